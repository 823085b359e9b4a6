//! `--workload subagents-session` (issue 42's parallel slots): three sub-agents of real text
//! send every turn at once; the replay sends them concurrently, and compare reports each
//! launch's aggregate generation (all generated tokens over the replay's wall time) beside the
//! time per request. Real server and SmolLM2 on the CPU. Never asserts a speed.

use crate::support;
use support::output_text;

#[test]
fn three_sub_agents_replay_at_once_and_compare_reports_the_aggregate() {
    let (Some(server), Some(model)) = (support::real_server(), support::smollm2()) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("cmp");
    let m = model.display();
    let o = support::qtune()
        .env("QTUNE_DATA_DIR", tmp.path().join("data"))
        .env("QTUNE_ALLOW_BUSY", "1")
        .args([
            "compare",
            "--rounds",
            "1",
            "--workload",
            "subagents-session",
            "--out",
        ])
        .arg(&out)
        .arg("--server")
        .arg(&server)
        .arg(format!("llama-server -m {m} -c 8192 -np 1 -t 1"))
        .arg(format!("llama-server -m {m} -c 8192 -np 4 -t 1"))
        .output()
        .unwrap();
    let text = output_text(&o);
    assert!(o.status.success(), "{text}");
    let flat = support::flat(&text);
    assert!(
        flat.contains("verdict on subagents-session.jsonl"),
        "{text}"
    );
    assert!(
        flat.contains("aggregate generation (all generated tokens over the replay's wall time"),
        "{text}"
    );
    assert!(
        flat.contains("B generated ") && flat.contains("the aggregate tokens/s of A"),
        "{text}"
    );

    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
    let w = &v["workloads"][0];
    let medians = w["median_aggregate_tps"].as_array().unwrap();
    assert_eq!(medians.len(), 2, "{w}");
    assert!(medians.iter().all(|x| x.as_f64().unwrap() > 0.0), "{w}");
    assert_eq!(w["aggregate_pairs"].as_array().unwrap().len(), 1, "{w}");
    let launches = v["rounds"][0]["launches"].as_array().unwrap();
    assert_eq!(launches.len(), 2, "{v}");
    for l in launches {
        assert_eq!(l["outcome"], "ok", "{l}");
        let r = &l["replay"];
        let reqs = r["requests"].as_array().unwrap();
        // Three sub-agents, every turn sent at once: three in flight together, every turn.
        assert_eq!(reqs.len() % 3, 0, "{r}");
        let most = reqs
            .iter()
            .map(|q| q["in_flight"].as_u64().unwrap())
            .max()
            .unwrap();
        assert_eq!(most, 2, "{r}");
        let busy = reqs.iter().filter(|q| q["in_flight"].as_u64().unwrap() > 0);
        assert_eq!(busy.count(), reqs.len() / 3 * 2, "{r}");
        // The aggregate is the generated tokens over the replay's wall time.
        let generated: u64 = reqs.iter().map(|q| q["generated"].as_u64().unwrap()).sum();
        let want = generated as f64 / r["wall_s"].as_f64().unwrap();
        let got = r["aggregate_tps"].as_f64().unwrap();
        assert!((got - want).abs() <= 1e-9 * want, "{got} against {want}");
    }
    // The header says what the session is.
    let traces = std::fs::read_dir(tmp.path().join("data/traces")).unwrap();
    let dir = traces.flatten().next().unwrap().path();
    let trace = std::fs::read_to_string(dir.join("subagents-session.jsonl")).unwrap();
    assert!(
        trace.contains("3 sub-agents at once, each 2,048 tokens deep"),
        "{}",
        trace.lines().next().unwrap()
    );
}
