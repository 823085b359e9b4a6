//! A busy box is named before it costs a tune (issue 43): with a busy loop on every core, a
//! real tune of the tiny MoE model warns in one line before its first launch, and every
//! launch (the baseline included) gets `-t 1`, the free cores, instead of llama.cpp's
//! default threads, which spin on cores other work holds and collapse.

use crate::support;
use support::output_text as text;
use support::require;

use std::process::{Child, Command, Stdio};

/// Busy loops (`yes > /dev/null`), killed when dropped.
struct Loops(Vec<Child>);

impl Drop for Loops {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn busy_loops(n: usize) -> Loops {
    Loops(
        (0..n)
            .map(|_| {
                Command::new("yes")
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("yes starts")
            })
            .collect(),
    )
}

#[test]
fn a_tune_on_a_busy_box_warns_first_and_gives_every_launch_the_free_cores() {
    let Some(server) = require::or_skip(require::server(), "llama-server") else {
        return;
    };
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let _loops = busy_loops(cores);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env("QTUNE_LLAMA_SERVER", &server)
        // The free-core logic, not the suite's own cap, is under test.
        .env_remove("QTUNE_MAX_THREADS")
        .env_remove("QTUNE_ALLOW_BUSY")
        .arg("tune")
        .arg("--model")
        .arg(&model)
        // A box this loaded may also be past the stop threshold: the warning is under test.
        .args([
            "--space",
            "demo",
            "--budget-trials",
            "2",
            "--allow-busy",
            "--out",
        ])
        .arg(&run)
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let warning = out
        .lines()
        .position(|l| l.starts_with("qtune: warning: the box is busy: other processes used "))
        .unwrap_or_else(|| panic!("no busy-box warning:\n{out}"));
    let first_launch = out
        .lines()
        .position(|l| l.starts_with("launch 1/"))
        .unwrap_or_else(|| panic!("no launch line:\n{out}"));
    assert!(warning < first_launch, "the warning comes first:\n{out}");
    // The warning as one line: stderr is wrapped at 100 columns, its continuations indented.
    let lines: Vec<&str> = out.lines().collect();
    let mut whole = lines[warning].to_string();
    for l in lines[warning + 1..]
        .iter()
        .take_while(|l| l.starts_with("  "))
    {
        whole.push(' ');
        whole.push_str(l.trim());
    }
    assert!(
        whole.contains("every launch gets -t 1 (the free cores), the baseline included"),
        "{out}"
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    let trials = results["trials"].as_array().unwrap();
    assert!(!trials.is_empty(), "{results:#}");
    for t in trials {
        assert_eq!(
            t["config"]["threads"], 1,
            "every launch fits the free core: {t:#}"
        );
    }
    assert!(
        out.lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ")
            .contains("every launch ran with at most -t 1, the baseline included"),
        "the verdict says fewer threads is this box's finding:\n{out}"
    );
}

/// The stop on a box too busy to time says to add --allow-busy: `qtune demo` (what a new user
/// runs first) takes it as `qtune tune` does, so the advice holds for both.
#[test]
fn demo_takes_allow_busy_as_tune_does() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-llama-server");
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["demo", "--allow-busy", "--out"])
        .arg(tmp.path().join("run"))
        .arg("--server")
        .arg(&missing)
        .output()
        .unwrap();
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(!out.contains("unexpected argument"), "{out}");
    assert!(out.contains("llama-server not found at"), "{out}");
    for cmd in ["tune", "demo"] {
        let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
            .args([cmd, "--help"])
            .output()
            .unwrap();
        assert!(text(&o).contains("--allow-busy"), "{cmd}: {}", text(&o));
    }
}
