//! Issue 17's probe table, one test per failure: the run directory as a database (torn tails,
//! a lock, verified resumes), bounded reads of user files, absolute model paths, loud
//! out-of-range values, and the smaller defects. Most use the hidden `--replay JOURNAL`
//! switch (no llama-server); the real CPU server is used where it is what shows the failure,
//! the fake one only for a server that never answers.

use crate::support;
use support::output_text as text;
use support::qtune_without_server as qtune;
use support::require;

use qtune::trial::TrialOutcome;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn fixture_journal() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe/journal.jsonl")
}

fn tiny() -> PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model")
}

fn replay(args: &[&str]) -> Command {
    let mut c = qtune();
    c.arg("tune")
        .arg("--replay")
        .arg(fixture_journal())
        .args(args);
    c
}

/// Bad input: a non-zero exit and exactly one line on stderr.
fn one_line_failure(o: &Output) -> String {
    assert!(!o.status.success(), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(err.trim_end().lines().count(), 1, "{}", text(o));
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// A replayed tune of `model` into `run`, stopped (as by Ctrl-C) after `after` trials.
fn interrupted_run(model: &Path, run: &Path, after: &str) {
    let o = replay(&[
        "--replay-interrupt-after",
        after,
        "--space",
        "quick",
        "--model",
    ])
    .arg(model)
    .arg("--out")
    .arg(run)
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
}

fn resume(run: &Path) -> Output {
    replay(&["--resume"]).arg(run).output().unwrap()
}

fn journal(run: &Path) -> Vec<TrialOutcome> {
    let text = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    assert!(text.ends_with('\n'), "journal ends line-whole");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("unreadable line {l:?}: {e}")))
        .collect()
}

fn unique(ids: impl Iterator<Item = u32>) {
    let mut v: Vec<u32> = ids.collect();
    let n = v.len();
    v.sort();
    v.dedup();
    assert_eq!(v.len(), n, "ids unique: {v:?}");
}

// 1. A torn journal tail is cut (and reported), ids continue after the highest recorded id.
#[test]
fn a_torn_journal_tail_is_cut_and_ids_never_repeat() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    interrupted_run(&tiny(), &run, "6");
    // Tear the last line as a kill mid-write would (the checkpoint already knows that trial).
    let path = run.join("journal.jsonl");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 300]).unwrap();
    let o = resume(&run);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cut off a torn last line"), "{err}");
    let entries = journal(&run);
    unique(entries.iter().map(|t| t.id));
    let (_, r) = qtune::run::read_result(&run).unwrap();
    unique(r.trials.iter().map(|t| t.id));
}

// 2. A second tune or resume on a directory in use gets one line and a non-zero exit; the
// lock dies with its holder.
#[test]
fn a_run_directory_in_use_is_refused_and_released_when_its_tune_dies() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let model = tiny();
    let mut first = replay(&["--replay-pace-ms", "300", "--space", "quick", "--model"])
        .arg(&model)
        .arg("--out")
        .arg(&run)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !run.join("run.json").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the tune did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = resume(&run);
    let err = one_line_failure(&o);
    assert!(err.contains("in use by another qtune"), "{err}");
    let o = replay(&["--space", "quick", "--model"])
        .arg(&model)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    let err = one_line_failure(&o);
    assert!(err.contains("in use by another qtune"), "{err}");
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first tune still runs"
    );
    first.kill().unwrap(); // SIGKILL: the OS releases the lock
    first.wait().unwrap();
    let o = resume(&run);
    assert!(o.status.success(), "{}", text(&o));
    unique(journal(&run).iter().map(|t| t.id));
}

// 3. Resume verifies the model and the space.
#[test]
fn resume_refuses_a_changed_model_or_space() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model.gguf");
    std::fs::copy(tiny(), &model).unwrap();
    let run = tmp.path().join("run");
    interrupted_run(&model, &run, "3");
    let o = replay(&["--space", "demo", "--resume"])
        .arg(&run)
        .output()
        .unwrap();
    let err = one_line_failure(&o);
    assert!(
        err.contains("not the space this tune started with"),
        "{err}"
    );
    // Another model at the same path.
    let other = qtune::fixtures::tiny_moe("tiny-qwen3moe").unwrap();
    std::fs::copy(other, &model).unwrap();
    let err = one_line_failure(&resume(&run));
    assert!(
        err.contains("model file") && err.contains("changed"),
        "{err}"
    );
    assert_eq!(journal(&run).len(), 3, "nothing appended");
}

// 3. Resume verifies the server binary (its version, run for real).
#[test]
fn resume_refuses_a_changed_server() {
    let Some(server) = require::or_skip(require::server(), "the CPU llama-server") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    interrupted_run(&tiny(), &run, "3");
    // The run says it was tuned with this server at another version.
    let f = run.join("run.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    v["server_path"] = serde_json::json!(server);
    v["server_version"] = serde_json::json!("version: 1 (0000000)");
    std::fs::write(&f, v.to_string()).unwrap();
    let o = qtune()
        .arg("tune")
        .arg("--resume")
        .arg(&run)
        .output()
        .unwrap();
    let err = one_line_failure(&o);
    assert!(err.contains("server") && err.contains("changed"), "{err}");
}

// 4. User files are bounded regular files: /dev/zero and a named pipe fail at once.
#[test]
fn a_device_or_a_pipe_as_space_or_model_fails_fast_with_one_line() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("space.yaml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let model = tiny();
    for space in [Path::new("/dev/zero"), fifo.as_path()] {
        let t0 = Instant::now();
        let o = replay(&["--model", model.to_str().unwrap(), "--space"])
            .arg(space)
            .arg("--out")
            .arg(tmp.path().join("run"))
            .output()
            .unwrap();
        let err = one_line_failure(&o);
        assert!(err.contains("not a regular file"), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
    let big = tmp.path().join("big.yaml");
    std::fs::write(&big, vec![b'#'; 2 << 20]).unwrap();
    let o = replay(&["--model", model.to_str().unwrap(), "--space"])
        .arg(&big)
        .output()
        .unwrap();
    assert!(one_line_failure(&o).contains("at most"));
    let o = replay(&["--space", "quick", "--model"])
        .arg(&fifo)
        .output()
        .unwrap();
    assert!(one_line_failure(&o).contains("not a regular file"));
    assert!(!tmp.path().join("run").join("run.json").exists());
}

// 6. A relative model path is stored absolute: resume and launch.sh work from elsewhere.
#[test]
fn a_relative_model_path_is_stored_absolute() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(tiny(), tmp.path().join("m.gguf")).unwrap();
    let o = replay(&["--replay-interrupt-after", "3", "--space", "quick"])
        .args(["--model", "m.gguf", "--out", "run"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let run = tmp.path().join("run");
    let inputs = qtune::run::read_inputs(&run).unwrap();
    assert!(
        inputs.model_path.is_absolute(),
        "{}",
        inputs.model_path.display()
    );
    assert_eq!(inputs.model_path, tmp.path().join("m.gguf"));
    // Resume from another directory.
    let o = replay(&["--resume"])
        .arg(&run)
        .current_dir("/")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let script = std::fs::read_to_string(run.join("launch.sh")).unwrap();
    assert!(
        script.contains(&tmp.path().join("m.gguf").display().to_string()),
        "{script}"
    );
}

// 7. A line break in the model path is refused up front.
#[test]
fn a_model_path_with_a_line_break_is_refused() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("a\nb.gguf");
    std::fs::copy(tiny(), &model).unwrap();
    let o = replay(&["--space", "quick", "--model"])
        .arg(&model)
        .arg("--out")
        .arg(tmp.path().join("run"))
        .output()
        .unwrap();
    let err = one_line_failure(&o);
    assert!(err.contains("line break"), "{err}");
    assert!(!tmp.path().join("run").join("run.json").exists());
}

// 8. Out-of-range values are errors with their line, never dropped silently.
#[test]
fn an_out_of_range_thread_count_is_an_error_with_its_line() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let space = tmp.path().join("s.yaml");
    let quick = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("search-spaces/quick.yaml"),
    )
    .unwrap();
    let bad = quick.replace("threads: [auto]", "threads: [100000]");
    assert_ne!(bad, quick);
    std::fs::write(&space, &bad).unwrap();
    let line = bad.lines().position(|l| l.contains("threads:")).unwrap() + 1;
    let o = replay(&["--model", tiny().to_str().unwrap(), "--space"])
        .arg(&space)
        .output()
        .unwrap();
    let err = one_line_failure(&o);
    assert!(
        err.contains(&format!("line {line}")) && err.contains("100000"),
        "{err}"
    );
    // A value this machine cannot try is said, not dropped.
    // A replay runs on the recorded box: its core count is the one that counts.
    let recorded = qtune::run::read_inputs(fixture_journal().parent().unwrap()).unwrap();
    let cores = recorded.hardware.host.logical_cores as usize;
    std::fs::write(
        &space,
        quick.replace(
            "threads: [auto]",
            &format!("threads: [auto, {}]", cores * 4),
        ),
    )
    .unwrap();
    let o = replay(&[
        "--replay-interrupt-after",
        "1",
        "--model",
        tiny().to_str().unwrap(),
    ])
    .arg("--space")
    .arg(&space)
    .arg("--out")
    .arg(tmp.path().join("run"))
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("threads {} is more than", cores * 4)),
        "{err}"
    );
}

// 9. --systemd --out x.service writes x.service (the unit) and x.sh (the script).
#[test]
fn a_systemd_unit_named_on_the_command_line_is_not_doubled() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let o = replay(&[
        "--space",
        "quick",
        "--model",
        tiny().to_str().unwrap(),
        "--out",
    ])
    .arg(&run)
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let unit = tmp.path().join("x.service");
    let o = qtune()
        .args(["script", "--systemd", "--from"])
        .arg(&run)
        .arg("--out")
        .arg(&unit)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let u = std::fs::read_to_string(&unit).unwrap();
    assert!(u.contains("[Service]"), "{u}");
    assert!(
        u.contains(&tmp.path().join("x.sh").display().to_string()),
        "{u}"
    );
    assert!(!tmp.path().join("x.service.service").exists());
    assert!(std::fs::read_to_string(tmp.path().join("x.sh"))
        .unwrap()
        .starts_with("#!"));
}

// 9. The printed command's port is checked.
#[test]
fn a_taken_port_in_the_printed_command_is_warned_about() {
    if !support::vocab() {
        return;
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let o = replay(&[
        "--space",
        "quick",
        "--port",
        &port,
        "--model",
        tiny().to_str().unwrap(),
    ])
    .arg("--out")
    .arg(tmp.path().join("run"))
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("port {port} on 127.0.0.1 is in use")),
        "{err}"
    );
    drop(taken);
}

// 9. A server that never answers completions cannot overrun the minutes budget.
#[test]
fn a_server_that_never_answers_cannot_overrun_the_minutes_budget() {
    if !support::vocab() {
        return;
    }
    let fake = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-llama-server");
    let tmp = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    // 0.25 minutes = 15 s; a request past it waits at most 30 s more (before: 120 s or more).
    let o = qtune()
        .args([
            "tune",
            "--space",
            "demo",
            "--budget-minutes",
            "0.25",
            "--model",
        ])
        .arg(tiny())
        .arg("--server")
        .arg(&fake)
        .arg("--out")
        .arg(tmp.path().join("run"))
        .env("FAKE_MODE", "slow")
        .output()
        .unwrap();
    let took = t0.elapsed();
    assert!(!o.status.success(), "nothing can win: {}", text(&o));
    assert!(
        took < Duration::from_secs(60),
        "a 15 s budget took {took:?}: {}",
        text(&o)
    );
    eprintln!("{}", text(&o));
    let entries = journal(&tmp.path().join("run"));
    assert!(!entries.is_empty());
    assert!(entries.iter().all(|t| !t.kind.is_ok()));
}

// 9. No colour codes when stderr is not a terminal; a trial log that exists is never
// overwritten (real server: its debug lines and its logs).
#[test]
fn no_colour_in_a_log_file_and_no_trial_log_overwritten() {
    let Some(server) = require::or_skip(require::server(), "the CPU llama-server") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    std::fs::create_dir_all(run.join("logs")).unwrap();
    std::fs::write(run.join("logs/trial-1.log"), "an earlier session's log\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["tune", "--space", "demo", "--budget-trials", "1", "--model"])
        .arg(qtune::fixtures::tiny_moe("tiny-qwen3moe").unwrap())
        .arg("--server")
        .arg(&server)
        .arg("--out")
        .arg(&run)
        .env("QTUNE_LOG", "qtune=debug")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("DEBUG"), "debug lines were asked for: {err}");
    assert!(!err.contains('\x1b'), "ANSI codes in a file: {err:?}");
    assert_eq!(
        std::fs::read_to_string(run.join("logs/trial-1.log")).unwrap(),
        "an earlier session's log\n"
    );
    let first = &journal(&run)[0];
    assert_eq!(first.id, 1);
    assert_eq!(
        first.log.as_deref(),
        Some(run.join("logs/trial-1.1.log").as_path())
    );
}
