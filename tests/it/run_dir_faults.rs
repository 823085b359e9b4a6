//! The run directory as a database (issue 17): random SIGKILL / SIGINT / SIGTERM / torn-tail
//! cycles on one run directory must leave a valid journal, unique ids, no trial measured twice
//! (other than the search's own re-measurement) and no process behind.
//!
//! Most cycles use the hidden `--replay JOURNAL` switch (with `--replay-pace-ms`, so a signal
//! lands mid-trial): fast and server-free. A few cycles use the real CPU llama-server on the
//! tiny MoE model, so "no process left" is proven with real servers.

use crate::support;
use qtune::engine::LaunchArgs;
use support::require;
use support::servers;

use qtune::run::TuneResult;
use qtune::trial::{TrialOutcome, TrialRole};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn fixture_journal() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe/journal.jsonl")
}

fn qtune() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qtune"));
    c.env_remove("QTUNE_LOG").env("NO_COLOR", "1");
    c
}

/// splitmix64: the test's own seeded randomness (printed, so a failure can be replayed).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seed() -> u64 {
    std::env::var("QTUNE_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// The journal must be line-whole except possibly a torn last line (which the next session
/// cuts); every whole line parses; ids are unique. Returns the whole entries.
fn check_journal(run: &Path, allow_torn_tail: bool) -> Vec<TrialOutcome> {
    let bytes = std::fs::read(run.join("journal.jsonl")).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    if let Some(last) = lines.last() {
        if !last.ends_with('\n') {
            assert!(allow_torn_tail, "journal ends with a torn line: {last:?}");
            lines.pop();
        }
    }
    let entries: Vec<TrialOutcome> = lines
        .iter()
        .map(|l| {
            serde_json::from_str(l.trim_end())
                .unwrap_or_else(|e| panic!("journal line unreadable ({e}): {l:?}"))
        })
        .collect();
    let mut ids: Vec<u32> = entries.iter().map(|o| o.id).collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "journal ids are unique: {entries:?}");
    entries
}

/// Cut the journal's last line to a random prefix of itself: a write torn by a kill.
fn tear_tail(run: &Path, rng: &mut Rng) -> bool {
    let path = run.join("journal.jsonl");
    let Ok(bytes) = std::fs::read(&path) else {
        return false;
    };
    if bytes.len() < 2 {
        return false;
    }
    let body = &bytes[..bytes.len() - 1];
    let start = body.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let last_len = bytes.len() - start;
    if last_len < 2 {
        // The last line is a single byte (a tear already cut it there): nothing left to tear.
        return false;
    }
    let keep = start + 1 + rng.below(last_len as u64 - 1) as usize;
    std::fs::write(&path, &bytes[..keep]).unwrap();
    true
}

fn label_counts(trials: &[TrialOutcome]) -> HashMap<(TrialRole, String), usize> {
    let mut m = HashMap::new();
    for t in trials {
        *m.entry((t.role, t.config.label())).or_default() += 1;
    }
    m
}

fn replay_tune(model: &Path, run: &Path, fresh: bool) -> Child {
    let j = fixture_journal();
    let mut c = qtune();
    c.arg("tune").arg("--replay").arg(&j);
    c.args(["--replay-pace-ms", "40"]);
    if fresh {
        c.arg("--model")
            .arg(model)
            .args(["--space", "quick", "--out"]);
    } else {
        c.arg("--resume");
    }
    c.arg(run)
        .env("QTUNE_LLAMA_SERVER", "/nonexistent/llama-server")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn thirty_random_kill_interrupt_and_torn_tail_cycles_leave_a_valid_run_directory() {
    if !support::vocab() {
        return;
    }
    let seed = seed();
    eprintln!("QTUNE_FAULT_SEED={seed}");
    let mut rng = Rng(seed);
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model");
    let tmp = tempfile::tempdir().unwrap();

    // The reference: the same tune, never interrupted.
    let full = tmp.path().join("full");
    let o = replay_tune(&model, &full, true).wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let reference: TuneResult = qtune::run::read_result(&full).unwrap().1;
    let want = label_counts(&reference.trials);
    let ref_path: Vec<(TrialRole, String)> = reference
        .trials
        .iter()
        .map(|t| (t.role, t.config.label()))
        .collect();
    let full_ms = 40 * reference.trials.len() as u64;

    let run = tmp.path().join("run");
    let mut counts: HashMap<&str, (u32, u32)> = HashMap::new();
    let mut finished_tunes = 0;
    let early_deaths = &mut 0;
    let mut fresh = true;
    for cycle in 0..36 {
        let mut action = ["SIGKILL", "SIGINT", "SIGTERM", "torn-tail"][rng.below(4) as usize];
        if action == "torn-tail" && fresh {
            action = "SIGKILL"; // nothing to tear yet
        }
        let entry = counts.entry(action).or_default();
        entry.0 += 1;
        if action == "torn-tail" {
            tear_tail(&run, &mut rng);
            check_journal(&run, true);
            entry.1 += 1;
            continue;
        }
        let mut child = replay_tune(&model, &run, fresh);
        std::thread::sleep(Duration::from_millis(20 + rng.below(full_ms / 2)));
        let sig = match action {
            "SIGINT" => libc::SIGINT,
            "SIGTERM" => libc::SIGTERM,
            _ => libc::SIGKILL,
        };
        unsafe { libc::kill(child.id() as i32, sig) };
        let started = Instant::now();
        let out = loop {
            if child.try_wait().unwrap().is_some() {
                break child.wait_with_output().unwrap();
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "cycle {cycle}: qtune did not end after {action}"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        use std::os::unix::process::ExitStatusExt;
        let finished = out.status.success();
        let early = out.status.signal() == Some(sig) && sig != libc::SIGKILL;
        if early {
            // Signalled before qtune installed its handlers (it was still starting): the
            // default action ended it, before it could write anything.
            assert!(err.is_empty(), "cycle {cycle}: {err}");
            *early_deaths += 1;
        }
        match (action, finished) {
            (_, true) => {}
            (_, false) if early => {}
            ("SIGKILL", false) => assert_eq!(out.status.signal(), Some(9), "{err}"),
            ("SIGINT", false) => {
                assert_eq!(
                    out.status.code(),
                    Some(130),
                    "cycle {cycle}: {:?} {err}",
                    out.status
                );
                assert!(err.contains(" finished trial"), "{err}");
                assert!(
                    err.contains(&format!("--resume {}", run.display())),
                    "{err}"
                );
            }
            (_, false) => {
                assert_eq!(
                    out.status.code(),
                    Some(143),
                    "cycle {cycle}: {:?} {err}",
                    out.status
                );
                assert!(err.contains(" finished trial"), "{err}");
            }
        }
        assert!(
            !err.contains("panicked"),
            "cycle {cycle}: qtune panicked: {err}"
        );
        // Killed before it wrote run.json: the next cycle starts the tune again.
        fresh = !run.join("run.json").exists();
        // A session stopped before it reached the repair may leave an earlier torn tail; a
        // finished one may not.
        let entries = check_journal(&run, !finished);
        // Nothing measured more often than the uninterrupted tune measures it.
        for (k, n) in label_counts(&entries) {
            assert!(
                n <= want.get(&k).copied().unwrap_or(0),
                "cycle {cycle}: {k:?} measured {n} times: {entries:?}"
            );
        }
        entry.1 += 1;
        if finished {
            finished_tunes += 1;
            let r: TuneResult = qtune::run::read_result(&run).unwrap().1;
            let path: Vec<(TrialRole, String)> = r
                .trials
                .iter()
                .map(|t| (t.role, t.config.label()))
                .collect();
            assert_eq!(
                path, ref_path,
                "cycle {cycle}: resumes repeat and skip nothing"
            );
            let mut ids: Vec<u32> = r.trials.iter().map(|t| t.id).collect();
            let n = ids.len();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), n, "results.json ids unique");
            assert_eq!(
                r.winner.map(|w| w.config),
                reference.winner.clone().map(|w| w.config)
            );
            // Start the next tune on the same directory.
            std::fs::remove_dir_all(&run).unwrap();
            fresh = true;
        }
    }
    // Finish whatever is left and check it against the reference.
    if !fresh {
        let o = replay_tune(&model, &run, false).wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        check_journal(&run, false);
        let r: TuneResult = qtune::run::read_result(&run).unwrap().1;
        let path: Vec<(TrialRole, String)> = r
            .trials
            .iter()
            .map(|t| (t.role, t.config.label()))
            .collect();
        assert_eq!(path, ref_path);
        finished_tunes += 1;
    }
    let total: u32 = counts.values().map(|c| c.1).sum();
    eprintln!(
        "fault cycles (action: valid/run): {counts:?}; {finished_tunes} tunes finished; {early_deaths} signalled before the handlers were installed"
    );
    assert!(total >= 30);
}

#[test]
fn real_servers_are_gone_after_every_kill_and_interrupt_cycle() {
    let Some(server) = require::or_skip(require::server(), "the CPU llama-server") else {
        return;
    };
    let Some(tiny) = require::tiny_qwen3moe() else {
        return;
    };
    let seed = seed();
    eprintln!("QTUNE_FAULT_SEED={seed}");
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    // A unique path: this test's servers carry it in their argv.
    let model = tmp.path().join(tiny.file_name().unwrap());
    std::os::unix::fs::symlink(&tiny, &model).unwrap();
    let needle = model.display().to_string();
    let run = tmp.path().join("run");
    // A space with room for every signal (see the file).
    let space =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spaces/kill-cycles.yaml");
    let t0 = Instant::now();
    let mut done = Vec::new();
    for action in ["SIGKILL", "SIGINT", "torn-tail", "SIGTERM", "SIGKILL"] {
        if action == "torn-tail" {
            assert!(tear_tail(&run, &mut rng), "a journal to tear");
            done.push(action);
            continue;
        }
        let mut c = qtune();
        c.arg("tune");
        if run.join("run.json").exists() {
            c.arg("--resume").arg(&run);
        } else {
            c.arg("--model").arg(&model).arg("--out").arg(&run);
            c.arg("--space").arg(&space);
        }
        let mut child = c
            .env("QTUNE_LLAMA_SERVER", &server)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Signal it once this session finished a trial, while the next server is up, at a
        // random moment of that trial.
        let before = check_journal(&run, true).len();
        let deadline = Instant::now() + Duration::from_secs(120);
        while check_journal(&run, true).len() <= before
            || servers::servers_mentioning(&needle).is_empty()
        {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                use std::io::Read;
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                panic!(
                    "{action}: the tune ended ({status}) before a server was seen; journal {:?}\n{err}",
                    check_journal(&run, true)
                        .iter()
                        .map(|t| t.config.label())
                        .collect::<Vec<_>>()
                );
            }
            assert!(Instant::now() < deadline, "{action}: no server in 120 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(rng.below(1500)));
        let sig = match action {
            "SIGINT" => libc::SIGINT,
            "SIGTERM" => libc::SIGTERM,
            _ => libc::SIGKILL,
        };
        unsafe { libc::kill(child.id() as i32, sig) };
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        use std::os::unix::process::ExitStatusExt;
        match action {
            "SIGKILL" => assert_eq!(out.status.signal(), Some(9), "{err}"),
            "SIGINT" => {
                assert_eq!(out.status.code(), Some(130), "{err}");
                assert!(err.contains(" finished trial"), "{err}");
                assert!(
                    err.contains(&format!("qtune tune --resume {}", run.display())),
                    "{err}"
                );
            }
            _ => {
                assert_eq!(out.status.code(), Some(143), "{err}");
                assert!(
                    err.contains(&format!("qtune tune --resume {}", run.display())),
                    "{err}"
                );
            }
        }
        // No process left: the servers die with qtune, whatever ended it.
        servers::assert_none_left(&needle, action);
        check_journal(&run, action == "SIGKILL");
        done.push(action);
    }
    eprintln!(
        "real-server cycles {done:?}: every one left no server, {:.0} s",
        t0.elapsed().as_secs_f64()
    );
}
