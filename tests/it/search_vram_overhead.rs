//! The filled placements (issue 13) against what the GPU machine measured.
//!
//! In the first GPU tune with filled placements (docs/evidence/gpu-h100-newtune35-16: H100, synthetic
//! Qwen3.5-35B-A3B Q4_K_M, 16 GiB free, budget 15,778 MiB), every trial's peak VRAM was its
//! reported buffers plus 714-757 MiB (the CUDA context), and the split placements proposed from
//! the buffers alone went over the card: `--n-cpu-moe 10` + block 10's up/gate ran out of memory,
//! the last-split placement peaked at 16,242 MiB, `--n-cpu-moe 12` at 15,816. These tests replay
//! that journal: the overhead is learned from it, and what is proposed with it would have fit.

use qtune::config::LaunchConfig;
use qtune::engine::LaunchArgs;
use qtune::model::memory::{HostCaps, CPU_COMPUTE};
use qtune::model::synth::SynthFtype;
use qtune::placement::{propose_with, Limits, FIT_OVERSHOOT_MIB};
use qtune::search::context::unitemized_vram_mib;
use qtune::space::PlacementStyle;
use qtune::trial::TrialOutcome;

use crate::support;

const JOURNAL: &str = "gpu-h100-newtune35-16/newtune35-16/journal.jsonl";
const BUDGET_MIB: f64 = 15_778.0;

fn journal() -> Vec<TrialOutcome> {
    let text = support::evidence::read(JOURNAL);
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn layout() -> qtune::model::ModelLayout {
    qtune::model::synth::shape_layout("qwen3.5-35b-a3b", SynthFtype::Q4KM).unwrap()
}

#[test]
fn the_overhead_is_learned_from_the_baseline_alone_and_oom_peaks_are_left_out() {
    let j = journal();
    let from_baseline = unitemized_vram_mib(&j[..1]);
    let from_all = unitemized_vram_mib(&j);
    println!("unitemized VRAM: from the baseline {from_baseline:.0} MiB, from all trials {from_all:.0} MiB");
    assert!((700.0..=730.0).contains(&from_baseline), "{from_baseline}");
    assert!((740.0..=770.0).contains(&from_all), "{from_all}");
    // The out-of-memory trial (#8: peak 16,272, buffers 15,733) would have said 539.
    let oom: Vec<TrialOutcome> = j.iter().filter(|o| o.id == 8).cloned().collect();
    assert_eq!(unitemized_vram_mib(&oom), 0.0);
    assert_eq!(unitemized_vram_mib(&[]), 0.0);
}

#[test]
fn placements_proposed_with_the_measured_overhead_are_not_the_ones_that_went_over() {
    if !support::vocab() {
        return;
    }
    let j = journal();
    let layout = layout();
    // The winner's other choices (trial 5: -ub 512, q8_0 KV, --load-mode none).
    let template: LaunchConfig = j.iter().find(|o| o.id == 5).unwrap().config.clone();
    let space = qtune::space::load("default").unwrap();
    let over: Vec<LaunchConfig> = j
        .iter()
        .filter(|o| !o.kind.is_ok())
        .map(|o| o.config.clone())
        .collect();
    assert_eq!(over.len(), 5, "trials that ran out of memory or spilled");
    let propose = |unitemized: f64| {
        propose_with(
            &layout,
            &template,
            &space,
            &Limits {
                vram_budget_mib: BUDGET_MIB - unitemized,
                ram_available_mib: None,
                fit_target_mib: 512 + FIT_OVERSHOOT_MIB,
            },
            HostCaps { repack: true },
            &CPU_COMPUTE,
        )
    };
    // Without the overhead (what the first GPU tune did), it proposes what went over.
    let blind = propose(0.0);
    assert!(
        blind.iter().any(|c| over.contains(&c.config)),
        "the replay should reproduce the first tune's mistake"
    );
    let seen = propose(unitemized_vram_mib(&j[..1]));
    assert!(!seen.is_empty());
    for c in &seen {
        println!(
            "{:>11}: {} predicted buffers {:.0} MiB",
            c.style.as_str(),
            c.config.label(),
            c.prediction.gpu_mib
        );
        assert!(
            !over.contains(&c.config),
            "{} went over on the GPU",
            c.config.label()
        );
    }
    // first-split lands between the whole-block boundaries measured: 12 blocks went over
    // (15,816 MiB), 13 fit (15,384): 12 whole blocks plus part of block 12.
    let first = seen
        .iter()
        .find(|c| c.style == PlacementStyle::FirstSplit)
        .expect("a first-split candidate");
    assert_eq!(first.config.n_cpu_moe, Some(12), "{}", first.config.label());
    let partial = first
        .config
        .cpu_experts
        .as_ref()
        .and_then(|e| e.partial.as_ref())
        .expect("a partial boundary block");
    assert_eq!(partial.block, 12);
    // fit is asked for the tune's headroom plus its measured overshoot.
    let fit = seen
        .iter()
        .find(|c| c.style == PlacementStyle::Fit)
        .expect("a fit candidate");
    assert_eq!(fit.config.fit_target_mib, vec![512 + FIT_OVERSHOOT_MIB]);
}
