//! The one time per request of a (config, workload): computed here and nowhere else, so the
//! summary, report.md, the plots, `results.json` and `--json` print the same number.
//!
//! The rule: **the median over the config's launches that measured the workload** (each
//! launch gives one number, the time per request of its own requests; a launch that failed
//! gives none; a baseline's launch that spilled past the VRAM budget counts, it is what the
//! user would type). The median is taken in logs, so with an even count it is the geometric
//! mean of the middle two. Ratios between two configs are a separate statistic: the race's
//! paired estimate over its rounds where the two raced (with its interval), else the ratio of
//! these medians (no interval: not raced).

use super::TuneResult;
use crate::config::LaunchConfig;
use crate::trial::{OutcomeKind, TrialOutcome};
use crate::workloads::Mix;

/// A config's time per request on one workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestTime {
    /// The median over its launches, seconds.
    pub seconds: f64,
    /// Launches behind it.
    pub launches: usize,
    /// The fastest and slowest of those launches, seconds.
    pub fastest_s: f64,
    pub slowest_s: f64,
}

/// The time per request of each launch of `config` that measured `mix` (None: the single
/// request of a tune without a workload mix), in trial order.
pub fn launch_times(trials: &[TrialOutcome], config: &LaunchConfig, mix: Option<&Mix>) -> Vec<f64> {
    trials
        .iter()
        .filter(|t| &t.config == config)
        .filter_map(|t| launch_time(t, mix))
        .collect()
}

/// One launch's time per request on `mix` (None: the single request of a tune without a mix),
/// as [`launch_times`] counts it: None for a launch that failed or measured none.
pub fn launch_time(t: &TrialOutcome, mix: Option<&Mix>) -> Option<f64> {
    if !(t.kind.is_ok() || t.kind == OutcomeKind::Spill) {
        return None;
    }
    let m = t.metrics.as_ref()?;
    match mix {
        Some(mix) => m.request_s_of(mix),
        None => m.request_s,
    }
    .filter(|t| t.is_finite() && *t > 0.0)
}

/// The median of `ln` values (NaN for none): the statistic [`request_time`] takes
/// ([`crate::objective::log_median`]).
pub use crate::objective::log_median;

/// [`RequestTime`] from launch times, seconds (None for none).
pub fn from_times(times: &[f64]) -> Option<RequestTime> {
    if times.is_empty() {
        return None;
    }
    let logs: Vec<f64> = times.iter().map(|t| t.ln()).collect();
    Some(RequestTime {
        seconds: log_median(&logs).exp(),
        launches: times.len(),
        fastest_s: times.iter().copied().fold(f64::INFINITY, f64::min),
        slowest_s: times.iter().copied().fold(0.0, f64::max),
    })
}

/// The time per request of `config` on `mix` over `trials` (the rule of this module).
pub fn request_time(
    trials: &[TrialOutcome],
    config: &LaunchConfig,
    mix: Option<&Mix>,
) -> Option<RequestTime> {
    from_times(&launch_times(trials, config, mix))
}

impl TuneResult {
    /// `config`'s time per request on the workload named `workload` (None: the tune's own
    /// objective, or its single request where it had no mix).
    pub fn request_time(
        &self,
        config: &LaunchConfig,
        workload: Option<&str>,
    ) -> Option<RequestTime> {
        let mix = match workload {
            Some(name) => Some(
                self.inputs
                    .space
                    .workload
                    .mixes
                    .iter()
                    .find(|m| m.name == name)?,
            ),
            None => self.inputs.space.workload.objective_mix(),
        };
        request_time(&self.trials, config, mix)
    }
}

impl TuneResult {
    /// A config's time per request on the tune's own workload: from its launches by the one
    /// rule, else (a result written without per-launch times) the value the result stored.
    pub fn objective_time(&self, c: &LaunchConfig, stored: Option<f64>) -> Option<RequestTime> {
        self.request_time(c, None).or_else(|| {
            stored.map(|s| RequestTime {
                seconds: s,
                launches: 0,
                fastest_s: s,
                slowest_s: s,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_is_the_median_in_logs_and_the_range_of_the_launches() {
        let t = from_times(&[1.0, 4.0]).unwrap();
        assert!((t.seconds - 2.0).abs() < 1e-12, "geometric mean of the two");
        assert_eq!((t.launches, t.fastest_s, t.slowest_s), (2, 1.0, 4.0));
        let t = from_times(&[3.0, 1.0, 2.0]).unwrap();
        assert!((t.seconds - 2.0).abs() < 1e-12);
        assert!(from_times(&[]).is_none());
    }
}
