//! Issue 48, servers that misbehave in ways the real llama-server does not on demand, played by
//! the fake server (tests/fixtures/fake-llama-server): a reply that hangs mid-way or drips a
//! byte a second costs the timeout the measured speeds set (not the budget), a huge reply is a
//! classified failure read no further.

use crate::support;

use qtune::config::LaunchConfig;
use qtune::trial::journal::Journal;
use qtune::trial::llama_runner::LlamaServerRunner;
use qtune::trial::{OutcomeKind, TrialOutcome, TrialRole, TrialRunner};
use std::time::{Duration, Instant};
use support::trial::*;

/// The shortest paced timeout (`qtune::trial::workload::Pace::FLOOR`).
const FLOOR: Duration = Duration::from_secs(30);

/// A runner on the fake server with `env`, a fixed request timeout of `request_timeout`.
fn runner(
    dir: &tempfile::TempDir,
    env: &[(&str, &str)],
    request_timeout: Duration,
) -> LlamaServerRunner {
    fake_runner(dir.path(), env, request_timeout)
}

/// A plausible baseline (no `-t`: the fake answers it), then a config with `-t` whose server
/// misbehaves in `mode`: it is a request timeout after the paced floor (30 s), far short of
/// the fixed 150 s timeout that main waited.
fn paced(mode: &str) -> (TrialOutcome, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let mut r = runner(
        &dir,
        &[("FAKE_MODE", mode), ("FAKE_BOGUS_ARG", "-t")],
        Duration::from_secs(150),
    );
    let base = r.run(&LaunchConfig::baseline(512), TrialRole::Baseline);
    assert_eq!(base.kind, OutcomeKind::Ok, "{}", base.message);
    let t0 = Instant::now();
    let o = r.run(&cpu_config(), TrialRole::Search);
    let took = t0.elapsed();
    assert_eq!(o.kind, OutcomeKind::RequestTimeout, "{mode}: {}", o.message);
    assert!(
        o.message.contains(&format!("within {} s", FLOOR.as_secs())),
        "{mode}: {}",
        o.message
    );
    assert!(
        took < FLOOR + Duration::from_secs(30),
        "{mode}: the hung config took {took:?}"
    );
    let journal = Journal::read(&dir.path().join("run")).unwrap();
    assert_eq!(journal.len(), 2);
    (o, took)
}

#[test]
fn a_server_that_stops_answering_mid_request_costs_the_paced_timeout() {
    paced("hang-mid");
}

#[test]
fn a_server_that_drips_its_reply_costs_the_paced_timeout() {
    // The timeout covers the whole request: a byte a second never resets it.
    paced("drip");
}

/// A valid `/completion` reply of 17 MiB (past the 16 MiB qtune reads), streamed without a
/// Content-Length: a classified failure, read no further.
#[test]
fn a_huge_reply_is_a_classified_failure() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = runner(
        &dir,
        &[("FAKE_MODE", "huge-reply")],
        Duration::from_secs(60),
    );
    let o = r.run(&cpu_config(), TrialRole::Search);
    assert_eq!(o.kind, OutcomeKind::Crash, "{}", o.message);
    assert!(o.metrics.is_none());
    assert!(o.message.contains("larger than 16 MiB"), "{}", o.message);
    assert_eq!(o.message.lines().count(), 1);
    // A reply under the cap is read whole.
    let dir = tempfile::tempdir().unwrap();
    let mut r = runner(
        &dir,
        &[("FAKE_MODE", "huge-reply"), ("FAKE_REPLY_MIB", "1")],
        Duration::from_secs(60),
    );
    let o = r.run(&cpu_config(), TrialRole::Search);
    assert_eq!(o.kind, OutcomeKind::Ok, "{}", o.message);
}

/// A fake whose first `launches` launches lose their port in `mode` (all of them with None).
fn port_race(mode: &str, launches: Option<u32>) -> TrialOutcome {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("launches");
    let n = launches.map(|n| n.to_string());
    let mut env = vec![("FAKE_MODE", mode)];
    let counter_s = counter.display().to_string();
    if let Some(n) = &n {
        env.push(("FAKE_COUNTER", &counter_s));
        env.push(("FAKE_FAULT_LAUNCHES", n));
    }
    let mut r = runner(&dir, &env, Duration::from_secs(60));
    let o = r.run(&cpu_config(), TrialRole::Search);
    let logs: Vec<String> = std::fs::read_dir(dir.path().join("run/logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(logs, ["trial-1.log"], "one log per trial");
    o
}

/// Issue 48: a lost port race (another program takes the port and even answers /health)
/// read "died while serving a request"; it is a port conflict, tried again on another port.
#[test]
fn a_lost_port_race_is_retried_and_named() {
    for mode in ["port-taken", "port-stolen"] {
        // Lost once: the next port works, and the trial measures.
        let o = port_race(mode, Some(1));
        assert_eq!(o.kind, OutcomeKind::Ok, "{mode}: {}", o.message);
        // Lost every time: a port conflict, in its own words.
        let o = port_race(mode, None);
        assert_eq!(o.kind.as_str(), "port-conflict", "{mode}: {}", o.message);
        assert!(
            o.message.contains("another program took it first"),
            "{mode}: {}",
            o.message
        );
        assert!(!o.message.contains("died"), "{mode}: {}", o.message);
        assert!(
            o.evidence
                .iter()
                .any(|l| l.contains("couldn't bind HTTP server socket")),
            "{mode}: {:?}",
            o.evidence
        );
    }
}

/// Issue 48: a server that daemonizes a helper (fork, setsid, fork: out of its process group)
/// left it running, unnoticed. It is killed when the trial ends, and named in one warning.
#[test]
fn what_a_daemonizing_server_leaves_is_killed_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("daemon.pid");
    let pidfile_s = pidfile.display().to_string();
    let mut r = runner(
        &dir,
        &[("FAKE_DAEMON", &pidfile_s)],
        Duration::from_secs(60),
    );
    let o = r.run(&cpu_config(), TrialRole::Search);
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .expect("the fake daemonized its helper")
        .trim()
        .parse()
        .unwrap();
    let t0 = Instant::now();
    while alive(pid) && t0.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = alive(pid);
    if left {
        // Leave nothing behind whatever the outcome.
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    }
    assert!(!left, "the daemonized helper {pid} outlived the trial");
    assert_eq!(o.kind, OutcomeKind::Ok, "{}", o.message);
    let named: Vec<&String> = o
        .warnings
        .iter()
        .filter(|w| w.contains("daemonize") && w.contains(&pid.to_string()))
        .collect();
    assert_eq!(named.len(), 1, "{:?}", o.warnings);
    assert_eq!(named[0].lines().count(), 1);
}
