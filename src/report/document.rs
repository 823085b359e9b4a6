//! The verdict of the one JSON document of a tune ([`verdict_json`]): the document is laid out
//! and written as `results.json` by [`crate::run::results_document`] and printed by
//! `qtune tune --json`. Its layout is published in `docs/results-schema.md`.
//!
//! Every time per request in it is the one rule of [`crate::run::figures`] (the median over a
//! config's launches), the same number the summary and report.md print.

use super::summary::flags;
use crate::run::TuneResult;

/// A paired comparison: its ratio and gain, and either its interval (`interval_pct`, with
/// `decision`) or why the rounds support no claim (`undecided`, no interval).
fn comparison_json(c: &crate::stats::Comparison) -> serde_json::Value {
    let why = c.too_noisy();
    serde_json::json!({
        "gain_pct": c.gain_pct(),
        "ratio": c.ratio(),
        "interval_pct": if why.is_some() {
            None
        } else {
            c.interval_pct().map(|(lo, hi)| [lo, hi])
        },
        "decision": c.claim(crate::stats::Band::default()),
        "undecided": why,
        "rounds": c.rounds,
        "confidence": c.confidence,
    })
}

/// The one verdict as data: what is recommended (llama.cpp flags and the whole command), how
/// sure (`proven`, `likely`, `kept`, `unraced`), its time per request and the reference's,
/// each metric against the reference, and the other workloads, measured but not raced.
pub fn verdict_json(r: &TuneResult) -> serde_json::Value {
    let Some(w) = &r.winner else {
        return serde_json::Value::Null;
    };
    let time = |c: &crate::config::LaunchConfig, stored: Option<f64>| r.objective_time(c, stored);
    let reference = |rf: &crate::run::Reference| {
        let t = time(&rf.config, rf.request_s);
        serde_json::json!({
            "name": rf.name,
            "flags": flags(&rf.config),
            "time_per_request_s": t.map(|t| t.seconds),
            "launches": t.map(|t| t.launches),
            "peak_vram_mib": rf.peak_vram_mib,
            "over_budget": rf.over_budget,
        })
    };
    let mine = time(&w.config, w.request_s);
    let picks = r.workload_picks();
    serde_json::json!({
        "workload": r.inputs.space.workload.name(),
        "recommended": {
            "flags": flags(&w.config),
            "command": w.command,
        },
        "status": w.status,
        "reference": w.reference.as_ref().map(|rf| {
            let mut v = reference(rf);
            v["other"] = rf.other.as_deref().map_or(serde_json::Value::Null, reference);
            v
        }),
        "time_per_request_s": mine.map(|t| t.seconds),
        "launches": mine.map(|t| t.launches),
        "vs_reference": {
            "time_per_request": w.request_vs_baseline.as_ref().map(comparison_json),
            "generation": w.gen_vs_baseline.as_ref().map(comparison_json),
            "prompt": w.prompt_vs_baseline.as_ref().map(comparison_json),
        },
        "measured_not_raced": super::summary::not_raced(r, &picks).iter().map(|p| serde_json::json!({
            "workload": p.workload,
            "flags": flags(&p.config),
            "time_per_request_s": p.request_s,
            "launches": p.launches,
            "better_baseline": p.reference_name,
            "better_baseline_time_per_request_s": p.reference_request_s,
            "basis": p.basis,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_json_verdict_names_the_recommendation_its_status_and_the_reference() {
        let r = crate::run::sample::gpu_result(
            std::path::Path::new("/opt/llama-server"),
            std::path::Path::new("/m/model.gguf"),
        );
        let v = crate::run::results_document(&r, Path::new("/runs/r1"), verdict_json(&r));
        assert_eq!(v["schema_version"], crate::run::JSON_SCHEMA_VERSION);
        assert_eq!(v["run_directory"], "/runs/r1");
        assert_eq!(v["report"], "/runs/r1/report.md");
        let verdict = &v["verdict"];
        assert!(
            verdict["recommended"]["flags"].as_str().is_some(),
            "{verdict}"
        );
        assert!(verdict["recommended"]["command"].is_array());
        assert!(v["trials"].is_array(), "the run's own fields follow");
        // No impossible numbers: every percentage present is finite.
        for m in ["time_per_request", "generation", "prompt"] {
            if let Some(g) = verdict["vs_reference"][m]["gain_pct"].as_f64() {
                assert!(g.is_finite() && g > -100.0, "{m}: {g}");
            }
        }
        // Read back as a result: the extra fields are ignored.
        let back: TuneResult = serde_json::from_value(v).unwrap();
        assert_eq!(back.trials.len(), r.trials.len());
    }

    #[test]
    fn a_comparison_from_two_rounds_has_no_interval_in_the_document() {
        let two = crate::stats::Comparison::from_log_ratios(&[0.1, 0.12], 0.95).unwrap();
        let j = comparison_json(&two);
        assert!(j["interval_pct"].is_null(), "{j}");
        assert_eq!(j["decision"], "undecided");
        assert!(
            j["undecided"].as_str().unwrap().contains("too few rounds"),
            "{j}"
        );
        let four =
            crate::stats::Comparison::from_log_ratios(&[0.1, 0.12, 0.11, 0.1], 0.95).unwrap();
        let j = comparison_json(&four);
        assert!(
            j["interval_pct"].is_array() && j["undecided"].is_null(),
            "{j}"
        );
    }
}
