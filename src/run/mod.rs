//! The finished run: what a tune produced ([`TuneResult`]) and what it started from
//! ([`RunInputs`]), and the only code that reads or writes them in a run directory. One job a
//! file:
//! - `inputs.rs`: [`RunInputs`], built once ([`RunInputs::resolve`]), and `run.json`;
//! - `result_file.rs`: `results.json`, its document and its layout;
//! - `folder.rs`: the run folder's lock and the checks before anything is written there;
//! - `budget.rs`: [`BudgetStop`], a tune a budget ended; `picks.rs`: the picks of a result;
//! - `figures.rs`, `pareto.rs`: the numbers the report and summary show; `schema.rs`: the
//!   checks of values read back;
//! - `setup.rs`: the server and the workload a tune and a comparison share.
//!
//! This module is neutral ground between the stages: `search` produces a [`TuneResult`];
//! `report`, `profile` and the app layer consume it. It depends only on the shared vocabulary
//! (`config`, `hardware`, `model`, `space` and the trial record types), never on a stage that
//! does work, except in `setup.rs` (finding the server, rendering a session).

use crate::config::LaunchConfig;
use crate::hardware::HardwareProfile;
use crate::model::ModelLayout;
use crate::space::SearchSpace;
use crate::trial::{Stat, TrialOutcome, TrialRole};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

mod budget;
pub mod figures;
mod folder;
mod inputs;
pub mod pareto;
mod picks;
mod result_file;
#[doc(hidden)]
pub mod sample;
pub mod schema;
pub mod setup;

pub use budget::*;
pub use folder::*;
pub use inputs::*;
pub use picks::*;
pub use result_file::*;

pub const RUN_FILE: &str = "run.json";
pub const RESULTS_FILE: &str = "results.json";
/// The largest `results.json` or `run.json` qtune reads (a long tune's is well under 1 MiB).
pub const MAX_RUN_FILE_BYTES: u64 = 64 << 20;

/// Host and port of the printed launch command when none was asked for.
pub const DEFAULT_HOST: &str = "127.0.0.1";
pub const DEFAULT_PORT: u16 = 8080;

fn default_host() -> String {
    DEFAULT_HOST.to_string()
}
fn default_port() -> u16 {
    DEFAULT_PORT
}

/// One candidate's interleaved re-measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Confirmed {
    pub config: LaunchConfig,
    pub is_baseline: bool,
    /// All rounds' samples pooled.
    pub gen_tps: Option<Stat>,
    pub prompt_tps: Option<Stat>,
    pub peak_vram_mib: Option<u64>,
    /// Trial ids of the rounds.
    pub trial_ids: Vec<u32>,
}

/// The winner and how it compares to the baseline (from the confirmation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Winner {
    pub config: LaunchConfig,
    pub gen_tps: Stat,
    pub prompt_tps: Stat,
    pub peak_vram_mib: Option<u64>,
    /// Gain over the baseline's median, percent (None when the baseline failed).
    pub gen_gain_pct: Option<f64>,
    pub prompt_gain_pct: Option<f64>,
    /// The launch command, ready to paste.
    pub command: Vec<String>,
    /// The paired race's gains against the baseline, with their intervals (None: not raced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gen_vs_baseline: Option<crate::stats::Comparison>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_vs_baseline: Option<crate::stats::Comparison>,
    /// The reference every gain is stated against: the better of the baselines on the
    /// objective (None in files written before there were two: the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Reference>,
    /// Time per request of the tune's workload (seconds, median over its trials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_s: Option<f64>,
    /// The paired race's requests-per-second ratio against the reference, with its interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_vs_baseline: Option<crate::stats::Comparison>,
    /// proven (beats the reference beyond its interval), likely (faster estimate, not
    /// measurably slower), kept (the reference itself is recommended), unraced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VerdictStatus>,
}

/// Which baseline the gains are stated against, and what it measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// `default` (no placement flags) or `fit-target` (`--fit on --fit-target <headroom>`).
    pub name: String,
    pub config: LaunchConfig,
    pub command: Vec<String>,
    /// Time per request of the workload, seconds (median over its trials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_s: Option<f64>,
    pub peak_vram_mib: Option<u64>,
    /// Its peak went past the user's VRAM budget (fit overshoots its target).
    #[serde(default)]
    pub over_budget: bool,
    /// The other baseline, as measured (None: only one was launched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other: Option<Box<Reference>>,
}

/// How sure the recommendation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerdictStatus {
    /// Faster than the reference beyond its interval.
    Proven,
    /// Faster by its estimate and not measurably slower; not proven. Only under a
    /// generation-first objective: per request, an unproven pick keeps the reference.
    Likely,
    /// The reference is recommended: nothing beat it.
    Kept,
    /// No race ran: single launches only.
    Unraced,
}

/// Everything a tune produced: written as `results.json` in the run directory, where the
/// fields of its [`RunInputs`] it always carried sit beside the rest ([`result_file`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "result_file::ResultFile", from = "result_file::ResultFile")]
pub struct TuneResult {
    pub qtune_version: String,
    /// What the run started from (its `run.json`). Read back from a results.json, the fields
    /// only `run.json` holds (`start`, the model's fingerprint and size, the server's size) are
    /// None.
    pub inputs: RunInputs,
    pub finished_at: String,
    pub model: ModelLayout,
    pub trials: Vec<TrialOutcome>,
    pub confirmation: Vec<Confirmed>,
    pub winner: Option<Winner>,
    /// The race of the top candidates against the baseline (paired ABBA rounds), when it ran.
    pub race: Option<RaceReport>,
    pub warnings: Vec<String>,
    pub minutes_used: f64,
    /// The config the speed model rated best on this box, launched right after the baseline
    /// (None: no GPU the model knows, several GPUs, or a tune written before qtune made one).
    pub model_pick: Option<crate::config::LaunchConfig>,
    /// The best command for each workload measured (the objective's first, then the other
    /// built-ins), from the trials' medians ([`TuneResult::workload_picks`]).
    pub workload_picks: Vec<WorkloadPick>,
    /// The budget that ended the tune before its race decided (None: the tune finished on
    /// its own).
    pub budget_stop: Option<BudgetStop>,
}

/// The trials that measured the baseline: its confirmation rounds when the confirmation ran,
/// else the baseline trials of the search. The one rule the verdict, the report and the plots
/// share.
pub fn baseline_trials<'a>(
    trials: &'a [TrialOutcome],
    baseline: &LaunchConfig,
) -> Vec<&'a TrialOutcome> {
    let confirm: Vec<&TrialOutcome> = trials
        .iter()
        .filter(|o| o.role == TrialRole::Confirm && &o.config == baseline)
        .collect();
    if !confirm.is_empty() {
        return confirm;
    }
    trials
        .iter()
        .filter(|o| o.role == TrialRole::Baseline)
        .collect()
}

/// What the baseline measured in a finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineMeasure {
    pub config: LaunchConfig,
    /// Pooled over the baseline's trials; None when none of them ran ok.
    pub gen: Option<Stat>,
    pub prompt: Option<Stat>,
    pub peak_vram_mib: Option<u64>,
    /// Ids of the trials pooled (or of the failed baseline trial).
    pub trial_ids: Vec<u32>,
    /// The trials were confirmation rounds (else the search's baseline trial).
    pub confirmed: bool,
    /// Why the baseline failed, when it did.
    pub failure: Option<String>,
}

impl TuneResult {
    /// The baseline's measurement (see [`baseline_trials`]); None when it never ran.
    pub fn baseline(&self) -> Option<BaselineMeasure> {
        let first = self.trials.iter().find(|t| t.role == TrialRole::Baseline)?;
        let config = first.config.clone();
        let trials = baseline_trials(&self.trials, &config);
        let ok: Vec<&TrialOutcome> = trials
            .iter()
            .copied()
            .filter(|t| t.kind.is_ok() && t.metrics.is_some())
            .collect();
        let pool = |f: fn(&crate::trial::Metrics) -> &Stat| {
            let samples: Vec<f64> = ok
                .iter()
                .flat_map(|t| f(t.metrics.as_ref().expect("filtered")).samples.clone())
                .collect();
            Stat::from_samples(&samples)
        };
        let failed = trials.iter().find(|t| !t.kind.is_ok());
        Some(BaselineMeasure {
            gen: pool(|m| &m.gen_tps),
            prompt: pool(|m| &m.prompt_tps),
            peak_vram_mib: trials.iter().filter_map(|t| t.peak_vram_total_mib()).max(),
            trial_ids: if ok.is_empty() {
                vec![first.id]
            } else {
                ok.iter().map(|t| t.id).collect()
            },
            confirmed: trials.iter().any(|t| t.role == TrialRole::Confirm),
            failure: if ok.is_empty() {
                failed.map(|t| format!("{}: {}", t.kind, t.message))
            } else {
                None
            },
            config,
        })
    }
}

/// What a user gets without qtune in this space: the engine's default baseline
/// ([`crate::engine::Engine::default_baseline`]).
pub fn baseline_of(space: &SearchSpace) -> LaunchConfig {
    crate::engine::of(space.fixed.engine).default_baseline(&space.fixed.baseline_inputs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_free_minus_headroom_never_negative_and_none_without_gpu() {
        assert_eq!(vram_budget_mib(true, 16000, 512), Some(15488));
        assert_eq!(vram_budget_mib(true, 300, 512), Some(0));
        assert_eq!(vram_budget_mib(false, 16000, 512), None);
    }

    #[test]
    fn results_round_trip_and_bad_input_is_explained() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_result(dir.path()).unwrap_err().to_string();
        assert!(e.contains("no results.json"), "{e}");
        std::fs::write(dir.path().join(RESULTS_FILE), "{").unwrap();
        let e = read_result(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a valid qtune result"), "{e}");
        let r = sample::gpu_result(Path::new("/srv/llama-server"), Path::new("/m/model.gguf"));
        write_results(dir.path(), &r, serde_json::json!({"workload": "chat"})).unwrap();
        let (d, back) = read_result(&dir.path().join(RESULTS_FILE)).unwrap();
        assert_eq!(d, dir.path());
        // Floats may differ in the last bit after a trip through text; the rest is exact.
        assert_eq!(back.trials.len(), r.trials.len());
        assert_eq!(back.winner.map(|w| w.config), r.winner.map(|w| w.config));
        assert_eq!(
            (back.inputs.host, back.inputs.port),
            (r.inputs.host, r.inputs.port)
        );
    }

    #[test]
    fn an_old_result_without_host_and_port_reads_with_the_defaults() {
        let r = sample::gpu_result(Path::new("/srv/llama-server"), Path::new("/m/model.gguf"));
        let mut v = serde_json::to_value(&r).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("host");
        o.remove("port");
        let back: TuneResult = serde_json::from_value(v).unwrap();
        assert_eq!(
            (back.inputs.host.as_str(), back.inputs.port),
            (DEFAULT_HOST, DEFAULT_PORT)
        );
    }

    #[test]
    fn baseline_prefers_confirmation_rounds() {
        let r = sample::gpu_result(Path::new("/srv/llama-server"), Path::new("/m/model.gguf"));
        let b = r.baseline().expect("the sample has a baseline");
        let confirm_ids: Vec<u32> = r
            .trials
            .iter()
            .filter(|t| t.role == TrialRole::Confirm && t.config == b.config && t.kind.is_ok())
            .map(|t| t.id)
            .collect();
        if confirm_ids.is_empty() {
            assert!(!b.confirmed);
        } else {
            assert!(b.confirmed);
            assert_eq!(b.trial_ids, confirm_ids);
        }
    }
}

/// The race of a tune: the configs that raced the baseline and what the race decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RaceReport {
    /// The racing configs; `outcome`'s indices point here (the baseline is the reference).
    pub candidates: Vec<LaunchConfig>,
    pub outcome: crate::stats::race::RaceOutcome,
}

impl RaceReport {
    /// Each raced config with its paired verdict against the baseline (raced rounds only).
    pub fn verdicts(&self) -> Vec<(&LaunchConfig, &crate::stats::PairedVerdict)> {
        self.outcome
            .candidates
            .iter()
            .filter_map(|c| Some((self.candidates.get(c.index)?, c.vs_reference.as_ref()?)))
            .collect()
    }
}
