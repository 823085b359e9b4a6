//! Trials: one launch of `llama-server` with one [`LaunchConfig`], measured, classified and
//! journaled. The [`TrialRunner`] trait has the real runner ([`llama_runner::LlamaServerRunner`]) and
//! replay / fault-injecting runners for testing the search's logic.

/// The folder of a run directory where each trial's server log goes (`logs/trial-<id>.log`).
pub const LOGS_DIR: &str = "logs";

pub mod acceptance;
pub mod classify;
pub mod cleanup;
pub mod journal;
pub mod leftover;
pub mod llama_runner;
/// The engines' log dialect, read where a trial reads its log (`trial::logparse` before issue 56).
pub use crate::engine::log as logparse;
pub mod lossless;
pub mod phase;
pub mod plausible;
pub mod process;
pub mod replay;
pub mod replay_trace;
pub mod rpc_log;
pub mod session_render;
pub mod workload;

use crate::config::LaunchConfig;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How a trial ended. Every failure names the log lines that prove it (`TrialOutcome::evidence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeKind {
    /// Loaded, served every request, stayed within the VRAM budget.
    Ok,
    /// Out of memory while loading the model or allocating buffers.
    OomLoad,
    /// Loaded and answered `/health`, then ran out of memory on a request.
    OomRuntime,
    /// Peak VRAM above the budget (free VRAM before the tune minus headroom), or a spill collapse.
    Spill,
    /// The server died or failed for a reason other than memory.
    Crash,
    /// `/health` never became ready within the load timeout.
    LoadTimeout,
    /// A request did not finish within its timeout.
    RequestTimeout,
    /// The server rejected a flag or value (too old a build, typo in a space).
    BadFlag,
    /// Predicted not to fit: never launched.
    Skipped,
    /// Another program took the trial's port before llama-server could listen on it (a lost
    /// race for a free port): no measurement of the config, and not its fault.
    PortConflict,
    /// The server reported speeds that cannot be real (not finite, zero or negative, or far
    /// past what the hardware can do): a broken measurement, never a result.
    Implausible,
    /// An RPC worker (`--rpc`) was unreachable at load or dropped mid-trial (llama.cpp aborts
    /// the head): no measurement of the config, and not its fault. The message names the
    /// worker.
    RpcWorkerLost,
    /// The tune's minutes budget ended while the trial loaded or measured, and qtune stopped
    /// it: nothing measured, and not the config's fault. It never takes an engine out of a
    /// tune, nor the reference out of the race.
    BudgetEnded,
    /// Speculative decoding whose drafts were accepted at or above
    /// [`acceptance::LOOP_ACCEPTANCE`] over the launch: the model's answers loop (a
    /// random-weight model does), and n-gram drafts predict a loop perfectly. Measured, never
    /// ranked: its speed is the model's artifact, not what real answers get.
    Degenerate,
    /// Speculative decoding whose greedy answers differ from the same config's without it
    /// ([`lossless`]): it changes what the user reads. Measured, never ranked; the message
    /// names the request and the token.
    Lossy,
}

impl OutcomeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Ok => "ok",
            OutcomeKind::OomLoad => "oom-load",
            OutcomeKind::OomRuntime => "oom-runtime",
            OutcomeKind::Spill => "spill",
            OutcomeKind::Crash => "crash",
            OutcomeKind::LoadTimeout => "load-timeout",
            OutcomeKind::RequestTimeout => "request-timeout",
            OutcomeKind::BadFlag => "bad-flag",
            OutcomeKind::Skipped => "skipped",
            OutcomeKind::Implausible => "implausible",
            OutcomeKind::PortConflict => "port-conflict",
            OutcomeKind::RpcWorkerLost => "rpc-worker-lost",
            OutcomeKind::BudgetEnded => "budget-ended",
            OutcomeKind::Degenerate => "degenerate",
            OutcomeKind::Lossy => "lossy",
        }
    }

    pub fn is_ok(self) -> bool {
        self == OutcomeKind::Ok
    }

    /// Ended by the tune's minutes budget, not by the config ([`OutcomeKind::BudgetEnded`]).
    pub fn budget_ended(self) -> bool {
        self == OutcomeKind::BudgetEnded
    }

    /// Failures caused by memory: the config is too big for this box.
    pub fn is_memory_failure(self) -> bool {
        matches!(
            self,
            OutcomeKind::OomLoad | OutcomeKind::OomRuntime | OutcomeKind::Spill
        )
    }
}

impl std::fmt::Display for OutcomeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Repeated measurements of one metric: median and spread, never a single sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub samples: Vec<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// (max - min) / median, in percent.
    pub spread_pct: f64,
}

impl Stat {
    /// `None` for no samples.
    pub fn from_samples(samples: &[f64]) -> Option<Stat> {
        if samples.is_empty() {
            return None;
        }
        let mut s: Vec<f64> = samples.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len();
        let median = crate::objective::median_of_sorted(&s)?;
        let (min, max) = (s[0], s[n - 1]);
        let spread_pct = if median > 0.0 {
            (max - min) / median * 100.0
        } else {
            0.0
        };
        Some(Stat {
            samples: samples.to_vec(),
            median,
            min,
            max,
            spread_pct,
        })
    }
}

/// What a successful trial measured, from the server's own `timings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Generation speed, tokens per second.
    pub gen_tps: Stat,
    /// Prompt processing speed, tokens per second.
    pub prompt_tps: Stat,
    /// Time to first token, milliseconds.
    pub ttft_ms: Stat,
    /// Generation speed with `context_depth` tokens already in context, when asked for.
    #[serde(default)]
    pub gen_tps_at_depth: Option<Stat>,
    /// Each request shape of the workload's mixes, measured once ([`crate::workloads`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<crate::workloads::ShapeTiming>,
    /// Time per request of the tune's workload, seconds: the objective (time to first token
    /// plus generation, weighted over the mix; the single request of the old form without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_s: Option<f64>,
    /// A trace's replay (`--workload FILE.jsonl`): each request's counts and times (never its
    /// tokens), their mean (`request_s`) and 90th percentile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<replay_trace::ReplayTiming>,
    /// Speculative decoding on the fixed request (no trace, no shapes): the server's drafted
    /// and accepted tokens summed over its measured repetitions; absent where it drafted none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drafts: Option<acceptance::Acceptance>,
}

impl Metrics {
    /// Time per request of `mix` from this trial's measured shapes, seconds.
    pub fn request_s_of(&self, mix: &crate::workloads::Mix) -> Option<f64> {
        mix.request_s(&self.shapes)
    }
}

/// Why this trial was run; reports and the search treat them differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TrialRole {
    #[default]
    Search,
    Baseline,
    Confirm,
    Sweep,
    /// The second baseline: the best command a user could type without qtune
    /// (`--fit on --fit-target <headroom>`), measured once before the search.
    SecondBaseline,
}

pub use crate::engine::log::ReportedMemory;

/// The first line of every trial log: qtune's own, naming the command it ran.
pub const LOG_HEADER: &str = "# qtune: ";

/// One finished trial, as journaled the moment it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialOutcome {
    /// Sequence number within the tune (1-based).
    pub id: u32,
    pub role: TrialRole,
    pub config: LaunchConfig,
    pub kind: OutcomeKind,
    /// Present when `kind` is `ok` (and for `spill`, where it was measured anyway).
    pub metrics: Option<Metrics>,
    /// Peak VRAM used on each GPU during the trial (MiB), sampled through NVML.
    #[serde(default)]
    pub peak_vram_mib: Vec<u64>,
    /// What the server reported for its buffers.
    #[serde(default)]
    pub reported: Option<ReportedMemory>,
    /// One line saying what happened, for people.
    pub message: String,
    /// The log lines that prove the classification.
    #[serde(default)]
    pub evidence: Vec<String>,
    /// When the trial started (RFC 3339).
    pub started_at: String,
    /// Wall time of the whole trial, seconds.
    pub duration_s: f64,
    /// The per-trial server log.
    #[serde(default)]
    pub log: Option<PathBuf>,
    /// Caveats about the measurement, e.g. a spread too wide to rank on.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// What the tune saw as this launch started, when the box had got busy since the tune
    /// began (other processes on the free cores or the GPU): `other processes used 1.9 of 2
    /// cores (load average 3.3)`. Its timings are the busy box's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_box: Option<String>,
}

impl TrialOutcome {
    /// A config that was never launched, and why (e.g. predicted to push the box into swap).
    pub fn skipped(config: &LaunchConfig, role: TrialRole, why: String) -> Self {
        TrialOutcome {
            id: 0,
            role,
            config: config.clone(),
            kind: OutcomeKind::Skipped,
            metrics: None,
            peak_vram_mib: Vec::new(),
            reported: None,
            message: why,
            evidence: Vec::new(),
            started_at: chrono::Local::now().to_rfc3339(),
            duration_s: 0.0,
            log: None,
            warnings: Vec::new(),
            busy_box: None,
        }
    }

    /// Generation tok/s median, if measured and ok.
    pub fn gen_tps(&self) -> Option<f64> {
        self.metrics.as_ref().map(|m| m.gen_tps.median)
    }
    pub fn prompt_tps(&self) -> Option<f64> {
        self.metrics.as_ref().map(|m| m.prompt_tps.median)
    }
    /// Time per request of the tune's workload (seconds), if measured.
    pub fn request_s(&self) -> Option<f64> {
        self.metrics.as_ref().and_then(|m| m.request_s)
    }
    /// Peak VRAM summed over GPUs (MiB), if sampled.
    pub fn peak_vram_total_mib(&self) -> Option<u64> {
        if self.peak_vram_mib.is_empty() {
            None
        } else {
            Some(self.peak_vram_mib.iter().sum())
        }
    }
}

/// Whether `second` put more of the model's weights on the GPUs than `first`, each as its first
/// launch among `trials` that reported its buffers said; false when either never reported
/// (no GPU, or no launch yet). The two baselines differ only in `--fit-target`: where one keeps
/// more experts on the card, it is the one expected to be faster, and where both loaded the
/// same buffers they are one configuration.
pub fn keeps_more_on_gpu(
    trials: &[TrialOutcome],
    second: &LaunchConfig,
    first: &LaunchConfig,
) -> bool {
    let weights = |c| first_reported(trials, c).map(logparse::gpu_model_mib);
    matches!((weights(second), weights(first)), (Some(s), Some(f)) if s > f)
}

/// Every trial's own warnings, each text once with the trials that gave it
/// (`trials 1-17, 19: ...`), in the order they first appeared. `skip` leaves some out (those
/// summarized elsewhere).
pub fn grouped_warnings(trials: &[TrialOutcome], skip: impl Fn(&str) -> bool) -> Vec<String> {
    let mut groups: Vec<(&str, Vec<u32>)> = Vec::new();
    for t in trials {
        for w in t.warnings.iter().filter(|w| !skip(w)) {
            match groups.iter_mut().find(|(g, _)| *g == w.as_str()) {
                Some((_, ids)) => ids.push(t.id),
                None => groups.push((w, vec![t.id])),
            }
        }
    }
    groups
        .into_iter()
        .map(|(w, ids)| {
            if ids.len() == 1 {
                format!("trial {}: {w}", ids[0])
            } else {
                format!("trials {}: {w}", id_ranges(&ids))
            }
        })
        .collect()
}

/// `1-3, 5, 7-8` for ids 1, 2, 3, 5, 7, 8.
fn id_ranges(ids: &[u32]) -> String {
    let mut v = ids.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}-{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    out.join(", ")
}
/// Whether `a` and `b` loaded the same buffers (model, KV, recurrent state and compute, on every
/// device), each as its first launch among `trials` that reported them said: one configuration
/// on this box, whatever their flags (`--fit-target` where the model fits with room to spare).
/// False when either never reported.
pub fn loaded_alike(trials: &[TrialOutcome], a: &LaunchConfig, b: &LaunchConfig) -> bool {
    matches!(
        (first_reported(trials, a), first_reported(trials, b)),
        (Some(x), Some(y)) if x == y
    )
}

/// The buffers the first launch of `c` among `trials` that reported them said it loaded.
fn first_reported<'a>(trials: &'a [TrialOutcome], c: &LaunchConfig) -> Option<&'a ReportedMemory> {
    trials
        .iter()
        .filter(|t| &t.config == c)
        .find_map(|t| t.reported.as_ref())
}

/// Runs one config and says what happened. Never panics on server misbehaviour: every
/// failure is an outcome. Implementations must leave no server process behind.
pub trait TrialRunner {
    fn run(&mut self, config: &LaunchConfig, role: TrialRole) -> TrialOutcome;
    /// Before each launch: Err(why) when what every trial depends on changed since the tune
    /// started (the model file replaced, truncated or deleted). The search then stops without
    /// charging a trial.
    fn check_inputs(&self) -> Result<(), String> {
        Ok(())
    }
    /// After a launch: Some(why) when it found that no trial can give a result (a replayed
    /// trace recorded with another tokenizer). That launch is not journaled, and the tune or
    /// comparison stops with this line ([`Fatal`]).
    fn fatal(&self) -> Option<String> {
        None
    }
}

/// The error a search stops with when [`TrialRunner::fatal`] says no trial can give a result:
/// no `--resume` can go on (the same inputs meet the same refusal).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Fatal(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    /// The same caveat from 17 trials was 17 lines of the summary (a committed GPU run): it
    /// is one line naming the trials.
    #[test]
    fn a_warning_many_trials_gave_is_one_line() {
        let t = |id: u32, w: &[&str]| {
            let mut o = TrialOutcome::skipped(
                &LaunchConfig::baseline(2048),
                TrialRole::Search,
                String::new(),
            );
            o.id = id;
            o.warnings = w.iter().map(|s| s.to_string()).collect();
            o
        };
        let trials = vec![
            t(1, &["reused 0"]),
            t(2, &["reused 0", "odd"]),
            t(3, &["reused 0"]),
            t(5, &["reused 0", "wide spread"]),
            t(6, &[]),
        ];
        assert_eq!(
            grouped_warnings(&trials, |w| w.contains("spread")),
            vec!["trials 1-3, 5: reused 0", "trial 2: odd"]
        );
    }
}
