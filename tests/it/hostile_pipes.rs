//! Issue 33: closed pipes on stdout or stderr (`qtune plan --json | head`,
//! `qtune tune ... 2>&1 | head`) end qtune quietly, with its usual exit code, never a panic;
//! a tune whose output pipe closed still finishes, writes its results and leaves no server.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn tiny() -> PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model")
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .unwrap_or("?");
        state != "Z" && state != "X"
    })
}

#[test]
fn plan_into_a_closed_pipe_ends_quietly() {
    for json in [true, false] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_qtune"));
        c.env_remove("QTUNE_LOG")
            .args(["plan", "--model"])
            .arg(tiny());
        if json {
            c.arg("--json");
        }
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read one byte, then close the pipe (as `head -c 1` does).
        let mut out = child.stdout.take().unwrap();
        let mut one = [0u8; 1];
        let _ = out.read(&mut one);
        drop(out);
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(o.status.code(), Some(0), "{err}");
    }
}

#[test]
fn a_tune_into_a_closed_pipe_finishes_and_leaves_no_server() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let pidfile = tmp.path().join("pids");
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-llama-server");
    // `2>&1 | head -1`: both streams into a pipe whose reader leaves after one line.
    let o = Command::new("bash")
        .arg("-c")
        .arg(r#""$@" 2>&1 | head -1; exit "${PIPESTATUS[0]}""#)
        .arg("_")
        .arg(env!("CARGO_BIN_EXE_qtune"))
        .args(["tune", "--space", "demo", "--budget-trials", "4", "--model"])
        .arg(tiny())
        .arg("--server")
        .arg(&fake)
        .arg("--out")
        .arg(&run)
        .env_remove("QTUNE_LOG")
        .env("FAKE_PIDFILE", &pidfile)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&o.stdout);
    assert_eq!(shown.lines().count(), 1, "{shown}");
    assert_eq!(o.status.code(), Some(0), "{shown}");
    // It went on after the pipe closed: every trial ran, the results were written.
    assert!(run.join("results.json").is_file());
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    assert!(journal.lines().count() >= 2, "{journal}");
    for pid in std::fs::read_to_string(&pidfile)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse::<u32>().unwrap())
    {
        assert!(!alive(pid), "server process {pid} outlived the tune");
    }
}
