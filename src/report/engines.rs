//! How the engines compared, in words (issue 56: "where ik wins, the tune picks it without
//! being told; where it loses, the tune says by how much"): one line per engine the tune raced
//! besides its first, computed once here for the summary's verdict and report.md.
//!
//! Each engine's best config is ranked on the tune's objective by the numbers the summary's
//! table prints ([`TuneResult::objective_time`] for time per request, else the median of the
//! objective's rate over the config's launches). The ratio between two configs is the race's
//! paired estimate over the rounds both ran, with its interval, where they raced; else the
//! ratio of those medians, said to be unraced.

use crate::config::{EngineKind, LaunchConfig};
use crate::engine::LaunchArgs;
use crate::objective::Metric;
use crate::run::TuneResult;
use crate::stats::Comparison;
use crate::trial::{TrialOutcome, TrialRole};

/// A config's number on the tune's objective.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Figure {
    /// Time per request (lower is better), the table's.
    Time(crate::run::figures::RequestTime),
    /// The objective's rate, tok/s (higher is better): the median over `launches`.
    Rate { tps: f64, launches: usize },
}

impl Figure {
    /// Higher is better, comparable between two figures of one tune.
    fn rate(&self) -> f64 {
        match self {
            Figure::Time(t) => 1.0 / t.seconds,
            Figure::Rate { tps, .. } => *tps,
        }
    }

    fn launches(&self) -> usize {
        match self {
            Figure::Time(t) => t.launches,
            Figure::Rate { launches, .. } => *launches,
        }
    }

    /// `1.38 s per request` or `112.4 tok/s`.
    fn shown(&self, metric: Metric) -> String {
        match self {
            Figure::Time(t) => format!("{:.2} s per request", t.seconds),
            Figure::Rate { tps, .. } => {
                let what = if metric.judged_on() == Metric::Prompt {
                    "prompt"
                } else {
                    "generation"
                };
                format!("{what} {tps:.1} tok/s")
            }
        }
    }
}

/// `config`'s figure over its launches (None: none measured).
fn figure(r: &TuneResult, config: &LaunchConfig) -> Option<Figure> {
    let metric = r.inputs.space.objective.metric;
    if metric == Metric::Request {
        return r.objective_time(config, None).map(Figure::Time);
    }
    let v: Vec<f64> = r
        .trials
        .iter()
        .filter(|t| &t.config == config)
        .filter_map(crate::stats::Sample::from_outcome)
        .map(|s| s.get(metric))
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    let s = crate::trial::Stat::from_samples(&v)?;
    Some(Figure::Rate {
        tps: s.median,
        launches: v.len(),
    })
}

/// The best config `engine` measured on the objective, and its figure.
fn best_of(r: &TuneResult, engine: EngineKind) -> Option<(&LaunchConfig, Figure)> {
    let mut seen: Vec<&LaunchConfig> = Vec::new();
    let mut best: Option<(&LaunchConfig, Figure)> = None;
    for t in r.trials.iter().filter(|t| t.config.engine == engine) {
        if seen.contains(&&t.config) {
            continue;
        }
        seen.push(&t.config);
        let Some(f) = figure(r, &t.config) else {
            continue;
        };
        if best.as_ref().is_none_or(|(_, b)| f.rate() > b.rate()) {
            best = Some((&t.config, f));
        }
    }
    best
}

/// The race's arm of `config` (its baselines, then its candidates), where it raced.
fn arm(r: &TuneResult, config: &LaunchConfig) -> Option<usize> {
    let race = r.race.as_ref()?;
    let o = &race.outcome;
    let baselines = o.baselines.max(1);
    if let Some(i) = race.candidates.iter().position(|c| c == config) {
        return Some(baselines + i);
    }
    let rf = r.winner.as_ref()?.reference.as_ref()?;
    if &rf.config == config {
        return Some(o.reference_arm);
    }
    let second = rf.other.as_ref().is_some_and(|b| &b.config == config);
    (second && baselines == 2).then(|| 1 - o.reference_arm.min(1))
}

/// `a` against `b` over the race's rounds both ran (the ratio of `a`'s rate to `b`'s).
fn paired(r: &TuneResult, a: &LaunchConfig, b: &LaunchConfig) -> Option<Comparison> {
    let (x, y) = (arm(r, a)?, arm(r, b)?);
    let rounds = &r.race.as_ref()?.outcome.rounds;
    if rounds.iter().any(|round| round.samples.len() <= x.max(y)) {
        return None;
    }
    crate::stats::race::compare_rounds(rounds, x, y, r.inputs.space.objective.metric, 0.95)
}

/// `1.10× faster` / `1.10× slower` for a rate ratio (the first over the second).
fn factor(ratio: f64) -> String {
    if ratio >= 1.0 {
        format!("{ratio:.2}× faster")
    } else {
        format!("{:.2}× slower", 1.0 / ratio)
    }
}

/// How sure the ratio is: `raced 4 rounds [1.04×, 1.17×]` (the 95 % interval of the paired
/// ratio, oriented as [`factor`] words it), or how many launches the unraced medians are of.
fn basis(c: Option<&Comparison>, a: &Figure, b: &Figure) -> String {
    match c {
        Some(c) => match (c.lo_log, c.hi_log) {
            (Some(lo), Some(hi)) => {
                let (lo, hi) = if c.ratio() >= 1.0 {
                    (lo.exp(), hi.exp())
                } else {
                    ((-hi).exp(), (-lo).exp())
                };
                format!(
                    "raced {} [{lo:.2}×, {hi:.2}×] (95 %)",
                    crate::stats::plural_rounds(c.rounds)
                )
            }
            _ => "raced 1 round, no interval".to_string(),
        },
        None => match (a.launches(), b.launches()) {
            (1, 1) => "one launch each, not raced".to_string(),
            (x, y) => format!("medians of {x} and {y} launches, not raced"),
        },
    }
}

/// `a` against `b`: the ratio of their rates (the race's paired estimate where both raced),
/// and how sure it is ([`basis`]).
fn compared(
    r: &TuneResult,
    a: (&LaunchConfig, Figure),
    b: (&LaunchConfig, Figure),
) -> (f64, String) {
    let c = paired(r, a.0, b.0);
    let ratio = c
        .as_ref()
        .map_or(a.1.rate() / b.1.rate(), Comparison::ratio);
    (ratio, basis(c.as_ref(), &a.1, &b.1))
}

/// An engine none of whose launches measured: how many failed and how the first did (its
/// outcome and the message's first clause), and whether the tune tried it no further.
fn never_measured(r: &TuneResult, engine: EngineKind) -> String {
    let launches: Vec<&TrialOutcome> = r
        .trials
        .iter()
        .filter(|t| t.config.engine == engine)
        .collect();
    if launches.is_empty() {
        return format!("{engine}: never launched");
    }
    let baselines_only = launches
        .iter()
        .all(|t| matches!(t.role, TrialRole::Baseline | TrialRole::SecondBaseline));
    let which = match (launches.len(), baselines_only) {
        (1, true) => "its baseline".to_string(),
        (2, true) => "both its baselines".to_string(),
        (n, true) => format!("all {n} of its baselines"),
        (n, false) => format!("all {n} of its launches"),
    };
    // Launches the minutes budget cut were no failure of the engine's: where every one was,
    // the line says so; else it names the first real failure.
    let Some(first) = launches.iter().find(|t| !t.kind.budget_ended()) else {
        return format!(
            "{engine}: never measured: the minutes budget ended before {which} measured \
             (raise --budget-minutes)"
        );
    };
    let dropped = baselines_only
        && launches
            .iter()
            .all(|t| crate::search::engines::fails_whatever_placed(t.kind));
    format!(
        "{engine}: never measured: {which} failed ({}: {}){}",
        first.kind,
        crate::search::engines::shortened(&first.message, 96),
        if dropped {
            ", none for memory, so it was tried no further"
        } else {
            ""
        }
    )
}

/// One line per engine the tune raced besides its first: where the recommendation is on it,
/// by how much it beat the first engine's best; where it lost, its best against the
/// recommendation; where it never measured, what happened. Empty without a recommendation or
/// with one engine.
pub fn lines(r: &TuneResult) -> Vec<String> {
    let Some(w) = r.winner.as_ref() else {
        return Vec::new();
    };
    let first = r.inputs.space.fixed.engine;
    let metric = r.inputs.space.objective.metric;
    // The recommendation's figure; from what the result stored where its launches say none.
    let stored = match metric {
        Metric::Request => r.objective_time(&w.config, w.request_s).map(Figure::Time),
        _ => Some(Figure::Rate {
            tps: w.gen_tps.median,
            launches: w.gen_tps.samples.len(),
        }),
    };
    let Some(rec) = figure(r, &w.config).or(stored) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for &e in &r.inputs.space.fixed.also_engines {
        if w.config.engine == e {
            out.push(match best_of(r, first) {
                Some((c, f)) => {
                    let (ratio, basis) = compared(r, (&w.config, rec), (c, f));
                    format!(
                        "{e}: recommended: {} than {first}'s best (`{}`), {} against {} ({basis})",
                        factor(ratio),
                        c.label(),
                        rec.shown(metric),
                        f.shown(metric)
                    )
                }
                None => format!("{e}: recommended; {}", never_measured(r, first)),
            });
            continue;
        }
        out.push(match best_of(r, e) {
            Some((c, f)) => {
                let (ratio, basis) = compared(r, (c, f), (&w.config, rec));
                format!(
                    "{e}: {}: its best (`{}`) ran {} against the recommendation's {}, {} ({basis})",
                    if ratio < 1.0 {
                        "lost"
                    } else {
                        "not recommended"
                    },
                    c.label(),
                    f.shown(metric),
                    rec.shown(metric),
                    factor(ratio)
                )
            }
            None => never_measured(r, e),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GPU machine's ik tunes (issue 56): ik_llama.cpp never measured. The verdict says so
    /// in one line with how its launches failed, in the summary and in report.md alike, and
    /// whether the tune tried it further.
    #[test]
    fn an_engine_that_never_measured_gets_one_line_saying_how_it_failed() {
        let r = crate::run::sample::committed("gpu-h200-ik56/tune35-16");
        assert_eq!(
            lines(&r),
            vec![
                "ik_llama.cpp: never measured: all 5 of its launches failed (crash: llama-server \
                 died while loading (killed by signal 11 SIGSEGV) with no out-of-memory line)"
                    .to_string()
            ]
        );
        let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat(&crate::report::summary::table(&r)).contains(&lines(&r)[0]),
            "not in the summary"
        );
        let md = crate::report::markdown::render(&r, &[]);
        assert!(
            flat(&md).contains("- ik_llama.cpp: never measured: all 5"),
            "{md}"
        );
        let r = crate::run::sample::committed("gpu-h200-ik56/tune30-16");
        assert_eq!(
            lines(&r),
            vec![
                "ik_llama.cpp: never measured: both its baselines failed (request-timeout: a \
                 request did not finish within 39 s), none for memory, so it was tried no further"
                    .to_string()
            ]
        );
        // The same launches cut by the minutes budget instead: no failure of the engine's.
        let mut r = r;
        for t in r
            .trials
            .iter_mut()
            .filter(|t| t.config.engine == EngineKind::IkLlama)
        {
            t.kind = crate::trial::OutcomeKind::BudgetEnded;
        }
        assert_eq!(
            lines(&r),
            vec![
                "ik_llama.cpp: never measured: the minutes budget ended before both its \
                 baselines measured (raise --budget-minutes)"
                    .to_string()
            ]
        );
    }

    /// The ratio of two raced configs is read from the race's rounds by each one's arm: the
    /// recommendation against the reference is the race's own paired estimate.
    #[test]
    fn two_raced_configs_compare_over_the_races_rounds() {
        let r = crate::run::sample::committed("gpu-h200-ik56/tune35-16");
        let w = r.winner.as_ref().unwrap();
        let rf = w.reference.as_ref().unwrap();
        let c = paired(&r, &w.config, &rf.config).unwrap();
        let race = w.request_vs_baseline.as_ref().unwrap();
        assert_eq!(c.rounds, race.rounds);
        assert!((c.ratio() - race.ratio()).abs() < 1e-9, "{c:?} {race:?}");
        let default = &rf.other.as_ref().unwrap().config;
        let second = r
            .race
            .as_ref()
            .unwrap()
            .outcome
            .second_vs_first
            .clone()
            .unwrap();
        let d = paired(&r, &rf.config, default).unwrap();
        assert!((d.ratio() - second.request.unwrap().ratio()).abs() < 1e-9);
        let b = basis(
            Some(&c),
            &figure(&r, &w.config).unwrap(),
            &figure(&r, default).unwrap(),
        );
        assert!(
            b.starts_with("raced 3 rounds [1.") && b.ends_with("×] (95 %)"),
            "{b}"
        );
    }
}
