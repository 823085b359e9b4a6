//! Issue 33, "hangs": a config skipped before launching (predicted not to fit host RAM)
//! costs budget and is never proposed again, so a search whose every config (the baseline
//! included) is refused ends at once instead of proposing it thousands of times.

use qtune::model::{BlockBytes, ModelLayout};
use qtune::search::strategy::{run_search, SearchContext};
use qtune::trial::replay::{ReplayAnswer, ReplayRunner};
use qtune::trial::{OutcomeKind, TrialOutcome};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// A qwen3.5-35b-a3b-like layout: 40 blocks, ~420 MiB of routed experts each.
fn layout() -> ModelLayout {
    let blocks: Vec<BlockBytes> = (0..40)
        .map(|_| BlockBytes {
            routed_experts: 420 * MIB,
            shared_experts: 4 * MIB,
            rest: 30 * MIB,
        })
        .collect();
    let tensor_bytes = blocks.iter().map(|b| b.total()).sum::<u64>() + 2 * 300 * MIB;
    ModelLayout {
        arch: "qwen35moe".into(),
        file_bytes: tensor_bytes + 10 * MIB,
        n_head: 16,
        n_head_kv: 2,
        head_dim_k: 256,
        head_dim_v: 256,
        n_vocab: 248_320,
        ctx_train: 262_144,
        kv_blocks: (0..40).map(|i| (i + 1) % 4 == 0).collect(),
        recurrent_state_bytes: (0..40)
            .map(|i| if (i + 1) % 4 == 0 { 0 } else { 1 << 20 })
            .collect(),
        blocks,
        token_embd_bytes: 300 * MIB,
        output_bytes: 300 * MIB,
        tensor_bytes,
        ..ModelLayout::uniform(40, 256, 0, 0)
    }
}

fn context(budget_mib: f64) -> SearchContext {
    SearchContext {
        space: qtune::space::load("default").unwrap(),
        layout: layout(),
        gpu_moe: true,
        has_gpu: true,
        budget_mib: Some(budget_mib),
        physical_cores: 16,
        logical_cores: 32,
        start: None,
        clock: qtune::clock::system(),
        ram_available_mib: None,
        fit_target_mib: 512,
        gpus: Vec::new(),
        speed: None,
    }
}

fn no_config_skipped_twice(history: &[TrialOutcome]) {
    let skipped: Vec<&TrialOutcome> = history
        .iter()
        .filter(|o| o.kind == OutcomeKind::Skipped)
        .collect();
    for (i, a) in skipped.iter().enumerate() {
        for b in &skipped[i + 1..] {
            assert!(
                !(a.config == b.config && a.role == b.role),
                "{} skipped twice",
                a.config.label()
            );
        }
    }
}

#[test]
fn a_baseline_that_cannot_fit_ends_the_search_within_its_budget() {
    for has_gpu in [true, false] {
        let mut ctx = context(15_800.0);
        ctx.has_gpu = has_gpu;
        ctx.gpu_moe = has_gpu;
        if !has_gpu {
            ctx.budget_mib = None;
            ctx.space = qtune::space::load("cpu-only").unwrap();
        }
        // Nothing fits in 1 MiB of host RAM: every config is refused before it launches.
        ctx.ram_available_mib = Some(1.0);
        let runner = ReplayRunner::from_fn(|_| ReplayAnswer::Ok {
            gen_tps: 10.0,
            prompt_tps: 100.0,
            peak_vram_mib: None,
        });
        let t0 = Instant::now();
        let search = run_search(ctx.clone(), Box::new(runner), Vec::new(), None).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        assert!(!search.history.is_empty());
        assert!(
            search.history.iter().all(|o| o.kind == OutcomeKind::Skipped),
            "nothing launched"
        );
        assert!(
            search.history.len() as u32 <= ctx.space.budget.trials,
            "{} outcomes for a budget of {}",
            search.history.len(),
            ctx.space.budget.trials
        );
        assert!(search.launches() <= ctx.space.budget.trials);
        no_config_skipped_twice(&search.history);
    }
}
