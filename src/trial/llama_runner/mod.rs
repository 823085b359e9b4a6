//! The real trial runner: launches `llama-server` with one [`LaunchConfig`], waits for
//! `/health`, runs the workload, samples VRAM, classifies and journals the outcome, and ends
//! the server's process group on every path.

mod abort;
mod launch;

use super::classify::Verdict;
use super::journal::Journal;
use super::plausible;
use super::workload;
use super::{OutcomeKind, TrialOutcome, TrialRole, TrialRunner};
use crate::config::LaunchConfig;
use crate::engine::LaunchArgs;
use crate::space::Workload;
use anyhow::{Context, Result};
use launch::Draft;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How far past the end of the minutes budget a trial may run, whatever the server does (a
/// load that never ends, a request that never answers, a workload of 100,000 repetitions):
/// with [`launch::STOP_GRACE`] to stop the server and a few seconds to write the results, a tune ends
/// within its budget plus 30 s.
pub const PAST_BUDGET_WALL: Duration = Duration::from_secs(15);

pub use super::process::{free_port, ServerProcess};

/// Load timeout for a model file: 60 s + 15 s per GiB.
pub fn load_timeout_for(model_bytes: u64) -> Duration {
    let gib = model_bytes as f64 / (1024.0 * 1024.0 * 1024.0);
    Duration::from_secs_f64(60.0 + 15.0 * gib)
}

/// The real trial runner. Sync: it owns a small tokio runtime and blocks on it, so call
/// `run()` from an ordinary thread (not from inside another runtime). Servers die with the
/// thread that calls `run()` (PDEATHSIG), so keep that thread alive for the tune.
pub use super::plausible::{PaceFn, SpeedCeilingFn};

pub struct LlamaServerRunner {
    server: PathBuf,
    /// The server of each other engine a config may name (`qtune compare` of llama.cpp and
    /// ik_llama.cpp); a config of an engine not listed launches `server`.
    engine_servers: Vec<(crate::config::EngineKind, PathBuf)>,
    model: PathBuf,
    workload: Workload,
    run_dir: PathBuf,
    journal: Journal,
    vram_budget_mib: Option<u64>,
    /// Each card's budget on a box with two GPUs or more (empty: judge the summed peak).
    gpu_budgets_mib: Vec<u64>,
    request_timeout: Duration,
    load_timeout: Duration,
    /// When the tune's minutes budget runs out: a request that does not answer waits at most
    /// until then (or [`crate::trial::workload::AFTER_DEADLINE_WAIT`] past it).
    deadline: Option<Instant>,
    extra_args: Vec<String>,
    env: Vec<(String, String)>,
    next_id: u32,
    last_pid: Option<u32>,
    /// Free VRAM (MiB, summed) measured before the tune, to notice other processes.
    free_vram_at_start_mib: Option<u64>,
    /// The fastest believable speeds of a config (default: the absolute bound).
    speed_ceiling: SpeedCeilingFn,
    /// The slowest speeds measured so far: each request's timeout follows them.
    pace: Option<workload::Pace>,
    /// The speed model's pessimistic speeds of a config, for the timeouts of the trials
    /// before any measurement.
    predicted_pace: PaceFn,
    /// The model's files (a split model's every part) and their size and latest modification
    /// time when the runner was made.
    model_parts: Vec<PathBuf>,
    model_stamp: Option<(u64, std::time::SystemTime)>,
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
    /// Set by a launch that found no trial can give a result ([`TrialRunner::fatal`]).
    fatal: Option<String>,
    /// The model file's size, for the heartbeat's loading step.
    model_bytes: u64,
    /// What the running launch is doing, for the heartbeat ([`Self::with_phase`]).
    doing: super::phase::PhaseCell,
    /// The box as each launch starts, when it got busy ([`Self::with_busy_note`]).
    busy: super::phase::BusyNote,
    /// A tune of a random-weight model ([`Self::with_random_weights`]).
    random_weights: bool,
    /// The first replay with kept answers of each config that keeps the model's answers: where
    /// the answers of a launch that may change them leave them, its server is probed for a near-tie
    /// ([`crate::trial::lossless::probe`]) before it stops.
    reference_answers: Vec<(LaunchConfig, crate::trial::replay_trace::ReplayTiming)>,
}

impl LlamaServerRunner {
    /// A runner for one model and workload. Per-trial logs go to `<run_dir>/logs/trial-<id>.log`,
    /// every outcome to `journal` the moment it ends. `vram_budget_mib` (free VRAM at start
    /// minus headroom) turns a trial whose own peak VRAM exceeds it into `spill`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        server: &Path,
        model: &Path,
        model_bytes: u64,
        workload: Workload,
        run_dir: &Path,
        journal: Journal,
        vram_budget_mib: Option<u64>,
        request_timeout: Duration,
    ) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the HTTP runtime")?;
        // A fresh connection per request: llama-server may close a kept-alive one (after a
        // streamed answer, when idle, when its worker thread ends) just as a request is sent
        // on it, and that request fails unanswered. Locally a connect costs microseconds.
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .context("cannot build the HTTP client")?;
        std::fs::create_dir_all(run_dir)
            .with_context(|| format!("cannot create {}", run_dir.display()))?;
        crate::util::real_dir(&run_dir.join(super::LOGS_DIR))?;
        let model_parts = crate::model::split::part_paths(model);
        Ok(LlamaServerRunner {
            server: server.to_path_buf(),
            engine_servers: Vec::new(),
            model: model.to_path_buf(),
            workload,
            run_dir: run_dir.to_path_buf(),
            journal,
            vram_budget_mib,
            gpu_budgets_mib: Vec::new(),
            request_timeout,
            load_timeout: load_timeout_for(model_bytes),
            deadline: None,
            extra_args: Vec::new(),
            env: Vec::new(),
            next_id: 1,
            last_pid: None,
            free_vram_at_start_mib: None,
            speed_ceiling: Box::new(|_| plausible::SpeedCeiling::ABSOLUTE),
            pace: None,
            predicted_pace: Box::new(|_| None),
            model_stamp: model_stamp(&model_parts),
            model_parts,
            rt,
            client,
            fatal: None,
            model_bytes,
            doing: super::phase::PhaseCell::default(),
            busy: super::phase::BusyNote::default(),
            random_weights: false,
            reference_answers: Vec::new(),
        })
    }

    /// A tune of a random-weight model: a speculative launch is measured for its cost, never
    /// ranked ([`super::acceptance::cost_only`]); not in `compare`, which measures that cost.
    pub fn with_random_weights(mut self, random: bool) -> Self {
        self.random_weights = random;
        self
    }

    /// The reference answers of the launches a resumed tune already made (`history`, its
    /// journal): without them a speculative launch after `--resume` had nothing to probe
    /// against, and a near-tie there was called lossy ([`crate::trial::lossless::references`]).
    pub fn with_reference_answers(mut self, history: &[super::TrialOutcome]) -> Self {
        self.reference_answers = crate::trial::lossless::references(history);
        self
    }

    /// Say each launch's step (loading, the request being measured) in `cell`, which the
    /// tune's heartbeat reads.
    pub fn with_phase(mut self, cell: super::phase::PhaseCell) -> Self {
        self.doing = cell;
        self
    }

    /// Record in each outcome (and so the journal) what the tune's check before the launch
    /// saw of a busy box, as it sets it in `note`.
    pub fn with_busy_note(mut self, note: super::phase::BusyNote) -> Self {
        self.busy = note;
        self
    }

    /// The end of the tune's minutes budget: a server that never answers is cut off there
    /// (a request timeout) instead of running the tune past its budget. Requests that answer
    /// are never cut: the search's budget rule decides which trials start.
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Override the load timeout (default: 60 s + 15 s per GiB of model file).
    pub fn with_load_timeout(mut self, d: Duration) -> Self {
        self.load_timeout = d;
        self
    }

    /// The server that launches the configs of `engine` (the others launch the runner's own).
    pub fn with_engine_server(mut self, engine: crate::config::EngineKind, server: &Path) -> Self {
        self.engine_servers.push((engine, server.to_path_buf()));
        self
    }

    /// Extra server flags appended after the config's (e.g. `--alias`, for tests).
    pub fn with_extra_args(mut self, args: Vec<String>) -> Self {
        self.extra_args = args;
        self
    }

    /// Judge each card's peak VRAM against its own budget (two GPUs or more, device order).
    pub fn with_gpu_budgets(mut self, budgets_mib: Vec<u64>) -> Self {
        self.gpu_budgets_mib = budgets_mib;
        self
    }

    /// Extra environment for the server process.
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }

    /// Free VRAM measured before the tune: a trial that starts with noticeably less (another
    /// process took VRAM) or more (one left) carries a warning saying so.
    pub fn with_free_vram_at_start(mut self, mib: Option<u64>) -> Self {
        self.free_vram_at_start_mib = mib;
        self
    }

    /// The fastest believable speeds of each config (e.g. from the speed model); a trial that
    /// reports more is [`OutcomeKind::Implausible`]. Default: [`plausible::SpeedCeiling::ABSOLUTE`].
    pub fn with_speed_ceiling(mut self, f: SpeedCeilingFn) -> Self {
        self.speed_ceiling = f;
        self
    }

    /// The speed model's pessimistic speeds of each config: until a trial has measured any,
    /// a request's timeout follows them ([`workload::Pace`]). Default: none (the fixed
    /// request timeout until the first measurement).
    pub fn with_predicted_pace(mut self, f: PaceFn) -> Self {
        self.predicted_pace = f;
        self
    }

    /// The id the next trial gets (default 1; a resumed tune continues its numbering).
    pub fn with_first_id(mut self, id: u32) -> Self {
        self.next_id = id.max(1);
        self
    }

    pub fn next_id(&self) -> u32 {
        self.next_id
    }

    pub fn load_timeout(&self) -> Duration {
        self.load_timeout
    }

    /// The pid of the last server started (for leak checks in tests).
    pub fn last_server_pid(&self) -> Option<u32> {
        self.last_pid
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The full argv for a config on a port: the config's engine's server with the config's
    /// own flags, then its log flags (llama.cpp's `-lv 4`: buffer sizes and the memory
    /// breakdown in the log), then the extra flags.
    pub fn argv(&self, config: &LaunchConfig, port: u16) -> Vec<String> {
        let server = self
            .engine_servers
            .iter()
            .find(|(e, _)| *e == config.engine)
            .map_or(&self.server, |(_, p)| p);
        let mut argv = config.command(server, &self.model, "127.0.0.1", port);
        argv.extend(crate::engine::of(config.engine).log_args());
        argv.extend(self.extra_args.iter().cloned());
        argv
    }
}

/// The files' size together and latest modification time, when every one can be read.
fn model_stamp(parts: &[PathBuf]) -> Option<(u64, std::time::SystemTime)> {
    let mut stamp = (0, std::time::SystemTime::UNIX_EPOCH);
    for p in parts {
        let m = std::fs::metadata(p).ok()?;
        stamp = (stamp.0 + m.len(), stamp.1.max(m.modified().ok()?));
    }
    Some(stamp)
}

impl TrialRunner for LlamaServerRunner {
    fn fatal(&self) -> Option<String> {
        self.fatal.clone()
    }

    fn check_inputs(&self) -> Result<(), String> {
        let Some((size, mtime)) = self.model_stamp else {
            return Ok(());
        };
        let shown = crate::escape::one_line(&self.model.display().to_string());
        match model_stamp(&self.model_parts) {
            None => Err(format!(
                "the model {shown} is gone since the tune started: no trial was charged to it; put it back"
            )),
            Some((s, m)) if s != size || m != mtime => Err(format!(
                "the model {shown} changed since the tune started ({size} bytes, now {s}{}): no trial was charged to it; put the original back",
                if m != mtime && s == size { ", modified" } else { "" }
            )),
            Some(_) => Ok(()),
        }
    }

    fn run(&mut self, config: &LaunchConfig, role: TrialRole) -> TrialOutcome {
        let id = self.next_id;
        let started_at = chrono::Utc::now().to_rfc3339();
        let t0 = Instant::now();
        let busy_box = self.busy.take();
        let d = if super::cleanup::interrupted().is_some() {
            // Interrupted before this trial began: launch nothing.
            Draft::from_verdict(Verdict {
                kind: OutcomeKind::Crash,
                message: "interrupted before it started".into(),
                evidence: Vec::new(),
            })
        } else {
            self.trial(id, config)
        };
        let mut outcome = TrialOutcome {
            id,
            role,
            config: config.clone(),
            kind: d.kind,
            metrics: d.metrics,
            peak_vram_mib: d.peak_vram_mib,
            reported: d.reported,
            message: d.message,
            evidence: d.evidence,
            started_at,
            duration_s: t0.elapsed().as_secs_f64(),
            log: d.log,
            warnings: d.warnings,
            busy_box,
        };
        if self.fatal.is_some() {
            // Not a result of the config (a trace of another tokenizer): never journaled;
            // the caller stops here.
            return outcome;
        }
        if super::cleanup::interrupted().is_some() {
            // qtune is being interrupted: this trial was cut short and its server is already
            // stopped, so its outcome is not a result. Never journal it (a resumed tune would
            // skip a config as "crashed"), and do not use up its id: the caller stops here.
            outcome.message = "interrupted".into();
            return outcome;
        }
        self.next_id += 1;
        if let Err(e) = self.journal.append(&outcome) {
            tracing::error!("{e:#}");
            outcome
                .warnings
                .push(format!("not journaled ({e:#}): --resume will run it again"));
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_timeout_scales_with_the_model() {
        assert_eq!(load_timeout_for(0), Duration::from_secs(60));
        assert_eq!(load_timeout_for(4 << 30), Duration::from_secs(120));
    }

    #[test]
    fn free_port_is_bindable() {
        let p = free_port().unwrap();
        assert!(p > 0);
        std::net::TcpListener::bind(("127.0.0.1", p)).unwrap();
    }

    #[test]
    fn argv_adds_verbosity_and_extra_flags_after_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let r = LlamaServerRunner::new(
            Path::new("/opt/llama-server"),
            Path::new("/m/model.gguf"),
            1 << 30,
            Workload::default(),
            dir.path(),
            Journal::open(dir.path()).unwrap(),
            None,
            Duration::from_secs(60),
        )
        .unwrap()
        .with_extra_args(vec!["--alias".into(), "x".into()]);
        assert_eq!(r.load_timeout(), Duration::from_secs(75));
        let argv = r.argv(&LaunchConfig::baseline(4096), 8123);
        assert_eq!(
            argv.join(" "),
            "/opt/llama-server -m /m/model.gguf -c 4096 -np 1 --host 127.0.0.1 --port 8123 -lv 4 --alias x"
        );
    }
}

/// A warning when free VRAM before a trial differs from free VRAM before the tune by more
/// than 512 MiB or 5 %: another process took (or released) VRAM, and the budget is stale.
pub fn vram_drift_warning(at_start: Option<u64>, now: Option<u64>) -> Option<String> {
    let (start, now) = (at_start?, now?);
    let diff = now.abs_diff(start);
    if diff <= 512.max(start / 20) {
        return None;
    }
    Some(if now < start {
        format!(
            "free VRAM before this trial was {now} MiB, {diff} MiB less than before the tune ({start} MiB): another process took VRAM, so this trial may fail or spill; free it or re-run the tune"
        )
    } else {
        format!(
            "free VRAM before this trial was {now} MiB, {diff} MiB more than before the tune ({start} MiB): another process released VRAM; the budget still holds the tune's starting value"
        )
    })
}

#[cfg(test)]
mod drift_tests {
    use super::vram_drift_warning;

    #[test]
    fn drift_is_noticed_both_ways_and_small_changes_are_not() {
        assert!(vram_drift_warning(Some(16_384), Some(16_200)).is_none());
        assert!(vram_drift_warning(Some(16_384), Some(12_000))
            .unwrap()
            .contains("took VRAM"));
        assert!(vram_drift_warning(Some(16_384), Some(24_000))
            .unwrap()
            .contains("released"));
        assert!(vram_drift_warning(None, Some(1)).is_none());
    }
}
