//! The verdict: the interleaved confirmation pooled per config, the winner and its gain over the
//! baseline. A config that failed or went over the VRAM budget in any trial never wins.

use super::objective::{better, gain_pct, Speeds};
use super::strategy::SearchContext;
use crate::config::LaunchConfig;
use crate::run::{Confirmed, Winner};
use crate::trial::{TrialOutcome, TrialRole};

fn peak(outcomes: &[&TrialOutcome]) -> Option<u64> {
    outcomes
        .iter()
        .filter_map(|o| o.peak_vram_total_mib())
        .max()
}

/// Group the trials of `role` by config, in order of first appearance.
fn grouped(history: &[TrialOutcome], role: TrialRole) -> Vec<(LaunchConfig, Vec<&TrialOutcome>)> {
    let mut groups: Vec<(LaunchConfig, Vec<&TrialOutcome>)> = Vec::new();
    for o in history.iter().filter(|o| o.role == role) {
        match groups.iter_mut().find(|(c, _)| *c == o.config) {
            Some((_, v)) => v.push(o),
            None => groups.push((o.config.clone(), vec![o])),
        }
    }
    groups
}

/// Decide the winner. Returns the confirmation table and the winner (None if nothing ran).
/// `budget` is the tune's VRAM budget (MiB); `command` renders a config's launch command.
pub fn decide(
    ctx: &SearchContext,
    history: &[TrialOutcome],
    budget: Option<u64>,
    command: &dyn Fn(&LaunchConfig) -> Vec<String>,
    warnings: &mut Vec<String>,
    race: Option<&crate::run::RaceReport>,
) -> (Vec<Confirmed>, Option<Winner>) {
    let baseline_cfg = ctx.baseline();
    // Every trial of a config counts against it: one failure or spill disqualifies it.
    let disqualified = |cfg: &LaunchConfig| {
        history.iter().filter(|o| &o.config == cfg).any(|o| {
            !o.kind.is_ok()
                || matches!((budget, o.peak_vram_total_mib()), (Some(b), Some(p)) if p > b)
        })
    };
    let confirmation: Vec<Confirmed> = grouped(history, TrialRole::Confirm)
        .into_iter()
        .map(|(config, trials)| {
            let speeds = Speeds::pooled(trials.iter().copied());
            Confirmed {
                is_baseline: config == baseline_cfg,
                gen_tps: speeds.as_ref().map(|s| s.gen.clone()),
                prompt_tps: speeds.as_ref().map(|s| s.prompt.clone()),
                peak_vram_mib: peak(&trials),
                trial_ids: trials.iter().map(|o| o.id).collect(),
                config,
            }
        })
        .collect();

    // Candidates: from the confirmation when it ran, else from the search.
    let role = if confirmation.iter().any(|c| !c.is_baseline) {
        TrialRole::Confirm
    } else {
        TrialRole::Search
    };
    let mut candidates: Vec<(LaunchConfig, Speeds, Option<u64>)> = Vec::new();
    for (cfg, trials) in grouped(history, role) {
        if cfg == baseline_cfg {
            continue;
        }
        if disqualified(&cfg) {
            if role == TrialRole::Confirm {
                warnings.push(format!(
                    "{} failed or exceeded the VRAM budget in a trial: not eligible to win",
                    cfg.label()
                ));
            }
            continue;
        }
        if let Some(s) = Speeds::pooled(trials.iter().copied()) {
            candidates.push((cfg, s, peak(&trials)));
        }
    }
    // The race decides when it ran: its winner, else the best raced config whose generation
    // is not slower than the baseline's beyond its interval; none such: the baseline.
    let raced = race.map(|r| headline(r, warnings));
    if let Some(chosen) = &raced {
        candidates.retain(|(c, _, _)| Some(c) == chosen.as_ref());
    }
    let baseline_trials = crate::run::baseline_trials(history, &baseline_cfg);
    let baseline = Speeds::pooled(baseline_trials.iter().copied());
    let obj = &ctx.space.objective;
    let best = candidates.into_iter().reduce(|a, b| {
        if better(&b.1, &a.1, obj, baseline.as_ref()) {
            b
        } else {
            a
        }
    });
    let baseline_eligible = baseline.is_some() && !disqualified(&baseline_cfg);
    let (config, speeds, vram) = match (best, baseline_eligible) {
        (Some(b), true)
            if raced.is_none()
                && better(baseline.as_ref().unwrap(), &b.1, obj, baseline.as_ref()) =>
        {
            warnings.push(format!(
                "the baseline (server defaults) measured faster than qtune's best ({}); the baseline is the recommendation",
                b.0.label()
            ));
            (
                baseline_cfg.clone(),
                baseline.clone().unwrap(),
                peak(&baseline_trials),
            )
        }
        (Some(b), _) => b,
        (None, true) => {
            if raced.is_none() {
                warnings.push(
                    "no searched config ran successfully; the baseline is the recommendation"
                        .into(),
                );
            }
            (
                baseline_cfg.clone(),
                baseline.clone().unwrap(),
                peak(&baseline_trials),
            )
        }
        (None, false) => return (confirmation, None),
    };
    let gen_gain = baseline
        .as_ref()
        .and_then(|b| gain_pct(speeds.gen.median, b.gen.median));
    let prompt_gain = baseline
        .as_ref()
        .and_then(|b| gain_pct(speeds.prompt.median, b.prompt.median));
    if let Some(w) = secondary_regression_warning(gen_gain, prompt_gain) {
        warnings.push(w);
    }
    let command = command(&config);
    let verdict = race.and_then(|r| {
        r.verdicts()
            .into_iter()
            .find(|(c, _)| **c == config)
            .map(|(_, v)| v.clone())
    });
    (
        confirmation,
        Some(Winner {
            gen_vs_baseline: verdict.as_ref().map(|v| v.gen.clone()),
            prompt_vs_baseline: verdict.as_ref().map(|v| v.prompt.clone()),
            config,
            gen_tps: speeds.gen,
            prompt_tps: speeds.prompt,
            peak_vram_mib: vram,
            gen_gain_pct: gen_gain,
            prompt_gain_pct: prompt_gain,
            command,
        }),
    )
}

/// The race's headline config: its winner; else the raced config with the best generation
/// estimate among those that did not fail and are not slower than the baseline beyond their
/// interval; None: the baseline stays (with a warning saying why).
fn headline(r: &crate::run::RaceReport, warnings: &mut Vec<String>) -> Option<LaunchConfig> {
    use crate::stats::race::ArmStatus;
    if let Some(i) = r.outcome.winner {
        return r.candidates.get(i).cloned();
    }
    let best = r
        .outcome
        .candidates
        .iter()
        .filter(|c| !matches!(c.status, ArmStatus::Failed { .. }))
        .filter_map(|c| Some((c.index, c.vs_reference.as_ref()?)))
        .filter(|(_, v)| v.gen.hi_log.is_some_and(|hi| hi >= 0.0) && v.gen.mean_log > 0.0)
        .max_by(|a, b| a.1.gen.mean_log.total_cmp(&b.1.gen.mean_log));
    match best {
        Some((i, v)) => {
            warnings.push(format!(
                "the race did not prove a gain ({}): the recommendation is its best estimate, generation {}",
                r.outcome.reason, v.gen
            ));
            r.candidates.get(i).cloned()
        }
        None => {
            warnings.push(format!(
                "the race found no config faster than the baseline in generation ({}); the baseline is the recommendation",
                r.outcome.reason
            ));
            None
        }
    }
}

/// A warning when the winner gives up much more prompt speed than it gains in generation
/// (seen on the GPU machine: Qwen3-30B, +8 % generation for −72 % prompt processing).
pub fn secondary_regression_warning(
    gen_gain: Option<f64>,
    prompt_gain: Option<f64>,
) -> Option<String> {
    let (g, p) = (gen_gain?, prompt_gain?);
    (p < -25.0 && -p > 2.0 * g.max(0.0)).then(|| {
        format!(
            "the winner generates {g:+.1} % faster than the baseline but processes prompts {p:+.1} %: if long prompts matter to you, re-run with an objective that weighs them (objective: {{metric: blend, gen_weight: 1, prompt_weight: 0.5}} in a --space file)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::secondary_regression_warning as w;
    use super::*;
    use crate::trial::{Metrics, OutcomeKind, Stat};

    fn ctx() -> SearchContext {
        let r = crate::run::sample::gpu_result(Path::new("/s"), Path::new("/m"));
        SearchContext {
            space: r.space.clone(),
            layout: r.model.clone(),
            gpu_moe: true,
            has_gpu: true,
            budget_mib: Some(15000.0),
            physical_cores: 8,
            logical_cores: 16,
            start: None,
            clock: crate::clock::system(),
            ram_available_mib: None,
            fit_target_mib: 512,
            gpus: Vec::new(),
        }
    }

    fn at(n: u32) -> LaunchConfig {
        ctx().config(&ctx().start_base_for_tests(), n)
    }

    fn trial(
        id: u32,
        role: TrialRole,
        config: LaunchConfig,
        kind: OutcomeKind,
        tg: f64,
    ) -> TrialOutcome {
        let s = |v: f64| Stat::from_samples(&[v * 0.99, v, v * 1.01]).unwrap();
        TrialOutcome {
            id,
            role,
            config,
            kind,
            metrics: (kind.is_ok() || kind == OutcomeKind::Spill).then(|| Metrics {
                gen_tps: s(tg),
                prompt_tps: s(tg * 10.0),
                ttft_ms: s(100.0),
                gen_tps_at_depth: None,
            }),
            peak_vram_mib: vec![10_000],
            reported: None,
            message: kind.to_string(),
            evidence: Vec::new(),
            started_at: String::new(),
            duration_s: 1.0,
            log: None,
            warnings: Vec::new(),
        }
    }

    fn run(history: &[TrialOutcome]) -> (Vec<Confirmed>, Option<Winner>, Vec<String>) {
        let mut warnings = Vec::new();
        let cmd = |c: &LaunchConfig| c.command(Path::new("/s"), Path::new("/m"), "h", 1);
        let (c, w) = decide(&ctx(), history, Some(15000), &cmd, &mut warnings, None);
        (c, w, warnings)
    }

    use std::path::Path;
    use OutcomeKind::*;
    use TrialRole::*;

    #[test]
    fn the_fastest_confirmed_config_wins_with_its_gain_over_the_baseline() {
        let b = ctx().baseline();
        let h = [
            trial(1, Baseline, b.clone(), Ok, 20.0),
            trial(2, Search, at(10), Ok, 30.0),
            trial(3, Search, at(12), Ok, 28.0),
            trial(4, Confirm, at(10), Ok, 30.0),
            trial(5, Confirm, at(12), Ok, 28.0),
            trial(6, Confirm, b.clone(), Ok, 20.0),
        ];
        let (conf, win, _) = run(&h);
        let win = win.unwrap();
        assert_eq!(win.config, at(10));
        assert!((win.gen_gain_pct.unwrap() - 50.0).abs() < 1e-6);
        assert_eq!(win.command.last().map(String::as_str), Some("1"));
        assert_eq!(conf.iter().filter(|c| c.is_baseline).count(), 1);
    }

    #[test]
    fn a_config_that_failed_in_any_trial_never_wins() {
        let b = ctx().baseline();
        let h = [
            trial(1, Baseline, b.clone(), Ok, 20.0),
            trial(2, Search, at(10), Ok, 40.0),
            trial(3, Search, at(12), Ok, 28.0),
            trial(4, Confirm, at(10), Ok, 40.0),
            trial(5, Confirm, at(12), Ok, 28.0),
            trial(6, Confirm, at(10), Crash, 0.0),
        ];
        let (_, win, warnings) = run(&h);
        assert_eq!(
            win.unwrap().config,
            at(12),
            "the faster config crashed once"
        );
        assert!(
            warnings.iter().any(|w| w.contains("not eligible to win")),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_config_over_the_vram_budget_never_wins() {
        let b = ctx().baseline();
        let mut greedy = trial(2, Search, at(5), Ok, 50.0);
        greedy.peak_vram_mib = vec![15_500];
        let h = [
            trial(1, Baseline, b.clone(), Ok, 20.0),
            greedy,
            trial(3, Search, at(12), Ok, 28.0),
        ];
        let (_, win, _) = run(&h);
        assert_eq!(win.unwrap().config, at(12));
    }

    #[test]
    fn the_baseline_wins_when_it_measures_faster_and_nothing_wins_when_nothing_ran() {
        let b = ctx().baseline();
        let h = [
            trial(1, Baseline, b.clone(), Ok, 40.0),
            trial(2, Search, at(10), Ok, 30.0),
        ];
        let (_, win, warnings) = run(&h);
        assert_eq!(win.unwrap().config, b);
        assert!(
            warnings.iter().any(|w| w.contains("baseline")),
            "{warnings:?}"
        );

        let h = [
            trial(1, Baseline, b.clone(), Crash, 0.0),
            trial(2, Search, at(10), OomLoad, 0.0),
        ];
        let (_, win, _) = run(&h);
        assert!(win.is_none());
    }

    #[test]
    fn a_failed_baseline_leaves_the_gain_unknown() {
        let b = ctx().baseline();
        let h = [
            trial(1, Baseline, b, Crash, 0.0),
            trial(2, Search, at(10), Ok, 30.0),
        ];
        let (_, win, _) = run(&h);
        let win = win.unwrap();
        assert_eq!(win.config, at(10));
        assert_eq!(win.gen_gain_pct, None);
    }
    #[test]
    fn warns_only_when_prompt_speed_is_traded_away_heavily() {
        assert!(w(Some(8.4), Some(-71.6)).unwrap().contains("-71.6 %"));
        assert!(w(Some(2.8), Some(75.2)).is_none());
        assert!(
            w(Some(30.0), Some(-30.0)).is_none(),
            "a large generation gain may pay for it"
        );
        assert!(w(None, Some(-90.0)).is_none());
    }
}
