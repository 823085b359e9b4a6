//! Speculative decoding's acceptance on a request-shape workload, not a trace (issue 54's
//! follow-up): `qtune compare` of the tiny synthetic MoE with and without `--spec-type
//! draft-mtp` on the built-in shapes (`--workload chat`) counts the server's drafted and
//! accepted tokens of every measured shape, and never lists an ok launch as "not measured".
//! On the GPU machine the same comparison printed "draft-mtp: no launch measured (ok; ...)"
//! while the server's log counted 375 drafted tokens per request. The tiny model's random MTP
//! layer drafts and (nearly) never hits, so its launch stays ok; SmolLM2 with n-grams answers
//! the filler shapes in a loop and its launch is `degenerate`, which keeps no shapes. Real
//! server, CPU; never asserts a speed.

use crate::support;
use support::output_text;

#[test]
fn a_shape_workload_reports_the_servers_acceptance() {
    let Some(server) = support::real_server() else {
        return;
    };
    if !support::vocab() {
        return;
    }
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model");
    let tmp = tempfile::tempdir().unwrap();
    let m = model.display();
    let base = format!("llama-server -m {m} -c 2048 -np 1 -t 1");
    let o = support::qtune()
        .env("QTUNE_DATA_DIR", tmp.path().join("data"))
        .env("QTUNE_ALLOW_BUSY", "1")
        .args([
            "compare",
            "--rounds",
            "1",
            "--workload",
            "chat",
            "--prompt-tokens",
            "64",
            "--gen-tokens",
            "16",
            "--repetitions",
            "1",
            "--json",
            "--out",
        ])
        .arg(tmp.path().join("cmp"))
        .arg("--server")
        .arg(&server)
        .arg(&base)
        .arg(format!("{base} --spec-type draft-mtp"))
        .output()
        .unwrap();
    let text = output_text(&o);
    assert!(o.status.success(), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("--json printed no JSON ({e}):\n{text}"));
    // The shapes were measured (no trace), and the speculative launch's carry its drafts.
    let launches = v["rounds"][0]["launches"].as_array().unwrap();
    let spec = launches.iter().find(|l| l["command"] == 1).unwrap();
    assert!(spec["replay"].is_null(), "{spec}");
    let shapes = spec["shapes"].as_array().unwrap();
    assert!(!shapes.is_empty(), "{spec}");
    let sum = |k: &str| shapes.iter().filter_map(|s| s[k].as_u64()).sum::<u64>();
    let plain = launches.iter().find(|l| l["command"] == 0).unwrap();
    assert!(
        plain["shapes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["draft_n"].is_null()),
        "{plain}"
    );
    // The speculation check reads them: acceptance, never "ok" as not measured.
    let s = &v["speculation"][0];
    let a = &s["acceptance"];
    assert!(!a.is_null(), "{s}");
    let (drafted, accepted) = (
        a["drafted"].as_u64().unwrap(),
        a["accepted"].as_u64().unwrap(),
    );
    assert!(drafted > 0 && accepted <= drafted, "{s}");
    assert_eq!(
        (sum("draft_n"), sum("draft_n_accepted")),
        (drafted, accepted),
        "{s}"
    );
    assert!(s["not_measured"].is_null(), "{s}");
    eprintln!("tiny MoE, draft-mtp on the shapes: {a}");
}
