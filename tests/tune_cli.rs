//! `qtune tune` end to end: the real binary, the real llama-server (CPU), real models.
//! Each test gets its own directory and its own symlink to the model, so the servers it starts
//! can be found by that path (and must be gone when qtune is).

use qtune::engine::LaunchArgs;
#[path = "it/support/mod.rs"]
mod support;
use support::qtune;
use support::servers;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One real tune at a time: two llama-servers each spinning as many threads as the 2-core CI
/// box has cores slow both by an order of magnitude (llama.cpp's threads wait for each other
/// while descheduled), and a tune's whole-request measurements then ran past its minutes
/// budget (a 305-token answer took over 112 s).
static ONE_TUNE: Mutex<()> = Mutex::new(());

fn one_tune() -> MutexGuard<'static, ()> {
    ONE_TUNE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The model `f` prepares, and the real llama-server qtune will find (`QTUNE_LLAMA_SERVER`,
/// else the pinned build in qtune's cache): the model, or None after saying SKIP (a failure
/// under scripts/test.sh or CI).
fn fixture(f: fn() -> anyhow::Result<PathBuf>) -> Option<PathBuf> {
    support::real_server()?;
    support::require::or_skip(
        f(),
        "the test model (`qtune synth --test-models` prepares it)",
    )
}

/// The model under a unique path (a symlink inside `dir`): servers of this test carry it in argv.
fn model_in(dir: &Path, model: &Path) -> PathBuf {
    let p = dir.join(model.file_name().unwrap());
    std::os::unix::fs::symlink(model, &p).unwrap();
    p
}

fn results(run: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap()
}

fn journal_lines(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A small tune: checks what every tune must satisfy.
fn tune_and_check(model: PathBuf, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let m = model_in(dir.path(), &model);
    let run = dir.path().join("run");
    let out = qtune()
        .args(["tune", "--model"])
        .arg(&m)
        .args(["--space", "demo", "--budget-trials", "4", "--out"])
        .arg(&run)
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tune failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if extra.contains(&"--json") {
        let j: serde_json::Value = serde_json::from_str(&stdout).expect("--json prints JSON");
        assert_eq!(j["schema_version"].as_u64(), Some(3), "{j}");
        let verdict = j["verdict"].clone();
        let kinds: Vec<String> = results(&run)["trials"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| format!("{} {}", t["kind"], t["message"]))
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            verdict["recommended"]["flags"].is_string(),
            "{verdict}\ntrials: {kinds:?}\nstderr: {stderr}"
        );
        assert!(verdict["status"].is_string(), "{verdict}");
        assert_eq!(j, results(&run), "--json prints results.json");
    }
    let last = if extra.contains(&"--json") {
        results(&run)["winner"]["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        stdout
            .lines()
            .last()
            .expect("a command on stdout")
            .to_string()
    };
    assert!(
        last.contains("llama-server") && last.contains("--host 127.0.0.1 --port 8080"),
        "{last}"
    );
    assert!(
        last.contains(&m.display().to_string()),
        "the model path is in the command: {last}"
    );

    let r = results(&run);
    let trials = r["trials"].as_array().unwrap();
    let searched = trials.iter().filter(|t| t["role"] == "search").count();
    assert!(searched <= 4, "{searched} search trials for a budget of 4");
    assert!(
        trials.iter().any(|t| t["role"] == "baseline"),
        "baseline measured"
    );
    // Every trial was journaled, once.
    assert_eq!(journal_lines(&run).len(), trials.len());
    // The verdict's rules, not a measured speed (speeds are noisy and belong in reports):
    // the winner ran ok in every one of its trials, and it is the printed command.
    let w = &r["winner"];
    let wcfg = &w["config"];
    let winner_trials: Vec<_> = trials.iter().filter(|t| &t["config"] == wcfg).collect();
    assert!(!winner_trials.is_empty(), "the winner was measured: {w}");
    for t in winner_trials {
        assert_eq!(t["kind"], "ok", "the winner failed a trial: {t}");
    }
    if let Some(ctx) = wcfg["ctx"].as_u64() {
        assert!(last.contains(&format!("-c {ctx}")), "{last}");
    }
    for f in ["report.md", "launch.sh"] {
        assert!(run.join(f).is_file(), "{f} written");
    }
    shows_configs_as_flags(&stderr, &run, trials);
    servers::assert_none_left(&m.display().to_string(), "after the tune");
}

/// Issue 43: the summary and the report show each config as the llama-server flags a user
/// would paste (`-t 1 -b 512 -ub 128`), never qtune's own shorthand (`t=1 b=512/128
/// kv=f16/f16 lm=none`).
fn shows_configs_as_flags(summary: &str, run: &Path, trials: &[serde_json::Value]) {
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    for (what, text) in [("the summary", summary), ("report.md", report.as_str())] {
        for shorthand in ["kv=", " t=", " b=", "lm=", "ncmoe=", "fa="] {
            assert!(
                !text.contains(shorthand),
                "{what} holds the shorthand {shorthand:?}:\n{text}"
            );
        }
    }
    let mut shown = 0;
    for t in trials.iter().filter(|t| t["kind"] == "ok") {
        let c: qtune::config::LaunchConfig =
            serde_json::from_value(t["config"].clone()).expect("a launch config");
        let flags = c.label();
        if c.threads.is_some() || c.batch.is_some() {
            assert!(
                flags.starts_with('-') && !flags.contains('='),
                "flags, not shorthand: {flags}"
            );
            assert!(
                report.contains(&flags),
                "report.md lacks {flags}:\n{report}"
            );
            shown += 1;
        }
    }
    assert!(shown > 0, "no searched config ran ok: {trials:?}");
    // The winner (or the kept reference) is named by its flags in the summary too.
    let w: qtune::config::LaunchConfig =
        serde_json::from_value(results(run)["winner"]["config"].clone()).unwrap();
    assert!(
        summary.contains(&w.label()),
        "the summary lacks the winner's {}:\n{summary}",
        w.label()
    );
}

#[test]
fn tune_tiny_moe_on_cpu() {
    let _one = one_tune();
    if let Some(m) = fixture(|| qtune::fixtures::tiny_moe("tiny-qwen35moe")) {
        tune_and_check(m, &[]);
    }
}

#[test]
fn tune_smollm2_dense_on_cpu() {
    let _one = one_tune();
    // qtune is for MoE models: a dense one is tuned only when asked for (--allow-dense).
    if let Some(m) = fixture(qtune::fixtures::smollm2) {
        tune_and_check(m, &["--json", "--allow-dense"]);
    }
}

#[test]
fn sigkill_then_resume_does_not_repeat_finished_trials() {
    let _one = one_tune();
    let Some(tiny) = fixture(|| qtune::fixtures::tiny_moe("tiny-qwen3moe")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let m = model_in(dir.path(), &tiny);
    let run = dir.path().join("run");
    let mut child = qtune()
        .args(["tune", "--allow-dense", "--model"])
        .arg(&m)
        .args(["--space", "demo", "--budget-trials", "4", "--out"])
        .arg(&run)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once two trials are journaled (mid-tune).
    let deadline = Instant::now() + Duration::from_secs(300);
    while journal_lines(&run).len() < 2 {
        assert!(Instant::now() < deadline, "no trial finished");
        assert!(
            child.try_wait().unwrap().is_none(),
            "tune ended before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap(); // SIGKILL: no handler runs; the servers die with it (PDEATHSIG)
    child.wait().unwrap();
    servers::assert_none_left(&m.display().to_string(), "after the tune");
    let before = journal_lines(&run);
    assert!(before.len() >= 2);

    let out = qtune()
        .args(["tune", "--model"])
        .arg(&m)
        .arg("--resume")
        .arg(&run)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = journal_lines(&run);
    let r = results(&run);
    let trials = r["trials"].as_array().unwrap();
    // The finished trials are kept as they were, none run twice, and ids keep counting.
    assert_eq!(&after[..before.len()], &before[..]);
    assert_eq!(after.len(), trials.len(), "every trial journaled once");
    let ids: Vec<u64> = trials.iter().map(|t| t["id"].as_u64().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.dedup();
    assert_eq!(ids, sorted, "trial ids unique and increasing: {ids:?}");
    servers::assert_none_left(&m.display().to_string(), "after the tune");
}

#[test]
fn sigint_stops_the_tune_cleanly_and_keeps_the_journal() {
    let _one = one_tune();
    let Some(smollm2) = fixture(qtune::fixtures::smollm2) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let m = model_in(dir.path(), &smollm2);
    let run = dir.path().join("run");
    let mut child = qtune()
        .args(["tune", "--allow-dense", "--model"])
        .arg(&m)
        .args(["--space", "demo", "--budget-trials", "4", "--out"])
        .arg(&run)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Generous: on a loaded 2-core machine one trial can take minutes.
    let deadline = Instant::now() + Duration::from_secs(900);
    // Interrupt while a server is up (after the first trial finished).
    while journal_lines(&run).is_empty()
        || servers::servers_mentioning(&m.display().to_string()).is_empty()
    {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!(
                "the tune ended ({status}) before it could be interrupted with a server up; {} trials journaled; stderr:\n{err}",
                journal_lines(&run).len()
            );
        }
        assert!(Instant::now() < deadline, "no server seen in 900 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    servers::assert_none_left(&m.display().to_string(), "after the tune");
    let kept = journal_lines(&run).len();
    assert!(kept > 0, "finished trials kept");
    // It says what it kept and the exact command that continues.
    let err = String::from_utf8_lossy(&out.stderr);
    let kept_words = if kept == 1 {
        "1 finished trial kept".to_string()
    } else {
        format!("{kept} finished trials kept")
    };
    assert!(
        support::unwrapped(&err)
            .join("\n")
            .contains(&format!("interrupted: {kept_words}")),
        "{err}"
    );
    // The command on a line of its own, after the error line (issue 33).
    assert_eq!(
        err.trim_end().lines().last().map(str::trim),
        Some(format!("qtune tune --resume {}", run.display()).as_str()),
        "{err}"
    );
}

#[test]
fn bad_inputs_give_one_line_and_no_run() {
    let dir = tempfile::tempdir().unwrap();
    let not_gguf = dir.path().join("x.gguf");
    std::fs::write(&not_gguf, b"definitely not a model").unwrap();
    let bad_space = dir.path().join("s.yaml");
    std::fs::write(&bad_space, "name: x\nvary: {threads: [0]}\n").unwrap();
    let Some(m) = fixture(qtune::fixtures::smollm2) else {
        return;
    };
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (vec!["--model".into(), not_gguf.clone().into()], "GGUF"),
        (
            vec!["--model".into(), dir.path().join("missing.gguf").into()],
            "missing.gguf",
        ),
        (
            vec![
                "--model".into(),
                m.clone().into(),
                "--space".into(),
                bad_space.clone().into(),
            ],
            "s.yaml",
        ),
        (
            vec![
                "--model".into(),
                m.clone().into(),
                "--server".into(),
                "/bin/true".into(),
            ],
            "/bin/true",
        ),
        // A dense model, refused before any launch unless --allow-dense.
        (
            vec!["--model".into(), m.clone().into()],
            "is a dense model (llama, no experts): qtune is for Mixture-of-Experts models",
        ),
    ];
    for (args, needle) in cases {
        let run = dir.path().join("run");
        let out = qtune()
            .arg("tune")
            .args(&args)
            .arg("--out")
            .arg(&run)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(
            err.trim().lines().count(),
            1,
            "one line for {args:?}: {err}"
        );
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(
            !run.join("journal.jsonl").exists(),
            "no run started for {args:?}"
        );
    }
}
