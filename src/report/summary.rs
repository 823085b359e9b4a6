//! The one-screen summary printed after a tune.

use super::TuneResult;
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
        r.model.name.as_deref().unwrap_or(&r.model.arch),
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
        "{} trials ({} search) in {:.1} min\n\n",
        r.trials.len(),
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
    if let Some(w) = &r.winner {
        out.push_str(&format!(
            "\nwinner: {}  tg {}  pp {}{}\n",
            w.config.label(),
            stat(Some(&w.gen_tps)),
            stat(Some(&w.prompt_tps)),
            match (w.gen_gain_pct, w.prompt_gain_pct) {
                (Some(g), Some(p)) => format!("  ({g:+.1}% tg, {p:+.1}% pp vs baseline)"),
                _ => String::new(),
            }
        ));
        if w.gen_vs_baseline.is_some() {
            out.push_str(&format!(
                "  paired vs baseline: {}\n",
                super::race::gains(w.gen_vs_baseline.as_ref(), w.prompt_vs_baseline.as_ref())
            ));
        }
    }
    for line in super::race::lines(r) {
        out.push_str(&line);
        out.push('\n');
    }
    for w in &r.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}
