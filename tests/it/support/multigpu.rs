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
