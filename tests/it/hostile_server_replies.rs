//! Issue 33, "a bogus number wins": a server that reports speeds that cannot be real (1e300,
//! zero, negative, or past the speed ceiling) makes the trial `implausible`: never `ok`,
//! never a winner, never "better" in `qtune compare`. The scripted fake server
//! (tests/fixtures/fake-llama-server) plays the server.

use crate::support;
use support::output_text as text;
use support::qtune;

use qtune::trial::journal::Journal;
use qtune::trial::llama_runner::LlamaServerRunner;
use qtune::trial::plausible::SpeedCeiling;
use qtune::trial::{OutcomeKind, TrialOutcome, TrialRole, TrialRunner};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::trial::*;

fn trial(env: &[(&str, &str)], ceiling: Option<SpeedCeiling>) -> TrialOutcome {
    trial_of(tiny_workload(), env, ceiling)
}

fn trial_of(
    workload: qtune::space::Workload,
    env: &[(&str, &str)],
    ceiling: Option<SpeedCeiling>,
) -> TrialOutcome {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("fake.gguf");
    std::fs::write(&model, b"GGUF").unwrap();
    let run_dir = dir.path().join("run");
    let journal = Journal::open(&run_dir).unwrap();
    let mut runner = LlamaServerRunner::new(
        &fake_server(),
        &model,
        4,
        workload,
        &run_dir,
        journal,
        None,
        Duration::from_secs(30),
    )
    .unwrap()
    .with_env(
        env.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    if let Some(c) = ceiling {
        runner = runner.with_speed_ceiling(Box::new(move |_| c));
    }
    let o = runner.run(&cpu_config(), TrialRole::Search);
    let journaled = Journal::read(&run_dir).unwrap();
    assert_eq!(journaled.len(), 1);
    assert_eq!(journaled[0].kind, o.kind, "journaled as returned");
    o
}

#[test]
fn bogus_speeds_make_the_trial_implausible() {
    let cases: [(&str, &str, &str); 6] = [
        ("FAKE_GEN_TPS", "1e300", "past the ceiling"),
        ("FAKE_GEN_TPS", "0", "not positive"),
        ("FAKE_GEN_TPS", "-5", "not positive"),
        ("FAKE_PP_TPS", "-1000", "not positive"),
        ("FAKE_PP_TPS", "1e12", "past the ceiling"),
        ("FAKE_GEN_TPS", "60000", "past the ceiling"),
    ];
    for (var, value, why) in cases {
        let o = trial(&[(var, value)], None);
        assert_eq!(
            o.kind,
            OutcomeKind::Implausible,
            "{var}={value}: {}",
            o.message
        );
        assert!(o.metrics.is_none(), "{var}={value}: never ranked");
        assert!(o.message.contains("cannot be real"), "{}", o.message);
        assert!(
            o.evidence.iter().any(|e| e.contains(why)),
            "{:?}",
            o.evidence
        );
        assert_eq!(o.message.lines().count(), 1);
    }
    // The same fake with plausible numbers is ok.
    let o = trial(&[], None);
    assert_eq!(o.kind, OutcomeKind::Ok, "{}", o.message);
}

#[test]
fn a_speed_past_the_predicted_ceiling_is_implausible() {
    // 10x a roofline of 20 tok/s: 200 tok/s; the fake reports about 50, then 500.
    let c = SpeedCeiling::from_prediction(20.0, 500.0);
    assert_eq!(c.gen_tps, 200.0);
    assert_eq!(trial(&[], Some(c)).kind, OutcomeKind::Ok);
    let o = trial(&[("FAKE_GEN_TPS", "500")], Some(c));
    assert_eq!(o.kind, OutcomeKind::Implausible, "{}", o.message);
    assert!(
        o.message.contains("10x the speed model's bound"),
        "{}",
        o.message
    );
    // No prediction: the absolute bound.
    assert_eq!(
        SpeedCeiling::from_prediction(f64::NAN, 0.0),
        SpeedCeiling {
            source: "10x the speed model's bound",
            ..SpeedCeiling::ABSOLUTE
        }
    );
}

/// No line gives the bogus number as a gain, a speed in a table or a verdict: it appears
/// only in the one-line reason a trial is implausible.
fn no_absurd_gain(all: &str) {
    for line in support::unwrapped(all)
        .iter()
        .filter(|l| l.contains("e300") || l.contains("e30"))
    {
        assert!(
            line.contains("cannot be real"),
            "the bogus number outside its reason: {line}\n{all}"
        );
    }
}

fn tiny() -> PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model")
}

/// A whole tune where every config with `-t` (every searched one) reports 1e300 tok/s and the
/// baseline a plausible speed: the bogus configs are implausible, none wins, no gain is
/// printed.
#[test]
fn a_bogus_speed_never_wins_a_tune() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let o = qtune()
        .args(["tune", "--space", "demo", "--budget-trials", "4", "--model"])
        .arg(tiny())
        .arg("--server")
        .arg(fake_server())
        .arg("--out")
        .arg(&run)
        .env("FAKE_GEN_TPS", "1e300")
        .env("FAKE_PP_TPS", "1e300")
        .env("FAKE_BOGUS_ARG", "-ub")
        .output()
        .unwrap();
    let all = text(&o);
    no_absurd_gain(&all);
    let journal: Vec<TrialOutcome> = std::fs::read_to_string(run.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bogus: Vec<&TrialOutcome> = journal
        .iter()
        .filter(|t| t.config.ubatch.is_some())
        .collect();
    assert!(!bogus.is_empty(), "{all}");
    assert!(
        bogus.iter().all(|t| t.kind == OutcomeKind::Implausible),
        "{all}"
    );
    if run.join("results.json").is_file() {
        let (_, r) = qtune::run::read_result(&run).unwrap();
        if let Some(w) = &r.winner {
            assert!(w.config.ubatch.is_none(), "a bogus config won: {all}");
            assert!(w.gen_tps.median < 1e6);
        }
    }
}

/// `qtune compare` of a plausible command and a bogus one: the bogus one is implausible in
/// every round, and never called better.
#[test]
fn compare_never_calls_a_bogus_command_better() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("m.gguf");
    std::fs::copy(tiny(), &m).unwrap();
    let a = format!("llama-server -m {} -c 512 -np 1", m.display());
    let b = format!("llama-server -m {} -c 512 -np 1 -t 2", m.display());
    let out = tmp.path().join("cmp");
    let o = qtune()
        .args(["compare", &a, &b, "--rounds", "2", "--prompt-tokens", "16"])
        .args(["--gen-tokens", "4", "--repetitions", "1", "--server"])
        .arg(fake_server())
        .arg("--out")
        .arg(&out)
        .env("FAKE_GEN_TPS", "1e300")
        .env("FAKE_BOGUS_ARG", "-t")
        .output()
        .unwrap();
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    no_absurd_gain(&all);
    assert!(all.contains("implausible"), "{all}");
    assert!(
        all.contains("no round where both B and A measured"),
        "{all}"
    );
    let lower = all.to_lowercase();
    for line in lower.lines().filter(|l| l.contains("verdict")) {
        assert!(
            !line.contains("b is better") && !line.contains("b faster"),
            "{line}"
        );
    }
    let _ = Path::new(&out);
}

/// The chat mix, fitted to the 512-token context of [`cpu_config`].
fn chat_workload() -> qtune::space::Workload {
    let mut w = qtune::space::Workload {
        mix: Some("chat".into()),
        ..tiny_workload()
    };
    w.resolve(512).unwrap();
    assert!(!w.mixes.is_empty());
    w
}

/// Issue 48: absurd timings on the workload's own requests alone (the short depth-0 samples
/// plausible) make the trial implausible too: a speed past the ceiling, zero or negative, or
/// a near-zero time to first token.
#[test]
fn bogus_workload_timings_make_the_trial_implausible() {
    let cases: [(&str, &str, &str); 6] = [
        ("FAKE_GEN_TPS", "1e300", "past the ceiling"),
        ("FAKE_GEN_TPS", "0", "not positive"),
        ("FAKE_GEN_TPS", "-5", "not positive"),
        ("FAKE_PROMPT_MS", "1e-300", "past the ceiling"),
        ("FAKE_PROMPT_MS", "0", "not a finite positive time"),
        ("FAKE_PROMPT_MS", "-20", "not a finite positive time"),
    ];
    for (var, value, why) in cases {
        let o = trial_of(
            chat_workload(),
            &[(var, value), ("FAKE_WORKLOAD_ONLY", "1")],
            None,
        );
        assert_eq!(
            o.kind,
            OutcomeKind::Implausible,
            "{var}={value}: {}",
            o.message
        );
        assert!(o.metrics.is_none(), "{var}={value}: never ranked");
        assert!(o.message.contains("request"), "{}", o.message);
        assert!(o.message.contains(why), "{var}={value}: {}", o.message);
        assert_eq!(o.message.lines().count(), 1);
    }
    // The same mix with plausible numbers is ok.
    let o = trial_of(chat_workload(), &[("FAKE_WORKLOAD_ONLY", "1")], None);
    assert_eq!(o.kind, OutcomeKind::Ok, "{}", o.message);
    assert!(!o.metrics.unwrap().shapes.is_empty());
}

/// No number of 12 digits or more anywhere: a 300-digit ratio or speed is never printed.
fn no_long_number(all: &str) {
    let mut run = 0;
    for c in all.chars() {
        run = if c.is_ascii_digit() { run + 1 } else { 0 };
        assert!(run < 12, "a number of 12 digits or more:\n{all}");
    }
}

/// A whole tune where every searched config (those with `-ub`; the baseline has none, and
/// every launch may get `-t` on a busy box or under the suite's `QTUNE_MAX_THREADS`) reports a near-zero time to
/// first token on the workload's requests alone: none wins, no gain is printed.
#[test]
fn a_bogus_workload_timing_never_wins_a_tune() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let o = qtune()
        .args(["tune", "--space", "demo", "--budget-trials", "4", "--model"])
        .arg(tiny())
        .arg("--server")
        .arg(fake_server())
        .arg("--out")
        .arg(&run)
        .env("FAKE_PROMPT_MS", "1e-300")
        .env("FAKE_WORKLOAD_ONLY", "1")
        .env("FAKE_BOGUS_ARG", "-ub")
        .output()
        .unwrap();
    let all = text(&o);
    no_absurd_gain(&all);
    no_long_number(&all);
    let journal: Vec<TrialOutcome> = std::fs::read_to_string(run.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bogus: Vec<&TrialOutcome> = journal
        .iter()
        .filter(|t| t.config.ubatch.is_some())
        .collect();
    assert!(!bogus.is_empty(), "{all}");
    for t in &bogus {
        assert_eq!(t.kind, OutcomeKind::Implausible, "{}\n{all}", t.message);
    }
    assert!(
        journal
            .iter()
            .any(|t| t.config.ubatch.is_none() && t.kind == OutcomeKind::Ok),
        "the plausible baseline measured: {all}"
    );
    if run.join("results.json").is_file() {
        let (_, r) = qtune::run::read_result(&run).unwrap();
        if let Some(w) = &r.winner {
            assert!(w.config.ubatch.is_none(), "a bogus config won: {all}");
        }
        let report = std::fs::read_to_string(run.join("report.md")).unwrap_or_default();
        no_long_number(&report);
    }
}

/// `qtune compare --workload chat` where B reports 1e300 tok/s on the workload's requests
/// alone: B is implausible in every round, so it measured nothing to pair on the workload, and
/// no ratio is printed as a number of 300 digits.
#[test]
fn compare_never_prints_a_bogus_workload_ratio() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("m.gguf");
    std::fs::copy(tiny(), &m).unwrap();
    let a = format!("llama-server -m {} -c 2048 -np 1", m.display());
    let b = format!("llama-server -m {} -c 2048 -np 1 -t 2", m.display());
    let out = tmp.path().join("cmp");
    let o = qtune()
        .args(["compare", &a, &b, "--rounds", "2", "--prompt-tokens", "16"])
        .args([
            "--gen-tokens",
            "4",
            "--repetitions",
            "1",
            "--workload",
            "chat",
        ])
        .arg("--server")
        .arg(fake_server())
        .arg("--out")
        .arg(&out)
        .env("FAKE_GEN_TPS", "1e300")
        .env("FAKE_WORKLOAD_ONLY", "1")
        .env("FAKE_BOGUS_ARG", "-t")
        .output()
        .unwrap();
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    no_absurd_gain(&all);
    no_long_number(&all);
    assert!(all.contains("implausible"), "{all}");
    // B measured nothing on the workload, so it has no pair to print: one line says so.
    assert!(
        all.contains("B: measured nothing here, so no paired round (see the warnings)"),
        "{all}"
    );
    assert!(!all.contains("B against A"), "{all}");
    let r: qtune::compare::CompareResult =
        serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    for round in &r.rounds {
        let b = round.launches.iter().find(|l| l.command == 1).unwrap();
        assert_eq!(b.outcome, "implausible", "{}", b.message);
        let a = round.launches.iter().find(|l| l.command == 0).unwrap();
        assert_eq!(a.outcome, "ok", "{}", a.message);
    }
}
