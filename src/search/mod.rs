//! The search: prune with the memory prediction, bisect the fitting `--n-cpu-moe` boundary,
//! improve threads / batch / KV type by coordinate steps, then confirm the top candidates
//! against the baseline by interleaved re-measurement. Driven by argmin's `Executor`.

use crate::config::LaunchConfig;
use crate::hardware::HardwareProfile;
use crate::model::ModelLayout;
use crate::space::SearchSpace;
use crate::trial::{Stat, TrialOutcome};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
}

/// Everything a tune produced: written as `results.json` in the run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneResult {
    pub qtune_version: String,
    pub server_path: PathBuf,
    pub server_version: String,
    pub started_at: String,
    pub finished_at: String,
    pub hardware: HardwareProfile,
    /// Free VRAM (summed) measured before the tune, MiB.
    pub free_vram_at_start_mib: u64,
    pub headroom_mib: u64,
    /// Free VRAM before the tune minus headroom; None with no GPU.
    pub vram_budget_mib: Option<u64>,
    pub model_path: PathBuf,
    pub model: ModelLayout,
    pub space: SearchSpace,
    pub trials: Vec<TrialOutcome>,
    pub confirmation: Vec<Confirmed>,
    pub winner: Option<Winner>,
    pub warnings: Vec<String>,
    pub minutes_used: f64,
}

/// What `qtune tune` was asked to do, free of clap.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    pub model: PathBuf,
    pub server: Option<PathBuf>,
    pub space: Option<String>,
    pub headroom_mib: u64,
    pub ctx: Option<u32>,
    pub budget_trials: Option<u32>,
    pub budget_minutes: Option<f64>,
    pub out: Option<PathBuf>,
    pub resume: Option<PathBuf>,
    pub from_profile: Option<PathBuf>,
    pub host: String,
    pub port: u16,
    pub json: bool,
}

/// `qtune tune`.
pub fn cmd_tune(opts: TuneOptions) -> anyhow::Result<()> {
    let _ = opts;
    anyhow::bail!("qtune tune is not implemented yet")
}

/// `qtune demo`.
pub fn cmd_demo(out: Option<PathBuf>, server: Option<PathBuf>) -> anyhow::Result<()> {
    let _ = (out, server);
    anyhow::bail!("qtune demo is not implemented yet")
}
