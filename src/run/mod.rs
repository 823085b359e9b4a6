//! The finished run: what a tune produced ([`TuneResult`]) and what it started from
//! ([`RunInputs`]), and the only code that reads or writes them in a run directory.
//!
//! This module is neutral ground between the stages: `search` produces a [`TuneResult`];
//! `report`, `profile` and the app layer consume it. It depends only on the shared vocabulary
//! (`config`, `hardware`, `model`, `space` and the trial record types), never on a stage that
//! does work.

use crate::config::LaunchConfig;
use crate::hardware::HardwareProfile;
use crate::model::ModelLayout;
use crate::space::SearchSpace;
use crate::trial::{Stat, TrialOutcome, TrialRole};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub mod figures;
mod folder;
mod inputs;
pub mod pareto;
mod result_file;
#[doc(hidden)]
pub mod sample;
pub mod schema;

pub use folder::*;
pub use inputs::*;

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

/// σ of the values around their own group's mean, pooled over the groups with more than one
/// value; [`PICK_PRIOR_SIGMA`] when fewer than two degrees of freedom are behind it.
fn pooled_sigma<'a>(groups: impl Iterator<Item = &'a [f64]>) -> f64 {
    let (mut ss, mut df) = (0.0, 0usize);
    for g in groups.filter(|g| g.len() > 1) {
        let mean = g.iter().sum::<f64>() / g.len() as f64;
        ss += g.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
        df += g.len() - 1;
    }
    if df < 2 {
        PICK_PRIOR_SIGMA
    } else {
        (ss / df as f64).sqrt()
    }
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

/// A number without a trailing `.0` (`5`, `2.5`).
fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// A tune the budget ended before its race decided: which budget, after how many launches,
/// what the race got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetStop {
    /// `launches` or `minutes`.
    pub by: String,
    pub launches: u32,
    pub budget_launches: u32,
    pub minutes: f64,
    pub budget_minutes: f64,
    /// Paired rounds the race measured, and where it stood.
    pub race_rounds: u32,
    pub race: String,
    /// The launch budget (a new total) that gives the race the rounds it says it needs to
    /// decide (None: no race ran, or a result written before qtune sized it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decide_launches: Option<u32>,
    /// The mean launch so far (seconds): what sizes the minutes those launches take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_launch_s: Option<f64>,
}

impl BudgetStop {
    /// The options and values that go on: the launches the race says it needs to decide
    /// (twice the launch budget where no race ran), and for a tune the minutes ended, the
    /// minutes those launches take at the mean launch so far (twice the minutes without one).
    pub fn extension(&self) -> Vec<(&'static str, String)> {
        let launches = self
            .decide_launches
            .filter(|&n| n > self.launches)
            .unwrap_or((self.budget_launches * 2).max(2));
        let mut out = Vec::new();
        if self.by != "minutes" || launches > self.budget_launches {
            out.push((
                "--budget-trials",
                launches.max(self.budget_launches).to_string(),
            ));
        }
        if self.by == "minutes" {
            let more = launches.saturating_sub(self.launches);
            let minutes = match self.mean_launch_s {
                Some(s) if self.decide_launches.is_some() => {
                    // Whole minutes, with one launch to spare.
                    (self.minutes + f64::from(more + 1) * s / 60.0)
                        .ceil()
                        .max(self.budget_minutes + 1.0)
                }
                _ => self.budget_minutes * 2.0,
            };
            out.push(("--budget-minutes", trim_float(minutes)));
        }
        out
    }

    /// For people: which budget, how far the tune got, and how to go on, then on a line of its
    /// own the exact command (`command` continues the tune; the extension is appended).
    pub fn line(&self, command: &str) -> String {
        let budget = if self.by == "minutes" {
            format!(
                "the minutes budget ({}) ended the tune after {} ({:.1} minutes)",
                crate::util::minutes(self.budget_minutes),
                if self.launches == 1 {
                    "1 launch".to_string()
                } else {
                    format!("{} launches", self.launches)
                },
                self.minutes
            )
        } else if self.launches < self.budget_launches {
            format!(
                "the launch budget left the race too few launches for a round ({} of {} made, \
                 {:.1} of {} minutes)",
                self.launches,
                self.budget_launches,
                self.minutes,
                trim_float(self.budget_minutes)
            )
        } else {
            format!(
                "the launch budget ended the tune after {} of {} launches ({:.1} of {} minutes)",
                self.launches,
                self.budget_launches,
                self.minutes,
                trim_float(self.budget_minutes)
            )
        };
        let rounds = match self.race_rounds {
            0 => "no paired round".to_string(),
            1 => "1 paired round".to_string(),
            n => format!("{n} paired rounds"),
        };
        let more: Vec<String> = self
            .extension()
            .into_iter()
            .map(|(flag, value)| format!("{flag} {value}"))
            .collect();
        let what = if self.decide_launches.is_some() {
            "to give the race the rounds it needs to decide"
        } else {
            "to go on with twice the budget"
        };
        format!(
            "stopped: {budget}; the race got {rounds}: {}; {what}:\n{command} {}",
            self.race,
            more.join(" ")
        )
    }
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
        let mut doc = serde_json::to_value(&r).unwrap();
        doc["schema_version"] = 3.into();
        doc["verdict"] = serde_json::json!({"workload": "chat"});
        write_document(dir.path(), &doc).unwrap();
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

/// One named pick of a tune: a config with its paired gains against the baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedPick {
    /// `fastest generation`, `best prompt speed, generation tied`, `the default`.
    pub name: &'static str,
    pub config: LaunchConfig,
    /// Against the baseline (None for the baseline itself, or when not raced).
    pub gen: Option<crate::stats::Comparison>,
    pub prompt: Option<crate::stats::Comparison>,
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

/// The best command for one workload, from the trials already measured: what the summary says
/// for every built-in workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadPick {
    pub workload: String,
    pub config: LaunchConfig,
    /// Median time per request over the config's trials, seconds.
    pub request_s: f64,
    /// The same for the better baseline on this workload, and which it was.
    pub reference_request_s: Option<f64>,
    pub reference_name: Option<String>,
    /// Launches behind `request_s`.
    pub launches: usize,
    /// The launch command (filled in by the tune).
    #[serde(default)]
    pub command: Vec<String>,
    /// Why this config: the raced verdict, a lead larger than the noise, or the better
    /// baseline kept (absent in files written before: a plain median).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<PickBasis>,
}

/// Why a workload's pick is the one named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PickBasis {
    /// The tune's own workload: the raced verdict.
    Verdict,
    /// Faster than the better baseline beyond the noise of the launches behind both medians
    /// (one-sided 95 % over every config that could lead, at least [`MIN_LEAD_LAUNCHES`]
    /// launches a side; not raced: re-measure with `qtune compare --workload`).
    Lead,
    /// Nothing led the better baseline by more than the noise: the baseline is the pick.
    Kept,
}

impl WorkloadPick {
    /// Why this config, for people ([`PickBasis::describe`]; files written before there was a
    /// basis ranked by the plain median).
    pub fn why(&self) -> &'static str {
        self.basis
            .map_or("the fastest median; no baseline was measured", |b| {
                b.describe()
            })
    }

    /// The better baseline's time per request over the pick's: above 1, the pick is faster.
    pub fn ratio(&self) -> Option<f64> {
        self.reference_request_s
            .filter(|_| self.request_s > 0.0)
            .map(|b| b / self.request_s)
    }
}

impl PickBasis {
    /// For people, after the pick.
    pub fn describe(self) -> &'static str {
        match self {
            PickBasis::Verdict => "the raced verdict",
            PickBasis::Lead => {
                "faster than the better baseline by more than its launches vary; not raced"
            }
            PickBasis::Kept => {
                "the better baseline: nothing beat it by more than the launches vary"
            }
        }
    }
}

/// Launches a side, at least, behind a lead on a workload that was not raced.
pub const MIN_LEAD_LAUNCHES: usize = 2;

/// σ of `ln(time per request)` between launches of one config when nothing says better (10 %:
/// what single launches on the lent GPU machine moved by).
const PICK_PRIOR_SIGMA: f64 = 0.10;

impl TuneResult {
    /// For each workload measured in every trial (the objective's first, then the other
    /// built-ins): the command to run.
    /// - For the tune's own workload, the verdict's config.
    /// - For the others, the better baseline (whatever their peak: they are what the user
    ///   would type): the one that keeps more of the model on the GPU (fit-target where it
    ///   fills the card further; the default where both loaded the same buffers), unless the
    ///   other's median is shorter beyond the noise (one-sided 95 %); unless a config
    ///   that never failed nor passed the VRAM budget has a median time per request shorter
    ///   than that baseline's beyond the noise: by more than z standard errors of the two
    ///   medians' log ratio, z one-sided 95 % over every config that could lead (Bonferroni).
    ///   The σ is the spread between launches of one config on that workload, pooled over
    ///   every config launched more than once (or 10 % when fewer than three launches repeat).
    ///   A single fast launch of a config is no evidence: on a noisy box, the fastest of twenty
    ///   single launches is fast by luck.
    pub fn workload_picks(&self) -> Vec<WorkloadPick> {
        let budget = self.inputs.vram_budget_mib;
        let mut configs: Vec<&LaunchConfig> = Vec::new();
        for t in &self.trials {
            if !configs.contains(&&t.config) {
                configs.push(&t.config);
            }
        }
        let is_baseline = |c: &LaunchConfig| self.baseline_name(c).is_some();
        let fuller_second = self
            .trials
            .iter()
            .find(|t| t.role == TrialRole::SecondBaseline)
            .is_some_and(|s| {
                crate::trial::keeps_more_on_gpu(
                    &self.trials,
                    &s.config,
                    &baseline_of(&self.inputs.space),
                )
            });
        // Both baselines loaded the same buffers: on this card they are one configuration, and
        // any difference measured between them is the launches' noise.
        let alike = self
            .trials
            .iter()
            .find(|t| t.role == TrialRole::SecondBaseline)
            .is_some_and(|s| {
                crate::trial::loaded_alike(
                    &self.trials,
                    &s.config,
                    &baseline_of(&self.inputs.space),
                )
            });
        let objective = self
            .inputs
            .space
            .workload
            .objective_mix()
            .map(|m| m.name.clone());
        let mut out = Vec::new();
        for mix in &self.inputs.space.workload.mixes {
            // (config, ln times, baseline?)
            let mut measured: Vec<(&LaunchConfig, Vec<f64>, bool)> = Vec::new();
            for &c in &configs {
                let trials: Vec<&TrialOutcome> =
                    self.trials.iter().filter(|t| &t.config == c).collect();
                let baseline = is_baseline(c);
                let failed = trials.iter().any(|t| {
                    let over =
                        matches!((budget, t.peak_vram_total_mib()), (Some(b), Some(p)) if p > b);
                    !(t.kind.is_ok() || (baseline && t.kind == crate::trial::OutcomeKind::Spill))
                        || (!baseline && over)
                });
                if failed {
                    continue;
                }
                let times: Vec<f64> = figures::launch_times(&self.trials, c, Some(mix))
                    .into_iter()
                    .map(f64::ln)
                    .collect();
                if !times.is_empty() {
                    measured.push((c, times, baseline));
                }
            }
            let median = figures::log_median;
            let sigma = pooled_sigma(measured.iter().map(|m| m.1.as_slice()));
            // Shorter than `b` beyond the noise: by more than z standard errors of the two
            // medians' log ratio.
            let beats = |a: &(&LaunchConfig, Vec<f64>, bool),
                         b: &(&LaunchConfig, Vec<f64>, bool),
                         z: f64| {
                let se = sigma * (1.0 / a.1.len() as f64 + 1.0 / b.1.len() as f64).sqrt();
                median(&b.1) - median(&a.1) - z * se
            };
            // The better baseline: the one that keeps more of the model on the GPU (or the
            // default, where both loaded the same), unless the other is faster beyond the noise.
            let tied_to = measured
                .iter()
                .filter(|m| m.2)
                .find(|m| (self.baseline_name(m.0) == Some("fit-target")) == fuller_second)
                .or_else(|| measured.iter().find(|m| m.2));
            let z_one = crate::stats::z_quantile(0.95);
            let reference = tied_to.map(|t| {
                if alike {
                    return t;
                }
                measured
                    .iter()
                    .filter(|m| m.2 && m.0 != t.0 && beats(m, t, z_one) > 0.0)
                    .max_by(|a, b| beats(a, t, z_one).total_cmp(&beats(b, t, z_one)))
                    .unwrap_or(t)
            });
            // The tune's own workload: the reference its verdict names (the race's, paired).
            let is_objective = objective.as_deref() == Some(mix.name.as_str());
            let verdicts_reference = self
                .winner
                .as_ref()
                .and_then(|w| w.reference.as_ref())
                .and_then(|r| measured.iter().find(|m| m.2 && *m.0 == r.config));
            let reference = match verdicts_reference {
                Some(r) if is_objective => Some(r),
                _ => reference,
            };
            let pick_of =
                |c: &LaunchConfig, times: &[f64], basis: Option<PickBasis>| WorkloadPick {
                    workload: mix.name.clone(),
                    config: c.clone(),
                    request_s: median(times).exp(),
                    reference_request_s: reference.map(|r| median(&r.1).exp()),
                    reference_name: reference
                        .and_then(|r| self.baseline_name(r.0))
                        .map(str::to_string),
                    launches: times.len(),
                    command: Vec::new(),
                    basis,
                };
            if is_objective {
                if let Some(w) = &self.winner {
                    if let Some(m) = measured.iter().find(|m| *m.0 == w.config) {
                        out.push(pick_of(m.0, &m.1, Some(PickBasis::Verdict)));
                        continue;
                    }
                }
            }
            let Some(reference) = reference else {
                // No baseline measured: the fastest median, as a ranking.
                if let Some(m) = measured
                    .iter()
                    .min_by(|a, b| median(&a.1).total_cmp(&median(&b.1)))
                {
                    out.push(pick_of(m.0, &m.1, None));
                }
                continue;
            };
            // One-sided 95 % over all the configs that could lead (Bonferroni): the fastest of
            // many equal configs is not a lead.
            let contenders = measured.iter().filter(|m| !m.2).count().max(1);
            let z = crate::stats::z_quantile(1.0 - 0.05 / contenders as f64);
            let lead = |m: &(&LaunchConfig, Vec<f64>, bool)| beats(m, reference, z);
            // Never a lead from one launch a side: one fast launch is no evidence.
            let repeated = |m: &(&LaunchConfig, Vec<f64>, bool)| {
                m.1.len() >= MIN_LEAD_LAUNCHES && reference.1.len() >= MIN_LEAD_LAUNCHES
            };
            let leader = measured
                .iter()
                .filter(|m| !m.2 && repeated(m) && lead(m) > 0.0)
                .max_by(|a, b| lead(a).total_cmp(&lead(b)));
            out.push(match leader {
                Some(m) => pick_of(m.0, &m.1, Some(PickBasis::Lead)),
                None => pick_of(reference.0, &reference.1, Some(PickBasis::Kept)),
            });
        }
        out
    }

    /// The baseline `c` is, as the verdict names it: `default` (what the user gets without
    /// placement flags) or `fit-target` (the second baseline the tune launched); None for any
    /// config qtune chose.
    pub fn baseline_name(&self, c: &LaunchConfig) -> Option<&'static str> {
        if *c == baseline_of(&self.inputs.space) {
            Some("default")
        } else if self
            .trials
            .iter()
            .any(|t| &t.config == c && t.role == TrialRole::SecondBaseline)
        {
            Some("fit-target")
        } else {
            None
        }
    }

    /// The Pareto front's named picks: fastest generation (the winner), best prompt speed
    /// among the configs whose generation interval overlaps the winner's (statistically tied),
    /// and the default. Empty without a race.
    pub fn named_picks(&self) -> Vec<NamedPick> {
        let Some(race) = &self.race else {
            return Vec::new();
        };
        let baseline = baseline_of(&self.inputs.space);
        let mut picks = Vec::new();
        let verdicts = race.verdicts();
        if let Some(w) = &self.winner {
            picks.push(NamedPick {
                name: "fastest generation",
                config: w.config.clone(),
                gen: w.gen_vs_baseline.clone(),
                prompt: w.prompt_vs_baseline.clone(),
            });
            let overlaps = |a: &crate::stats::Comparison, b: Option<&crate::stats::Comparison>| {
                match (a.lo_log, a.hi_log, b.and_then(|b| b.lo_log.zip(b.hi_log))) {
                    (Some(lo), Some(hi), Some((blo, bhi))) => lo <= bhi && blo <= hi,
                    // The baseline (no interval against itself) is tied when 0 is inside.
                    (Some(lo), Some(hi), None) if b.is_none() => lo <= 0.0 && 0.0 <= hi,
                    _ => false,
                }
            };
            let best_prompt = verdicts
                .iter()
                .filter(|(c, _)| **c != w.config)
                .filter(|(c, v)| {
                    let failed = race.outcome.candidates.iter().any(|r| {
                        race.candidates.get(r.index) == Some(*c)
                            && matches!(r.status, crate::stats::race::ArmStatus::Failed { .. })
                    });
                    !failed && overlaps(&v.gen, w.gen_vs_baseline.as_ref())
                })
                .filter(|(_, v)| {
                    w.prompt_vs_baseline
                        .as_ref()
                        .is_none_or(|p| v.prompt.mean_log > p.mean_log)
                })
                .max_by(|a, b| a.1.prompt.mean_log.total_cmp(&b.1.prompt.mean_log));
            if let Some((c, v)) = best_prompt {
                picks.push(NamedPick {
                    name: "best prompt speed, generation tied",
                    config: (*c).clone(),
                    gen: Some(v.gen.clone()),
                    prompt: Some(v.prompt.clone()),
                });
            }
        }
        picks.push(NamedPick {
            name: "the default",
            config: baseline,
            gen: None,
            prompt: None,
        });
        picks
    }
}
