//! What a newcomer meets (issue 31), through the real binary and the replayed landscape of
//! tests/fixtures/replay-tiny-moe (no llama-server, milliseconds): where runs and profiles go,
//! the start banner and progress, `--quiet`, `--dry-run`, the guard rails that refuse a tune
//! before any launch, and one convention for the model argument and the context.

use crate::support;
use support::output_text as text;
use support::require;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe")
}

fn model() -> PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model is synthesized")
}

/// qtune with no data-directory variables of the caller's, and no server (replays need none).
fn qtune(cwd: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qtune"));
    c.current_dir(cwd)
        .env_remove("QTUNE_DATA_DIR")
        .env_remove("XDG_DATA_HOME")
        .env_remove("QTUNE_LOG")
        .env("QTUNE_LLAMA_SERVER", "/nonexistent/llama-server");
    c
}

/// `tune --replay` of the fixture (or of `journal_dir`), quick space, plus `extra`.
fn replay_args(journal_dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "tune".into(),
        "--model".into(),
        model().display().to_string(),
        "--replay".into(),
        journal_dir.join("journal.jsonl").display().to_string(),
        "--space".into(),
        "quick".into(),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn last_stdout_line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// The fixture copied into `dir`, its recorded box changed by `edit` (run.json's hardware).
fn fixture_with_box(dir: &Path, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let to = dir.join("fixture");
    std::fs::create_dir_all(&to).unwrap();
    std::fs::copy(fixture().join("journal.jsonl"), to.join("journal.jsonl")).unwrap();
    let mut run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("run.json")).unwrap())
            .unwrap();
    edit(&mut run);
    std::fs::write(to.join("run.json"), run.to_string()).unwrap();
    to
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The run directory is in the user's data directory, printed at the start and the end; the
/// current directory gets nothing (the demo no longer writes into a repository's reports/).
#[test]
fn runs_go_to_the_data_directory_and_the_run_directory_is_printed_at_start_and_end() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let cases: Vec<(&str, PathBuf)> = vec![
        ("QTUNE_DATA_DIR", tmp.path().join("qtune-data")),
        ("XDG_DATA_HOME", tmp.path().join("xdg").join("qtune")),
        ("HOME", tmp.path().join("home/.local/share/qtune")),
    ];
    for (var, data) in cases {
        let mut c = qtune(&cwd);
        match var {
            "QTUNE_DATA_DIR" => c.env(var, &data),
            "XDG_DATA_HOME" => c.env(var, tmp.path().join("xdg")),
            _ => c.env("HOME", tmp.path().join("home")),
        };
        let o = c.args(replay_args(&fixture(), &[])).output().unwrap();
        assert!(o.status.success(), "{var}: {}", text(&o));
        let runs = data.join("runs");
        let made = entries(&runs);
        assert_eq!(
            made.len(),
            1,
            "{var}: one run in {}: {made:?}",
            runs.display()
        );
        let run = runs.join(&made[0]);
        assert!(run.join("report.md").is_file(), "{var}: {}", run.display());
        let said = format!("run directory: {}", run.display());
        assert_eq!(
            support::unwrapped(&stderr(&o))
                .join("\n")
                .matches(&said)
                .count(),
            2,
            "{var}: {}",
            text(&o)
        );
        assert!(
            entries(&cwd).is_empty(),
            "{var}: wrote into the current directory"
        );
        assert!(
            last_stdout_line(&o).starts_with("llama-server -m "),
            "{}",
            text(&o)
        );
    }
    // --out still wins.
    let out = tmp.path().join("mine");
    let o = qtune(&cwd)
        .env("QTUNE_DATA_DIR", tmp.path().join("unused"))
        .args(replay_args(&fixture(), &["--out", out.to_str().unwrap()]))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.join("results.json").is_file());
    assert!(!tmp.path().join("unused").exists());
}

/// The banner before the first launch, a progress line per launch with its phase, elapsed time
/// and ETA; `--quiet` leaves errors and the command only.
#[test]
fn a_tune_starts_with_a_banner_and_counts_its_launches_and_quiet_silences_both() {
    let tmp = tempfile::tempdir().unwrap();
    let o = qtune(tmp.path())
        .env("QTUNE_DATA_DIR", tmp.path())
        .args(replay_args(&fixture(), &[]))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = stderr(&o);
    for needle in [
        "qtune: tuning ",
        "(qwen35moe, ",
        "  space: quick",
        "  workload: chat (2000 held + 150 new → 400 generated): time per request is the objective",
        "  ctx: 32768",
        "  budget: at most 16 launches and 8 minutes",
        "  baseline (what you get without qtune): -c 32768 -np 1",
        "  run directory: ",
        "launch 1/16 · baseline · ",
        "launch 3/16 · baseline (fit-target) · ",
        "  second baseline (what you get without qtune): -c 32768 -np 1 --fit on --fit-target 512",
        "launch 4/16 · search · ",
        " ETA ",
    ] {
        assert!(err.contains(needle), "missing {needle:?}:\n{err}");
    }
    // The banner comes before the first launch; no colour codes off a terminal.
    assert!(err.find("  run directory: ").unwrap() < err.find("launch 1/16").unwrap());
    assert!(!err.contains('\x1b'), "{err}");

    let o = qtune(tmp.path())
        .env("QTUNE_DATA_DIR", tmp.path())
        .args(replay_args(&fixture(), &["--quiet"]))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = stderr(&o);
    assert!(!err.contains("launch 1/"), "{err}");
    assert!(!err.contains("qtune: tuning"), "{err}");
    assert!(!err.contains("winner"), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);
    assert!(
        last_stdout_line(&o).starts_with("llama-server -m "),
        "{}",
        text(&o)
    );
}

/// Two tunes started in the same second without `--out` each get their own run folder (the
/// default name is to the second: the second tune had found the first's folder and stopped,
/// "already holds a tune").
#[test]
fn two_tunes_started_at_once_get_their_own_run_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let start = || {
        qtune(tmp.path())
            .env("QTUNE_DATA_DIR", tmp.path())
            .args(replay_args(&fixture(), &["--quiet"]))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start(), start());
    for o in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
        assert!(o.status.success(), "{}", text(&o));
    }
    let runs: Vec<_> = std::fs::read_dir(tmp.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for r in &runs {
        assert!(r.join("results.json").is_file(), "{}", r.display());
    }
}

/// Without a GPU the tune says it switched to the cpu-only space; `--dry-run` lists the
/// launches it would start with, writes nothing and launches nothing.
#[test]
fn dry_run_lists_the_first_launches_and_says_when_the_space_is_cpu_only() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let o = qtune(tmp.path())
        .env("QTUNE_DATA_DIR", &data)
        .args(replay_args(&fixture(), &["--dry-run"]))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        out.starts_with("# qtune tune --dry-run: nothing launched."),
        "{out}"
    );
    assert!(out.contains("within 16 launches and 8 minutes"), "{out}");
    assert!(out.contains(" 1. baseline -c 32768 -np 1  # "), "{out}");
    assert!(out.contains(" 2. baseline -c 32768 -np 1  # "), "{out}");
    assert!(
        out.contains("search   -c 32768 -np 1 -ngl 999 --n-cpu-moe "),
        "{out}"
    );
    assert!(!data.exists(), "a dry run writes nothing");

    let no_gpu = fixture_with_box(tmp.path(), |run| {
        run["hardware"]["gpus"] = serde_json::json!([]);
        run["hardware"]["no_gpu_reason"] = serde_json::json!("no NVIDIA driver");
        run["free_vram_at_start_mib"] = serde_json::json!(0);
    });
    let mut args = replay_args(&no_gpu, &["--dry-run"]);
    // No --space: the default for this box.
    args.drain(5..7);
    let o = qtune(tmp.path())
        .env("QTUNE_DATA_DIR", &data)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains(
            "  space: cpu-only (no GPU (no NVIDIA driver): switched to the cpu-only space)"
        ),
        "{}",
        text(&o)
    );
    assert!(stderr(&o).contains("  ctx: 4096"), "{}", text(&o));
    assert!(!data.exists(), "a dry run writes nothing");
}

/// Each guard rail: a non-zero exit, one line saying what would work, no run directory.
#[test]
fn guard_rails_refuse_before_any_launch_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let small = fixture_with_box(tmp.path(), |run| {
        run["hardware"]["host"]["ram_total_mib"] = serde_json::json!(16);
        run["hardware"]["gpus"][0]["vram_free_mib"] = serde_json::json!(20);
        run["free_vram_at_start_mib"] = serde_json::json!(20);
    });
    let cases: Vec<(PathBuf, Vec<&str>, &str)> = vec![
        (fixture(), vec!["--ctx", "0"], "ctx 0 is outside 256..=1048576"),
        (
            fixture(),
            vec!["--ctx", "40000"],
            "--ctx 40000 is past the model's trained context of 32768 tokens: use --ctx 32768 or less",
        ),
        (
            fixture(),
            vec!["--target-vram-headroom", "200000"],
            "--target-vram-headroom 200000 MiB is more than the 143771 MiB of NVIDIA H200",
        ),
        (
            small,
            vec!["--target-vram-headroom", "0"],
            "more than this box's 16 MiB RAM + 20 MiB VRAM budget",
        ),
    ];
    for (journal, extra, needle) in cases {
        let data = tmp.path().join("data");
        let o = qtune(tmp.path())
            .env("QTUNE_DATA_DIR", &data)
            .args(replay_args(&journal, &extra))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {}", text(&o));
        let err = stderr(&o);
        assert_eq!(err.trim().lines().count(), 1, "{extra:?}: {err}");
        assert!(err.starts_with("qtune: error: "), "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert!(o.stdout.is_empty(), "{extra:?}");
        assert!(!data.exists(), "{extra:?}: no run directory");
    }
}

/// A dense model is refused (qtune is for MoE models) unless --allow-dense.
#[test]
fn a_dense_model_is_refused_unless_allowed() {
    let Some(dense) = require::or_skip(qtune::fixtures::smollm2(), "the SmolLM2 fixture") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut args = replay_args(&fixture(), &["--dry-run"]);
    args[2] = dense.display().to_string();
    let o = qtune(tmp.path()).args(&args).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains(
            "is a dense model (llama, no experts): qtune is for Mixture-of-Experts models"
        ) && stderr(&o).contains("--allow-dense"),
        "{}",
        text(&o)
    );
    args.push("--allow-dense".into());
    let o = qtune(tmp.path()).args(&args).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// Every command takes `--model M` (the positional form stays); `plan` refuses a context of 0
/// or past the trained one; `inspect` and `plan` default to the context `tune` would use.
#[test]
fn one_model_argument_and_one_context_rule_across_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let m = model();
    let m = m.to_str().unwrap();
    let run = |args: &[&str]| {
        qtune(tmp.path())
            .env("QTUNE_DATA_DIR", tmp.path())
            .env("QTUNE_NO_GPU", "1")
            .args(args)
            .output()
            .unwrap()
    };
    let by_flag = run(&["inspect", "--model", m]);
    let by_position = run(&["inspect", m]);
    assert!(by_flag.status.success(), "{}", text(&by_flag));
    assert_eq!(by_flag.stdout, by_position.stdout);
    let j: serde_json::Value =
        serde_json::from_slice(&run(&["inspect", "-m", m, "--json"]).stdout).unwrap();
    // No GPU: the cpu-only space's context, as `tune` would use.
    assert_eq!(j["ctx"], 4096, "{j}");
    let o = run(&["calibrate", "--help"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("--model <MODEL>"));

    let o = run(&["plan", "--model", m, "--no-profile"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(last_stdout_line(&o).contains(" -c 4096 "), "{}", text(&o));
    for (ctx, needle) in [
        ("0", "--ctx 0 is outside 256..=1048576"),
        ("65536", "past the model's trained context of 32768 tokens"),
    ] {
        let o = run(&["plan", "--model", m, "--ctx", ctx]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(stderr(&o).contains(needle), "{}", text(&o));
        assert!(o.stdout.is_empty());
    }
}

/// `qtune synth` says how much it has written (off a terminal: a plain line, the last at 100 %).
#[test]
fn synth_reports_its_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.gguf");
    let o = qtune(tmp.path())
        .args(["synth", out.to_str().unwrap(), "--shape", "tiny-qwen3moe"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = stderr(&o);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("qtune synth: ") && last.ends_with(" written (100 %)"),
        "{err}"
    );
}

/// An exported profile is named by a slug that `profile show` takes; imported, it is found
/// from any directory; a plan from it keeps its context, and at another context says so.
#[test]
fn profiles_are_slugs_kept_in_the_data_directory_and_keep_their_context() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let run = tmp.path().join("run");
    let o = qtune(tmp.path())
        .args(replay_args(&fixture(), &["--out", run.to_str().unwrap()]))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let file = tmp.path().join("p.yaml");
    let o = qtune(tmp.path())
        .args(["profile", "export", run.to_str().unwrap(), "--out"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let slug = "tiny-qwen35moe-q4_k_m-h200-16gib";
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!("exported profile '{slug}'")),
        "{}",
        text(&o)
    );
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let q = |args: &[&str]| {
        qtune(&elsewhere)
            .env("QTUNE_DATA_DIR", &data)
            .env("QTUNE_NO_GPU", "1")
            .args(args)
            .output()
            .unwrap()
    };
    let o = q(&["profile", "import", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(data.join("profiles").join(format!("{slug}.yaml")).is_file());
    let o = q(&["profile", "list"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(slug),
        "{}",
        text(&o)
    );
    let o = q(&["profile", "show", slug]);
    assert!(o.status.success(), "{}", text(&o));

    let m = model();
    let m = m.to_str().unwrap();
    // The profile was tuned at the quick space's 32768: the plan keeps it.
    let o = q(&["plan", "--model", m, "--profile", slug]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(last_stdout_line(&o).contains(" -c 32768 "), "{}", text(&o));
    assert!(!stderr(&o).contains("tuned at ctx"), "{}", text(&o));
    let o = q(&["plan", "--model", m, "--profile", slug, "--ctx", "4096"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(last_stdout_line(&o).contains(" -c 4096 "), "{}", text(&o));
    assert!(
        stderr(&o)
            .contains("warning: the profile was tuned at ctx 32768; this plan is for ctx 4096"),
        "{}",
        text(&o)
    );
}

/// Issue 43: `qtune` alone prints the help and where a newcomer starts, and exits 0; a typo
/// is answered with commands the help lists, never a hidden one; completions and a man page
/// come from the same definitions.
#[test]
fn bare_qtune_helps_and_suggestions_name_only_listed_commands() {
    let dir = tempfile::tempdir().unwrap();
    let o = qtune(dir.path()).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.contains("Usage:") && out.contains("demo"), "{out}");
    assert!(out.contains("New here? `qtune demo`"), "{out}");

    // Every subcommand is listed in the help: none is hidden, so none can be suggested unseen.
    let cmd = <qtune::cli::Cli as clap::CommandFactory>::command();
    let hidden: Vec<&str> = cmd
        .get_subcommands()
        .filter(|c| c.is_hide_set())
        .map(|c| c.get_name())
        .collect();
    assert!(hidden.is_empty(), "hidden subcommands: {hidden:?}");
    let o = qtune(dir.path()).arg("fixture").output().unwrap();
    assert!(!o.status.success());
    assert!(!text(&o).contains("fixtures"), "{}", text(&o));

    let o = qtune(dir.path())
        .args(["completions", "bash"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("_qtune") && out.contains("compare"));
    let o = qtune(dir.path()).arg("man").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success() && out.contains(".TH qtune 1"), "{out}");
    // Issue 52: every page qtune.1 names under SEE ALSO is written by `man --dir`.
    let pages = dir.path().join("man1");
    let o = qtune(dir.path())
        .args(["man", "--dir"])
        .arg(&pages)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let named: Vec<String> = out
        .split("qtune\\-")
        .skip(1)
        .filter_map(|s| s.split_once("(1)").map(|(n, _)| n.replace("\\-", "-")))
        .collect();
    assert!(named.len() >= 15, "{named:?}");
    for n in named {
        let page = pages.join(format!("qtune-{n}.1"));
        assert!(
            page.is_file(),
            "{} is named but not written",
            page.display()
        );
    }
    assert!(
        !pages.join("qtune-help.1").exists(),
        "no page for the help subcommand"
    );
}
