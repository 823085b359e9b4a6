//! One launch of the real runner: the trial's log, the server started on a free port and
//! waited for, the workload measured, the failure classified (moved out of `llama_runner.rs`
//! whole, issue 55).

use super::abort::{AbortWatch, ABORT_GRACE};
use super::{free_port, vram_drift_warning, LlamaServerRunner, ServerProcess, PAST_BUDGET_WALL};
use crate::config::{shell_line, LaunchConfig};
use crate::trial::classify::{self, Failure, Observation, Phase, Verdict};
use crate::trial::plausible;
use crate::trial::workload::{self, Measured, ServerSession};
use crate::trial::{Metrics, OutcomeKind, ReportedMemory};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often `/health` is polled while the server loads.
const HEALTH_POLL: Duration = Duration::from_millis(100);
/// Grace between SIGTERM and SIGKILL when a trial ends normally.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Attempts when the chosen port is taken between the check and the launch.
const PORT_ATTEMPTS: usize = 4;

/// What one launch produced, before it becomes a [`TrialOutcome`].
pub(super) struct Draft {
    /// The phase a failure was classified in (None for a success or a setup failure).
    pub(super) phase: Option<Phase>,
    pub(super) kind: OutcomeKind,
    pub(super) metrics: Option<Metrics>,
    pub(super) message: String,
    pub(super) evidence: Vec<String>,
    pub(super) warnings: Vec<String>,
    pub(super) peak_vram_mib: Vec<u64>,
    pub(super) reported: Option<ReportedMemory>,
    pub(super) log: Option<PathBuf>,
}

impl Draft {
    /// Classify a failure and remember the phase it happened in.
    fn classified(obs: &Observation<'_>) -> Draft {
        let mut v = classify::classify(obs);
        if v.kind == OutcomeKind::RpcWorkerLost {
            crate::trial::rpc_log::name_lost_worker(&mut v.message, obs.log);
        }
        Draft {
            phase: Some(obs.phase),
            ..Draft::from_verdict(v)
        }
    }

    pub(super) fn from_verdict(v: Verdict) -> Draft {
        Draft {
            phase: None,
            kind: v.kind,
            metrics: None,
            message: v.message,
            evidence: v.evidence,
            warnings: Vec::new(),
            peak_vram_mib: Vec::new(),
            reported: None,
            log: None,
        }
    }
}

impl LlamaServerRunner {
    /// `logs/trial-<id>.log`, or `trial-<id>.<n>.log` when that exists already (a trial cut
    /// short before it was journaled): a trial log is never overwritten.
    fn log_path(&self, id: u32) -> PathBuf {
        let logs = self.run_dir.join(crate::trial::LOGS_DIR);
        // A dangling link takes its name too (`exists` would follow it).
        let taken = |p: &Path| std::fs::symlink_metadata(p).is_ok();
        let first = logs.join(format!("trial-{id}.log"));
        if !taken(&first) {
            return first;
        }
        (1..)
            .map(|n| logs.join(format!("trial-{id}.{n}.log")))
            .find(|p| !taken(p))
            .expect("an unused name")
    }

    /// A new trial log: `logs/` checked to be a real folder (never a link planted during the
    /// run), the file created with `O_EXCL | O_NOFOLLOW` (never through a link, never over
    /// another log).
    fn open_log(&self, path: &Path, argv: &[String]) -> Result<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        crate::util::real_dir(&self.run_dir.join(crate::trial::LOGS_DIR))?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .with_context(|| format!("cannot create trial log {}", path.display()))?;
        writeln!(f, "{}{}", classify::LOG_HEADER, shell_line(argv))?;
        f.flush()?;
        Ok(f)
    }

    /// One launch, measured and classified.
    pub(super) fn trial(&mut self, id: u32, config: &LaunchConfig) -> Draft {
        let need = workload::needed_ctx(&self.workload);
        if need > config.ctx as u64 {
            return Draft::from_verdict(Verdict {
                kind: OutcomeKind::BadFlag,
                message: format!(
                    "the workload needs {need} tokens of context but this config has {} {}: raise the context or shorten the workload",
                    crate::engine::Flag::Ctx,
                    config.ctx
                ),
                evidence: Vec::new(),
            });
        }
        let log_path = self.log_path(id);
        let vram_before = crate::hardware::VramSampler::start(Duration::from_secs(3600)).stop();
        let free_cards: Option<Vec<u64>> = crate::hardware::free_vram_mib_now();
        let free_now: Option<u64> = free_cards.as_ref().map(|v| v.iter().sum());
        let sampler = crate::hardware::VramSampler::start(Duration::from_millis(100));

        let pace = self.pace.or_else(|| (self.predicted_pace)(config));
        let mut draft = self.launch_and_measure(config, &log_path, pace);
        // Every server of the trial is ended by now (each one's handle dropped).
        crate::trial::leftover::clear(&self.run_dir);
        if let Some(w) = vram_drift_warning(self.free_vram_at_start_mib, free_now) {
            draft.warnings.push(w);
        }

        let peaks = sampler.stop();
        draft.peak_vram_mib = peaks
            .iter()
            .enumerate()
            .map(|(i, p)| p.saturating_sub(vram_before.get(i).copied().unwrap_or(0)))
            .collect();
        draft.log = Some(log_path.clone());
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        draft.reported = reported_memory(&log);
        if draft.kind == OutcomeKind::Crash {
            let own: u64 = draft.peak_vram_mib.iter().sum();
            let runtime = draft.phase == Some(Phase::Measure);
            let full = match &free_cards {
                // Two GPUs: one full card aborts the server while the other has room.
                Some(free) if free.len() >= 2 => {
                    classify::full_gpu_abort_cards(&log, runtime, &draft.peak_vram_mib, free)
                }
                _ => classify::full_gpu_abort(&log, runtime, own, free_now),
            };
            if let Some(v) = full {
                draft.kind = v.kind;
                draft.message = v.message;
                draft.evidence = v.evidence;
            }
        }
        if draft.kind == OutcomeKind::Ok {
            let own: u64 = draft.peak_vram_mib.iter().sum();
            let spill = if self.gpu_budgets_mib.len() >= 2 {
                classify::classify_spill_cards(&draft.peak_vram_mib, &self.gpu_budgets_mib)
            } else {
                classify::classify_spill(own, self.vram_budget_mib)
            };
            if let Some(v) = spill {
                draft.kind = v.kind;
                draft.message = v.message;
                draft.evidence = v.evidence;
            }
        }
        // Speeds that cannot be real make the trial implausible (even a spill's: its numbers
        // are shown). The numbers stay in the evidence, never in the metrics.
        if let Some(m) = &draft.metrics {
            if let Some(v) = plausible::implausible_speed(m, &(self.speed_ceiling)(config)) {
                draft.kind = v.kind;
                draft.message = v.message;
                draft.evidence = v.evidence;
                draft.metrics = None;
            }
        }
        // Speculation whose drafts were all but all accepted: the answers loop, and its speed
        // is not credited (the numbers stay in the metrics, journaled).
        if draft.kind == OutcomeKind::Ok {
            if let Some(v) = draft.metrics.as_ref().and_then(|m| {
                crate::trial::acceptance::degenerate(config, m).or_else(|| {
                    self.random_weights
                        .then(|| crate::trial::acceptance::cost_only(config, m))
                        .flatten()
                })
            }) {
                draft.kind = v.kind;
                draft.message = v.message;
            }
        }
        // Believable speeds set the pace of the next trials' timeouts (the slowest so far).
        if let Some(p) = draft.metrics.as_ref().and_then(workload::Pace::of) {
            self.pace = Some(self.pace.map_or(p, |q| q.slower(p)));
        }
        draft
    }

    fn launch_and_measure(
        &mut self,
        config: &LaunchConfig,
        log_path: &Path,
        pace: Option<workload::Pace>,
    ) -> Draft {
        for attempt in 1..=PORT_ATTEMPTS {
            let port = match free_port() {
                Ok(p) => p,
                Err(e) => return self.setup_failure(format!("{e:#}")),
            };
            let argv = self.argv(config, port);
            let log_file = match self.open_log(log_path, &argv) {
                Ok(f) => f,
                Err(e) => return self.setup_failure(format!("{e:#}")),
            };
            let mut proc = match ServerProcess::spawn(&argv, &log_file, &self.env) {
                Ok(p) => p,
                Err(e) => return self.setup_failure(format!("{e:#}")),
            };
            drop(log_file);
            self.last_pid = Some(proc.pid());
            // For `--resume` after a SIGKILL: what to look for (see `leftover`).
            crate::trial::leftover::record(
                &self.run_dir,
                &crate::trial::leftover::Live {
                    pgid: proc.pid() as i32,
                    port,
                    token: proc.token().to_string(),
                },
            );
            let base_url = format!("http://127.0.0.1:{port}");
            self.doing.set(Some(crate::trial::phase::Doing::Loading {
                pid: proc.pid(),
                model_bytes: self.model_bytes,
            }));
            let mut watch = AbortWatch::new(log_path, log_len(log_path), ABORT_GRACE);
            let healthy = self.wait_healthy(&mut proc, &base_url, &mut watch);
            self.doing.set(None);
            match healthy {
                Ok(()) => {
                    // Another program on the port may have answered /health in the server's
                    // place: the server then exits with the bind failure mid-measurement.
                    let d = self.measure(proc, &base_url, log_path, pace, config);
                    if d.kind == OutcomeKind::PortConflict && attempt < PORT_ATTEMPTS {
                        tracing::debug!("port {port} was taken by another program; retrying");
                        forget_attempt(log_path);
                        continue;
                    }
                    return d;
                }
                Err(failure) => {
                    let exit = match failure {
                        // Hung: qtune ends it, which says nothing of how it failed.
                        Failure::LoadTimeout { .. } | Failure::Aborted { .. } => {
                            proc.stop(Duration::from_millis(500));
                            None
                        }
                        _ => Some(proc.stop(STOP_GRACE)),
                    };
                    let orphans = orphan_warning(&proc);
                    let log = std::fs::read_to_string(log_path).unwrap_or_default();
                    if exit.is_some() && classify::says_bind_failed(&log) && attempt < PORT_ATTEMPTS
                    {
                        tracing::debug!("port {port} was taken; retrying on another");
                        forget_attempt(log_path);
                        continue;
                    }
                    let mut d = Draft::classified(&Observation {
                        phase: Phase::Load,
                        exit,
                        log: &log,
                        healthy_at: None,
                        failure,
                    });
                    d.warnings.extend(orphans);
                    return d;
                }
            }
        }
        unreachable!("the last attempt always returns")
    }

    fn setup_failure(&self, why: String) -> Draft {
        Draft::from_verdict(Verdict {
            kind: OutcomeKind::Crash,
            message: format!("could not start the trial: {why}"),
            evidence: Vec::new(),
        })
    }

    /// Poll `/health` until 200 while watching the process.
    /// The moment no trial runs past: the budget's end plus [`PAST_BUDGET_WALL`].
    fn wall(&self) -> Option<Instant> {
        self.deadline.map(|d| d + PAST_BUDGET_WALL)
    }

    fn wait_healthy(
        &self,
        proc: &mut ServerProcess,
        base_url: &str,
        watch: &mut AbortWatch,
    ) -> Result<(), Failure> {
        let url = format!("{base_url}/health");
        let client = &self.client;
        let now = Instant::now();
        let mut deadline = now + self.load_timeout;
        let mut budget = false;
        if let Some(w) = self.wall() {
            // The load timeout is capped by what the minutes budget leaves.
            if w < deadline {
                deadline = w.max(now);
                budget = true;
            }
        }
        let load_secs = (deadline - now).as_secs_f64();
        self.rt.block_on(async {
            loop {
                if proc.try_exit().is_some() {
                    return Err(Failure::Exited);
                }
                if let Some(line) = watch.hung() {
                    return Err(Failure::Aborted { line });
                }
                if crate::trial::cleanup::interrupted().is_some() {
                    // qtune is being interrupted: stop waiting; the caller ends the server.
                    return Err(Failure::LoadTimeout {
                        secs: load_secs,
                        budget: false,
                    });
                }
                let now = Instant::now();
                if now >= deadline {
                    return Err(Failure::LoadTimeout {
                        secs: load_secs,
                        budget,
                    });
                }
                let per_try = (deadline - now).min(Duration::from_secs(2));
                if let Ok(Ok(resp)) = tokio::time::timeout(per_try, client.get(&url).send()).await {
                    if resp.status().as_u16() == 200 {
                        return Ok(());
                    }
                }
                tokio::time::sleep(HEALTH_POLL).await;
            }
        })
    }

    fn measure(
        &mut self,
        mut proc: ServerProcess,
        base_url: &str,
        log_path: &Path,
        pace: Option<workload::Pace>,
        config: &LaunchConfig,
    ) -> Draft {
        // Everything the server logs from here on belongs to the measure phase.
        let healthy_at = log_len(log_path) as usize;
        let mut watch = AbortWatch::new(log_path, healthy_at as u64, ABORT_GRACE);
        // The abort line of a server that hung in its abort while a request was in flight.
        let mut aborted: Option<String> = None;
        let request_timeout = self.request_timeout;
        let workload = self.workload.clone();
        let client = &self.client;
        // A replayed trace's tokenizer, checked before anything is measured.
        let tokenizer = workload.replay.as_ref().and_then(|r| {
            let want = r.trace.as_ref()?.header.tokenizer_sha256.clone()?;
            Some((r.name.clone(), want))
        });
        let want = crate::trial::lossless::reference_of(config);
        let reference = config
            .may_change_answers()
            .then(|| self.reference_answers.iter().find(|(c, _)| *c == want))
            .flatten()
            .map(|(_, r)| r);
        let result: Result<Result<Measured, String>, Failure> = {
            let mut gone = || {
                if proc.try_exit().is_some() {
                    return true;
                }
                aborted = watch.hung();
                aborted.is_some()
            };
            let mut session = ServerSession {
                client,
                base_url: base_url.to_string(),
                request_timeout,
                pace,
                deadline: self.deadline,
                gone: &mut gone,
                doing: Some(&self.doing),
            };
            let job = async {
                if let Some((name, want)) = &tokenizer {
                    let got = crate::trial::replay_trace::tokenizer_sha256(&mut session).await?;
                    if got != *want {
                        return Ok(Err(crate::trial::replay_trace::tokenizer_mismatch(
                            name, want, &got,
                        )));
                    }
                }
                match &workload.replay {
                    Some(r) => {
                        let mut m =
                            crate::trial::replay_trace::measure(&mut session, &workload, r).await?;
                        // Greedy answers that left the reference's: a near-tie or a fault?
                        if let (Some(mine), Some(theirs), Some(trace)) =
                            (m.metrics.replay.as_mut(), reference, r.trace.as_ref())
                        {
                            mine.probes =
                                crate::trial::lossless::probe(&mut session, trace, mine, theirs)
                                    .await;
                        }
                        Ok(Ok(m))
                    }
                    None => session.run(&workload).await.map(Ok),
                }
            };
            match self.wall() {
                // However many repetitions the workload asks for, the measurement stops at
                // the wall (a request timeout, so the trial is never `ok`).
                Some(w) => {
                    let left = w.saturating_duration_since(Instant::now());
                    self.rt
                        .block_on(async { tokio::time::timeout(left, job).await })
                        .unwrap_or(Err(Failure::RequestTimeout {
                            secs: left.as_secs_f64(),
                            budget: true,
                        }))
                }
                None => self.rt.block_on(job),
            }
        };
        self.doing.set(None);
        let result = match result {
            Ok(Err(fatal)) => {
                proc.stop(STOP_GRACE);
                self.fatal = Some(fatal.clone());
                return Draft::from_verdict(Verdict {
                    kind: OutcomeKind::Crash,
                    message: fatal,
                    evidence: Vec::new(),
                });
            }
            Ok(Ok(m)) => Ok(m),
            // The process still runs, hung in its abort.
            Err(Failure::Exited) if aborted.is_some() && proc.try_exit().is_none() => {
                Err(Failure::Aborted {
                    line: aborted.unwrap_or_default(),
                })
            }
            Err(f) => Err(f),
        };
        match result {
            Ok(m) => {
                let exit = proc.stop(STOP_GRACE);
                if let Some(r) = m.metrics.replay.as_ref().filter(|r| {
                    !config.may_change_answers()
                        && r.requests.iter().any(|q| q.answer.is_some())
                        && !self.reference_answers.iter().any(|(c, _)| c == config)
                }) {
                    self.reference_answers.push((config.clone(), r.clone()));
                }
                tracing::debug!("server stopped after the trial: {exit}");
                let mut warnings = m.warnings;
                warnings.extend(orphan_warning(&proc));
                Draft {
                    phase: None,
                    kind: OutcomeKind::Ok,
                    metrics: Some(m.metrics),
                    message: "ok".to_string(),
                    evidence: Vec::new(),
                    warnings,
                    peak_vram_mib: Vec::new(),
                    reported: None,
                    log: None,
                }
            }
            Err(failure) => {
                // A dropped connection often comes a moment before the process is gone
                // (abort, backtrace): give it time to exit so the cause is read right.
                let exit = match failure {
                    _ if crate::trial::cleanup::interrupted().is_some() => None,
                    Failure::RequestTimeout { .. } => proc.try_exit(),
                    Failure::Aborted { .. } => None,
                    _ => proc.wait_exit(Duration::from_secs(3)),
                };
                proc.stop(STOP_GRACE);
                let log = std::fs::read_to_string(log_path).unwrap_or_default();
                let mut d = Draft::classified(&Observation {
                    phase: Phase::Measure,
                    exit,
                    log: &log,
                    healthy_at: Some(healthy_at.min(log.len())),
                    failure,
                });
                d.warnings.extend(orphan_warning(&proc));
                d
            }
        }
    }
}

/// How long the trial log is now (where a phase's lines begin).
fn log_len(log_path: &Path) -> u64 {
    std::fs::metadata(log_path).map(|m| m.len()).unwrap_or(0)
}

/// One line naming the processes a server left running outside its group (it daemonized),
/// which qtune killed when the server ended.
fn orphan_warning(proc: &ServerProcess) -> Option<String> {
    let pids = proc.orphans();
    if pids.is_empty() {
        return None;
    }
    let list: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
    Some(format!(
        "the server left {} process(es) running outside its process group (pid {}; does it daemonize?): qtune killed them when the trial ended",
        pids.len(),
        list.join(", ")
    ))
}

/// Remove the log of a launch that lost its port (qtune's own header and the server's bind
/// failure), so the next attempt writes the trial's log afresh under the same name.
fn forget_attempt(log_path: &Path) {
    if let Err(e) = std::fs::remove_file(log_path) {
        tracing::debug!("cannot remove {}: {e}", log_path.display());
    }
}

/// The server's own buffer sizes, from its log; `None` when it reported none (e.g. it died
/// before allocating anything).
fn reported_memory(log: &str) -> Option<ReportedMemory> {
    let r = crate::trial::logparse::parse_reported_memory(log);
    if r == ReportedMemory::default() {
        None
    } else {
        Some(r)
    }
}
