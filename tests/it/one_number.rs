//! One number per (config, workload), issue 43: a real tiny tune (the real CPU llama-server,
//! tiny-qwen35moe) with `--workload agent-shapes`, whose summary, report.md and results.json are parsed
//! and compared: the verdict is agent's, the other workloads are "measured, not raced", and
//! every time per request reads the same in all three (`--json` prints results.json itself:
//! tests/tune_cli.rs checks that). Asserts no speed.

use crate::support;
use support::qtune;
use support::servers;

use std::path::PathBuf;

/// The number right after `prefix` in `line` (`0.84` from `... time per request: 0.84 s`).
fn number_after(line: &str, prefix: &str) -> Option<String> {
    let at = line.find(prefix)? + prefix.len();
    Some(
        line[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect(),
    )
}

#[test]
fn a_workload_tune_prints_one_time_per_request_everywhere_and_the_workloads_verdict() {
    support::real_server().expect("the real CPU llama-server");
    let Some(model) = support::require::or_skip(
        qtune::fixtures::tiny_moe("tiny-qwen35moe"),
        "the test model (`qtune synth --test-models` prepares it)",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let m: PathBuf = dir.path().join("one-number-tiny.gguf");
    std::os::unix::fs::symlink(&model, &m).unwrap();
    let run = dir.path().join("run");
    let out = qtune()
        .args(["tune", "--model"])
        .arg(&m)
        .args([
            "--space",
            "demo",
            "--budget-trials",
            "4",
            "--workload",
            "agent-shapes",
        ])
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "tune failed: {stderr}");
    servers::assert_none_left(&m.display().to_string(), "after the tune");
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    let verdict = &json["verdict"];
    assert_eq!(json["schema_version"], 3, "{json}");
    assert_eq!(
        json["run_directory"].as_str(),
        Some(run.to_str().unwrap()),
        "the run directory is in the document"
    );
    assert!(json["report"].as_str().unwrap().ends_with("report.md"));

    // The verdict is agent's.
    assert_eq!(verdict["workload"], "agent-shapes", "{verdict}");
    assert!(
        stderr.contains("recommended for agent-shapes: "),
        "{stderr}"
    );
    assert!(md.contains("**Recommended for agent-shapes:**"), "{md}");

    // Its time per request: one number in the summary, report.md and results.json.
    let secs = |v: &serde_json::Value| format!("{:.2}", v.as_f64().expect("a time"));
    let mine = secs(&verdict["time_per_request_s"]);
    let fact = |text: &str| -> String {
        let lines = support::unwrapped(text);
        let line = lines
            .iter()
            .find(|l| l.contains("time per request: "))
            .unwrap_or_else(|| panic!("no time per request in:\n{text}"));
        number_after(line, "time per request: ").unwrap()
    };
    assert_eq!(
        fact(&stderr),
        mine,
        "summary against results.json:\n{stderr}"
    );
    assert_eq!(fact(&md), mine, "report.md against results.json:\n{md}");
    if let Some(t) = verdict["reference"]["time_per_request_s"].as_f64() {
        let theirs = format!("{t:.2}");
        for (what, text) in [("summary", &stderr), ("report.md", &md)] {
            // Its logical line: a wrap after the measured numbers may carry the
            // reference's time onto a continuation line.
            let lines = support::unwrapped(text);
            let line = lines
                .iter()
                .find(|l| l.contains("time per request: "))
                .unwrap();
            if line.contains("against the reference's ") {
                assert_eq!(
                    number_after(line, "against the reference's ").unwrap(),
                    theirs,
                    "{what}: {line}"
                );
            }
        }
    }
    // The stored pick of agent says the same.
    let picks = json["workload_picks"].as_array().expect("workload picks");
    let agent = picks
        .iter()
        .find(|p| p["workload"] == "agent-shapes")
        .unwrap();
    assert_eq!(secs(&agent["request_s"]), mine, "{agent}");

    // The others: measured, not raced; agent is not among them; each one number everywhere.
    let others = verdict["measured_not_raced"].as_array().unwrap();
    assert!(!others.is_empty(), "{verdict}");
    assert!(stderr.contains("\nmeasured, not raced ("), "{stderr}");
    assert!(
        md.contains("## Other workloads: measured, not raced"),
        "{md}"
    );
    let block: Vec<&str> = stderr
        .lines()
        .skip_while(|l| !l.starts_with("measured, not raced ("))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert!(
        !block.iter().any(|l| l.starts_with("  agent-shapes: ")),
        "{stderr}"
    );
    for o in others {
        let w = o["workload"].as_str().unwrap();
        assert_ne!(w, "agent-shapes");
        let t = secs(&o["time_per_request_s"]);
        let line = block
            .iter()
            .find(|l| l.starts_with(&format!("  {w}: ")))
            .unwrap_or_else(|| panic!("no line for {w} in:\n{stderr}"));
        assert_eq!(number_after(line, " · ").unwrap(), t, "{line}");
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| {w} (")))
            .unwrap_or_else(|| panic!("no row for {w}:\n{md}"));
        assert!(row.contains(&format!("| {t} |")), "{row} lacks {t}");
        let stored = picks.iter().find(|p| p["workload"] == w).unwrap();
        assert_eq!(secs(&stored["request_s"]), t, "{stored}");
    }
    // Never "beyond the noise" from one launch a side.
    for l in stderr
        .lines()
        .filter(|l| l.contains("by more than its launches vary"))
    {
        assert!(!l.contains(" over 1 launch"), "{l}");
    }
}
