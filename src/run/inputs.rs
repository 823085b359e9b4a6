//! What a run starts from ([`RunInputs`]), built in one place ([`RunInputs::resolve`]) for a
//! tune and its dry run, written as `run.json` and read back for `--resume`; and the VRAM
//! budgets derived from the box and the headroom.

use super::{MAX_RUN_FILE_BYTES, RUN_FILE};
use crate::config::Base;
use crate::hardware::HardwareProfile;
use crate::model::ModelLayout;
use crate::space::SearchSpace;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What qtune resolved and measured before a tune starts (the model, the server, the box, the
/// space), from which [`RunInputs::resolve`] makes the run's inputs.
#[derive(Debug, Clone)]
pub struct Resolved<'a> {
    /// Absolute.
    pub model_path: PathBuf,
    pub layout: &'a ModelLayout,
    /// Absolute.
    pub server_path: PathBuf,
    pub server_version: String,
    /// A real server (its size is kept so `--resume` sees a changed binary); false for a
    /// replayed journal, whose server is only a name.
    pub real_server: bool,
    pub hardware: HardwareProfile,
    pub space: SearchSpace,
    pub headroom_mib: u64,
    pub host: String,
    pub port: u16,
    /// `--from-profile`: the winner of an earlier tune the search starts from.
    pub start: Option<Base>,
    /// The quality floor's measurement (None: no floor, or a dry run, which measures nothing).
    pub quality: Option<crate::quality::floor::QualityGate>,
    /// The other engines' servers the tune races (`--engine both`; empty for one engine).
    pub engine_servers: Vec<crate::engine::select::EngineServer>,
}

/// The inputs of a tune, written as `run.json` when it starts so `--resume` uses the same ones
/// (in particular the free VRAM measured before the first trial).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInputs {
    pub model_path: PathBuf,
    pub server_path: PathBuf,
    pub server_version: String,
    pub space: SearchSpace,
    pub headroom_mib: u64,
    pub hardware: HardwareProfile,
    pub free_vram_at_start_mib: u64,
    pub vram_budget_mib: Option<u64>,
    /// Each card's budget when the box has two GPUs or more (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_budgets: Vec<crate::hardware::GpuBudget>,
    pub started_at: String,
    pub host: String,
    pub port: u16,
    #[serde(default)]
    pub start: Option<Base>,
    /// The quality floor's measurement, taken once before the first trial.
    #[serde(default)]
    pub quality: Option<crate::quality::floor::QualityGate>,
    /// The model's header fingerprint and file size when the tune started: `--resume` refuses
    /// a model file that changed since (None in runs written before qtune checked).
    #[serde(default)]
    pub model_fingerprint: Option<String>,
    #[serde(default)]
    pub model_bytes: Option<u64>,
    /// The server binary's size when the tune started (its version is `server_version`).
    #[serde(default)]
    pub server_bytes: Option<u64>,
    /// The other engines' servers the tune races (`--engine both`), each with its version:
    /// empty where one engine is tuned (and in runs written before there were two).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub engine_servers: Vec<crate::engine::select::EngineServer>,
}

impl RunInputs {
    /// A new run's inputs: the free VRAM and the budgets measured from the box now, the
    /// model's fingerprint and size, the server's size, and the start time. The one place a
    /// tune (and its dry run) builds them; `--resume` reads them back from `run.json`.
    pub fn resolve(r: Resolved<'_>) -> RunInputs {
        let hw = &r.hardware;
        RunInputs {
            server_bytes: if r.real_server {
                std::fs::metadata(&r.server_path).ok().map(|m| m.len())
            } else {
                None
            },
            model_path: r.model_path,
            server_path: r.server_path,
            server_version: r.server_version,
            space: r.space,
            headroom_mib: r.headroom_mib,
            vram_budget_mib: box_vram_budget_mib(hw, r.headroom_mib),
            gpu_budgets: gpu_budgets(hw, r.headroom_mib),
            free_vram_at_start_mib: hw.free_vram_mib(),
            hardware: r.hardware,
            started_at: chrono::Local::now().to_rfc3339(),
            host: r.host,
            port: r.port,
            start: r.start,
            quality: r.quality,
            model_fingerprint: Some(r.layout.fingerprint.clone()),
            model_bytes: Some(r.layout.file_bytes),
            engine_servers: r.engine_servers,
        }
    }

    /// The launch command of `config` in this run: its engine's server, model, host and port.
    pub fn command(&self, config: &crate::config::LaunchConfig) -> Vec<String> {
        use crate::engine::LaunchArgs;
        let server = crate::engine::select::server_for(
            config.engine,
            &self.server_path,
            &self.engine_servers,
        );
        config.command(server, &self.model_path, &self.host, self.port)
    }
}

/// Write `run.json` (the inputs of a starting tune).
pub fn write_inputs(dir: &Path, inputs: &RunInputs) -> Result<()> {
    crate::util::write_atomic(
        &dir.join(RUN_FILE),
        serde_json::to_string_pretty(inputs)?.as_bytes(),
    )
}

/// Read `run.json` of a run directory; `why` says what the caller wanted it for.
pub fn read_inputs(dir: &Path) -> Result<RunInputs> {
    let path = dir.join(RUN_FILE);
    let bytes = match crate::util::read_bounded(&path, MAX_RUN_FILE_BYTES) {
        Ok(b) => b,
        Err(crate::util::BoundedReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            anyhow::bail!(
                "{} has no {RUN_FILE} (not a qtune run directory?)",
                dir.display()
            )
        }
        Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
    };
    let inputs: RunInputs = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is unreadable", path.display()))?;
    inputs
        .check_schema()
        .map_err(|e| anyhow::anyhow!("{} is not a valid qtune run: {e}", path.display()))?;
    Ok(inputs)
}

/// The VRAM budget of a tune or a plan: free VRAM minus headroom, never negative; None without
/// a GPU (nothing to budget).
pub fn vram_budget_mib(has_gpu: bool, free_vram_mib: u64, headroom_mib: u64) -> Option<u64> {
    has_gpu.then(|| free_vram_mib.saturating_sub(headroom_mib))
}

/// The per-card budgets of a tune or a plan on a box with two GPUs or more (free VRAM minus
/// the headroom, each card); empty with one GPU or none, whose single budget is
/// [`vram_budget_mib`] as before.
pub fn gpu_budgets(hw: &HardwareProfile, headroom_mib: u64) -> Vec<crate::hardware::GpuBudget> {
    if hw.gpus.len() < 2 {
        return Vec::new();
    }
    hw.gpu_budgets(headroom_mib)
}

/// The VRAM budget of a box: with several GPUs the sum of their own budgets (the headroom
/// kept on each card), else [`vram_budget_mib`] of the summed free VRAM.
pub fn box_vram_budget_mib(hw: &HardwareProfile, headroom_mib: u64) -> Option<u64> {
    let cards = gpu_budgets(hw, headroom_mib);
    if cards.is_empty() {
        vram_budget_mib(hw.has_gpu(), hw.free_vram_mib(), headroom_mib)
    } else {
        Some(cards.iter().map(|g| g.budget_mib).sum())
    }
}
