use super::*;
use crate::stats::noise::{NoiseModel, NoisyBox};
use crate::trial::replay::{ReplayAnswer, ReplayRunner};
use crate::trial::OutcomeKind;

#[test]
fn a_trial_runner_drives_the_race_with_roles_and_failures() {
    let base = LaunchConfig::baseline(4096);
    let fast = LaunchConfig {
        ubatch: Some(1024),
        ..base.clone()
    };
    let broken = LaunchConfig {
        n_cpu_moe: Some(2),
        ..base.clone()
    };
    let (b2, f2, x2) = (base.clone(), fast.clone(), broken.clone());
    let truth = vec![
        Sample {
            gen_tps: 100.0,
            prompt_tps: 1000.0,
            request_rate: None,
        },
        Sample {
            gen_tps: 125.0,
            prompt_tps: 1000.0,
            request_rate: None,
        },
    ];
    let mut bx = NoisyBox::new(NoiseModel::measured_box(), truth, 5);
    let mut n = 0u64;
    let mut runner = ReplayRunner::from_fn(move |c| {
        n += 1;
        if *c == x2 {
            return ReplayAnswer::Fail(OutcomeKind::OomLoad);
        }
        let arm = usize::from(*c == f2);
        assert!(*c == b2 || *c == f2);
        let s = bx.measure(arm, n / 3, n % 3);
        ReplayAnswer::Ok {
            gen_tps: s.gen_tps,
            prompt_tps: s.prompt_tps,
            peak_vram_mib: None,
        }
    });
    let settings = RaceSettings::default();
    let (out, trials) = run_trials(settings, &base, &[broken, fast], &mut runner, vec![]);
    assert_eq!(out.launches as usize, trials.len());
    assert!(trials.len() <= settings.budget_launches as usize);
    let roles: Vec<TrialRole> = trials.iter().map(|t| t.role).collect();
    assert_eq!(
        &roles[..3],
        [TrialRole::Baseline; 3],
        "the probe runs the baseline"
    );
    assert!(roles[3..].iter().all(|r| *r == TrialRole::Confirm));
    assert!(matches!(
        out.candidates[0].status,
        ArmStatus::Failed { round: 0 }
    ));
    assert_eq!(out.winner, Some(1), "{}\n{:#?}", out.reason, out.candidates);
    assert!(out.reason.contains("generation +"), "{}", out.reason);
    assert!(out.pair_sigma_pct.is_some() && out.noise.is_some());
}

/// Drive a race of two baselines and one candidate on a box as noisy as the lent GPU
/// machine (3.5 % per launch, 5 % drift between rounds), whose true generation speeds are
/// `gen` (default, fit-target, candidate). Returns the reference the finished race names.
fn reference_of(tie_to: Option<usize>, gen: [f64; 3], seed: u64) -> usize {
    let truth = gen
        .iter()
        .map(|&g| Sample {
            gen_tps: g,
            prompt_tps: 1000.0,
            request_rate: None,
        })
        .collect();
    let mut bx = NoisyBox::new(NoiseModel::measured_box(), truth, seed);
    let mut race = Race::with_baselines(RaceSettings::default(), 2, 1);
    if let Some(t) = tie_to {
        race = race.with_tie_to(t);
    }
    while let Some(l) = race.next_launch() {
        // The probe is round 0 of the box's drift, the race's rounds 1, 2, ...
        let s = bx.measure(l.arm, l.round.map_or(0, |r| r as u64 + 1), 0);
        race.record(l, Some(s));
    }
    race.outcome().reference_arm
}

#[test]
fn the_fuller_baseline_stays_the_reference_until_the_other_is_faster_beyond_the_noise() {
    // The default 1 % faster, within the noise: the fit-target baseline (named as the one
    // that keeps more of the model on the card) stays the reference; without a
    // preference, the default does. A baseline the race drops as clearly slower leaves
    // it, and on this box that rule misfires in one or two of eight seeds.
    let close = [101.0, 100.0, 95.0];
    let seeds = 1..=8u64;
    let fit_kept = seeds
        .clone()
        .filter(|&s| reference_of(Some(1), close, s) == 1);
    assert!(fit_kept.count() >= 6);
    let default_kept = seeds.clone().filter(|&s| reference_of(None, close, s) == 0);
    assert!(default_kept.count() >= 6);
    for seed in seeds {
        // 30 % faster: beyond the noise, whichever was preferred.
        assert_eq!(
            reference_of(Some(1), [130.0, 100.0, 95.0], seed),
            0,
            "seed {seed}"
        );
        assert_eq!(
            reference_of(None, [100.0, 130.0, 95.0], seed),
            1,
            "seed {seed}"
        );
    }
}
