//! Classifying how a trial ended, from what was observed: the phase, how the process exited,
//! the server's log and the HTTP failure. Pure functions, unit-tested with real log lines of
//! the pinned llama.cpp build (messages grepped from ggml-cuda.cu, ggml-backend.cpp,
//! ggml-alloc.c, llama-model.cpp, llama-context.cpp, llama-kv-cache.cpp and common/arg.cpp).

use super::OutcomeKind;
use crate::engine::Flag;
use std::fmt;

/// Where the trial was when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Launched, `/health` not yet 200.
    Load,
    /// Healthy; warm-up or measured requests.
    Measure,
}

/// How the server process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitInfo {
    pub fn from_status(st: &std::process::ExitStatus) -> ExitInfo {
        use std::os::unix::process::ExitStatusExt;
        ExitInfo {
            code: st.code(),
            signal: st.signal(),
        }
    }
}

/// The conventional name of a signal number, e.g. `SIGSEGV`.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    format!("signal {sig} {name}")
}

impl fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (_, Some(s)) => write!(f, "killed by {}", signal_name(s)),
            (Some(c), None) => write!(f, "exit code {c}"),
            (None, None) => f.write_str("unknown exit"),
        }
    }
}

/// What went wrong, as the runner saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The process exited (during load, or while serving).
    Exited,
    /// `/health` was not 200 within this many seconds.
    /// `budget`: the wait was cut short by the end of the tune's minutes budget.
    LoadTimeout { secs: f64, budget: bool },
    /// A request did not finish within this many seconds.
    /// `budget`: the wait was cut short by the end of the tune's minutes budget.
    RequestTimeout { secs: f64, budget: bool },
    /// The server answered a request with an error status.
    Http { status: u16, body: String },
    /// The connection failed or dropped (reqwest's message).
    Connection(String),
    /// The server answered, but not what the workload needs (e.g. fewer tokens generated).
    BadResponse(String),
    /// The server printed this abort line and kept running without serving (hung in its
    /// abort); qtune stopped it.
    Aborted { line: String },
}

impl std::fmt::Display for Failure {
    /// In words, for a message (never the variant's name).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Exited => f.write_str("the process exited"),
            Failure::LoadTimeout { secs, .. } => {
                write!(f, "/health was not ready within {secs:.0} s")
            }
            Failure::RequestTimeout { secs, .. } => {
                write!(f, "a request did not finish within {secs:.0} s")
            }
            Failure::Http { status, body } => {
                write!(f, "it answered HTTP {status} ({})", first_line(body, 160))
            }
            Failure::Connection(err) => {
                write!(f, "the connection failed ({})", first_line(err, 160))
            }
            Failure::BadResponse(why) => write!(f, "it answered, but {why}"),
            Failure::Aborted { line } => {
                write!(f, "it printed '{}' and hung", first_line(line, 120))
            }
        }
    }
}

/// Everything observed about a failed trial.
#[derive(Debug, Clone)]
pub struct Observation<'a> {
    pub phase: Phase,
    /// `Some` when the process had exited by the time the failure was classified.
    pub exit: Option<ExitInfo>,
    /// The whole per-trial log.
    pub log: &'a str,
    /// Byte offset in `log` where the server became healthy (start of the measure phase).
    pub healthy_at: Option<usize>,
    pub failure: Failure,
}

/// A classification: the kind, one line for people, and the log lines that prove it.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub kind: OutcomeKind,
    pub message: String,
    pub evidence: Vec<String>,
}

/// At most this many evidence lines.
pub const MAX_EVIDENCE: usize = 8;

use crate::engine::log::is_bad_flag_line;
pub use crate::engine::log::is_oom_line;

/// Whether the log says the server could not listen on its port (any engine's line).
pub fn says_bind_failed(log: &str) -> bool {
    log.lines().any(crate::engine::log::is_bind_failed_line)
}

/// A port-conflict verdict when the server exited after saying it could not listen on its
/// port: another program took it first (when that program answers `/health`, the trial even
/// looked healthy and then "died while serving a request").
fn port_conflict(log: &str, exit: Option<ExitInfo>) -> Option<Verdict> {
    exit?;
    let line = log
        .lines()
        .find(|l| crate::engine::log::is_bind_failed_line(l))?;
    Some(Verdict {
        kind: OutcomeKind::PortConflict,
        message: "llama-server could not listen on the port qtune gave it: another program took it first (a lost race for a free port), so this is no measurement of the config; if it repeats, something on this box is grabbing free ports".into(),
        evidence: vec![line.trim().to_string()],
    })
}

/// A verdict when the log shows an RPC worker was unreachable at load (`Failed to connect to
/// HOST:PORT`) or dropped while llama-server used it (llama.cpp's abort line). The dropped
/// worker is not named in the log: the message names the `--rpc` list, and the runner names
/// the one that no longer answers ([`super::rpc_log::name_lost_worker`]).
fn rpc_worker_lost(log: &str) -> Option<Verdict> {
    let lines = non_empty_lines(log);
    if let Some(w) = super::rpc_log::unreachable_in_log(log) {
        let idx = lines
            .iter()
            .position(|l| l.contains("Failed to connect to"))?;
        return Some(Verdict {
            kind: OutcomeKind::RpcWorkerLost,
            message: format!(
                "RPC worker {w} was not reachable when llama-server loaded: no measurement of the config; start it again on its box ('qtune rpc serve'), the next trials use it"
            ),
            evidence: window(&lines, idx, 2),
        });
    }
    let idx = lines
        .iter()
        .position(|l| l.contains(super::rpc_log::WORKER_DROPPED))?;
    let workers = super::rpc_log::workers_in_header(log);
    let which = if workers.is_empty() {
        "an RPC worker".to_string()
    } else {
        format!("an RPC worker (of {})", workers.join(", "))
    };
    Some(Verdict {
        kind: OutcomeKind::RpcWorkerLost,
        message: format!(
            "{which} dropped mid-trial and llama-server aborted: no measurement of the config; restart the worker on its box ('qtune rpc serve'), the next trials use it"
        ),
        evidence: window(&lines, idx, 2),
    })
}

pub use super::LOG_HEADER;

fn non_empty_lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(|l| l.trim_end())
        .filter(|l| !l.trim().is_empty() && !l.starts_with(LOG_HEADER))
        .collect()
}

/// Up to [`MAX_EVIDENCE`] lines from `before` lines ahead of `idx` on.
fn window(lines: &[&str], idx: usize, before: usize) -> Vec<String> {
    let start = idx.saturating_sub(before);
    let end = (start + MAX_EVIDENCE).min(lines.len());
    lines[start..end].iter().map(|s| s.to_string()).collect()
}

/// The last [`MAX_EVIDENCE`] non-empty lines.
pub fn tail_evidence(text: &str) -> Vec<String> {
    let lines = non_empty_lines(text);
    let start = lines.len().saturating_sub(MAX_EVIDENCE);
    lines[start..].iter().map(|s| s.to_string()).collect()
}

/// The first bad-flag line and what follows it.
pub fn find_bad_flag(log: &str) -> Option<Vec<String>> {
    let lines = non_empty_lines(log);
    let idx = lines.iter().position(|l| is_bad_flag_line(l))?;
    Some(window(&lines, idx, 0))
}

/// The first allocation failure (the root cause; later lines are its consequences) and the
/// lines around it.
pub fn find_oom(log: &str) -> Option<Vec<String>> {
    let lines = non_empty_lines(log);
    let idx = lines.iter().position(|l| is_oom_line(l))?;
    Some(window(&lines, idx, 2))
}

fn first_line(s: &str, max: usize) -> String {
    let l = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if l.chars().count() > max {
        format!("{}…", l.chars().take(max).collect::<String>())
    } else {
        l.to_string()
    }
}

/// Pull the error text out of a bad-flag line, e.g. `error: invalid argument: --n-cpu-moe`.
fn bad_flag_detail(evidence: &[String]) -> String {
    evidence
        .iter()
        .find(|l| is_bad_flag_line(l))
        .map(|l| first_line(l, 160))
        .unwrap_or_default()
}

/// The server's "listening on http://HOST:PORT" line and its address, when that port is not
/// the `--port` of the command line in the log's header.
fn listening_elsewhere(log: &str) -> Option<(String, String)> {
    let header = log.lines().find(|l| l.starts_with(LOG_HEADER))?;
    let words: Vec<&str> = header.split_whitespace().collect();
    let asked = words
        .windows(2)
        .find(|w| w[0] == "--port")
        .and_then(|w| w[1].parse::<u16>().ok())?;
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("listening on http"))?;
    let at = line.split("listening on ").nth(1)?.trim().to_string();
    let port: u16 = at
        .trim_end_matches('/')
        .rsplit(':')
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()?;
    (port != asked).then(|| (line.trim().to_string(), at))
}

/// Classify a failed trial.
pub fn classify(obs: &Observation<'_>) -> Verdict {
    let log = obs.log;
    // The measure phase only looks at what the server printed after it became healthy, so a
    // harmless load-time line cannot turn a runtime failure into something else.
    let runtime_log = match (obs.phase, obs.healthy_at) {
        (Phase::Measure, Some(off)) if off <= log.len() && log.is_char_boundary(off) => &log[off..],
        _ => log,
    };
    let exit = obs.exit;

    match &obs.failure {
        Failure::LoadTimeout { secs, budget } => {
            if let Some(ev) = find_oom(log) {
                return Verdict {
                    kind: OutcomeKind::OomLoad,
                    message: oom_load_then_hung(),
                    evidence: ev,
                };
            }
            // The server said it listens on another port than the one qtune gave it: /health
            // was asked in the wrong place (a wrapper that ignores --port?).
            if let Some((line, at)) = listening_elsewhere(log) {
                return Verdict {
                    kind: OutcomeKind::LoadTimeout,
                    message: format!(
                        "the server listens on {at}, not on the port qtune gave it, so /health never answered within {secs:.0} s: does it ignore --port (a wrapper script?)"
                    ),
                    evidence: vec![line],
                };
            }
            if *budget {
                return Verdict {
                    kind: OutcomeKind::BudgetEnded,
                    message: format!(
                        "not ready when the tune's minutes budget ran out ({secs:.0} s of loading): raise --budget-minutes to give it time"
                    ),
                    evidence: tail_evidence(log),
                };
            }
            return Verdict {
                kind: OutcomeKind::LoadTimeout,
                message: format!(
                    "not ready within {secs:.0} s: the model loads too slowly (disk, {}, spilling to swap?); check the log or raise the load timeout",
                    Flag::NoMmap
                ),
                evidence: tail_evidence(log),
            };
        }
        Failure::Aborted { line } => return aborted(obs.phase, line, log, runtime_log),
        Failure::RequestTimeout { secs, budget: true } if exit.is_none() => {
            return Verdict {
                kind: OutcomeKind::BudgetEnded,
                message: format!(
                    "still measuring when the tune's minutes budget ran out (cut after {secs:.0} s): not a verdict on this config; raise --budget-minutes to measure it"
                ),
                evidence: tail_evidence(runtime_log),
            };
        }
        Failure::RequestTimeout { secs, .. } if exit.is_none() => {
            return Verdict {
                kind: OutcomeKind::RequestTimeout,
                message: format!(
                    "a request did not finish within {secs:.0} s: this config is far too slow (weights spilling to system RAM?) or the server hung"
                ),
                evidence: tail_evidence(runtime_log),
            };
        }
        _ => {}
    }

    if let Some(v) = port_conflict(log, exit) {
        return v;
    }
    if let Some(v) = rpc_worker_lost(log) {
        return v;
    }

    match obs.phase {
        Phase::Load => {
            if let Some(ev) = find_bad_flag(log) {
                let detail = bad_flag_detail(&ev);
                return Verdict {
                    kind: OutcomeKind::BadFlag,
                    message: format!(
                        "llama-server rejected its command line ({detail}): the build is too old for this flag or the search space has a bad value; update llama.cpp or fix the space"
                    ),
                    evidence: ev,
                };
            }
            if let Some(ev) = find_oom(log) {
                return Verdict {
                    kind: OutcomeKind::OomLoad,
                    message: format!("out of memory while loading: raise {} (more experts on the CPU), lower the context or quantize the KV cache", Flag::NCpuMoe),
                    evidence: ev,
                };
            }
            let how = exit.map_or("stopped".to_string(), |e| e.to_string());
            Verdict {
                kind: OutcomeKind::Crash,
                message: format!(
                    "llama-server died while loading ({how}) with no out-of-memory line: read the trial log"
                ),
                evidence: tail_evidence(log),
            }
        }
        Phase::Measure => {
            if let Some(ev) = find_oom(runtime_log) {
                return Verdict {
                    kind: OutcomeKind::OomRuntime,
                    message: format!("loaded, then ran out of memory serving a request (compute or cuBLAS buffers): raise {} or lower {} / the context", Flag::NCpuMoe, Flag::Ubatch),
                    evidence: ev,
                };
            }
            match (&obs.failure, exit) {
                (_, Some(e)) => {
                    let hint = if e.signal == Some(libc::SIGKILL) {
                        " (the kernel's OOM killer? check system RAM)"
                    } else {
                        ""
                    };
                    Verdict {
                        kind: OutcomeKind::Crash,
                        message: format!(
                            "llama-server died while serving a request ({e}){hint} with no out-of-memory line: read the trial log"
                        ),
                        evidence: tail_evidence(runtime_log),
                    }
                }
                (Failure::Http { status, body }, None) => Verdict {
                    kind: OutcomeKind::Crash,
                    message: format!(
                        "llama-server answered HTTP {status} ({}): read the trial log",
                        first_line(body, 160)
                    ),
                    evidence: tail_evidence(runtime_log),
                },
                (Failure::BadResponse(why), None) => Verdict {
                    kind: OutcomeKind::Crash,
                    message: format!("llama-server answered, but {why}"),
                    evidence: tail_evidence(runtime_log),
                },
                (Failure::Connection(err), None) => Verdict {
                    kind: OutcomeKind::Crash,
                    message: format!(
                        "the connection to llama-server failed ({}) while it kept running: read the trial log",
                        first_line(err, 160)
                    ),
                    evidence: tail_evidence(runtime_log),
                },
                (f, None) => Verdict {
                    kind: OutcomeKind::Crash,
                    message: format!("llama-server failed: {f}"),
                    evidence: tail_evidence(runtime_log),
                },
            }
        }
    }
}

/// A spill verdict when the peak VRAM of a trial went over the budget (both MiB), else `None`.
pub fn classify_spill(peak_mib: u64, budget_mib: Option<u64>) -> Option<Verdict> {
    let budget = budget_mib?;
    if peak_mib <= budget {
        return None;
    }
    Some(Verdict {
        kind: OutcomeKind::Spill,
        message: format!(
            "peak VRAM {} over the budget {}: raise {} or lower the context so the other programs on this GPU keep their memory",
            crate::util::fmt_mib(peak_mib as f64),
            crate::util::fmt_mib(budget as f64),
            Flag::NCpuMoe
        ),
        evidence: vec![format!(
            "peak VRAM used by this trial: {peak_mib} MiB; budget (free VRAM at start minus headroom): {budget} MiB"
        )],
    })
}

/// A spill verdict when any card's peak VRAM in a trial went over that card's own budget (both
/// MiB, device order), else `None`: on two GPUs each card is judged alone, so a trial cannot
/// hide one full card behind the room left on the other.
pub fn classify_spill_cards(peaks_mib: &[u64], budgets_mib: &[u64]) -> Option<Verdict> {
    let over: Vec<(usize, u64, u64)> = peaks_mib
        .iter()
        .zip(budgets_mib)
        .enumerate()
        .filter(|(_, (p, b))| p > b)
        .map(|(i, (p, b))| (i, *p, *b))
        .collect();
    let &(first, peak, budget) = over.first()?;
    let fmt = crate::util::fmt_mib;
    Some(Verdict {
        kind: OutcomeKind::Spill,
        message: format!(
            "peak VRAM {} on GPU {first} over its budget {}: put more of that card's experts on the CPU, shift the split ({}) toward the other card, or lower the context",
            fmt(peak as f64),
            fmt(budget as f64),
            Flag::TensorSplit
        ),
        evidence: over
            .iter()
            .map(|(i, p, b)| {
                format!(
                    "GPU {i}: peak VRAM used by this trial {p} MiB; budget (its free VRAM at start minus headroom) {b} MiB"
                )
            })
            .collect(),
    })
}

/// The CUDA runtime's words for a kernel that read or wrote outside its memory: the server's
/// fault, never a full card.
const ILLEGAL_ACCESS: &str = "an illegal memory access";

/// A load that ran out of memory and then hung (qtune stopped it).
fn oom_load_then_hung() -> String {
    format!(
        "out of memory while loading (the server then hung): raise {}, lower the context or quantize the KV cache",
        Flag::NCpuMoe
    )
}

/// A server that printed its abort and hung in it ([`Failure::Aborted`]; qtune stopped it): out
/// of memory where the log says so, else a crash that names the abort (a CUDA illegal memory
/// access is a fault in the server's GPU code, never a shortage).
fn aborted(phase: Phase, line: &str, log: &str, runtime_log: &str) -> Verdict {
    let (scope, when) = match phase {
        Phase::Load => (log, "while loading"),
        Phase::Measure => (runtime_log, "serving a request"),
    };
    if let Some(ev) = find_oom(scope) {
        let (kind, message) = match phase {
            Phase::Load => (
                OutcomeKind::OomLoad,
                oom_load_then_hung(),
            ),
            Phase::Measure => (
                OutcomeKind::OomRuntime,
                format!("loaded, then ran out of memory serving a request (the server then hung): raise {} or lower {} / the context", Flag::NCpuMoe, Flag::Ubatch),
            ),
        };
        return Verdict {
            kind,
            message,
            evidence: ev,
        };
    }
    let what = if line.contains(ILLEGAL_ACCESS) {
        ": a CUDA illegal memory access, a fault in the server's GPU code for this model, \
         config or card, not a memory shortage"
    } else {
        ""
    };
    let mut evidence = tail_evidence(scope);
    if !evidence.iter().any(|l| l.trim() == line) {
        evidence.truncate(MAX_EVIDENCE - 1);
        evidence.insert(0, line.to_string());
    }
    Verdict {
        kind: OutcomeKind::Crash,
        message: format!(
            "llama-server aborted {when} and hung instead of exiting, so qtune stopped it{what}: read the trial log"
        ),
        evidence,
    }
}

/// A CUDA abort with the GPU full is an out-of-memory failure. When ggml-cuda aborts, the
/// "CUDA error: out of memory" text goes through llama.cpp's asynchronous logger and is lost
/// with the process; only `ggml-cuda.cu:N: CUDA error` reaches stderr (seen on the GPU machine
/// with a 16 GiB ballast, on load warm-up and on the first request). If this trial's own peak
/// VRAM came within 256 MiB of the free VRAM before it, the GPU was full: classify as OOM,
/// with the abort line and the VRAM figures as evidence.
pub fn full_gpu_abort(
    log: &str,
    runtime: bool,
    own_peak_mib: u64,
    free_before_mib: Option<u64>,
) -> Option<Verdict> {
    let free = free_before_mib?;
    // A fault in the server's GPU code, whatever the memory.
    if log.contains(ILLEGAL_ACCESS) {
        return None;
    }
    let abort = log
        .lines()
        .rev()
        .find(|l| l.contains("ggml-cuda") && l.contains("CUDA error"))?;
    if own_peak_mib + 256 < free {
        return None;
    }
    let (kind, message) = if runtime {
        (
            OutcomeKind::OomRuntime,
            format!("loaded, then the GPU ran out of memory on a request (CUDA abort with VRAM full): raise {} or lower {} / the context", Flag::NCpuMoe, Flag::Ubatch),
        )
    } else {
        (
            OutcomeKind::OomLoad,
            format!("the GPU ran out of memory while loading or warming up (CUDA abort with VRAM full): raise {}, lower the context or quantize the KV cache", Flag::NCpuMoe),
        )
    };
    Some(Verdict {
        kind,
        message,
        evidence: vec![
            abort.trim().to_string(),
            format!(
                "peak VRAM used by this trial: {own_peak_mib} MiB of {free} MiB free before it: the GPU was full"
            ),
        ],
    })
}

/// [`full_gpu_abort`] on a box with two GPUs or more: the CUDA abort is an OOM when any card's
/// own peak came within 256 MiB of that card's free VRAM before the trial (device order).
pub fn full_gpu_abort_cards(
    log: &str,
    runtime: bool,
    own_peaks_mib: &[u64],
    free_before_mib: &[u64],
) -> Option<Verdict> {
    let (i, peak, free) = own_peaks_mib
        .iter()
        .zip(free_before_mib)
        .enumerate()
        .find(|(_, (p, f))| **p + 256 >= **f)
        .map(|(i, (p, f))| (i, *p, *f))?;
    let mut v = full_gpu_abort(log, runtime, peak, Some(free))?;
    if let Some(e) = v.evidence.last_mut() {
        *e = format!("GPU {i}: {e}");
    }
    Some(v)
}

/// The warning added when repeated measurements disagree too much to rank on.
pub fn spread_warning(metric: &str, stat: &super::Stat, limit_pct: f64) -> Option<String> {
    if stat.samples.len() >= 2 && stat.spread_pct > limit_pct {
        Some(format!(
            "{metric} spread {:.1} % (min {:.2}, max {:.2} over {} runs) is wider than {limit_pct:.0} %: spread too wide to rank: rerun with more repetitions",
            stat.spread_pct,
            stat.min,
            stat.max,
            stat.samples.len()
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_said_in_words_not_as_its_variant() {
        let words = [
            Failure::Exited.to_string(),
            Failure::LoadTimeout {
                secs: 30.0,
                budget: false,
            }
            .to_string(),
            Failure::RequestTimeout {
                secs: 12.0,
                budget: false,
            }
            .to_string(),
            Failure::Http {
                status: 500,
                body: "boom".into(),
            }
            .to_string(),
            Failure::Connection("reset".into()).to_string(),
            Failure::BadResponse("no tokens".into()).to_string(),
        ];
        assert_eq!(words[2], "a request did not finish within 12 s");
        for w in &words {
            for variant in ["Exited", "Timeout", "Http {", "Connection(", "BadResponse"] {
                assert!(!w.contains(variant), "{w}");
            }
        }
    }

    fn obs(phase: Phase, exit: Option<ExitInfo>, log: &str, failure: Failure) -> Verdict {
        classify(&Observation {
            phase,
            exit,
            log,
            healthy_at: None,
            failure,
        })
    }

    const EXIT1: Option<ExitInfo> = Some(ExitInfo {
        code: Some(1),
        signal: None,
    });
    const ABRT: Option<ExitInfo> = Some(ExitInfo {
        code: None,
        signal: Some(libc::SIGABRT),
    });

    /// ik_llama.cpp's server says a taken port in its own words: a port conflict too (the
    /// runner retries on another port), not a crash.
    #[test]
    fn iks_bind_failure_is_a_port_conflict() {
        let log = "llama_init_from_model: CPU compute buffer size = 297.25 MiB\n\ncouldn't bind to server socket: hostname=127.0.0.1 port=8080\n\n";
        assert!(says_bind_failed(log));
        let v = obs(Phase::Load, EXIT1, log, Failure::Exited);
        assert_eq!(v.kind, OutcomeKind::PortConflict, "{v:?}");
        assert_eq!(
            v.evidence,
            vec!["couldn't bind to server socket: hostname=127.0.0.1 port=8080".to_string()]
        );
    }

    // Real output of the pinned CPU llama-server: `-np 0`.
    const REAL_NP0: &str = r#"error while handling argument "-np": error: invalid value for n_parallel


usage:
-np,   --parallel N                     number of server slots (default: -1, -1 = auto)
                                        (env: LLAMA_ARG_N_PARALLEL)


to show complete usage, run with -h
"#;

    // Real output of the pinned CPU llama-server: a missing model file.
    const REAL_NO_MODEL: &str = r#"0.00.004.671 I common_fit_params: fitting params to free memory took 0.00 seconds
0.00.004.679 E gguf_init_from_file: failed to open GGUF file 'nonexist.gguf' (No such file or directory)
0.00.004.686 E llama_model_load: error loading model: llama_model_loader: failed to load model from nonexist.gguf
0.00.004.686 E llama_model_load_from_file_impl: failed to load model
0.00.004.687 E cmn  common_init_: failed to load model 'nonexist.gguf'
0.00.004.688 E srv    load_model: failed to load model, 'nonexist.gguf'
0.00.004.689 I srv    operator(): operator(): cleaning up before exit...
0.00.005.044 E srv  llama_server: exiting due to model loading error
"#;

    // A CUDA build with too few experts on the CPU (format of ggml-cuda.cu / llama-model.cpp).
    const CUDA_LOAD_OOM: &str = r#"0.01.002.100 I load_tensors: offloading 48 repeating layers to GPU
0.01.002.200 I load_tensors: offloaded 49/49 layers to GPU
0.01.310.500 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 17034.56 MiB on device 0: cudaMalloc failed: out of memory
0.01.310.600 E alloc_tensor_range: failed to allocate CUDA0 buffer of size 17861977344
0.01.320.000 E llama_model_load: error loading model: unable to allocate CUDA0 buffer
0.01.320.100 E llama_model_load_from_file_impl: failed to load model
0.01.320.200 E srv    load_model: failed to load model, '/models/qwen3-30b-a3b.gguf'
0.01.330.000 E srv  llama_server: exiting due to model loading error
"#;

    // A KV cache too big for the card.
    const CUDA_KV_OOM: &str = r#"0.02.000.000 I llama_context: constructing llama_context
0.02.100.000 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 6144.00 MiB on device 0: cudaMalloc failed: out of memory
0.02.100.100 E llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache
0.02.100.200 E srv    load_model: failed to load model, '/m.gguf'
"#;

    // Loaded and healthy, then the first request aborts allocating a cuBLAS workspace.
    const CUDA_RUNTIME_OOM: &str = r#"0.03.000.000 I srv  llama_server: model loaded
0.03.000.100 I srv  llama_server: listening on http://127.0.0.1:8080
0.04.000.000 I slot launch_slot_: id  0 | task 0 | processing task
CUDA error: out of memory
  current device: 0, in function ggml_cuda_op_mul_mat_cublas at ggml/src/ggml-cuda/ggml-cuda.cu:1402
  cublasCreate_v2(&cublas_handles[device])
ggml/src/ggml-cuda/ggml-cuda.cu:101: CUDA error
"#;

    // Harmless debug lines seen with -lv 4.
    const BENIGN: &str = r#"0.00.100.000 D ggml_cuda_host_malloc: failed to allocate 512.00 MiB of pinned memory: out of memory
0.00.200.000 D ggml_backend_sched_alloc_graph: failed to allocate graph, reserving (backend_ids_changed = 1)
0.00.300.000 D load_all_data: failed to allocate host buffer for async uploads for device CUDA0
"#;

    #[test]
    fn real_bad_value_is_bad_flag_with_the_error_line_first() {
        let v = obs(Phase::Load, EXIT1, REAL_NP0, Failure::Exited);
        assert_eq!(v.kind, OutcomeKind::BadFlag);
        assert!(v.evidence[0].contains("invalid value for n_parallel"));
        assert!(v.message.contains("\"-np\""), "{}", v.message);
        assert!(v.evidence.len() <= MAX_EVIDENCE);
    }

    #[test]
    fn unknown_flag_and_bad_kv_type_are_bad_flags() {
        let v = obs(
            Phase::Load,
            EXIT1,
            "error: invalid argument: --n-cpu-moe\n",
            Failure::Exited,
        );
        assert_eq!(v.kind, OutcomeKind::BadFlag);
        assert!(v.message.contains("--n-cpu-moe"));
        let v = obs(
            Phase::Load,
            EXIT1,
            "error while handling argument \"-ctk\": Unsupported cache type: q3_k\n",
            Failure::Exited,
        );
        assert_eq!(v.kind, OutcomeKind::BadFlag);
    }

    #[test]
    fn cuda_load_oom_points_at_the_root_cause() {
        let v = obs(Phase::Load, EXIT1, CUDA_LOAD_OOM, Failure::Exited);
        assert_eq!(v.kind, OutcomeKind::OomLoad);
        assert!(
            v.evidence
                .iter()
                .any(|l| l.contains("cudaMalloc failed: out of memory")),
            "{:?}",
            v.evidence
        );
        // Word for word as before the engine spelled the flags (issue 56).
        assert_eq!(
            v.message,
            "out of memory while loading: raise --n-cpu-moe (more experts on the CPU), lower the \
             context or quantize the KV cache"
        );
        let spill = classify_spill_cards(&[9000, 100], &[8000, 8000])
            .unwrap()
            .message;
        assert!(
            spill.ends_with("shift the split (-ts) toward the other card, or lower the context"),
            "{spill}"
        );
        let v = obs(Phase::Load, EXIT1, CUDA_KV_OOM, Failure::Exited);
        assert_eq!(v.kind, OutcomeKind::OomLoad);
    }

    #[test]
    fn cpu_buffer_failures_are_oom_too() {
        for line in [
            "E alloc_tensor_range: failed to allocate CPU buffer of size 123456789",
            "E llama_model_load: error loading model: unable to allocate CPU_Mapped buffer",
            "E ggml_gallocr_reserve_n_impl: failed to allocate CUDA0 buffer of size 2147483648",
            "E llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers",
        ] {
            let v = obs(Phase::Load, EXIT1, line, Failure::Exited);
            assert_eq!(v.kind, OutcomeKind::OomLoad, "{line}");
        }
    }

    #[test]
    fn benign_debug_lines_are_not_oom() {
        let log = format!("{BENIGN}{REAL_NO_MODEL}");
        let v = obs(Phase::Load, EXIT1, &log, Failure::Exited);
        assert_eq!(v.kind, OutcomeKind::Crash);
        assert!(v.message.contains("exit code 1"));
        assert!(v
            .evidence
            .last()
            .unwrap()
            .contains("exiting due to model loading error"));
    }

    #[test]
    fn runtime_oom_after_health_with_dropped_connection() {
        let v = obs(
            Phase::Measure,
            ABRT,
            CUDA_RUNTIME_OOM,
            Failure::Connection("connection closed before message completed".into()),
        );
        assert_eq!(v.kind, OutcomeKind::OomRuntime);
        assert!(v.evidence.iter().any(|l| l == "CUDA error: out of memory"));
        assert!(v.evidence.iter().any(|l| l.contains("cublasCreate")));
    }

    #[test]
    fn measure_phase_ignores_load_time_lines() {
        // An allocation failure the server survived while loading (e.g. while fitting).
        let log = format!(
            "{BENIGN}0.05 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 0: cudaMalloc failed: out of memory\n0.1 I srv  llama_server: model loaded\n"
        );
        let healthy_at = log.len();
        let log = format!("{log}0.2 I slot launch_slot_: processing task\n");
        let v = classify(&Observation {
            phase: Phase::Measure,
            exit: Some(ExitInfo {
                code: None,
                signal: Some(libc::SIGSEGV),
            }),
            log: &log,
            healthy_at: Some(healthy_at),
            failure: Failure::Connection("dropped".into()),
        });
        assert_eq!(v.kind, OutcomeKind::Crash);
        assert!(v.message.contains("SIGSEGV"), "{}", v.message);
        assert_eq!(v.evidence, ["0.2 I slot launch_slot_: processing task"]);
    }

    #[test]
    fn timeouts() {
        let v = obs(
            Phase::Load,
            None,
            "loading...\n",
            Failure::LoadTimeout {
                secs: 90.0,
                budget: false,
            },
        );
        assert_eq!(v.kind, OutcomeKind::LoadTimeout);
        assert!(v.message.contains("90 s"));
        let v = obs(
            Phase::Measure,
            None,
            "x\n",
            Failure::RequestTimeout {
                secs: 5.0,
                budget: false,
            },
        );
        assert_eq!(v.kind, OutcomeKind::RequestTimeout);
        assert!(v.message.contains("far too slow"), "{}", v.message);
        // Cut by the minutes budget's end: the budget's doing, not the config's.
        let v = obs(
            Phase::Measure,
            None,
            "x\n",
            Failure::RequestTimeout {
                secs: 18.0,
                budget: true,
            },
        );
        assert_eq!(v.kind, OutcomeKind::BudgetEnded);
        assert!(
            v.message.contains("minutes budget ran out"),
            "{}",
            v.message
        );
        assert!(!v.message.contains("too slow"), "{}", v.message);
        // A request timeout where the server died under it is a crash, not a timeout.
        let v = obs(
            Phase::Measure,
            ABRT,
            "x\n",
            Failure::RequestTimeout {
                secs: 5.0,
                budget: false,
            },
        );
        assert_eq!(v.kind, OutcomeKind::Crash);
    }

    #[test]
    fn http_error_from_a_live_server_is_a_crash_with_the_body() {
        let v = obs(
            Phase::Measure,
            None,
            "",
            Failure::Http {
                status: 500,
                body: "{\"error\":{\"message\":\"failed to decode\"}}".into(),
            },
        );
        assert_eq!(v.kind, OutcomeKind::Crash);
        assert!(v.message.contains("HTTP 500") && v.message.contains("failed to decode"));
    }

    #[test]
    fn evidence_is_capped() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let v = obs(Phase::Load, EXIT1, &log, Failure::Exited);
        assert_eq!(v.evidence.len(), MAX_EVIDENCE);
        assert_eq!(v.evidence.last().unwrap(), "line 99");
    }

    #[test]
    fn spill_is_judged_per_card() {
        assert!(classify_spill_cards(&[9000, 9000], &[10000, 9000]).is_none());
        // 1 MiB over on the small card is a spill, though the sum is under the summed budget.
        let v = classify_spill_cards(&[5000, 9001], &[15000, 9000]).unwrap();
        assert_eq!(v.kind, OutcomeKind::Spill);
        assert!(v.message.contains("on GPU 1"), "{}", v.message);
        assert_eq!(v.evidence.len(), 1);
        assert!(classify_spill_cards(&[], &[1, 1]).is_none());
    }

    #[test]
    fn spill_only_over_budget() {
        assert!(classify_spill(15000, Some(15360)).is_none());
        assert!(classify_spill(15000, None).is_none());
        let v = classify_spill(16000, Some(15360)).unwrap();
        assert_eq!(v.kind, OutcomeKind::Spill);
        assert!(v.message.contains("16,000 MiB"));
    }

    #[test]
    fn spread_warning_only_when_wide() {
        let s = super::super::Stat::from_samples(&[10.0, 10.5, 10.2]).unwrap();
        assert!(spread_warning("gen tok/s", &s, 10.0).is_none());
        let s = super::super::Stat::from_samples(&[10.0, 12.0, 10.2]).unwrap();
        let w = spread_warning("gen tok/s", &s, 10.0).unwrap();
        assert!(w.contains("rerun with more repetitions"));
        let one = super::super::Stat::from_samples(&[10.0]).unwrap();
        assert!(spread_warning("gen tok/s", &one, 10.0).is_none());
    }

    #[test]
    fn cuda_abort_with_a_full_gpu_is_oom_and_with_room_is_not() {
        // From the GPU machine (docs/evidence/gpu-h200-qwen3.5-35b-a3b-16gib-first-request-oom):
        // the first request aborted with VRAM full.
        let log = "0.02.906.971 I slot   operator(): id  0 | task 0 | cached n_tokens = 0\n/tmp/src/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:109: CUDA error\n";
        let v = full_gpu_abort(log, true, 16_288, Some(16_291)).unwrap();
        assert_eq!(v.kind, OutcomeKind::OomRuntime);
        assert!(v.evidence[0].ends_with("CUDA error"));
        assert_eq!(
            full_gpu_abort(log, false, 15_356, Some(15_415))
                .unwrap()
                .kind,
            OutcomeKind::OomLoad
        );
        // Plenty of VRAM left: a real crash, not memory.
        assert!(full_gpu_abort(log, true, 9_000, Some(16_291)).is_none());
        // No GPU figures or no CUDA abort: nothing to say.
        assert!(full_gpu_abort(log, true, 16_288, None).is_none());
        assert!(full_gpu_abort("segfault\n", true, 16_288, Some(16_291)).is_none());
        // Two GPUs: GPU 1 full, GPU 0 with room to spare.
        let v = full_gpu_abort_cards(log, true, &[4_000, 12_200], &[40_000, 12_288]).unwrap();
        assert_eq!(v.kind, OutcomeKind::OomRuntime);
        assert!(
            v.evidence.last().unwrap().starts_with("GPU 1: "),
            "{:?}",
            v.evidence
        );
        assert!(full_gpu_abort_cards(log, true, &[4_000, 9_000], &[40_000, 12_288]).is_none());
        // An illegal memory access is the server's fault, even on a full card.
        let illegal = format!("CUDA error: an illegal memory access was encountered\n{log}");
        assert!(full_gpu_abort(&illegal, true, 16_288, Some(16_291)).is_none());
    }

    /// A server hung in its abort (qtune stopped it): out of memory where the phase's log says
    /// so, else a crash that names the abort; only the measure phase's lines count there.
    #[test]
    fn a_server_hung_in_its_abort_is_oom_only_where_its_log_says_so() {
        let obs = |phase, log: &'static str, healthy_at, line: &str| {
            classify(&Observation {
                phase,
                exit: None,
                log,
                healthy_at,
                failure: Failure::Aborted {
                    line: line.to_string(),
                },
            })
        };
        let oom = "E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 512.00 MiB on device 0: cudaMalloc failed: out of memory\nCUDA error: out of memory\n";
        let v = obs(Phase::Load, oom, None, "CUDA error: out of memory");
        assert_eq!(v.kind, OutcomeKind::OomLoad);
        assert!(v.message.contains("the server then hung"), "{}", v.message);
        let v = obs(Phase::Measure, oom, Some(0), "CUDA error: out of memory");
        assert_eq!(v.kind, OutcomeKind::OomRuntime);
        // The OOM line came before the server was healthy: not this request's.
        let late =
            "cudaMalloc failed: out of memory\nI srv listening\nggml.c:1: GGML_ASSERT(x) failed\n";
        let v = obs(
            Phase::Measure,
            late,
            Some(33),
            "ggml.c:1: GGML_ASSERT(x) failed",
        );
        assert_eq!(v.kind, OutcomeKind::Crash, "{}", v.message);
        assert!(v
            .message
            .starts_with("llama-server aborted serving a request and hung"));
        assert!(
            !v.message.contains("illegal memory access"),
            "{}",
            v.message
        );
        assert_eq!(v.evidence.first().unwrap(), "I srv listening");
        let illegal = "I init\nCUDA error: an illegal memory access was encountered\n";
        let v = obs(
            Phase::Load,
            illegal,
            None,
            "CUDA error: an illegal memory access was encountered",
        );
        assert_eq!(v.kind, OutcomeKind::Crash);
        assert!(v.message.contains("not a memory shortage"), "{}", v.message);
    }

    #[test]
    fn a_load_timeout_says_what_happened() {
        let obs = |log: &'static str, budget: bool| Observation {
            phase: Phase::Load,
            exit: None,
            log,
            healthy_at: None,
            failure: Failure::LoadTimeout { secs: 35.0, budget },
        };
        let other_port = "# qtune: /opt/llama-server -m /m.gguf --host 127.0.0.1 --port 41234\n\
                          0.00.210.477 I srv  llama_server: listening on http://127.0.0.1:8080\n";
        let v = classify(&obs(other_port, false));
        assert_eq!(v.kind, OutcomeKind::LoadTimeout);
        assert!(
            v.message
                .starts_with("the server listens on http://127.0.0.1:8080, not on the port"),
            "{}",
            v.message
        );
        // Listening where it was asked: still loading, the ordinary message.
        let same_port = "# qtune: /opt/llama-server --port 8080\n\
                         I srv  llama_server: listening on http://127.0.0.1:8080\n";
        assert!(classify(&obs(same_port, false))
            .message
            .contains("loads too slowly"));
        let v = classify(&obs("loading\n", true));
        assert_eq!(v.kind, OutcomeKind::BudgetEnded);
        assert!(
            v.message.contains("minutes budget ran out"),
            "{}",
            v.message
        );
    }

    /// The pinned build's lines (ggml-rpc.cpp) when a worker is down at load, and when one
    /// drops while the head serves: a worker-lost verdict naming the worker (or the list),
    /// never a crash of the config.
    #[test]
    fn a_lost_rpc_worker_is_its_own_kind_naming_the_worker() {
        let header = "# qtune: /srv/llama-server -m /m.gguf -c 2048 -np 1 --rpc 127.0.0.1:50052,127.0.0.1:50053 --host 127.0.0.1 --port 8123\n";
        let at_load = format!(
            "{header}load_backend: loaded RPC backend\n/src/ggml/src/ggml-rpc/ggml-rpc.cpp:547: Failed to connect to 127.0.0.1:50053\n"
        );
        let v = obs(Phase::Load, ABRT, &at_load, Failure::Exited);
        assert_eq!(v.kind, OutcomeKind::RpcWorkerLost);
        assert!(
            v.message
                .contains("RPC worker 127.0.0.1:50053 was not reachable"),
            "{}",
            v.message
        );
        assert!(v.evidence.iter().any(|l| l.contains("Failed to connect")));
        let dropped = format!(
            "{header}srv  log_server_r: request: GET /health 127.0.0.1 200\n/src/ggml/src/ggml-rpc/ggml-rpc.cpp:566: Remote RPC server crashed or returned malformed response\n"
        );
        let v = obs(
            Phase::Measure,
            ABRT,
            &dropped,
            Failure::Connection("connection closed before message completed".into()),
        );
        assert_eq!(v.kind, OutcomeKind::RpcWorkerLost);
        assert!(
            v.message.starts_with(
                "an RPC worker (of 127.0.0.1:50052, 127.0.0.1:50053) dropped mid-trial"
            ),
            "{}",
            v.message
        );
        // The same abort without RPC in the log stays a crash.
        let plain = obs(
            Phase::Measure,
            ABRT,
            "GGML_ASSERT(x) failed\n",
            Failure::Exited,
        );
        assert_eq!(plain.kind, OutcomeKind::Crash);
    }
}
