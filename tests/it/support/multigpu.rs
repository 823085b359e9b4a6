//! Shared by the two-GPU replay tests (multigpu_replay, multigpu_resplit): a whole tune on a
//! replayed box, and the checks every two-GPU tune must pass.
#![allow(dead_code)]

use qtune::model::ModelLayout;
use qtune::run::{RunInputs, TuneResult};
use qtune::space::SearchSpace;
use qtune::trial::replay::ReplayRunner;
use qtune::trial::{OutcomeKind, TrialOutcome};
use std::path::Path;
use std::sync::Arc;

/// A whole tune from its start in `dir`, `runner` answering every launch, on a manual clock.
pub fn replay_tune(
    dir: &Path,
    inputs: &RunInputs,
    layout: ModelLayout,
    runner: ReplayRunner,
) -> TuneResult {
    let clock = qtune::clock::ManualClock::new();
    let runner = runner
        .with_journal(qtune::trial::journal::Journal::open(dir).unwrap())
        .with_clock(clock.clone());
    qtune::run::write_inputs(dir, inputs).unwrap();
    qtune::search::tune(
        dir,
        inputs,
        layout,
        Box::new(runner),
        qtune::search::Resume {
            next_id: 1,
            ..Default::default()
        },
        Arc::new(clock),
        None,
    )
    .unwrap()
}

/// Launches spent (a skipped config was never launched).
pub fn launches(trials: &[TrialOutcome]) -> usize {
    trials
        .iter()
        .filter(|t| t.kind != OutcomeKind::Skipped)
        .count()
}

/// Every launch counts: at most the space's budget and 25.
pub fn assert_launch_budget(trials: &[TrialOutcome], space: &SearchSpace) {
    let n = launches(trials);
    assert!(n <= space.budget.trials as usize && n <= 25, "{n} launches");
}

/// No trial that ran ok had a card over that card's own budget (`budgets`, MiB, device order).
pub fn assert_ok_trials_within_each_card(trials: &[TrialOutcome], budgets: &[u64]) {
    for t in trials.iter().filter(|t| t.kind == OutcomeKind::Ok) {
        for (i, p) in t.peak_vram_mib.iter().enumerate() {
            assert!(
                *p <= budgets[i],
                "trial {} GPU {i}: {p} > {}",
                t.id,
                budgets[i]
            );
        }
    }
}

/// The sample GPU box with these cards' free VRAM (MiB), in device order: H200s emulated at
/// those sizes, 120 GiB of RAM available.
pub fn cards(free: &[u64]) -> qtune::hardware::HardwareProfile {
    let mut hw = qtune::run::sample::gpu_result(
        std::path::Path::new("llama-server"),
        std::path::Path::new("m.gguf"),
    )
    .inputs
    .hardware;
    let card = hw.gpus[0].clone();
    hw.gpus = free
        .iter()
        .enumerate()
        .map(|(i, &f)| qtune::hardware::GpuInfo {
            index: i as u32,
            name: format!("NVIDIA H200 (emulated {} GiB)", f / 1024),
            uuid: format!("GPU-{i}"),
            vram_free_mib: f,
            vram_used_mib: card.vram_total_mib - f,
            ..card.clone()
        })
        .collect();
    hw.host.ram_available_mib = 120 * 1024;
    hw.fingerprint = "0f1e2d3c4b5a6978".into();
    hw
}

/// A tune's inputs on that box: the default space, every card's budget its free VRAM less
/// `headroom` MiB, a synthetic Q8_0 Qwen3.5-35B-A3B-like model.
pub fn two_card_inputs(
    hw: qtune::hardware::HardwareProfile,
    headroom: u64,
) -> qtune::run::RunInputs {
    let free = hw.free_vram_mib();
    qtune::run::RunInputs {
        model_path: std::path::PathBuf::from("Qwen3.5-35B-A3B-Q8_0.gguf"),
        server_path: std::path::PathBuf::from("llama-server"),
        server_version: "synthetic two-GPU landscape".into(),
        space: qtune::space::load("default").unwrap(),
        headroom_mib: headroom,
        vram_budget_mib: qtune::run::box_vram_budget_mib(&hw, headroom),
        gpu_budgets: qtune::run::gpu_budgets(&hw, headroom),
        hardware: hw,
        free_vram_at_start_mib: free,
        started_at: "2026-11-22T00:00:00Z".into(),
        host: "127.0.0.1".into(),
        port: 8080,
        start: None,
        quality: None,
        model_fingerprint: None,
        model_bytes: None,
        server_bytes: None,
        engine_servers: Vec::new(),
    }
}

/// What a replayed two-card box really uses and how fast it runs ([`landscape`]).
pub struct Truth {
    /// What every card uses beyond its predicted buffers (MiB).
    pub context_mib: f64,
    /// One card's extra beyond that: (device, MiB), a prediction error the search must learn.
    pub error_on: (u32, f64),
    /// Generation's factor at q8_0 KV (1.0: none).
    pub q8_kv_gain: f64,
}

/// The replayed box: explicit placements use what qtune predicts per card plus `truth`'s
/// context and error; a card over its free VRAM fails to load. Fewer CPU experts generate
/// faster, a larger ubatch reads prompts a little faster; the server's own placements
/// (default, fit) are slower.
pub fn landscape(inputs: &RunInputs, layout: ModelLayout, truth: Truth) -> ReplayRunner {
    use qtune::trial::replay::ReplayAnswer;
    let ctx = qtune::search::context(inputs, &layout, qtune::clock::system());
    let free: Vec<f64> = inputs
        .hardware
        .gpus
        .iter()
        .map(|g| g.vram_free_mib as f64)
        .collect();
    let runner = ReplayRunner::from_fn(move |c: &qtune::config::LaunchConfig| {
        let pp = 900.0 + c.ubatch.unwrap_or(512) as f64 / 8.0;
        if c.is_auto_placement() || c.is_fit_placement() {
            return ReplayAnswer::OkCards {
                gen_tps: if c.is_fit_placement() { 52.0 } else { 45.0 },
                prompt_tps: pp,
                peak_vram_mib: free.iter().map(|f| (f - 700.0) as u64).collect(),
            };
        }
        let p = ctx.predict_cards(c);
        let used: Vec<f64> = if p.gpu_devices.is_empty() {
            vec![p.gpu_mib + truth.context_mib]
        } else {
            p.gpu_devices
                .iter()
                .map(|d| {
                    let error = if d.device == truth.error_on.0 {
                        truth.error_on.1
                    } else {
                        0.0
                    };
                    d.total_mib + truth.context_mib + error
                })
                .collect()
        };
        if used.iter().zip(&free).any(|(u, f)| u > f) {
            return ReplayAnswer::Fail(OutcomeKind::OomLoad);
        }
        let cpu = ctx.cpu_blocks_of(c) as f64;
        let mut tg = 80.0 - 1.2 * cpu;
        if c.cache_type_k == qtune::config::KvType::Q8_0 {
            tg *= truth.q8_kv_gain;
        }
        ReplayAnswer::OkCards {
            gen_tps: tg,
            prompt_tps: pp - 8.0 * cpu,
            peak_vram_mib: used.iter().map(|u| *u as u64).collect(),
        }
    });
    runner
        .with_noise(2.0, 7)
        .with_seconds_per_trial(20.0)
        .with_vram_budget(inputs.vram_budget_mib)
        .with_gpu_budgets(inputs.gpu_budgets.iter().map(|g| g.budget_mib).collect())
}
