//! The objective first, where people look (issue 52): a tune's summary leads with the time per
//! request and is sorted by it; a trace tune's report.md never describes a probe it did not
//! send and draws the objective; everything a tune and a plan print fits 100 columns.

use crate::support;
use support::output_text as text;

use std::path::PathBuf;

const COLUMNS: usize = 100;

/// Every line of `out` longer than 100 columns.
fn too_wide(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.chars().count() > COLUMNS)
        .map(|l| format!("{} columns: {l}", l.chars().count()))
        .collect()
}

/// The summary's `s/request` column, top to bottom (a table on one line per row, or stacked:
/// each config on its own line above its numbers).
fn summary_times(stderr: &str) -> Vec<f64> {
    let mut lines = stderr.lines().skip_while(|l| !l.starts_with("config"));
    let header = lines
        .next()
        .unwrap_or_else(|| panic!("no summary:\n{stderr}"));
    let stacked = header.contains("(on its own line)");
    let mut times = Vec::new();
    for l in lines {
        if l.trim().is_empty() || l.starts_with("recommended") {
            break;
        }
        let cells: Vec<&str> = l
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        let cell = if stacked {
            // The numbers' row is indented; the config's line is not.
            if !l.starts_with("    ") || l.trim_start().starts_with("s/request") {
                continue;
            }
            cells.first()
        } else {
            cells.get(1)
        };
        if let Some(t) = cell.and_then(|c| c.parse::<f64>().ok()) {
            times.push(t);
        }
    }
    times
}

fn journal() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe/journal.jsonl")
}

/// A tune on the replayed landscape (no llama-server): the summary leads with the time per
/// request, and no line of it, of its launches or of its stop is over 100 columns (on main, 22
/// of 63 lines were, up to 356).
#[test]
fn a_tune_leads_with_the_time_per_request_within_100_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap();
    for budget in ["20", "10"] {
        let run = tmp.path().join(format!("run-{budget}"));
        let o = support::qtune_without_server()
            .arg("tune")
            .arg("--model")
            .arg(&model)
            .arg("--replay")
            .arg(journal())
            .args(["--space", "quick", "--budget-trials", budget, "--out"])
            .arg(&run)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{}", text(&o));
        let wide = too_wide(&err);
        assert!(wide.is_empty(), "{}\n\n{err}", wide.join("\n"));
        // The journal predates per-request times: the column leads, with none to sort by.
        let header = err
            .lines()
            .find(|l| l.trim_start().starts_with("s/request") || l.starts_with("config  "))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(header.find("s/request") < header.find("tg t/s"), "{header}");
    }
}

/// `qtune plan` for a described box and for a model file: every line within 100 columns.
#[test]
fn a_plan_prints_within_100_columns() {
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap();
    let runs: Vec<Vec<String>> = vec![
        ["plan", "--box", qtune::plan::boxes::CATALOG[0].id]
            .iter()
            .chain(&["--shape", "qwen3.5-35b-a3b", "--quant", "q4_k_m,q8_0"])
            .map(|s| s.to_string())
            .collect(),
        vec![
            "plan".into(),
            "--no-profile".into(),
            "--model".into(),
            model.display().to_string(),
        ],
    ];
    for args in runs {
        let o = support::qtune_without_server()
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        assert!(err.lines().count() > 3, "{args:?}: {err}");
        let wide = too_wide(&err);
        assert!(wide.is_empty(), "{args:?}:\n{}\n\n{err}", wide.join("\n"));
    }
}

const HEADER: &str = r#"{"type":"header","format":"qtune-trace","version":1,"qtune_version":"0","started_at":"2026-11-26T00:00:00Z","upstream":"http://x","model":{"n_vocab":151936,"n_ctx":100000}}"#;

fn request(id: u64, arrived: f64, prompt_len: usize, gen: u64) -> String {
    let prompt: Vec<u32> = (1..=prompt_len as u32).collect();
    serde_json::json!({"type":"request","id":id,"endpoint":"/completion","stream":false,
        "arrived_ms":arrived,"first_byte_ms":arrived + 1.0,"ended_ms":arrived + 2.0,
        "overlapped":[],"status":200,"outcome":"ok","prompt_tokens":prompt,
        "n_generated":gen,"max_tokens":null,
        "timings":{"cache_n":0,"prompt_n":prompt_len,"prompt_ms":1.0,"predicted_n":gen,"predicted_ms":1.0}})
    .to_string()
}

/// A trace tune on the real server (tiny-qwen35moe): report.md says the trace was each
/// trial's workload, never the single-request probe it did not send, and draws the
/// objective; the summary leads with the time per request, sorted; all within 100 columns.
#[test]
fn a_trace_tunes_report_describes_no_probe_and_draws_the_objective() {
    let Some(server) = support::real_server() else {
        return;
    };
    if !support::vocab() {
        return;
    }
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("mine.jsonl");
    let body: Vec<String> = (0..4)
        .map(|i| request(i + 1, i as f64 * 100.0, 48 + 16 * i as usize, 8))
        .collect();
    std::fs::write(&trace, format!("{HEADER}\n{}\n", body.join("\n"))).unwrap();
    let run = dir.path().join("run");
    let o = support::qtune()
        .env("QTUNE_ALLOW_BUSY", "1")
        .env("QTUNE_DATA_DIR", dir.path().join("data"))
        .args([
            "tune",
            "--space",
            "demo",
            "--ctx",
            "4096",
            "--budget-trials",
            "8",
        ])
        .arg("--model")
        .arg(&model)
        .arg("--server")
        .arg(&server)
        .arg("--workload")
        .arg(&trace)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{}", text(&o));
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    let workload_line = report
        .lines()
        .find(|l| l.contains("**Workload per trial:**"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(workload_line.contains("the trace"), "{workload_line}");
    assert!(
        !report.contains(" prompt tokens, ") && !report.contains("measured request(s)"),
        "a probe the tune did not send:\n{report}"
    );
    assert!(
        !report.contains("measured no workload's time per request"),
        "{report}"
    );
    if report.contains("**Recommended for ") {
        assert!(report.contains("](plot-objective.png)"), "{report}");
        assert!(run.join("plot-objective.svg").exists());
    }
    let times = summary_times(&err);
    assert!(times.len() >= 2, "{err}");
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "not the lowest time per request first: {times:?}\n{err}"
    );
    let wide = too_wide(&err);
    assert!(wide.is_empty(), "{}\n\n{err}", wide.join("\n"));
}
