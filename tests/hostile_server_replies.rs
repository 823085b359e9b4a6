//! Issue 33, "a bogus number wins": a server that reports speeds that cannot be real (1e300,
//! zero, negative, or past the speed ceiling) makes the trial `implausible`: never `ok`,
//! never a winner, never "better" in `qtune compare`. The scripted fake server
//! (tests/fixtures/fake-llama-server) plays the server.

mod support;
use support::output_text as text;

use qtune::trial::classify::SpeedCeiling;
use qtune::trial::journal::Journal;
use qtune::trial::llama_runner::LlamaServerRunner;
use qtune::trial::{OutcomeKind, TrialOutcome, TrialRole, TrialRunner};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::trial::*;

fn trial(env: &[(&str, &str)], ceiling: Option<SpeedCeiling>) -> TrialOutcome {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("fake.gguf");
    std::fs::write(&model, b"GGUF").unwrap();
    let run_dir = dir.path().join("run");
    let journal = Journal::open(&run_dir).unwrap();
    let mut runner = LlamaServerRunner::new(
        &fake_server(),
        &model,
        4,
        tiny_workload(),
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

fn qtune() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qtune"));
    c.env_remove("QTUNE_LOG");
    c
}

/// No line gives the bogus number as a gain, a speed in a table or a verdict: it appears
/// only in the one-line reason a trial is implausible.
fn no_absurd_gain(all: &str) {
    for line in all
        .lines()
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
        .env("FAKE_BOGUS_ARG", "-t")
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
        .filter(|t| t.config.threads.is_some())
        .collect();
    assert!(!bogus.is_empty(), "{all}");
    assert!(
        bogus.iter().all(|t| t.kind == OutcomeKind::Implausible),
        "{all}"
    );
    if run.join("results.json").is_file() {
        let (_, r) = qtune::run::read_result(&run).unwrap();
        if let Some(w) = &r.winner {
            assert!(w.config.threads.is_none(), "a bogus config won: {all}");
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
