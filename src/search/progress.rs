//! Progress on stderr through argmin's observer interface: a spinner while a trial runs and one
//! line per finished trial.

use super::strategy::TuneState;
use crate::config::LaunchConfig;
use crate::trial::{TrialOutcome, TrialRole};
use argmin::core::observers::Observe;
use argmin::core::{Error as ArgminError, KV};
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Arc;
use std::time::Duration;

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub fn new() -> Self {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                .expect("static template"),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar }
    }

    /// A trial is about to launch.
    pub fn starting(&self, config: &LaunchConfig, role: TrialRole) {
        self.bar
            .set_message(format!("{} trial: {}", role_word(role), config.label()));
    }

    /// One finished trial, printed above the spinner (or plainly when stderr is not a terminal).
    pub fn line(outcome: &TrialOutcome, search_trials: u32, budget_trials: u32) -> String {
        let counter = match outcome.role {
            TrialRole::Search => format!("search {search_trials:>2}/{budget_trials}"),
            r => role_word(r).to_string(),
        };
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
            "[{counter:>12}] #{:<3} {:<44} {:<15} {speeds}{vram}  ({:.0} s)",
            outcome.id,
            outcome.config.label(),
            outcome.kind.as_str(),
            outcome.duration_s
        )
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

fn role_word(role: TrialRole) -> &'static str {
    match role {
        TrialRole::Search => "search",
        TrialRole::Baseline => "baseline",
        TrialRole::Confirm => "confirm",
        TrialRole::Sweep => "sweep",
    }
}

/// argmin observer that prints each iteration's trial line.
pub struct Observer(pub Arc<Progress>);

impl Observe<TuneState> for Observer {
    fn observe_iter(&mut self, _state: &TuneState, kv: &KV) -> Result<(), ArgminError> {
        if let Some(line) = kv.get("line").and_then(|v| v.get_string()) {
            if self.0.bar.is_hidden() {
                eprintln!("{line}");
            } else {
                self.0.bar.println(line);
            }
        }
        Ok(())
    }
}
