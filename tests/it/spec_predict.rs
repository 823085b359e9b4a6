//! Speculative decoding predicted from a trace, before any launch (issue 54, item 5): qtune's
//! mirror of the pinned llama.cpp's n-gram drafter (`src/traffic/speculate.rs`) run over a
//! trace's prompt and answer tokens predicts the acceptance the server then measures, within 10
//! points, launch by launch. Real server, SmolLM2-135M (real weights: acceptance depends on
//! the model's text) on the CPU; a session recorded through `qtune record` with the `openai`
//! client, and the built-in agent session with its greedy answers. Never asserts a speed.

use crate::support;
use support::output_text;
use support::record::{start_record, start_server, stop_record};

use std::path::Path;
use std::process::Command;

/// `qtune trace show FILE --json`'s prediction: (drafted, accepted).
fn predicted(trace: &Path) -> (u64, u64, String) {
    let o = support::qtune()
        .args(["trace", "show"])
        .arg(trace)
        .output()
        .unwrap();
    let text = output_text(&o);
    assert!(o.status.success(), "{text}");
    let at = text
        .find("speculative decoding (ngram-mod), predicted from ")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(text[at..].contains(" drafted tokens accepted; "), "{text}");
    assert!(
        text[at..].lines().all(|l| l.chars().count() <= 100),
        "{text}"
    );
    let o = support::qtune()
        .args(["trace", "show", "--json"])
        .arg(trace)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &v["speculation"];
    (
        s["drafted"].as_u64().unwrap(),
        s["accepted"].as_u64().unwrap(),
        text,
    )
}

/// `qtune compare --workload trace` of three speculative launches of `model` (one round):
/// each launch's (drafted, accepted), the server's own counts.
fn measured(dir: &Path, model: &Path, args: &str, trace: &Path) -> Vec<(u64, u64)> {
    let server = support::real_server().unwrap();
    let out = dir.join("cmp");
    let m = model.display();
    let base = format!("llama-server -m {m} {args} --spec-type ngram-mod");
    let o = support::qtune()
        .env("QTUNE_ALLOW_BUSY", "1")
        .args(["compare", "--rounds", "1", "--out"])
        .arg(&out)
        .arg("--workload")
        .arg(trace)
        .arg("--server")
        .arg(&server)
        .arg(&base)
        .arg(format!("{base} -b 1024"))
        .arg(format!("{base} -ub 256"))
        .output()
        .unwrap();
    let text = output_text(&o);
    assert!(o.status.success(), "{text}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
    let launches = v["rounds"][0]["launches"].as_array().unwrap();
    assert_eq!(launches.len(), 3, "{v}");
    launches
        .iter()
        .map(|l| {
            let a = &l["replay"]["acceptance"];
            (
                a["drafted"].as_u64().unwrap_or(0),
                a["accepted"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn ratio((drafted, accepted): (u64, u64)) -> f64 {
    if drafted == 0 {
        0.0
    } else {
        accepted as f64 / drafted as f64
    }
}

/// Predicted against measured, each launch within 10 points.
fn assert_within_10_points(what: &str, pred: (u64, u64), launches: &[(u64, u64)]) {
    for (i, &m) in launches.iter().enumerate() {
        eprintln!(
            "{what}: predicted {:.1} % ({} of {}), launch {} measured {:.1} % ({} of {})",
            ratio(pred) * 100.0,
            pred.1,
            pred.0,
            i + 1,
            ratio(m) * 100.0,
            m.1,
            m.0
        );
        assert!(
            (ratio(pred) - ratio(m)).abs() <= 0.10,
            "{what}: predicted {pred:?}, launch {} measured {m:?}",
            i + 1
        );
        // Drafts happen in both or in neither.
        assert_eq!(pred.0 > 0, m.0 > 0, "{what}: {pred:?} against {m:?}");
    }
}

#[test]
fn a_recorded_sessions_predicted_acceptance_is_what_the_server_measures() {
    let openai = Command::new("python3")
        .args(["-c", "import openai"])
        .output();
    if !openai.is_ok_and(|o| o.status.success()) {
        support::require::missing("python3 with the openai package (pip install openai)");
        return;
    }
    let Some(model) = support::smollm2() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let args = "-c 4096 -np 1 -t 1";
    let server_args: Vec<&str> = args.split(' ').collect();
    let Some((server, sport)) = start_server(dir.path(), &model, "smollm2.gguf", &server_args)
    else {
        return;
    };
    let trace = dir.path().join("session.jsonl");
    let (mut rec, pport) = start_record(sport, &trace, dir.path());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spec-client.py");
    let o = Command::new("python3")
        .arg(&script)
        .arg(format!("http://127.0.0.1:{pport}"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    stop_record(&mut rec, dir.path());
    drop(server);
    // Every answer (streamed or not) was tokenized: as many tokens as the server generated,
    // less the end-of-text token it counts and the text leaves out.
    let text = std::fs::read_to_string(&trace).unwrap();
    let reqs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["type"] == "request")
        .collect();
    assert_eq!(reqs.len(), 4, "{text}");
    for r in &reqs {
        let n = r["answer_tokens"].as_array().map_or(0, Vec::len) as u64;
        let g = r["n_generated"].as_u64().unwrap();
        assert!(n + 1 >= g && n <= g, "{r}");
    }
    let (drafted, accepted, shown) = predicted(&trace);
    // The answers re-emit the file: drafts are made, and most are accepted.
    assert!(drafted > 0 && accepted > 0, "{shown}");
    let launches = measured(dir.path(), &model, args, &trace);
    assert_within_10_points("recorded session", (drafted, accepted), &launches);
}

#[test]
fn the_built_in_agent_sessions_predicted_acceptance_is_what_the_server_measures() {
    let Some(model) = support::smollm2() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let args = "-c 2048 -np 1 -t 1";
    let server_args: Vec<&str> = args.split(' ').collect();
    let Some((server, sport)) = start_server(dir.path(), &model, "smollm2.gguf", &server_args)
    else {
        return;
    };
    let trace = dir.path().join("agent.jsonl");
    let o = support::qtune()
        .args(["trace", "session", "agent", "--answers", "--server"])
        .arg(format!("http://127.0.0.1:{sport}"))
        .arg("--out")
        .arg(&trace)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    drop(server);
    let (drafted, accepted, _) = predicted(&trace);
    let launches = measured(dir.path(), &model, args, &trace);
    assert_within_10_points("agent session", (drafted, accepted), &launches);
}
