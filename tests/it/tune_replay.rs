//! The whole `qtune tune` pipeline end to end, without llama-server: the real `qtune` binary
//! with the hidden `--replay JOURNAL` switch answers every trial from a committed journal
//! (tests/fixtures/replay-tiny-moe: a landscape of the tiny synthetic MoE on a recorded
//! 16 GiB GPU box). Resume, interruption, verdict, results.json, report, profile and launch
//! script are checked in milliseconds; the real-server tests in tune_cli.rs stay.

use crate::support;
use qtune::engine::LaunchArgs;
use support::output_text as text;

use qtune::run::TuneResult;
use qtune::trial::{OutcomeKind, TrialOutcome, TrialRole};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe")
}

fn journal() -> PathBuf {
    fixture().join("journal.jsonl")
}

fn model() -> PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model is synthesized")
}

fn qtune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(args)
        .env("QTUNE_LLAMA_SERVER", "/nonexistent/llama-server")
        .output()
        .expect("qtune runs")
}

fn tune(out: &Path, extra: &[&str]) -> Output {
    let (m, j) = (model(), journal());
    let mut args = vec![
        "tune",
        "--model",
        m.to_str().unwrap(),
        "--replay",
        j.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--space",
        "quick",
    ];
    args.extend_from_slice(extra);
    qtune(&args)
}

fn result(dir: &Path) -> TuneResult {
    qtune::run::read_result(dir).unwrap().1
}

fn path_of(r: &TuneResult) -> Vec<(TrialRole, String)> {
    r.trials
        .iter()
        .map(|t| (t.role, t.config.label()))
        .collect()
}

#[test]
fn a_replayed_tune_runs_end_to_end_and_writes_every_artifact() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let t0 = std::time::Instant::now();
    let o = tune(&out, &["--host", "0.0.0.0", "--port", "9137"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(t0.elapsed().as_secs() < 20, "a replay takes no real time");
    // The contract: the winning command is the last stdout line.
    let stdout = String::from_utf8_lossy(&o.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("llama-server -m "), "{}", text(&o));
    assert!(last.contains("--host 0.0.0.0 --port 9137"), "{last}");

    let r = result(&out);
    let w = r.winner.as_ref().expect("the landscape has a winner");
    // The verdict never picks a config that failed or spilled in any trial.
    for t in r.trials.iter().filter(|t| t.config == w.config) {
        assert_eq!(t.kind, OutcomeKind::Ok, "winner failed in trial {}", t.id);
    }
    assert!(r.trials.iter().any(|t| t.role == TrialRole::Baseline));
    assert!(r.trials.iter().any(|t| t.role == TrialRole::Confirm));
    let ids: Vec<u32> = r.trials.iter().map(|t| t.id).collect();
    assert_eq!(ids, (1..=ids.len() as u32).collect::<Vec<_>>());
    // Replayed time: the recorded durations, not the milliseconds this test took.
    assert!(r.minutes_used > 0.5, "{}", r.minutes_used);

    let script = std::fs::read_to_string(out.join("launch.sh")).unwrap();
    assert!(
        script.contains("DEFAULT_HOST=0.0.0.0\n") && script.contains("DEFAULT_PORT=9137\n"),
        "{script}"
    );
    assert!(out.join("report.md").is_file());

    // report and profile read the same results.json.
    std::fs::remove_file(out.join("report.md")).unwrap();
    let o = qtune(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.join("report.md").is_file());
    let prof = tmp.path().join("p.yaml");
    let o = qtune(&[
        "profile",
        "export",
        out.to_str().unwrap(),
        "--out",
        prof.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let p = qtune::profile::load_profile(&prof).unwrap();
    assert_eq!(p.winner.config, w.config);
    assert!(p.front.iter().any(|f| f.pareto));
}

#[test]
fn the_same_replay_takes_the_same_path_and_noise_is_seeded() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    assert!(tune(&a, &[]).status.success());
    assert!(tune(&b, &[]).status.success());
    assert_eq!(path_of(&result(&a)), path_of(&result(&b)));

    let (c, d) = (tmp.path().join("c"), tmp.path().join("d"));
    let noisy = ["--replay-noise", "3", "--replay-seed", "7"];
    assert!(tune(&c, &noisy).status.success());
    assert!(tune(&d, &noisy).status.success());
    let (rc, rd) = (result(&c), result(&d));
    assert_eq!(path_of(&rc), path_of(&rd));
    let samples = |r: &TuneResult| -> Vec<Vec<f64>> {
        r.trials
            .iter()
            .filter_map(|t| t.metrics.as_ref().map(|m| m.gen_tps.samples.clone()))
            .collect()
    };
    assert_eq!(samples(&rc), samples(&rd), "same seed, same samples");
    assert_ne!(
        samples(&rc),
        samples(&result(&a)),
        "noise changed the samples"
    );
}

#[test]
fn an_interrupt_says_what_was_kept_and_the_resume_finishes_the_same_tune() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    assert!(tune(&full, &[]).status.success());

    let out = tmp.path().join("cut");
    let o = tune(&out, &["--replay-interrupt-after", "4"]);
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("interrupted: 4 finished trials kept"),
        "{stderr}"
    );
    // The command on a line of its own, after the error line (issue 33).
    let resume = format!(
        "qtune tune --replay {} --resume {}",
        journal().display(),
        out.display()
    );
    assert!(
        stderr.contains("(continue with the command below)"),
        "{stderr}"
    );
    assert_eq!(
        stderr.trim_end().lines().last().map(str::trim),
        Some(resume.as_str()),
        "{stderr}"
    );
    let kept: Vec<TrialOutcome> = qtune::trial::journal::Journal::read(&out).unwrap();
    assert_eq!(kept.len(), 4);
    assert!(!out.join("results.json").exists());

    // The exact command it printed (no --model: the run directory knows it).
    let (j, d) = (journal(), out.clone());
    let o = qtune(&[
        "tune",
        "--replay",
        j.to_str().unwrap(),
        "--resume",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("4 trials already done"));
    let (rf, rr) = (result(&full), result(&out));
    assert_eq!(
        path_of(&rr),
        path_of(&rf),
        "resume repeats nothing and skips nothing"
    );
    assert_eq!(rr.winner.map(|w| w.config), rf.winner.map(|w| w.config));
}

#[test]
fn resume_of_a_journal_without_checkpoint_replays_it() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    assert!(tune(&full, &[]).status.success());
    // A run killed before its first checkpoint: run.json and half the journal.
    let cut = tmp.path().join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    std::fs::copy(full.join("run.json"), cut.join("run.json")).unwrap();
    let lines: Vec<String> = std::fs::read_to_string(full.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    std::fs::write(
        cut.join("journal.jsonl"),
        lines[..lines.len() / 2].join("\n") + "\n",
    )
    .unwrap();
    let (j, d) = (journal(), cut.clone());
    let o = qtune(&[
        "tune",
        "--replay",
        j.to_str().unwrap(),
        "--resume",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(path_of(&result(&cut)), path_of(&result(&full)));
}

#[test]
fn a_replay_switch_is_hidden_from_help() {
    let o = qtune(&["tune", "--help"]);
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stdout).contains("--replay"));
}

/// Regenerates the committed fixture from a synthetic landscape of a 16 GiB GPU box. Run with
/// `cargo test --test it tune_replay::regenerate -- --ignored` and commit the two files.
#[test]
#[ignore]
fn regenerate_replay_fixture() {
    use qtune::trial::replay::{ReplayAnswer, ReplayRunner};
    let dir = fixture();
    let _ = std::fs::remove_file(dir.join("journal.jsonl"));
    let _ = std::fs::remove_file(dir.join("checkpoint.json"));
    let mut hardware =
        qtune::run::sample::gpu_result(Path::new("llama-server"), Path::new("m.gguf"))
            .inputs
            .hardware;
    hardware.fingerprint = "0f1e2d3c4b5a6978".into();
    let layout = qtune::model::load(&model()).unwrap();
    let space = qtune::space::load("quick").unwrap();
    let free = hardware.free_vram_mib();
    let inputs = qtune::run::RunInputs {
        model_path: PathBuf::from("tiny-qwen35moe-q4_k_m.gguf"),
        server_path: PathBuf::from("llama-server"),
        server_version: "synthetic landscape".into(),
        space,
        headroom_mib: 512,
        vram_budget_mib: qtune::run::vram_budget_mib(true, free, 512),
        gpu_budgets: Vec::new(),
        hardware,
        free_vram_at_start_mib: free,
        started_at: "2026-11-22T00:00:00Z".into(),
        host: "127.0.0.1".into(),
        port: 8080,
        start: None,
        quality: None,
        model_fingerprint: None,
        model_bytes: None,
        server_bytes: None,
        engine_servers: Vec::new(),
    };
    qtune::run::write_inputs(&dir, &inputs).unwrap();
    // Fewer CPU experts is faster; a larger batch helps prompts; q8_0 KV is a bit slower;
    // below 2 CPU blocks the card runs out of memory.
    let landscape = |c: &qtune::config::LaunchConfig| {
        let n = c.n_cpu_moe.unwrap_or(6) as f64;
        if c.n_cpu_moe.is_some_and(|n| n < 2) {
            return ReplayAnswer::Fail(OutcomeKind::OomLoad);
        }
        let kv = if c.cache_type_k == qtune::config::KvType::F16 {
            1.0
        } else {
            0.97
        };
        let t = c.threads.unwrap_or(4) as f64;
        ReplayAnswer::Ok {
            gen_tps: (90.0 - 4.0 * n + t) * kv,
            prompt_tps: 800.0 + c.ubatch.unwrap_or(512) as f64 / 4.0 - 10.0 * n,
            peak_vram_mib: Some(2000 - 100 * n as u64),
        }
    };
    let clock = qtune::clock::ManualClock::new();
    let runner = ReplayRunner::from_fn(landscape)
        .with_noise(2.0, 1)
        .with_seconds_per_trial(20.0)
        .with_journal(qtune::trial::journal::Journal::open(&dir).unwrap())
        .with_clock(clock.clone());
    qtune::search::tune(
        &dir,
        &inputs,
        layout,
        Box::new(runner),
        qtune::search::Resume {
            next_id: 1,
            ..Default::default()
        },
        std::sync::Arc::new(clock),
        None,
    )
    .unwrap();
    let _ = std::fs::remove_file(dir.join("checkpoint.json"));
}

/// Issue 12: the race is wired into the tune. The winner carries its paired interval against
/// the baseline, the summary prints it, the budget (every launch) holds, and a tune killed in
/// the middle of the race resumes along the same path to the same verdict, with seeded noise.
#[test]
fn the_race_reports_intervals_holds_the_budget_and_resumes_identically() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let noisy = ["--replay-noise", "3", "--replay-seed", "11"];
    let full = tmp.path().join("full");
    let o = tune(&full, &noisy);
    assert!(o.status.success(), "{}", text(&o));
    let rf = result(&full);
    let race = rf.race.as_ref().expect("the race ran");
    assert!(!race.candidates.is_empty());
    let budget = rf.inputs.space.budget.trials as usize;
    assert!(rf.trials.len() <= budget, "{} > {budget}", rf.trials.len());
    let confirm = rf
        .trials
        .iter()
        .filter(|t| t.role == TrialRole::Confirm)
        .count();
    assert!(confirm >= 4, "at least two paired rounds: {confirm}");
    let w = rf.winner.as_ref().unwrap();
    let g = w
        .gen_vs_baseline
        .as_ref()
        .expect("the winner carries its interval");
    let (lo, hi) = g
        .interval_pct()
        .expect("two rounds or more give an interval");
    assert!(lo <= g.gain_pct() && g.gain_pct() <= hi);
    // Never the headline: slower than the baseline beyond the interval.
    assert!(hi >= 0.0, "{g}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("recommended for chat: ") && stderr.contains("\n  status: "),
        "{stderr}"
    );
    assert!(stderr.contains("(95 %, "), "{stderr}");
    // The race in the objective's terms: per request against the better baseline.
    assert!(
        stderr.contains("race against the reference (default, the better baseline)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("× faster than the reference (")
            || stderr.contains("× slower than the reference ("),
        "{stderr}"
    );
    let md = std::fs::read_to_string(full.join("report.md")).unwrap();
    assert!(md.contains("## Race against the reference"), "{md}");
    let json = std::fs::read_to_string(full.join("results.json")).unwrap();
    assert!(json.contains("\"gen_vs_baseline\""), "{json}");

    // Killed after the first race launch: the resume finishes the same race.
    let first_race = rf
        .trials
        .iter()
        .position(|t| t.role == TrialRole::Confirm)
        .unwrap();
    let cut = tmp.path().join("cut");
    let after = (first_race + 1).to_string();
    let mut args = noisy.to_vec();
    args.extend(["--replay-interrupt-after", &after]);
    let o = tune(&cut, &args);
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let (j, d) = (journal(), cut.clone());
    let o = qtune(&[
        "tune",
        "--replay",
        j.to_str().unwrap(),
        "--replay-noise",
        "3",
        "--replay-seed",
        "11",
        "--resume",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let rr = result(&cut);
    assert_eq!(path_of(&rr), path_of(&rf), "the race resumes identically");
    assert_eq!(rr.race, rf.race);
    assert_eq!(rr.winner.map(|w| w.config), rf.winner.map(|w| w.config));
}
