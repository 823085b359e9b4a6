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
    out.push_str(&format!(
        "{:<46} {:>14} {:>16} {:>12}  {}\n",
        "config", "tg t/s", "pp t/s", "peak VRAM", "outcome"
    ));
    // The confirmation first (what decided), then every search trial that failed or ranked.
    for c in &r.confirmation {
        out.push_str(&format!(
            "{:<46} {:>14} {:>16} {:>12}  {}\n",
            format!(
                "{}{}",
                if c.is_baseline { "[baseline] " } else { "" },
                c.config.label()
            ),
            stat(c.gen_tps.as_ref()),
            stat(c.prompt_tps.as_ref()),
            c.peak_vram_mib.map_or("-".into(), |v| fmt_mib(v as f64)),
            format_args!("confirmed ({} rounds)", c.trial_ids.len())
        ));
    }
    for t in r.trials.iter().filter(|t| t.role != TrialRole::Confirm) {
        out.push_str(&format!(
            "{:<46} {:>14} {:>16} {:>12}  {}\n",
            format!(
                "{}{}",
                if t.role == TrialRole::Baseline {
                    "[baseline] "
                } else {
                    ""
                },
                t.config.label()
            ),
            stat(t.metrics.as_ref().map(|m| &m.gen_tps)),
            stat(t.metrics.as_ref().map(|m| &m.prompt_tps)),
            t.peak_vram_total_mib()
                .map_or("-".into(), |v| fmt_mib(v as f64)),
            t.kind.as_str()
        ));
    }
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
    }
    for w in &r.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}
