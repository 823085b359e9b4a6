//! Two GPUs (issue 57), without a GPU: where the best config keeps routed experts on the CPU,
//! the search proposes moving some of them to a card with room (`-ot ...=CUDAn`, the layers
//! where they were) and a placement where the smaller card holds only experts (every layer on
//! the larger card by `-ts`, the CPU last). The box is like multigpu_replay's: a
//! Qwen3.5-35B-A3B-like model on an emulated 12 + 8 GiB pair (the issue's), the replayed truth
//! qtune's per-card prediction plus a CUDA context (GPU 0 400 MiB more); fewer CPU experts
//! generate faster.
//! Checked: both placements are proposed and launched on two cards, their flags read back as
//! the same config, each is predicted within every card's budget, and one card never gets them.

use crate::support;
use qtune::engine::LaunchArgs;

use qtune::config::LaunchConfig;
use qtune::hardware::HardwareProfile;
use qtune::model::ModelLayout;
use qtune::run::{RunInputs, TuneResult};
use qtune::search::strategy::SearchContext;
use qtune::trial::replay::ReplayRunner;
use qtune::trial::{OutcomeKind, TrialRole};
use std::path::Path;
use support::multigpu::{assert_launch_budget, assert_ok_trials_within_each_card, replay_tune};

const HEADROOM: u64 = 512;
/// What every card really uses beyond its predicted buffers (less than the search's CUDA
/// context estimate), and what GPU 0 uses beyond that (the MoE staging of CPU experts runs on
/// the first card): GPU 1 is left room the layer split cannot use.
const CONTEXT_MIB: f64 = 300.0;
const GPU0_ERROR_MIB: f64 = 400.0;

/// 40 blocks of 500 MiB of routed experts (about 20 GiB: more than 12 + 8 GiB hold).
fn layout() -> ModelLayout {
    support::layouts::qwen35_like_sized(500, 8, 40, 500)
}

/// The sample GPU box with these cards' free VRAM (MiB), in device order.
fn hardware(free: &[u64]) -> HardwareProfile {
    support::multigpu::cards(free)
}

fn inputs(hw: HardwareProfile) -> RunInputs {
    support::multigpu::two_card_inputs(hw, HEADROOM)
}

/// The replayed box (see the module doc); a card over its free VRAM fails to load.
fn landscape(inputs: &RunInputs) -> ReplayRunner {
    support::multigpu::landscape(
        inputs,
        layout(),
        support::multigpu::Truth {
            context_mib: CONTEXT_MIB,
            error_on: (0, GPU0_ERROR_MIB),
            q8_kv_gain: 1.0,
        },
    )
}

fn tune(dir: &Path, inputs: &RunInputs) -> TuneResult {
    replay_tune(dir, inputs, layout(), landscape(inputs))
}

fn context(inputs: &RunInputs) -> SearchContext {
    qtune::search::context(inputs, &layout(), qtune::clock::system())
}

fn budgets(inputs: &RunInputs) -> Vec<u64> {
    inputs.gpu_budgets.iter().map(|g| g.budget_mib).collect()
}

/// The config `c`'s flags read back as.
fn read_back(c: &LaunchConfig) -> LaunchConfig {
    let mut argv = vec!["llama-server".to_string(), "-m".into(), "m.gguf".into()];
    argv.extend(c.server_args());
    qtune::engine::parse_command(&argv).unwrap().config
}

/// Each card's predicted buffers plus `extra` against its own budget: none over.
fn assert_within_each_card(ctx: &SearchContext, c: &LaunchConfig, extra: &[f64]) {
    let p = ctx.predict_cards(c);
    assert_eq!(p.gpu_devices.len(), 2, "{}", c.label());
    for d in &p.gpu_devices {
        let i = d.device as usize;
        let budget = ctx.gpus[i].budget_mib as f64;
        assert!(
            d.total_mib + extra[i] <= budget,
            "GPU {i}: {:.0} + {:.0} > {budget} MiB: {}",
            d.total_mib,
            extra[i],
            c.label()
        );
    }
}

fn on_card(c: &LaunchConfig, device: u32) -> Vec<u32> {
    c.gpu_experts
        .iter()
        .filter(|g| g.device == device)
        .flat_map(|g| g.blocks.iter())
        .collect()
}

fn cpu(c: &LaunchConfig) -> Vec<u32> {
    c.cpu_experts
        .as_ref()
        .map(|e| e.blocks.iter().collect())
        .unwrap_or_default()
}

#[test]
fn experts_move_to_a_card_with_room_and_the_smaller_card_holds_only_experts() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = inputs(hardware(&[12 * 1024, 8 * 1024]));
    let ctx = context(&inputs);
    let budgets = budgets(&inputs);
    let r = tune(tmp.path(), &inputs);
    for t in &r.trials {
        println!(
            "#{} {:?} {} {}",
            t.id,
            t.role,
            t.kind.as_str(),
            t.config.label()
        );
    }
    assert_launch_budget(&r.trials, &r.inputs.space);
    assert_ok_trials_within_each_card(&r.trials, &budgets);

    let searched = |i: usize| {
        r.trials[..i]
            .iter()
            .filter(|t| t.role == TrialRole::Search && t.kind == OutcomeKind::Ok)
            .map(|t| t.config.clone())
            .collect::<Vec<_>>()
    };
    let mut per_card = None;
    let mut experts_only = None;
    for (i, t) in r.trials.iter().enumerate() {
        let c = &t.config;
        if c.gpu_experts.is_empty() || t.role != TrialRole::Search {
            continue;
        }
        // Launched, ran, its flags read back as the same config, and predicted within each
        // card's budget with what each card was measured to hold beyond the prediction.
        assert_eq!(t.kind, OutcomeKind::Ok, "{}: {}", c.label(), t.message);
        assert_eq!(read_back(c), *c, "{}", c.label());
        assert_eq!(c.check(), Ok(()));
        let extra = qtune::search::candidates::card_extra_mib(&ctx, &r.trials[..i]);
        assert_within_each_card(&ctx, c, &extra);
        if c.tensor_split == vec![100, 0] {
            experts_only = Some(c.clone());
        } else {
            per_card = Some((c.clone(), searched(i)));
        }
    }

    // Experts per card: a measured config with CPU experts, the same split, some of those
    // blocks' experts on a card and the rest still on the CPU; or, where the exploration left
    // no card room for one more block's experts, the reason.
    match per_card {
        Some((moved, before)) => {
            let mut blocks = cpu(&moved);
            blocks.extend(on_card(&moved, 0));
            blocks.extend(on_card(&moved, 1));
            blocks.sort_unstable();
            let from = before
                .iter()
                .find(|b| {
                    b.tensor_split == moved.tensor_split
                        && b.base() == moved.base()
                        && cpu(b) == blocks
                })
                .unwrap_or_else(|| panic!("{} moves a measured config's experts", moved.label()));
            assert!(ctx.cpu_blocks_of(&moved) < ctx.cpu_blocks_of(from));
        }
        None => assert!(
            r.warnings.iter().any(|w| w
                .starts_with("routed experts on a card instead of the CPU: not tried, no room")),
            "{:#?}",
            r.warnings
        ),
    }

    // The smaller card holds only experts: every layer on GPU 0, GPU 1 holds routed experts
    // only, the CPU the rest.
    let only = experts_only.expect("the experts-only smaller card was launched");
    assert!(!on_card(&only, 1).is_empty() && on_card(&only, 0).is_empty());
    let p = ctx.predict_cards(&only);
    assert_eq!(p.gpu_devices[1].blocks, None, "no layer on GPU 1");
    assert!(p.gpu_devices[1].expert_bytes > 0);
    assert!(only.server_args().join(" ").contains("-ts 100,0"));
}

#[test]
fn one_card_never_gets_them_and_each_skip_says_why() {
    // A one-GPU box of the same size: no trial names a card for experts.
    let tmp = tempfile::tempdir().unwrap();
    let one = inputs(hardware(&[20 * 1024]));
    let r = tune(tmp.path(), &one);
    assert!(r.trials.iter().all(|t| t.config.gpu_experts.is_empty()));
    assert!(r.trials.iter().all(|t| !t.config.has_gpu_split()));
    // Even for a config that keeps CPU experts as `-ot` rules: nothing, and why.
    let ctx = context(&one);
    let mut best = r
        .trials
        .iter()
        .find(|t| t.role == TrialRole::Search)
        .unwrap()
        .config
        .clone();
    best.place_on_gpus(vec![100], qtune::config::BlockSet::new([30, 31, 32]));
    let plan = qtune::search::card_experts::propose(&ctx, &best, &[0.0]);
    assert!(plan.configs.is_empty(), "{:?}", plan.configs);
    assert_eq!(plan.skipped.len(), 2);
    assert!(
        plan.skipped
            .iter()
            .all(|l| l.ends_with("the box has one GPU")),
        "{:?}",
        plan.skipped
    );

    // Two cards, every expert on the cards: nothing to move, and why.
    let two = inputs(hardware(&[12 * 1024, 8 * 1024]));
    let ctx = context(&two);
    let base = best.base();
    let (all_on_gpus, _) = ctx.config_placed(&base, 0, &[0.0, 0.0]);
    let plan = qtune::search::card_experts::propose(&ctx, &all_on_gpus, &[0.0, 0.0]);
    assert!(plan.configs.is_empty());
    assert!(plan
        .skipped
        .iter()
        .all(|l| l.contains("no routed experts on the CPU")));
    // No room: each card measured to hold 8 GiB beyond its prediction.
    let (c, _) = ctx.config_placed(&base, 30, &[0.0, 0.0]);
    let plan = qtune::search::card_experts::propose(&ctx, &c, &[8192.0, 8192.0]);
    assert!(plan.configs.is_empty(), "{:?}", plan.configs);
    assert_eq!(plan.skipped.len(), 2);
    assert!(
        plan.skipped.iter().all(|l| l.contains("no room")),
        "{:?}",
        plan.skipped
    );
}

#[test]
fn no_proposal_is_predicted_over_a_cards_budget() {
    let two = inputs(hardware(&[12 * 1024, 8 * 1024]));
    let ctx = context(&two);
    let base = LaunchConfig {
        batch: Some(2048),
        ubatch: Some(512),
        ..LaunchConfig::baseline(two.space.fixed.ctx)
    }
    .base();
    let mut proposed = 0;
    let mut to_gpu1 = 0;
    for n in 1..=40 {
        for extra in [
            [300.0, 300.0],
            [760.0, 760.0],
            [1200.0, 300.0],
            [300.0, 2000.0],
        ] {
            let (best, _) = ctx.config_placed(&base, n, &extra);
            let plan = qtune::search::card_experts::propose(&ctx, &best, &extra);
            for c in &plan.configs {
                assert_within_each_card(&ctx, c, &extra);
                assert_eq!(read_back(c), *c, "{}", c.label());
                if c.tensor_split == best.tensor_split {
                    // Experts per card: only CPU blocks move, to a card.
                    assert!(ctx.cpu_blocks_of(c) < n, "{}", c.label());
                    to_gpu1 += usize::from(!on_card(c, 1).is_empty());
                } else {
                    // The smaller card holds no layer.
                    assert_eq!(c.tensor_split, vec![100, 0], "{}", c.label());
                    assert_eq!(ctx.predict_cards(c).gpu_devices[1].blocks, None);
                }
                proposed += 1;
            }
        }
    }
    assert!(proposed >= 40, "{proposed} proposals");
    assert!(
        to_gpu1 >= 10,
        "{to_gpu1} proposals move CPU experts to GPU 1"
    );
}
