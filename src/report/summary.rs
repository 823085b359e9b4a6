//! The one-screen summary printed after a tune.

use super::TuneResult;
use crate::escape::terminal;
use crate::trial::TrialRole;
use crate::util::fmt_mib;

fn stat(s: Option<&crate::trial::Stat>) -> String {
    s.map_or("-".into(), |s| {
        format!("{:.1} ±{:.0}%", s.median, s.spread_pct / 2.0)
    })
}

pub fn table(r: &TuneResult) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "\n{} · {} · {}\n",
        terminal(r.model.name.as_deref().unwrap_or(&r.model.arch)),
        r.hardware.summary(),
        match r.vram_budget_mib {
            Some(b) if !r.gpu_budgets.is_empty() => format!(
                "VRAM budget {} = {} (free − headroom {} on each card)",
                fmt_mib(b as f64),
                r.gpu_budgets
                    .iter()
                    .map(|g| format!("CUDA{} {}", g.index, fmt_mib(g.budget_mib as f64)))
                    .collect::<Vec<_>>()
                    .join(" + "),
                fmt_mib(r.headroom_mib as f64)
            ),
            Some(b) => format!(
                "VRAM budget {} (free {} − headroom {})",
                fmt_mib(b as f64),
                fmt_mib(r.free_vram_at_start_mib as f64),
                fmt_mib(r.headroom_mib as f64)
            ),
            None => "no GPU: CPU only".into(),
        }
    ));
    let searched = r
        .trials
        .iter()
        .filter(|t| t.role == TrialRole::Search)
        .count();
    out.push_str(&format!(
        "{} ({} search) in {:.1} min\n\n",
        crate::util::count(r.trials.len() as u64, "trial", "trials"),
        searched,
        r.minutes_used
    ));
    // The confirmation first (what decided), then every search trial that failed or ranked.
    let mut rows: Vec<Vec<String>> = Vec::new();
    let label = |baseline: bool, c: &crate::config::LaunchConfig| {
        format!("{}{}", if baseline { "[baseline] " } else { "" }, c.label())
    };
    for c in &r.confirmation {
        rows.push(vec![
            label(c.is_baseline, &c.config),
            stat(c.gen_tps.as_ref()),
            stat(c.prompt_tps.as_ref()),
            c.peak_vram_mib.map_or("-".into(), |v| fmt_mib(v as f64)),
            format!("confirmed ({} rounds)", c.trial_ids.len()),
        ]);
    }
    for t in r.trials.iter().filter(|t| t.role != TrialRole::Confirm) {
        rows.push(vec![
            label(t.role == TrialRole::Baseline, &t.config),
            stat(t.metrics.as_ref().map(|m| &m.gen_tps)),
            stat(t.metrics.as_ref().map(|m| &m.prompt_tps)),
            t.peak_vram_total_mib()
                .map_or("-".into(), |v| fmt_mib(v as f64)),
            t.kind.as_str().to_string(),
        ]);
    }
    out.push_str(&crate::util::text_table(
        &["config", "tg t/s", "pp t/s", "peak VRAM", "outcome"],
        &rows,
        &[1, 2, 3],
    ));
    for line in verdict_lines(r) {
        out.push_str(&line);
        out.push('\n');
    }
    for line in super::race::lines(r) {
        out.push_str(&line);
        out.push('\n');
    }
    for w in &r.warnings {
        out.push_str(&format!("warning: {}\n", terminal(w)));
    }
    out
}

/// A config in llama.cpp's own flags: `-ngl 999 --n-cpu-moe 12 -ub 2048 -ctk q8_0 ...`
/// (`(server defaults)` for none).
pub fn flags(c: &crate::config::LaunchConfig) -> String {
    let args: Vec<String> = c
        .server_args()
        .into_iter()
        .map(|a| crate::config::shell_quote(&a))
        .collect();
    if args.is_empty() {
        "(server defaults)".into()
    } else {
        args.join(" ")
    }
}

/// The default baseline in words; with the tune's thread cap (a busy box) where it had one.
fn default_phrase(c: &crate::config::LaunchConfig) -> String {
    match c.threads {
        Some(t) => format!("the bare default at -t {t} (the tune's thread cap)"),
        None => "the bare default".to_string(),
    }
}

fn reference_phrase(rf: &crate::run::Reference, trials: &[crate::trial::TrialOutcome]) -> String {
    let what = match rf.name.as_str() {
        "default" => default_phrase(&rf.config),
        _ => format!("`{}`", flags(&rf.config)),
    };
    let mut s = what;
    if let Some(o) = &rf.other {
        let other = match o.name.as_str() {
            "default" => default_phrase(&o.config),
            _ => format!("`{}`", flags(&o.config)),
        };
        if crate::trial::loaded_alike(trials, &rf.config, &o.config) {
            // `--fit-target` changes nothing where the model fits with room to spare.
            s.push_str(&format!(
                ", the same configuration as {other} on this card (both loaded the same buffers)"
            ));
        } else {
            s.push_str(&format!(", the better of it and {other}"));
            if let (Some(a), Some(b)) = (rf.request_s, o.request_s) {
                s.push_str(&format!(" ({a:.2} s vs {b:.2} s per request)"));
            }
        }
    }
    if rf.over_budget {
        s.push_str(&format!(
            "; its peak {} went past the VRAM budget",
            rf.peak_vram_mib.map_or("-".into(), |p| fmt_mib(p as f64))
        ));
    }
    s
}

/// The one verdict, worded once: the terminal prints it as lines ([`verdict_lines`]), report.md
/// as a list.
pub struct Verdict {
    /// The tune's workload, by name.
    pub workload: String,
    /// The recommended config in llama.cpp's flags.
    pub flags: String,
    /// One fact each: the workload's requests, the reference, time per request against it with
    /// its interval, generation and prompt, and how sure it is.
    pub facts: Vec<String>,
}

/// What is recommended in llama.cpp's flags, one number per metric against the reference with
/// its interval, and how sure it is (None without a winner).
pub fn verdict(r: &TuneResult) -> Option<Verdict> {
    let w = r.winner.as_ref()?;
    let mut facts = Vec::new();
    if let Some(m) = r.space.workload.objective_mix() {
        facts.push(format!("workload: {}", m.describe()));
    }
    if let Some(rf) = &w.reference {
        facts.push(format!("reference: {}", reference_phrase(rf, &r.trials)));
    }
    let vs = match (
        &w.request_vs_baseline,
        w.request_s,
        w.reference.as_ref().and_then(|r| r.request_s),
    ) {
        (Some(c), Some(a), Some(b)) => Some(format!(
            "time per request: {a:.2} s against {b:.2} s, {}",
            super::race::per_request(c)
        )),
        (None, Some(a), _) => Some(format!("time per request: {a:.2} s")),
        _ => None,
    };
    facts.extend(vs);
    match (&w.gen_vs_baseline, &w.prompt_vs_baseline) {
        (Some(g), Some(p)) => facts.push(format!("generation {g} · prompt {p}")),
        _ => facts.push(format!(
            "generation {:.1} tok/s · prompt {:.1} tok/s (medians; {})",
            w.gen_tps.median,
            w.prompt_tps.median,
            if w.status == Some(crate::run::VerdictStatus::Kept) {
                "the reference itself"
            } else {
                "not raced"
            }
        )),
    }
    let status = match w.status {
        Some(crate::run::VerdictStatus::Proven) => {
            "proven faster than the reference beyond its interval".to_string()
        }
        Some(crate::run::VerdictStatus::Likely) => {
            "likely faster (faster by its estimate, not measurably slower), not proven".to_string()
        }
        Some(crate::run::VerdictStatus::Kept) => {
            "the reference is kept: nothing beat it beyond the noise".to_string()
        }
        Some(crate::run::VerdictStatus::Unraced) | None => {
            "single launches only (no race): a ranking, not a proof".to_string()
        }
    };
    facts.push(format!("status: {status}"));
    Some(Verdict {
        workload: r.space.workload.name(),
        flags: flags(&w.config),
        facts,
    })
}

/// The verdict as the terminal prints it; then the best command for the other built-in
/// workloads from the trials already measured.
pub fn verdict_lines(r: &TuneResult) -> Vec<String> {
    let mut out = Vec::new();
    let Some(v) = verdict(r) else {
        return out;
    };
    out.push(String::new());
    out.push(format!(
        "recommended for {}: {}",
        terminal(&v.workload),
        v.flags
    ));
    out.extend(v.facts.iter().map(|f| format!("  {}", terminal(f))));
    let picks = r.workload_picks();
    if picks.len() > 1 {
        out.push("best command for each built-in workload (median time per request):".into());
        for p in &picks {
            let reference = match (p.reference_request_s, &p.reference_name) {
                (Some(t), Some(n)) if p.basis != Some(crate::run::PickBasis::Kept) => {
                    format!("; better baseline: {n}, {t:.2} s")
                }
                _ => String::new(),
            };
            out.push(format!(
                "  {}: {} · {:.2} s over {} launch{}{reference} ({})",
                terminal(&p.workload),
                flags(&p.config),
                p.request_s,
                p.launches,
                if p.launches == 1 { "" } else { "es" },
                p.why()
            ));
        }
    }
    out
}

/// The version of `qtune tune --json`'s layout: the run's `results.json` fields plus
/// `schema_version` and `verdict`.
pub const JSON_SCHEMA_VERSION: u32 = 2;

fn comparison_json(c: &crate::stats::Comparison) -> serde_json::Value {
    serde_json::json!({
        "gain_pct": c.gain_pct(),
        "interval_pct": c.interval_pct().map(|(lo, hi)| [lo, hi]),
        "ratio": c.ratio(),
        "rounds": c.rounds,
        "confidence": c.confidence,
    })
}

/// The one verdict as data: what is recommended (llama.cpp flags and the whole command), how
/// sure (`proven`, `likely`, `kept`, `unraced`), the reference and each metric against it with
/// its interval in percent, and the best command for each built-in workload.
pub fn verdict_json(r: &TuneResult) -> serde_json::Value {
    let Some(w) = &r.winner else {
        return serde_json::Value::Null;
    };
    let reference = |rf: &crate::run::Reference| {
        serde_json::json!({
            "name": rf.name,
            "flags": flags(&rf.config),
            "time_per_request_s": rf.request_s,
            "peak_vram_mib": rf.peak_vram_mib,
            "over_budget": rf.over_budget,
        })
    };
    serde_json::json!({
        "workload": r.space.workload.name(),
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
        "time_per_request_s": w.request_s,
        "vs_reference": {
            "time_per_request": w.request_vs_baseline.as_ref().map(comparison_json),
            "generation": w.gen_vs_baseline.as_ref().map(comparison_json),
            "prompt": w.prompt_vs_baseline.as_ref().map(comparison_json),
        },
        "workloads": r.workload_picks().iter().map(|p| serde_json::json!({
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

/// `qtune tune --json`: the run's result with `schema_version` and `verdict` first.
pub fn tune_json(r: &TuneResult) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    out.insert("schema_version".into(), JSON_SCHEMA_VERSION.into());
    out.insert("verdict".into(), verdict_json(r));
    if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(r) {
        out.extend(m);
    }
    serde_json::Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_verdict_names_the_recommendation_its_status_and_the_reference() {
        let r = crate::run::sample::gpu_result(
            std::path::Path::new("/opt/llama-server"),
            std::path::Path::new("/m/model.gguf"),
        );
        let v = tune_json(&r);
        assert_eq!(v["schema_version"], JSON_SCHEMA_VERSION);
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
    }

    #[test]
    fn two_baselines_that_loaded_the_same_buffers_are_called_one_configuration() {
        let reference_line = |run: &str| {
            let v = verdict(&crate::run::sample::committed(run)).unwrap();
            v.facts
                .into_iter()
                .find(|f| f.starts_with("reference:"))
                .unwrap()
        };
        // The 30B on a 24 GiB card: the model fits, --fit-target 512 changes nothing.
        let line = reference_line("gpu-h100-workload4/work30-24");
        assert!(
            line.contains("the same configuration as") && line.contains("loaded the same buffers"),
            "{line}"
        );
        // The 35B on 16 GiB: fit-target put more experts on the card.
        let line = reference_line("gpu-h100-workload3/work35-16");
        assert!(line.contains("the better of it and"), "{line}");
    }
}
