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

pub mod candidates;
mod checkpoint;
pub mod measure;
pub mod objective;
mod progress;
pub mod strategy;
mod summary;
pub mod verdict;

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

/// The inputs of a tune, written as `run.json` when it starts so `--resume` uses the same ones
/// (in particular the free VRAM measured before the first trial).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInputs {
    pub model_path: PathBuf,
    pub server_path: PathBuf,
    pub server_version: String,
    pub space: SearchSpace,
    pub headroom_mib: u64,
    pub hardware: HardwareProfile,
    pub free_vram_at_start_mib: u64,
    pub vram_budget_mib: Option<u64>,
    pub started_at: String,
    pub host: String,
    pub port: u16,
    #[serde(default)]
    pub start: Option<strategy::Base>,
}

pub const RUN_FILE: &str = "run.json";
pub const RESULTS_FILE: &str = "results.json";

/// `reports/<date>-<model>-<host>/`.
fn default_run_dir(model: &std::path::Path, tag: Option<&str>) -> PathBuf {
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let host = sysinfo::System::host_name().unwrap_or_else(|| "host".into());
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let date = chrono::Local::now().format("%Y%m%d-%H%M%S");
    PathBuf::from("reports").join(format!(
        "{date}-{}{}-{}",
        tag.map(|t| format!("{t}-")).unwrap_or_default(),
        clean(&stem),
        clean(&host)
    ))
}

/// Load a search space: a built-in name or a YAML file; apply command-line overrides.
fn space_for(opts: &TuneOptions, has_gpu: bool, moe: bool) -> anyhow::Result<SearchSpace> {
    let name = opts.space.clone().unwrap_or_else(|| {
        if has_gpu && moe {
            "default".into()
        } else {
            "cpu-only".into()
        }
    });
    let mut space = crate::space::load(&name)?;
    if let Some(c) = opts.ctx {
        space.fixed.ctx = c;
    }
    if let Some(t) = opts.budget_trials {
        space.budget.trials = t;
    }
    if let Some(m) = opts.budget_minutes {
        space.budget.minutes = m;
    }
    crate::space::validate(&space).map_err(|(_, msg)| anyhow::anyhow!("{msg}"))?;
    Ok(space)
}

/// `qtune tune`.
pub fn cmd_tune(opts: TuneOptions) -> anyhow::Result<()> {
    let result = tune(&opts)?;
    print_outcome(&result, opts.json)
}

/// Run a whole tune and write its results, report and launch script.
pub fn tune(opts: &TuneOptions) -> anyhow::Result<(TuneResult, PathBuf)> {
    use anyhow::Context;
    let (run_dir, inputs) = match &opts.resume {
        Some(dir) => {
            let text = std::fs::read_to_string(dir.join(RUN_FILE)).with_context(|| {
                format!(
                    "cannot resume: {} has no {RUN_FILE} (not a qtune run directory?)",
                    dir.display()
                )
            })?;
            let inputs: RunInputs = serde_json::from_str(&text).with_context(|| {
                format!(
                    "cannot resume: {} is unreadable",
                    dir.join(RUN_FILE).display()
                )
            })?;
            if inputs.model_path != opts.model {
                anyhow::bail!(
                    "cannot resume: {} was a tune of {}, not {}",
                    dir.display(),
                    inputs.model_path.display(),
                    opts.model.display()
                );
            }
            (dir.clone(), inputs)
        }
        None => {
            let server = crate::server::resolve(opts.server.as_deref())?;
            let layout = crate::model::load(&opts.model)?;
            let hardware = crate::hardware::probe(true);
            let space = space_for(opts, hardware.has_gpu(), layout.is_moe())?;
            let free = hardware.free_vram_mib();
            let budget = hardware
                .has_gpu()
                .then(|| free.saturating_sub(opts.headroom_mib));
            let start = match &opts.from_profile {
                Some(p) => Some(strategy::base_of(
                    &crate::profile::load_profile(p)?.winner.config,
                )),
                None => None,
            };
            let run_dir = opts
                .out
                .clone()
                .unwrap_or_else(|| default_run_dir(&opts.model, None));
            if run_dir.join(RUN_FILE).exists() {
                anyhow::bail!(
                    "{} already holds a tune: use --resume {} to continue it, or another --out",
                    run_dir.display(),
                    run_dir.display()
                );
            }
            let inputs = RunInputs {
                model_path: opts.model.clone(),
                server_path: server.path.clone(),
                server_version: server.version.clone(),
                space,
                headroom_mib: opts.headroom_mib,
                hardware,
                free_vram_at_start_mib: free,
                vram_budget_mib: budget,
                started_at: chrono::Local::now().to_rfc3339(),
                host: opts.host.clone(),
                port: opts.port,
                start,
            };
            crate::util::write_atomic(
                &run_dir.join(RUN_FILE),
                serde_json::to_string_pretty(&inputs)?.as_bytes(),
            )?;
            (run_dir, inputs)
        }
    };
    let result = run(&run_dir, &inputs)?;
    Ok((result, run_dir))
}

/// Drive the search for a prepared run directory.
fn run(run_dir: &std::path::Path, inputs: &RunInputs) -> anyhow::Result<TuneResult> {
    use std::sync::Arc;

    let server = crate::server::check(&inputs.server_path, crate::server::Source::Flag)?;
    let layout = crate::model::load(&inputs.model_path)?;
    let hw = &inputs.hardware;
    let ctx = strategy::SearchContext {
        space: inputs.space.clone(),
        layout: layout.clone(),
        gpu_moe: hw.has_gpu() && layout.is_moe() && inputs.space.vary.n_cpu_moe.is_some(),
        has_gpu: hw.has_gpu(),
        budget_mib: inputs.vram_budget_mib.map(|b| b as f64),
        physical_cores: hw.host.physical_cores.unwrap_or(hw.host.logical_cores),
        logical_cores: hw.host.logical_cores,
        start: inputs.start.clone(),
        ram_available_mib: Some(hw.host.ram_available_mib as f64),
    };

    let journal = crate::trial::journal::Journal::open(run_dir)?;
    let journaled = crate::trial::journal::Journal::read(run_dir)?;
    let checkpoint = checkpoint::RunDirCheckpoint::new(run_dir);
    let seen = {
        use argmin::core::checkpointing::Checkpoint;
        checkpoint
            .load()?
            .map(|(s, _)| s.history.iter().map(|o| o.id).max().unwrap_or(0))
            .unwrap_or(0)
    };
    let replay: Vec<TrialOutcome> = journaled.iter().filter(|o| o.id > seen).cloned().collect();
    let next_id = journaled.iter().map(|o| o.id).max().unwrap_or(0) + 1;
    if !journaled.is_empty() {
        eprintln!(
            "qtune: resuming {}: {} trials already done",
            run_dir.display(),
            journaled.len()
        );
    }

    let progress = Arc::new(progress::Progress::new());
    let runner = crate::trial::server::LlamaServerRunner::new(
        &server.path,
        &inputs.model_path,
        layout.file_bytes,
        inputs.space.workload.clone(),
        run_dir,
        journal,
        inputs.vram_budget_mib,
        request_timeout(&inputs.space.workload),
    )?
    .with_first_id(next_id)
    .with_free_vram_at_start(hw.has_gpu().then_some(inputs.free_vram_at_start_mib));
    let journal_path = run_dir.join(crate::trial::journal::FILE_NAME);
    let solver = strategy::run_search_with(
        ctx.clone(),
        Box::new(runner),
        replay,
        Some(run_dir),
        Some(progress.clone()),
    )
    .map_err(|e| {
        // Interrupted or failed mid-tune: the journal keeps every finished trial.
        anyhow::anyhow!(
            "{e:#} (finished trials are in {}; continue with --resume {})",
            journal_path.display(),
            run_dir.display()
        )
    })?;
    progress.finish();
    let history = solver.history.clone();
    let mut warnings = solver.warnings.clone();
    let (confirmation, winner) = verdict::decide(
        &ctx,
        &history,
        &server.path,
        &inputs.model_path,
        inputs,
        &mut warnings,
    );
    let noisy: Vec<String> = history
        .iter()
        .filter(|o| o.warnings.iter().any(|w| w.contains("spread")))
        .map(|o| o.id.to_string())
        .collect();
    for o in &history {
        for w in o.warnings.iter().filter(|w| !w.contains("spread")) {
            warnings.push(format!("trial {}: {w}", o.id));
        }
    }
    if !noisy.is_empty() {
        warnings.push(format!(
            "{} of {} trials had a spread wider than 10 % (trials {}): the box was busy or noisy; the confirmation pooled repeated rounds, but consider more repetitions in the space",
            noisy.len(),
            history.len(),
            noisy.join(", ")
        ));
    }
    let result = TuneResult {
        qtune_version: env!("CARGO_PKG_VERSION").to_string(),
        server_path: server.path.clone(),
        server_version: server.version.clone(),
        started_at: inputs.started_at.clone(),
        finished_at: chrono::Local::now().to_rfc3339(),
        hardware: inputs.hardware.clone(),
        free_vram_at_start_mib: inputs.free_vram_at_start_mib,
        headroom_mib: inputs.headroom_mib,
        vram_budget_mib: inputs.vram_budget_mib,
        model_path: inputs.model_path.clone(),
        model: layout,
        space: inputs.space.clone(),
        trials: history,
        confirmation,
        winner,
        warnings,
        minutes_used: solver.elapsed_s() / 60.0,
    };
    crate::util::write_atomic(
        &run_dir.join(RESULTS_FILE),
        serde_json::to_string_pretty(&result)?.as_bytes(),
    )?;
    crate::report::write_all(run_dir, &result)?;
    Ok(result)
}

/// The summary table on stderr, then the winning command alone as the last line on stdout.
fn print_outcome((result, run_dir): &(TuneResult, PathBuf), json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(result)?);
        return Ok(());
    }
    eprintln!("{}", summary::table(result));
    eprintln!("report: {}", run_dir.join("report.md").display());
    match &result.winner {
        Some(w) => {
            println!("{}", crate::config::shell_line(&w.command));
            Ok(())
        }
        None => anyhow::bail!(
            "no config ran successfully within the budget; see {} for each failure",
            run_dir.join("report.md").display()
        ),
    }
}

/// `qtune demo`: obtain a server (building it if needed), synthesize the tiny MoE model and
/// run a small tune end to end.
pub fn cmd_demo(out: Option<PathBuf>, server: Option<PathBuf>) -> anyhow::Result<()> {
    let server = crate::server::resolve_or_build(server.as_deref())?;
    eprintln!(
        "qtune demo: llama-server {} ({})",
        server.path.display(),
        server.version
    );
    let model = crate::fixtures::tiny_moe("tiny-qwen35moe")?;
    eprintln!(
        "qtune demo: model {} (synthetic tiny qwen35moe)",
        model.display()
    );
    let opts = TuneOptions {
        model: model.clone(),
        server: Some(server.path),
        space: Some("demo".into()),
        headroom_mib: 512,
        ctx: None,
        budget_trials: None,
        budget_minutes: None,
        out: Some(out.unwrap_or_else(|| default_run_dir(&model, Some("demo")))),
        resume: None,
        from_profile: None,
        host: "127.0.0.1".into(),
        port: 8080,
        json: false,
    };
    let result = tune(&opts)?;
    print_outcome(&result, false)
}

/// How long one request may take: generous, since a slow box is not a failure.
fn request_timeout(w: &crate::space::Workload) -> std::time::Duration {
    let tokens = w.prompt_tokens + w.gen_tokens + w.context_depth.unwrap_or(0);
    std::time::Duration::from_secs(120 + u64::from(tokens) / 10)
}
