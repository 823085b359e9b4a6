//! MTP (issue 54, item 4) on the real CPU llama-server: the tiny MoE that `qtune synth` writes
//! with its MTP layer launches with `--spec-type draft-mtp` and the server drafts with it; the
//! tune measures it for its cost only (random weights: what it drafts means nothing) and never
//! ranks it. A GGUF without the layer is not launched with it, and one line says why.

use crate::support;
use support::output_text;

use std::path::Path;

/// A space with nothing to vary but the MTP lever, and a budget that reaches it.
const SPACE: &str = "name: mtp-cost
description: the MTP lever alone
vary:
  threads: [1]
  levers:
    speculative: [draft-mtp]
fixed:
  ctx: 2048
  parallel: 1
workload:
  prompt_tokens: 64
  gen_tokens: 16
  repetitions: 1
budget:
  trials: 6
  minutes: 10
  confirm_top: 1
  confirm_rounds: 2
";

/// A trace of two completions of 200 prompt tokens (ids the tiny model's vocabulary holds),
/// 16 generated each.
fn write_inputs(dir: &Path) {
    std::fs::write(dir.join("space.yaml"), SPACE).unwrap();
    let mut text = String::from(
        r#"{"type":"header","format":"qtune-trace","version":1,"qtune_version":"0","started_at":"2026-11-28T00:00:00Z","upstream":"http://127.0.0.1:1/","server":{},"model":{},"tokenizer_sha256":null}"#,
    );
    text.push('\n');
    for i in 0..2u32 {
        let prompt: Vec<u32> = (1000 + 7 * i..1200 + 7 * i).collect();
        let at = f64::from(i) * 1000.0;
        text.push_str(&format!(
            r#"{{"type":"request","id":{},"endpoint":"/completion","stream":false,"arrived_ms":{at},"first_byte_ms":null,"ended_ms":{},"overlapped":[],"status":200,"outcome":"ok","prompt_tokens":{prompt:?},"n_generated":16,"max_tokens":16,"timings":null}}"#,
            i + 1,
            at + 500.0
        ));
        text.push('\n');
    }
    std::fs::write(dir.join("trace.jsonl"), text).unwrap();
}

fn tune(dir: &Path, model: &Path, server: &Path, trials: &str) -> (bool, String) {
    let o = support::qtune()
        .current_dir(dir)
        .env("QTUNE_DATA_DIR", dir.join("data"))
        .env("QTUNE_ALLOW_BUSY", "1")
        .args(["tune", "--space", "space.yaml", "--workload", "trace.jsonl"])
        .args(["--budget-trials", trials, "--out", "run", "--server"])
        .arg(server)
        .arg("-m")
        .arg(model)
        .output()
        .unwrap();
    (o.status.success(), output_text(&o))
}

fn journal(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("run/journal.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v.get("config").is_some())
        .collect()
}

#[test]
fn the_tiny_moe_drafts_with_its_mtp_layer_and_the_tune_measures_it_without_crediting_it() {
    let Some(server) = support::real_server() else {
        return;
    };
    if !support::vocab() {
        return;
    }
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model");
    let layout = qtune::model::load(&model).unwrap();
    assert_eq!((layout.n_blocks, layout.details.mtp_layers), (4, 1));
    let tmp = tempfile::tempdir().unwrap();
    write_inputs(tmp.path());
    let (ok, text) = tune(tmp.path(), &model, &server, "6");
    assert!(ok, "{text}");
    let trials = journal(tmp.path());
    let mtp: Vec<&serde_json::Value> = trials
        .iter()
        .filter(|t| t["config"]["spec_type"] == "draft-mtp")
        .collect();
    assert!(!mtp.is_empty(), "no draft-mtp launch: {text}");
    for t in &mtp {
        // Measured (its speeds kept as its cost), never ranked.
        assert_eq!(t["kind"], "degenerate", "{t}");
        assert!(
            t["metrics"]["gen_tps"]["median"].as_f64().unwrap() > 0.0,
            "{t}"
        );
        let msg = t["message"].as_str().unwrap();
        assert!(msg.contains("measured for its cost only"), "{msg}");
        // The server drafted with the MTP layer: per request and summed over the launch.
        let a = &t["metrics"]["replay"]["acceptance"];
        let drafted = a["drafted"].as_u64().unwrap_or(0);
        assert!(
            drafted > 0 && a["accepted"].as_u64().unwrap() <= drafted,
            "{t}"
        );
        let reqs = t["metrics"]["replay"]["requests"].as_array().unwrap();
        assert!(reqs.iter().all(|q| q["draft_n"].as_u64().is_some()), "{t}");
        let log = tmp.path().join(format!("run/logs/trial-{}.log", t["id"]));
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(log.contains("creating MTP draft context"), "{log}");
    }
    // No launch without it drafted anything.
    assert!(trials
        .iter()
        .filter(|t| t["config"]["spec_type"].is_null())
        .all(|t| t["metrics"]["replay"]["acceptance"].is_null()));
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("run/results.json")).unwrap())
            .unwrap();
    assert!(
        results["winner"]["config"]["spec_type"].is_null(),
        "{}",
        results["winner"]
    );
    // The summary says so in one line, and names what was drafted.
    let said = |s: &str| text.lines().filter(|l| l.contains(s)).count();
    assert_eq!(
        said("MTP: measured for its cost only, not ranked"),
        1,
        "{text}"
    );
    assert!(said("draft-mtp: ") >= 1, "{text}");
}

#[test]
fn a_gguf_without_the_mtp_layer_is_not_launched_with_it_and_one_line_says_why() {
    let Some(server) = support::real_server() else {
        return;
    };
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny-no-mtp.gguf");
    let shape = qtune::model::synth::SynthShape {
        nextn_layers: 0,
        ..qtune::model::synth::shape_by_name("tiny-qwen35moe").unwrap()
    };
    qtune::model::synth::write_synthetic(
        &model,
        &shape,
        qtune::model::synth::SynthFtype::parse("q4_k_m").unwrap(),
    )
    .unwrap();
    let layout = qtune::model::load(&model).unwrap();
    // The pinned build offers draft-mtp; the file has no layer to draft with.
    assert!(qtune::engine::mtp::server_offers_mtp(&server));
    let why = "MTP: not tried, this GGUF has no MTP layer (qwen35moe.nextn_predict_layers = 0; a convert without --no-mtp keeps it)";
    assert_eq!(
        qtune::engine::mtp::unavailable(&layout.arch, layout.details.mtp_layers, true).as_deref(),
        Some(why)
    );
    write_inputs(tmp.path());
    let (ok, text) = tune(tmp.path(), &model, &server, "3");
    assert!(ok, "{text}");
    assert!(journal(tmp.path())
        .iter()
        .all(|t| t["config"]["spec_type"].is_null()));
    // The summary wraps at 100 columns: the line starts as the reason does.
    let head = &why[..60];
    assert_eq!(
        text.lines().filter(|l| l.contains(head)).count(),
        1,
        "{text}"
    );
    // `qtune compare` says the same before any launch.
    let o = support::qtune()
        .current_dir(tmp.path())
        .env("QTUNE_DATA_DIR", tmp.path().join("data"))
        .args(["compare", "--rounds", "1", "--out", "cmp", "--server"])
        .arg(&server)
        .arg(format!("llama-server -m {} -c 2048 -np 1", model.display()))
        .arg(format!(
            "llama-server -m {} -c 2048 -np 1 --spec-type draft-mtp",
            model.display()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", output_text(&o));
    assert!(
        err.contains("--spec-type draft-mtp cannot run in `llama-server")
            && err.contains("this GGUF has no MTP layer (qwen35moe.nextn_predict_layers = 0"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!tmp.path().join("cmp").join("journal.jsonl").exists());
    // The arch line: qwen3moe has no MTP graph in the pinned build.
    let q3 = qtune::model::load(&qtune::fixtures::tiny_moe("tiny-qwen3moe").unwrap()).unwrap();
    let line = qtune::engine::mtp::unavailable(&q3.arch, q3.details.mtp_layers, true).unwrap();
    assert!(line.ends_with("models, not qwen3moe"), "{line}");
}
