//! Two GPUs (issue 15), without a GPU: a whole tune on a replayed two-card box through the
//! injected runner. The box is a synthetic Q8_0 Qwen3.5-35B-A3B-like model on an emulated
//! 24 GiB + 16 GiB pair; the replayed "truth" is qtune's own per-card prediction plus a CUDA
//! context on each card, GPU 1 using 400 MiB more (so the search must learn its boundary).
//! Checked: each card is judged against its own budget, the layer split is searched (shifted
//! splits and fit's multi-GPU placement), the launch budget holds, the CPU experts come from
//! both cards' shares, and report, launch script and profile name each card. A one-GPU box
//! of the same size keeps the single-GPU path (`--n-cpu-moe`, no split, no per-card budgets).

use crate::support;
use qtune::engine::LaunchArgs;

use qtune::config::LaunchConfig;
use qtune::hardware::HardwareProfile;
use qtune::model::ModelLayout;
use qtune::placement::FIT_OVERSHOOT_MIB;
use qtune::run::{RunInputs, TuneResult};
use qtune::trial::replay::ReplayRunner;
use qtune::trial::{OutcomeKind, TrialRole};
use std::path::Path;
use support::multigpu::{assert_launch_budget, assert_ok_trials_within_each_card, replay_tune};

const HEADROOM: u64 = 512;
/// What every card really uses beyond its predicted buffers (the CUDA context, as measured on
/// the GPU machine), and what GPU 1 uses beyond that (a prediction error the search must learn).
const CONTEXT_MIB: f64 = 740.0;
const GPU1_ERROR_MIB: f64 = 400.0;

/// A Q8_0 Qwen3.5-35B-A3B-like layout, a little heavier: 40 blocks, 1,000 MiB of routed
/// experts each (about 40 GiB in all: more than two cards of 24 + 16 GiB hold).
fn layout() -> ModelLayout {
    support::layouts::qwen35_like_sized(1000, 8, 40, 500)
}

/// The sample GPU box with these cards' free VRAM (MiB), in device order.
fn hardware(free: &[u64]) -> HardwareProfile {
    support::multigpu::cards(free)
}

fn inputs(hw: HardwareProfile) -> RunInputs {
    support::multigpu::two_card_inputs(hw, HEADROOM)
}

/// The replayed box: explicit placements use what qtune predicts per card plus a CUDA context
/// on each card (GPU 1 400 MiB more); a card over its free VRAM fails to load. Fewer CPU experts generate faster; q8_0 KV and a
/// larger ubatch help a little; the server's own placements (default, fit) are slower.
fn landscape(inputs: &RunInputs) -> ReplayRunner {
    support::multigpu::landscape(
        inputs,
        layout(),
        support::multigpu::Truth {
            context_mib: CONTEXT_MIB,
            error_on: (1, GPU1_ERROR_MIB),
            q8_kv_gain: 1.03,
        },
    )
}

fn tune(dir: &Path, inputs: &RunInputs) -> TuneResult {
    replay_tune(dir, inputs, layout(), landscape(inputs))
}

#[test]
fn a_two_gpu_tune_respects_each_card_searches_the_split_and_keeps_the_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = inputs(hardware(&[24 * 1024, 16 * 1024]));
    let budgets: Vec<u64> = inputs.gpu_budgets.iter().map(|g| g.budget_mib).collect();
    assert_eq!(budgets, vec![24 * 1024 - HEADROOM, 16 * 1024 - HEADROOM]);
    assert_eq!(inputs.vram_budget_mib, Some(budgets.iter().sum()));
    let r = tune(tmp.path(), &inputs);

    // The budget of launches: every launch counts, at most the space's 20 (and the 25).
    assert_launch_budget(&r.trials, &r.inputs.space);

    // Each card against its own budget: no ok trial has a card over it, and the trials that
    // went over on GPU 1 (where the prediction is 400 MiB short) were not ok.
    assert_ok_trials_within_each_card(&r.trials, &budgets);
    let failed_on_card = r
        .trials
        .iter()
        .filter(|t| t.kind == OutcomeKind::Spill || t.kind.is_memory_failure())
        .count();
    assert!(
        failed_on_card >= 1,
        "GPU 1's boundary was learned by a failure"
    );
    assert!(
        r.trials.iter().any(|t| t.kind == OutcomeKind::Spill
            && t.message.contains("on GPU 1")
            && t.peak_vram_mib.iter().sum::<u64>() <= budgets.iter().sum::<u64>())
            || r.trials.iter().any(|t| t.kind.is_memory_failure()),
        "{:#?}",
        r.trials
            .iter()
            .map(|t| (&t.kind, &t.message))
            .collect::<Vec<_>>()
    );

    // The split is searched: explicit placements split the layers with `-ts` (never
    // `--n-cpu-moe`), shifted splits and fit's multi-GPU placement are launched as variants.
    let explicit: Vec<&LaunchConfig> = r
        .trials
        .iter()
        .map(|t| &t.config)
        .filter(|c| c.n_gpu_layers == Some(999))
        .collect();
    assert!(!explicit.is_empty());
    for c in &explicit {
        assert_eq!(
            c.n_cpu_moe, None,
            "--n-cpu-moe would take every CPU block from GPU 0"
        );
        assert_eq!(c.tensor_split.len(), 2, "{}", c.label());
    }
    let splits: std::collections::BTreeSet<Vec<u32>> =
        explicit.iter().map(|c| c.tensor_split.clone()).collect();
    // The exploration's first placement splits the layers so that the fullest card keeps the
    // most room (each card with its CUDA context estimate), not by the budgets' proportions
    // (61/39 here), which ignore where whole layers and the output layer fall.
    let ctx = qtune::search::context(&inputs, &layout(), qtune::clock::system());
    let first = r
        .trials
        .iter()
        .find(|t| t.role == TrialRole::Search && t.config.n_gpu_layers == Some(999))
        .expect("an explicit placement");
    let n = ctx.cpu_blocks_of(&first.config);
    assert_eq!(
        first.config,
        ctx.config(&first.config.base(), n),
        "{}",
        first.config.label()
    );
    let template = LaunchConfig {
        tensor_split: Vec::new(),
        cpu_experts: None,
        ..first.config.clone()
    };
    let context = [qtune::model::cards::CARD_CONTEXT_MIB; 2];
    let room = |split: &[u32]| {
        let blocks = ctx.cpu_fill(&template, split, n);
        let mut c = template.clone();
        c.place_on_gpus(split.to_vec(), blocks);
        let p = ctx.predict_cards(&c);
        p.gpu_devices
            .iter()
            .map(|d| budgets[d.device as usize] as f64 - context[0] - d.total_mib)
            .fold(f64::INFINITY, f64::min)
    };
    let by_budget = qtune::model::cards::split_by_budget(
        &qtune::model::cards::buffer_budgets_mib(&inputs.gpu_budgets),
        0,
    );
    assert_eq!(by_budget, vec![61, 39]);
    assert!(
        room(&first.config.tensor_split) >= room(&by_budget),
        "{} leaves less room than {by_budget:?}",
        first.config.label()
    );
    // Whatever went over a card was launched as the bisection's probe below the boundary,
    // predicted over (with what each card measured before it): never a variant, which is
    // filled against what each card measured beyond its prediction (GPU 1's extra 400 MiB
    // included).
    for (i, t) in r.trials.iter().enumerate() {
        if t.config.n_gpu_layers == Some(999) && t.kind != OutcomeKind::Ok {
            let extra = qtune::search::candidates::card_extra_mib(&ctx, &r.trials[..i]);
            assert!(
                !ctx.fits_cards_with(&t.config, &extra),
                "{} was predicted to fit and went over: {}",
                t.config.label(),
                t.message
            );
        }
    }
    assert!(splits.len() >= 2, "a shifted split was tried: {splits:?}");
    assert!(
        r.trials.iter().any(|t| t.config.is_fit_placement()
            && t.config.fit_target_mib == vec![512 + FIT_OVERSHOOT_MIB; 2]),
        "fit's multi-GPU placement is a candidate"
    );

    // The CPU experts come from both cards' shares (each card filled to its own budget).
    let w = r.winner.as_ref().expect("a winner");
    for t in r.trials.iter().filter(|t| t.config == w.config) {
        assert_eq!(t.kind, OutcomeKind::Ok, "winner failed in trial {}", t.id);
    }
    let ok_explicit = r
        .trials
        .iter()
        .filter(|t| t.kind == OutcomeKind::Ok && t.config.n_gpu_layers == Some(999))
        .map(|t| &t.config)
        .find(|c| c.cpu_experts.is_some())
        .expect("an ok placement with CPU experts");
    let weights: Vec<f64> = ok_explicit
        .tensor_split
        .iter()
        .map(|&x| f64::from(x))
        .collect();
    let devs = qtune::model::memory::layer_devices(40, 999, &weights);
    let blocks = ok_explicit.cpu_experts.as_ref().unwrap().blocks.clone();
    let on = |d: u32| {
        blocks
            .iter()
            .filter(|&b| devs[b as usize] == Some(d))
            .count()
    };
    assert!(on(0) > 0 && on(1) > 0, "{}", ok_explicit.label());

    // Report, launch script and profile name each card and its budget, in device order.
    qtune::report::write_all(tmp.path(), &r).unwrap();
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    assert!(
        md.contains("CUDA1: NVIDIA H200 (emulated 16 GiB) · budget 15,872 MiB"),
        "{md}"
    );
    if w.config.n_gpu_layers != Some(0) {
        let script = std::fs::read_to_string(tmp.path().join("launch.sh")).unwrap();
        assert!(
            script.contains("export CUDA_VISIBLE_DEVICES=0,1"),
            "{script}"
        );
        assert!(
            script.contains("export CUDA_DEVICE_ORDER=PCI_BUS_ID"),
            "{script}"
        );
        assert!(script.contains("NEED_VRAM_MIB_PER_GPU=("), "{script}");
        assert!(
            !script.contains("NEED_VRAM_MIB="),
            "checked per card, not summed"
        );
        let syntax = std::process::Command::new("bash")
            .arg("-n")
            .arg(tmp.path().join("launch.sh"))
            .status()
            .unwrap();
        assert!(syntax.success(), "{script}");
    }
    let p = qtune::profile::from_tune(&r, None).unwrap();
    assert_eq!(p.hardware.gpus[1].budget_mib, Some(budgets[1]));
    let text = qtune::profile::show_text(&p);
    assert!(
        text.contains("CUDA0: NVIDIA H200 (emulated 24 GiB)"),
        "{text}"
    );
}

#[test]
fn one_gpu_of_the_same_size_keeps_the_single_gpu_path() {
    let tmp = tempfile::tempdir().unwrap();
    let hw = hardware(&[40 * 1024]);
    assert!(qtune::run::gpu_budgets(&hw, HEADROOM).is_empty());
    assert_eq!(
        qtune::run::box_vram_budget_mib(&hw, HEADROOM),
        qtune::run::vram_budget_mib(true, hw.free_vram_mib(), HEADROOM)
    );
    let inputs = inputs(hw);
    let r = tune(tmp.path(), &inputs);
    assert!(r.inputs.gpu_budgets.is_empty());
    let json = serde_json::to_string(&r).unwrap();
    for absent in ["gpu_budgets", "tensor_split", "split_mode", "gpu_experts"] {
        assert!(!json.contains(absent), "{absent} in a one-GPU result");
    }
    assert!(r
        .trials
        .iter()
        .filter(|t| t.role == TrialRole::Search && t.config.n_gpu_layers == Some(999))
        .all(|t| t.config.tensor_split.is_empty() && !t.config.has_gpu_split()));
    assert!(r
        .trials
        .iter()
        .any(|t| t.role == TrialRole::Search && t.config.n_cpu_moe.is_some()));
}
