//! The race against the baseline in words: each raced config's paired gains with their
//! intervals, the named picks, and the noise the race measured.

use crate::run::TuneResult;
use crate::stats::race::ArmStatus;

/// `generation +4.1 % [−1.2, +9.6] (95 %, 6 rounds), prompt +61.0 % [...]`, or `not raced`.
pub fn gains(
    gen: Option<&crate::stats::Comparison>,
    prompt: Option<&crate::stats::Comparison>,
) -> String {
    match (gen, prompt) {
        (Some(g), Some(p)) => format!("generation {g}, prompt {p}"),
        (Some(g), None) => format!("generation {g}"),
        _ => "no paired rounds".to_string(),
    }
}

fn status(s: &ArmStatus) -> String {
    match s {
        ArmStatus::Racing => "raced to the end".into(),
        ArmStatus::Dropped {
            after_round,
            reason,
        } => {
            format!("dropped after round {after_round}: {reason}")
        }
        ArmStatus::Failed { round } => format!("failed in round {round}"),
        ArmStatus::NotRaced { reason } => format!("not raced: {reason}"),
    }
}

/// Lines describing the race (empty when none ran): what it spent and decided, each raced
/// config against the baseline, and the named picks.
pub fn lines(r: &TuneResult) -> Vec<String> {
    let Some(race) = &r.race else {
        return Vec::new();
    };
    let o = &race.outcome;
    let mut out = Vec::new();
    let noise = o
        .pair_sigma_pct
        .map(|s| format!(", paired noise σ {s:.1} %"))
        .unwrap_or_default();
    out.push(format!(
        "race against the baseline: {} launches, {} paired ABBA rounds{noise}; {}",
        o.launches,
        o.rounds.len(),
        o.reason
    ));
    for c in &o.candidates {
        let Some(cfg) = race.candidates.get(c.index) else {
            continue;
        };
        let v = c.vs_reference.as_ref();
        out.push(format!(
            "  {}: {} ({})",
            cfg.label(),
            gains(v.map(|v| &v.gen), v.map(|v| &v.prompt)),
            status(&c.status)
        ));
    }
    let picks = r.named_picks();
    if !picks.is_empty() {
        out.push("picks:".to_string());
        for p in picks {
            let g = if p.gen.is_none() && p.prompt.is_none() && p.name == "the default" {
                "the reference".to_string()
            } else {
                gains(p.gen.as_ref(), p.prompt.as_ref())
            };
            out.push(format!("  {}: {} ({g})", p.name, p.config.label()));
        }
    }
    out
}
