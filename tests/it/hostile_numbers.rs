//! Issue 33: numbers in spaces and on the command line are range-checked in their own type
//! before any arithmetic: `prompt_tokens: 4294967295` (which wrapped past the context check),
//! compare's `--prompt-tokens 4294967295`, `plan --ctx 0` are one-line errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn qtune() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qtune"));
    c.env_remove("QTUNE_LOG")
        .env("QTUNE_LLAMA_SERVER", "/nonexistent/llama-server");
    c
}

fn tiny() -> PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model")
}

fn one_line_failure(o: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(needle), "wanted {needle:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn space_with(dir: &Path, from: &str, to: &str) -> PathBuf {
    let demo = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("search-spaces/demo.yaml"),
    )
    .unwrap();
    assert!(demo.contains(from));
    let p = dir.join(format!("s{}.yaml", to.len()));
    std::fs::write(&p, demo.replace(from, to)).unwrap();
    p
}

#[test]
fn workload_numbers_past_their_range_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let journal =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe/journal.jsonl");
    let cases = [
        (
            "prompt_tokens: 128",
            "prompt_tokens: 4294967295",
            "prompt_tokens 4294967295 is outside",
        ),
        (
            "gen_tokens: 32",
            "gen_tokens: 4294967295",
            "gen_tokens 4294967295 is outside",
        ),
        (
            "repetitions: 2",
            "repetitions: 4294967295",
            "repetitions 4294967295 is outside",
        ),
        (
            "prompt_tokens: 128",
            "prompt_tokens: 4294967296",
            "prompt_tokens",
        ),
        ("prompt_tokens: 128", "prompt_tokens: -1", "prompt_tokens"),
    ];
    for (from, to, needle) in cases {
        let space = space_with(tmp.path(), from, to);
        let o = qtune()
            .args(["tune", "--replay"])
            .arg(&journal)
            .arg("--space")
            .arg(&space)
            .arg("--model")
            .arg(tiny())
            .arg("--out")
            .arg(tmp.path().join("run"))
            .output()
            .unwrap();
        one_line_failure(&o, needle);
        assert!(!tmp.path().join("run").join("run.json").exists());
    }
}

#[test]
fn compare_and_plan_flags_past_their_range_are_refused() {
    let m = tiny();
    let a = format!("llama-server -m {} -c 512 -np 1", m.display());
    let b = format!("llama-server -m {} -c 512 -np 1 -t 1", m.display());
    for (flag, v, needle) in [
        (
            "--prompt-tokens",
            "4294967295",
            "--prompt-tokens 4294967295 is outside",
        ),
        (
            "--gen-tokens",
            "4294967295",
            "--gen-tokens 4294967295 is outside",
        ),
        (
            "--repetitions",
            "4294967295",
            "--repetitions 4294967295 is outside",
        ),
        ("--prompt-tokens", "4294967296", "4294967296"),
    ] {
        let o = qtune()
            .args(["compare", &a, &b, flag, v, "--server"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-llama-server"))
            .output()
            .unwrap();
        if v == "4294967296" {
            // Past u32: clap's own usage error (exit 2), before anything runs.
            assert_eq!(o.status.code(), Some(2));
            assert!(String::from_utf8_lossy(&o.stderr).contains(needle));
            continue;
        }
        one_line_failure(&o, needle);
    }
    for ctx in ["0", "255", "4294967295"] {
        let o = qtune()
            .args(["plan", "--ctx", ctx, "--model"])
            .arg(&m)
            .output()
            .unwrap();
        one_line_failure(&o, &format!("--ctx {ctx} is outside 256..=1048576"));
        assert!(o.stdout.is_empty(), "no command printed");
    }
}

/// Issue 53: a server whose searched configs (those with `-ub`) report 49,000 tok/s
/// generation on the workload's requests alone, under the absolute ceiling of 50,000, while
/// the same launch's depth-0 samples read about 50: over 100x apart in one launch, so those
/// trials are implausible and none is recommended; no status says "proven" beside a broken
/// measurement.
#[test]
fn workload_speeds_that_disagree_with_their_own_samples_never_win() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-llama-server");
    let o = qtune()
        .args(["tune", "--space", "demo", "--budget-trials", "5", "--model"])
        .arg(tiny())
        .arg("--server")
        .arg(&fake)
        .arg("--out")
        .arg(&run)
        .env("QTUNE_ALLOW_BUSY", "1") // a shared test box: the fake server's timings are fixed
        .env("FAKE_GEN_TPS", "49000")
        .env("FAKE_PROMPT_MS", "1")
        .env("FAKE_WORKLOAD_ONLY", "1")
        .env("FAKE_BOGUS_ARG", "-ub")
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let journal: Vec<qtune::trial::TrialOutcome> =
        std::fs::read_to_string(run.join("journal.jsonl"))
            .unwrap_or_else(|e| panic!("{e}: {all}"))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    let faked: Vec<_> = journal
        .iter()
        .filter(|t| t.config.ubatch.is_some())
        .collect();
    assert!(!faked.is_empty(), "{all}");
    for t in &faked {
        assert_eq!(
            t.kind,
            qtune::trial::OutcomeKind::Implausible,
            "{}\n{all}",
            t.message
        );
        assert!(t.message.contains("apart"), "{}", t.message);
    }
    if run.join("results.json").is_file() {
        let (_, r) = qtune::run::read_result(&run).unwrap();
        if let Some(w) = &r.winner {
            assert!(w.config.ubatch.is_none(), "a faked config won: {all}");
        }
    }
    let report = std::fs::read_to_string(run.join("report.md")).unwrap_or_default();
    for text in [&all, &report] {
        assert!(
            !(text.contains("proven faster") && text.contains("broken measurement")),
            "{text}"
        );
    }
}
