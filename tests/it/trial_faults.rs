//! Faults the real llama-server does not produce on demand, injected by a fake server
//! (tests/fixtures/fake-llama-server): each is classified right, with evidence, and leaves
//! no process behind (the fake also starts a grandchild in its group, which must die too).

use crate::support;

use qtune::trial::journal::Journal;
use qtune::trial::{OutcomeKind, TrialOutcome, TrialRole, TrialRunner};
use std::time::{Duration, Instant};
use support::trial::*;

struct Run {
    outcome: TrialOutcome,
    journal: Vec<TrialOutcome>,
    pids: Vec<u32>,
    elapsed: Duration,
    _dir: tempfile::TempDir,
}

fn run_fake(mode: &str, load_timeout: Duration, request_timeout: Duration) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let pid_env = pidfile.display().to_string();
    let mut runner = fake_runner(
        dir.path(),
        &[("FAKE_MODE", mode), ("FAKE_PIDFILE", &pid_env)],
        request_timeout,
    )
    .with_load_timeout(load_timeout);
    let t0 = Instant::now();
    let outcome = runner.run(&cpu_config(), TrialRole::Search);
    let elapsed = t0.elapsed();
    let pids: Vec<u32> = std::fs::read_to_string(&pidfile)
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "the fake server did not start ({mode})");
    assert_eq!(Some(pids[0]), runner.last_server_pid());
    let journal = Journal::read(&dir.path().join("run")).unwrap();
    Run {
        outcome,
        journal,
        pids,
        elapsed,
        _dir: dir,
    }
}

fn check_common(r: &Run, kind: OutcomeKind) {
    let o = &r.outcome;
    assert_eq!(
        o.kind, kind,
        "message: {}\nevidence: {:#?}",
        o.message, o.evidence
    );
    for pid in &r.pids {
        // A SIGKILLed orphan may take a moment to be torn down on a loaded machine.
        let t0 = Instant::now();
        while alive(*pid) && t0.elapsed() < std::time::Duration::from_secs(3) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!alive(*pid), "process {pid} outlived the trial");
    }
    assert_eq!(r.journal.len(), 1);
    same_entry(&r.journal[0], o);
    assert!(o.metrics.is_none());
    assert!(!o.message.is_empty() && !o.message.contains('\n'));
    assert!(o.evidence.len() <= 8);
    assert!(o.log.as_ref().unwrap().is_file());
}

/// The journal line is the outcome (floats compared to 1e-9: serde_json parses them
/// without its `float_roundtrip` feature).
fn same_entry(j: &TrialOutcome, o: &TrialOutcome) {
    assert_eq!(
        (j.id, j.kind, &j.message, &j.evidence, &j.config, &j.log),
        (o.id, o.kind, &o.message, &o.evidence, &o.config, &o.log)
    );
    assert!((j.duration_s - o.duration_s).abs() < 1e-9);
}

const LOAD: Duration = Duration::from_secs(20);
const REQ: Duration = Duration::from_secs(20);

#[test]
fn oom_while_loading() {
    let r = run_fake("oom-load", LOAD, REQ);
    check_common(&r, OutcomeKind::OomLoad);
    assert!(r
        .outcome
        .evidence
        .iter()
        .any(|l| l.contains("cudaMalloc failed: out of memory")));
    assert!(r.outcome.message.contains("--n-cpu-moe"));
}

#[test]
fn bad_flag() {
    let r = run_fake("bad-flag", LOAD, REQ);
    check_common(&r, OutcomeKind::BadFlag);
    assert_eq!(
        r.outcome.evidence[0],
        "error: invalid argument: --n-cpu-moe"
    );
    assert!(r.outcome.message.contains("--n-cpu-moe"));
}

#[test]
fn hang_before_health_is_a_load_timeout_and_sigterm_immune_server_is_killed() {
    let r = run_fake("hang-load", Duration::from_secs(2), REQ);
    check_common(&r, OutcomeKind::LoadTimeout);
    assert!(r.outcome.message.contains("2 s"), "{}", r.outcome.message);
    assert!(r
        .outcome
        .evidence
        .iter()
        .any(|l| l.contains("loading model")));
}

#[test]
fn oom_on_the_first_request_after_health() {
    let r = run_fake("oom-runtime", LOAD, REQ);
    check_common(&r, OutcomeKind::OomRuntime);
    let ev = &r.outcome.evidence;
    assert!(
        ev.iter().any(|l| l == "CUDA error: out of memory"),
        "{ev:#?}"
    );
    assert!(ev.iter().any(|l| l.contains("cublasCreate")));
}

#[test]
fn death_mid_request_without_oom_text_is_a_crash_with_the_signal() {
    let r = run_fake("crash", LOAD, REQ);
    check_common(&r, OutcomeKind::Crash);
    assert!(
        r.outcome.message.contains("SIGSEGV"),
        "{}",
        r.outcome.message
    );
    assert!(r
        .outcome
        .evidence
        .iter()
        .any(|l| l.contains("processing task")));
}

/// ik_llama.cpp's CUDA build printed its abort and hung in it for minutes (the GPU machine,
/// 2026-11-28): the trial ends a few seconds after the abort line, not at its load timeout,
/// and says what the server printed.
#[test]
fn a_server_hung_in_its_abort_while_loading_is_a_crash_not_a_load_timeout() {
    let r = run_fake("abort-load", Duration::from_secs(300), REQ);
    check_common(&r, OutcomeKind::Crash);
    let o = &r.outcome;
    assert!(
        o.message.contains("aborted while loading and hung"),
        "{}",
        o.message
    );
    assert!(o.message.contains("illegal memory access"), "{}", o.message);
    assert!(o
        .evidence
        .iter()
        .any(|l| l == "CUDA error: an illegal memory access was encountered"));
    assert!(r.elapsed < Duration::from_secs(60), "{:?}", r.elapsed);
}

#[test]
fn a_server_hung_in_its_abort_mid_request_is_a_crash_not_a_request_timeout() {
    let r = run_fake("abort-mid", LOAD, Duration::from_secs(300));
    check_common(&r, OutcomeKind::Crash);
    let o = &r.outcome;
    assert!(
        o.message.contains("aborted serving a request and hung"),
        "{}",
        o.message
    );
    assert!(o
        .evidence
        .iter()
        .any(|l| l.ends_with("ggml-cuda.cu:132: CUDA error")));
    assert!(r.elapsed < Duration::from_secs(60), "{:?}", r.elapsed);
}

#[test]
fn slow_request_is_a_request_timeout() {
    let r = run_fake("slow", LOAD, Duration::from_secs(2));
    check_common(&r, OutcomeKind::RequestTimeout);
    assert!(r.outcome.message.contains("2 s"), "{}", r.outcome.message);
    // Timed out and cleaned up, not waited for the 600 s sleep.
    assert!(r.elapsed < Duration::from_secs(60));
}

#[test]
fn healthy_fake_is_ok_and_measured() {
    let r = run_fake("ok", LOAD, REQ);
    let o = &r.outcome;
    assert_eq!(o.kind, OutcomeKind::Ok, "{} {:?}", o.message, o.evidence);
    let m = o.metrics.as_ref().unwrap();
    // The fake reports 50.1, 50.2, 50.3 for warm-up and two measured requests.
    assert_eq!(m.gen_tps.samples, [50.2, 50.3]);
    assert_eq!(m.prompt_tps.samples, [1002.0, 1003.0]);
    assert!(o.warnings.is_empty());
    for pid in &r.pids {
        // A SIGKILLed orphan may take a moment to be torn down on a loaded machine.
        let t0 = Instant::now();
        while alive(*pid) && t0.elapsed() < std::time::Duration::from_secs(3) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!alive(*pid), "process {pid} outlived the trial");
    }
    assert_eq!(r.journal.len(), 1);
    same_entry(&r.journal[0], o);
}
