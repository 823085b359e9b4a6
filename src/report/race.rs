//! The race against the reference in words: each raced config's paired comparison with its
//! interval (per request for a workload objective; generation and prompt otherwise, or as
//! secondary lines), the named picks of a generation objective, and the noise the race measured.

use crate::engine::LaunchArgs;
use crate::run::TuneResult;
use crate::stats::race::ArmStatus;
use crate::stats::Band;

/// How outside text is escaped where the lines go.
pub type Esc = fn(&str) -> String;

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

/// An arm's status; `over`: the race ended by itself (not cut off by the tune's budget); its
/// reason, read from a results file, through `esc`.
fn status(s: &ArmStatus, over: bool, esc: Esc) -> String {
    match s {
        ArmStatus::Racing if over => "raced to the end".into(),
        ArmStatus::Racing => "still racing when the budget ended the tune".into(),
        ArmStatus::Dropped {
            after_round,
            reason,
        } => {
            format!("dropped after round {after_round}: {}", esc(reason))
        }
        ArmStatus::Failed { round } => format!("failed in round {round}"),
        ArmStatus::NotRaced { reason } => format!("not raced: {}", esc(reason)),
    }
}

/// The baseline every candidate raced against, by name (`default`, `fit-target`), when the
/// result says (files written before there were two baselines do not).
fn reference_name(r: &TuneResult) -> Option<&str> {
    r.winner
        .as_ref()?
        .reference
        .as_ref()
        .map(|rf| rf.name.as_str())
}

/// Lines describing the race (empty when none ran): what it spent and decided, each raced
/// config against the reference, and (for a generation objective) the named picks. With the
/// workload's time per request as the objective, each config's line states it per request,
/// generation and prompt follow as a secondary line, and the two baselines' own comparison
/// says which became the reference.
///
/// The race's reasons come from the results file, which anyone may have edited: each goes
/// through `esc` ([`crate::escape::terminal`] for the terminal, [`crate::escape::markdown`]
/// for report.md), as other outside text does.
pub fn lines(r: &TuneResult, esc: Esc) -> Vec<String> {
    let Some(race) = &r.race else {
        return Vec::new();
    };
    let by_request = r.inputs.space.objective.metric == crate::objective::Metric::Request;
    let o = &race.outcome;
    let mut out = Vec::new();
    // The statistic behind the noise goes to the log (-v); the line says it in words.
    if let Some(s) = o.pair_sigma_pct {
        tracing::debug!("race: paired noise sigma {s:.2} % per round");
    }
    let noise = o
        .pair_sigma_pct
        .map(|s| format!(", launches of one config differing by about {s:.1} %"))
        .unwrap_or_default();
    let against = match (by_request, reference_name(r)) {
        (true, Some(n)) => format!("the reference ({n}, the better baseline)"),
        (true, None) => "the reference".to_string(),
        (false, _) => "the baseline".to_string(),
    };
    out.push(format!(
        "race against {against}: {}, {} (each: the reference and every candidate, order alternating){noise}; {}",
        crate::util::count(o.launches as u64, "launch", "launches"),
        crate::util::count(o.rounds.len() as u64, "round", "rounds"),
        esc(&o.reason)
    ));
    if by_request {
        if let Some(c) = o.second_vs_first.as_ref().and_then(|v| v.request.as_ref()) {
            out.push(format!(
                "  {}",
                ran("fit-target", "the default", c, Band::default())
            ));
        }
    }
    let over = r.budget_stop.is_none();
    for c in &o.candidates {
        let Some(cfg) = race.candidates.get(c.index) else {
            continue;
        };
        let v = c.vs_reference.as_ref();
        match v.and_then(|v| v.request.as_ref()).filter(|_| by_request) {
            Some(req) => {
                let claim = c.claim.as_ref().and_then(|v| v.request.as_ref());
                out.push(format!(
                    "  {} ({})",
                    ran_claimed(
                        &format!("`{}`", cfg.label()),
                        "the reference",
                        req,
                        claim,
                        Band::default()
                    ),
                    status(&c.status, over, esc)
                ));
                out.push(format!(
                    "    {}",
                    gains(v.map(|v| &v.gen), v.map(|v| &v.prompt))
                ));
            }
            None => out.push(format!(
                "  {}: {} ({})",
                cfg.label(),
                gains(v.map(|v| &v.gen), v.map(|v| &v.prompt)),
                status(&c.status, over, esc)
            )),
        }
    }
    let picks = if by_request {
        Vec::new()
    } else {
        r.named_picks()
    };
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

/// [`ran`] at the reporting confidence, and where the race's own claim (at its stricter
/// confidence, split over its looks and candidates) decides otherwise, that decision beside it:
/// `... (95 % CI 1.02×–1.20×, 4 rounds: better at 95 %; undecided at the race's 98.75 %)`. A
/// line that said "better" beside a verdict that kept the reference contradicted it (issue 52).
pub fn ran_claimed(
    name: &str,
    reference: &str,
    c: &crate::stats::Comparison,
    claim: Option<&crate::stats::Comparison>,
    band: Band,
) -> String {
    let line = ran(name, reference, c, band);
    let Some(cl) = claim else {
        return line;
    };
    if c.too_noisy().is_some() || !c.is_plausible() || !cl.is_plausible() {
        return line;
    }
    let (shown, decided) = (c.decide(band), cl.decide(band));
    if shown == decided || cl.too_noisy().is_some() {
        return line;
    }
    match line.strip_suffix(')') {
        Some(head) => format!(
            "{head} at {} %; {decided} at the race's {} %)",
            crate::stats::fmt_level(c.confidence),
            crate::stats::fmt_level(cl.confidence)
        ),
        None => line,
    }
}

/// A requests-per-second comparison (the ratio of times per request) in hyperfine's words:
/// `'B' ran 1.15× faster than 'A' (95 % CI 1.06×–1.24×, 4 rounds: better)`. Where the rounds
/// support no claim ([`crate::stats::Comparison::too_noisy`]) no interval is printed:
/// `'B' ran 1.10× slower than 'A' (undecided: too few rounds to tell (2 rounds; 3 needed))`.
pub fn ran(name: &str, reference: &str, c: &crate::stats::Comparison, band: Band) -> String {
    if !c.is_plausible() {
        return format!("{name} against {reference}: {c}");
    }
    let ratio = c.ratio();
    let faster = ratio >= 1.0;
    let (word, shown) = if faster {
        ("faster", ratio)
    } else {
        ("slower", 1.0 / ratio)
    };
    let why = match c.too_noisy() {
        Some(why) => format!("undecided: {why}"),
        None => {
            let (lo, hi) = (c.lo_log.unwrap_or(0.0).exp(), c.hi_log.unwrap_or(0.0).exp());
            let (lo, hi) = if faster {
                (lo, hi)
            } else {
                (1.0 / hi, 1.0 / lo)
            };
            format!(
                "{} % CI {lo:.2}×–{hi:.2}×, {}: {}",
                crate::stats::fmt_level(c.confidence),
                crate::stats::plural_rounds(c.rounds),
                c.decide(band)
            )
        }
    };
    format!("{name} ran {shown:.2}× {word} than {reference} ({why})")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GPU machine's agent-session tune (issue 52): 4 rounds of 1.11x whose 95 % interval
    /// cleared the band while the race's claim, at 98.75 % over its looks, did not: the line
    /// said "better" beside a verdict that kept the reference.
    #[test]
    fn a_line_never_says_better_where_the_race_decided_otherwise() {
        let logs = [0.17, 0.06, 0.09, 0.10];
        let shown = crate::stats::Comparison::from_log_ratios(&logs, 0.95).unwrap();
        let claim = crate::stats::Comparison::from_log_ratios(&logs, 0.9875).unwrap();
        assert_eq!(shown.decide(Band::default()).to_string(), "better");
        assert_eq!(claim.decide(Band::default()).to_string(), "undecided");
        let line = ran_claimed("B", "A", &shown, Some(&claim), Band::default());
        assert!(
            line.ends_with("4 rounds: better at 95 %; undecided at the race's 98.8 %)"),
            "{line}"
        );
        // Where both agree, the line is ran's.
        assert_eq!(
            ran_claimed("B", "A", &shown, Some(&shown), Band::default()),
            ran("B", "A", &shown, Band::default())
        );
    }
}
