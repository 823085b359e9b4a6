//! What the search tells whoever watches it: a trial is starting, a trial finished (as one
//! line). The search never prints; the app layer implements [`Watch`] (a spinner on stderr).

use super::TuneState;
use crate::config::LaunchConfig;
use crate::trial::{TrialOutcome, TrialRole};
use argmin::core::observers::Observe;
use argmin::core::{Error as ArgminError, KV};
use std::sync::Arc;

/// Where a launch of the confirmation phase stands in the race: round `round` (1-based) of
/// at most `rounds_at_most`, launching `arm` ("the baseline", "a candidate").
#[derive(Debug, Clone, PartialEq)]
pub struct RaceStep {
    pub round: u32,
    pub rounds_at_most: u32,
    pub arm: &'static str,
}

impl RaceStep {
    /// `racing round 2 of at most 5, the baseline (-t 1)`: `label` is the config's flags.
    pub fn describe(&self, label: &str) -> String {
        format!(
            "racing round {} of at most {}, {} ({label})",
            self.round, self.rounds_at_most, self.arm
        )
    }
}

/// Someone watching a tune.
pub trait Watch {
    /// A trial is about to launch; `race` says where it stands in the confirmation race.
    fn starting(&self, config: &LaunchConfig, role: TrialRole, race: Option<&RaceStep>);
    /// A trial finished; `line` says how (see [`line`]).
    fn finished(&self, line: &str);
}

/// One finished trial as one line for people. The launch count and ETA are on the line the
/// app prints as each launch starts; this one says how it went.
pub fn line(outcome: &TrialOutcome, _search_trials: u32, _budget_trials: u32) -> String {
    let counter = launch_word(outcome.role, &outcome.config);
    let speeds = match &outcome.metrics {
        Some(m) => format!(
            "tg {:>7.1} t/s ±{:<4.1}%  pp {:>8.1} t/s",
            m.gen_tps.median,
            m.gen_tps.spread_pct / 2.0,
            m.prompt_tps.median
        ),
        None => outcome.message.clone(),
    };
    let vram = outcome
        .peak_vram_total_mib()
        .map(|v| format!("  VRAM {}", crate::util::fmt_mib(v as f64)))
        .unwrap_or_default();
    format!(
        "  {counter:>8} #{:<3} {:<15} {speeds}{vram}  ({:.0} s)",
        outcome.id,
        outcome.kind.as_str(),
        outcome.duration_s
    )
}

/// The word for a trial's role.
/// How a launch of `config` in `role` is named on its lines: the role, with the engine where it
/// is not llama.cpp (`--engine both`); another engine's default is a "baseline", not a
/// "baseline (fit-target)".
pub fn launch_word(role: TrialRole, config: &crate::config::LaunchConfig) -> String {
    let word = match role {
        TrialRole::SecondBaseline if config.fit != Some(true) => "baseline",
        r => role_word(r),
    };
    if config.engine == crate::config::EngineKind::default() {
        word.to_string()
    } else {
        format!("{word} · {}", config.engine.name())
    }
}

pub fn role_word(role: TrialRole) -> &'static str {
    match role {
        TrialRole::Search => "search",
        TrialRole::Baseline => "baseline",
        TrialRole::Confirm => "confirm",
        TrialRole::Sweep => "sweep",
        TrialRole::SecondBaseline => "baseline (fit-target)",
    }
}

/// argmin observer that hands each iteration's trial line to the watcher.
pub struct Observer(pub Arc<dyn Watch>);

impl Observe<TuneState> for Observer {
    fn observe_iter(&mut self, _state: &TuneState, kv: &KV) -> Result<(), ArgminError> {
        if let Some(line) = kv.get("line").and_then(|v| v.get_string()) {
            self.0.finished(&line);
        }
        Ok(())
    }
}
