//! The real CPU llama-server (pinned build) measuring real models through `LlamaServerRunner`:
//! the happy path, the real server's own bad-flag rejections, and no server left behind.

use crate::support;
use support::require;

use qtune::config::LaunchConfig;
use qtune::trial::journal::Journal;
use qtune::trial::llama_runner::LlamaServerRunner;
use qtune::trial::{OutcomeKind, TrialOutcome, TrialRole, TrialRunner};
use std::path::Path;
use std::time::Duration;
use support::trial::*;

fn runner(server: &Path, model: &Path, run_dir: &Path) -> LlamaServerRunner {
    runner_with(server, model, run_dir, tiny_workload())
}

fn runner_with(
    server: &Path,
    model: &Path,
    run_dir: &Path,
    workload: qtune::space::Workload,
) -> LlamaServerRunner {
    let bytes = std::fs::metadata(model).unwrap().len();
    LlamaServerRunner::new(
        server,
        model,
        bytes,
        workload,
        run_dir,
        Journal::open(run_dir).unwrap(),
        None,
        Duration::from_secs(120),
    )
    .unwrap()
}

fn assert_measured_ok(o: &TrialOutcome) {
    assert_eq!(o.kind, OutcomeKind::Ok, "{}\n{:#?}", o.message, o.evidence);
    let m = o.metrics.as_ref().unwrap();
    for s in [&m.gen_tps, &m.prompt_tps, &m.ttft_ms] {
        assert_eq!(s.samples.len(), 2, "one sample per repetition");
        assert!(s.samples.iter().all(|v| v.is_finite() && *v > 0.0), "{s:?}");
        assert!(s.min <= s.median && s.median <= s.max);
        assert!(s.spread_pct.is_finite() && s.spread_pct >= 0.0);
    }
    // Warnings, if any, are the spread warning only.
    assert!(
        o.warnings.iter().all(|w| w.contains("spread")),
        "{:?}",
        o.warnings
    );
    // No GPU here: nothing sampled, nothing over a budget.
    assert!(o.peak_vram_mib.iter().all(|&p| p < 1024));
    let log = std::fs::read_to_string(o.log.as_ref().unwrap()).unwrap();
    assert!(log.starts_with("# qtune: "));
    assert!(log.contains(" -lv 4"), "verbosity flag passed");
    assert!(log.contains("model loaded"));
    // The server's own buffer report, parsed from the -lv 4 log.
    let rep = o.reported.as_ref().expect("buffer sizes reported");
    let model_mib: f64 = rep.model_mib.values().sum();
    let kv_mib: f64 = rep.kv_mib.values().sum::<f64>() + rep.recurrent_mib.values().sum::<f64>();
    assert!(model_mib > 1.0, "{rep:?}");
    assert!(kv_mib > 0.0, "{rep:?}");
}

#[test]
fn smollm2_trial_is_measured_journaled_and_leaves_no_server() {
    let (Some(server), Some(model)) = (support::real_server(), support::smollm2()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut r = runner(&server, &model, dir.path());
    let o = r.run(&cpu_config(), TrialRole::Baseline);
    let pid = r.last_server_pid().expect("a server was started");
    assert!(!alive(pid), "llama-server {pid} outlived the trial");
    assert_measured_ok(&o);
    let m = o.metrics.as_ref().unwrap();
    eprintln!(
        "SmolLM2 CPU: gen {:.1} tok/s (spread {:.1} %), prompt {:.1} tok/s (spread {:.1} %), ttft {:.1} ms; warnings {:?}",
        m.gen_tps.median, m.gen_tps.spread_pct, m.prompt_tps.median, m.prompt_tps.spread_pct,
        m.ttft_ms.median, o.warnings
    );
    assert_eq!(o.id, 1);
    assert_eq!(o.role, TrialRole::Baseline);
    assert_eq!(
        o.log.as_deref(),
        Some(dir.path().join("logs/trial-1.log").as_path())
    );

    // A second trial on the same runner: next id, same journal, context depth measured.
    let o2 = r.run(
        &LaunchConfig {
            batch: Some(64),
            ubatch: Some(32),
            ..cpu_config()
        },
        TrialRole::Search,
    );
    assert_measured_ok(&o2);
    assert_eq!(o2.id, 2);
    let j = Journal::read(dir.path()).unwrap();
    assert_eq!(
        j.iter().map(|o| (o.id, o.kind)).collect::<Vec<_>>(),
        [(1, OutcomeKind::Ok), (2, OutcomeKind::Ok)]
    );
    assert_eq!(j[0].metrics.as_ref().unwrap().gen_tps.samples.len(), 2);
    let log2 = std::fs::read_to_string(o2.log.as_ref().unwrap()).unwrap();
    assert!(log2.contains("-b 64 -ub 32"));
}

#[test]
fn context_depth_is_measured_separately() {
    let (Some(server), Some(model)) = (support::real_server(), support::smollm2()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut r = runner_with(
        &server,
        &model,
        dir.path(),
        qtune::space::Workload {
            context_depth: Some(200),
            warmup: false,
            repetitions: 1,
            ..tiny_workload()
        },
    );
    let o = r.run(&cpu_config(), TrialRole::Search);
    assert_eq!(o.kind, OutcomeKind::Ok, "{} {:?}", o.message, o.evidence);
    let d = o.metrics.unwrap().gen_tps_at_depth.expect("depth measured");
    assert!(d.median.is_finite() && d.median > 0.0);
    assert!(!alive(r.last_server_pid().unwrap()));
}

/// A plain-attention model (SmolLM2) and one with recurrent layers (the tiny Qwen3.5 MoE: its
/// linear-attention state can only be resumed where a prompt ended).
#[test]
fn a_mix_is_measured_whole_with_held_tokens_from_the_cache_on_both_kinds_of_model() {
    let Some(server) = support::real_server() else {
        return;
    };
    let Some(smollm) = support::smollm2() else {
        return;
    };
    if !support::vocab() {
        return;
    }
    let hybrid = qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap();
    for model in [smollm, hybrid] {
        measure_a_mix(&server, &model);
    }
}

fn measure_a_mix(server: &Path, model: &Path) {
    let shape = |name: &str, held, new, gen| qtune::workloads::Shape {
        name: name.into(),
        held,
        new,
        gen,
        weight: 1.0,
    };
    let mix = |name: &str, s: qtune::workloads::Shape| qtune::workloads::Mix {
        name: name.into(),
        description: String::new(),
        shapes: vec![s],
    };
    // As the built-ins are, in small: a chat turn, an agent turn as deep as the document read
    // fresh just before it.
    let mixes = vec![
        mix("chat", shape("turn", 64, 16, 12)),
        mix("agent", shape("deep", 300, 40, 10)),
        mix("doc", shape("read", 0, 300, 6)),
    ];
    let dir = tempfile::tempdir().unwrap();
    // What the heartbeat would say, sampled while the trial runs.
    let doing = qtune::trial::phase::PhaseCell::default();
    let mut r = runner_with(
        server,
        model,
        dir.path(),
        qtune::space::Workload {
            mix: Some("chat".into()),
            mixes: mixes.clone(),
            shape_repetitions: 2,
            ..tiny_workload()
        },
    )
    .with_phase(doing.clone());
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (doing, done) = (doing.clone(), done.clone());
        std::thread::spawn(move || {
            let mut seen: Vec<String> = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(d) = doing.describe().filter(|d| !seen.contains(d)) {
                    seen.push(d);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            seen
        })
    };
    let o = r.run(&cpu_config(), TrialRole::Search);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = sampler.join().unwrap();
    assert!(
        seen.iter()
            .any(|d| d.starts_with("loading the model") && d.contains(" GB")),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|d| d == "measuring the deep request (300 tokens held, 40 new, 10 generated)"),
        "{seen:?}"
    );
    assert_eq!(doing.describe(), None, "nothing is said between launches");
    let model = model.display();
    assert_eq!(
        o.kind,
        OutcomeKind::Ok,
        "{model}: {} {:?}",
        o.message,
        o.evidence
    );
    let m = o.metrics.unwrap();
    let names: Vec<&str> = m.shapes.iter().map(|t| t.shape.name.as_str()).collect();
    // The fresh document first (it fills the cache), then the most held; twice.
    assert_eq!(names, ["read", "deep", "turn", "read", "deep", "turn"]);
    for t in &m.shapes {
        // Every generated token was measured, not a sample.
        assert_eq!(t.gen_measured, t.shape.gen, "{t:?}");
        if t.shape.held == 0 {
            // A fresh read reuses nothing (a token or two may match by chance).
            assert!(t.cache_n <= 2, "{model}: {t:?}");
            assert!(t.prompt_n + t.cache_n == t.shape.new, "{model}: {t:?}");
        } else {
            // The held tokens came from the cache (a resumable state may sit a few tokens
            // short of the prompt's end), and only the new ones were read.
            assert!(t.cache_n + 16 >= t.shape.held, "{model}: {t:?}");
            assert_eq!(
                t.prompt_n + t.cache_n,
                t.shape.held + t.shape.new,
                "{model}: {t:?}"
            );
        }
        assert!(t.request_s().is_some_and(|s| s > 0.0), "{t:?}");
    }
    // The objective is the chat turn's mean time over its two requests.
    let turn: Vec<f64> = m
        .shapes
        .iter()
        .filter(|t| t.shape.name == "turn")
        .filter_map(|t| t.request_s())
        .collect();
    let mean = (turn[0] + turn[1]) / 2.0;
    assert!((m.request_s.unwrap() - mean).abs() < 1e-9, "{m:?}");
    assert!(
        o.warnings.iter().all(|w| !w.contains("reused")),
        "{:?}",
        o.warnings
    );
    assert!(!alive(r.last_server_pid().unwrap()));
}

#[test]
fn real_server_rejections_are_bad_flags() {
    let (Some(server), Some(model)) = (support::real_server(), support::smollm2()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // A value the real server rejects: -np 0.
    let mut r = runner(&server, &model, dir.path());
    let o = r.run(
        &LaunchConfig {
            parallel: 0,
            ..cpu_config()
        },
        TrialRole::Search,
    );
    assert_eq!(
        o.kind,
        OutcomeKind::BadFlag,
        "{} {:?}",
        o.message,
        o.evidence
    );
    assert!(
        o.evidence[0].contains("invalid value for n_parallel"),
        "{:?}",
        o.evidence
    );
    assert!(o.message.contains("-np"));
    assert!(!alive(r.last_server_pid().unwrap()));

    // A flag this build does not know.
    let mut r = runner(&server, &model, &dir.path().join("b"))
        .with_extra_args(vec!["--n-cpu-moe-typo".into(), "3".into()]);
    let o = r.run(&cpu_config(), TrialRole::Search);
    assert_eq!(
        o.kind,
        OutcomeKind::BadFlag,
        "{} {:?}",
        o.message,
        o.evidence
    );
    assert_eq!(o.evidence[0], "error: invalid argument: --n-cpu-moe-typo");
    assert!(!alive(r.last_server_pid().unwrap()));
    assert_eq!(
        Journal::read(&dir.path().join("b")).unwrap()[0].kind,
        OutcomeKind::BadFlag
    );
}

#[test]
fn a_context_too_small_for_the_workload_is_refused_without_launching() {
    let (Some(server), Some(model)) = (support::real_server(), support::smollm2()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut r = runner(&server, &model, dir.path());
    let o = r.run(&LaunchConfig::baseline(16), TrialRole::Search);
    assert_eq!(o.kind, OutcomeKind::BadFlag);
    assert!(o.message.contains("-c 16"), "{}", o.message);
    assert!(r.last_server_pid().is_none());
    assert_eq!(Journal::read(dir.path()).unwrap().len(), 1);
}

#[test]
fn missing_model_is_a_crash_with_the_servers_words() {
    let Some(server) = support::real_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut r = LlamaServerRunner::new(
        &server,
        &dir.path().join("nope.gguf"),
        0,
        tiny_workload(),
        dir.path(),
        Journal::open(dir.path()).unwrap(),
        None,
        Duration::from_secs(30),
    )
    .unwrap();
    let o = r.run(&cpu_config(), TrialRole::Search);
    assert_eq!(o.kind, OutcomeKind::Crash, "{} {:?}", o.message, o.evidence);
    assert!(o.message.contains("exit code 1"), "{}", o.message);
    assert!(o
        .evidence
        .iter()
        .any(|l| l.contains("failed to load model")));
    assert!(!alive(r.last_server_pid().unwrap()));
}

#[test]
fn tiny_moe_trial() {
    let Some(server) = support::real_server() else {
        return;
    };
    let Some(model) = require::or_skip(
        qtune::fixtures::tiny_moe("tiny-qwen35moe").map_err(|e| format!("{e:#}")),
        "the tiny MoE fixture",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut r = runner(&server, &model, dir.path());
    let o = r.run(&cpu_config(), TrialRole::Search);
    assert!(!alive(r.last_server_pid().unwrap()));
    assert_measured_ok(&o);
    let m = o.metrics.as_ref().unwrap();
    eprintln!(
        "tiny-qwen35moe CPU: gen {:.1} tok/s (spread {:.1} %), prompt {:.1} tok/s (spread {:.1} %)",
        m.gen_tps.median, m.gen_tps.spread_pct, m.prompt_tps.median, m.prompt_tps.spread_pct
    );
}
