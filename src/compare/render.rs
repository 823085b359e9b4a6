//! `qtune compare` for people: commands, per-round speeds, paired ratios, peak VRAM.

use super::*;

pub fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| shown(v, 1))
}

/// A measured quantity (tok/s, seconds) with `decimals`, or `implausible` for one that cannot
/// be a measurement (not finite, not positive, or a billion and more): never 300 digits.
fn shown(v: f64, decimals: usize) -> String {
    if v.is_finite() && v > 0.0 && v < 1e9 {
        format!("{v:.decimals$}")
    } else {
        "implausible".to_string()
    }
}

/// The comparison for people: commands, per-round speeds, paired ratios, peak VRAM.
pub fn render_text(r: &CompareResult) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let n = r.commands.len();
    let each = match &r.workload.replay {
        Some(rw) => format!(
            "each launch replays {}: {}",
            crate::escape::terminal(&rw.name),
            rw.plan.describe()
        ),
        None => format!(
            "{}-token prompts, {} generated tokens, {} requests per launch",
            r.workload.prompt_tokens, r.workload.gen_tokens, r.workload.repetitions
        ),
    };
    let _ = writeln!(
        s,
        "qtune compare: {n} commands, {} of {} rounds (in turn A B, then B A, so that a drifting box favours neither), {each}",
        r.rounds.len(),
        r.rounds_asked,
    );
    // Each command's engine, where one is not llama.cpp (two servers, or ik_llama.cpp's).
    let engines = r.commands.iter().any(|c| !c.config.engine.is_default());
    // The objective first: each command's time per request on the verdict's workload (the
    // median the verdict prints below), the lowest first.
    let verdict_times = r
        .workloads
        .iter()
        .find(|w| Some(w.workload.as_str()) == verdict_workload(r))
        .map(|w| w.median_request_s.clone());
    let mut order: Vec<(usize, Option<f64>, f64)> = r
        .commands
        .iter()
        .enumerate()
        .map(|(i, _)| {
            let t = verdict_times
                .as_ref()
                .and_then(|v| v.get(i).copied().flatten());
            (i, t, 0.0)
        })
        .collect();
    if verdict_times.is_some() {
        order.sort_by(|a, b| crate::util::by_time(a.1, a.2, b.1, b.2).then(a.0.cmp(&b.0)));
    }
    for (i, t, _) in order {
        let c = &r.commands[i];
        let engine = if engines {
            format!("  ({})", c.config.engine)
        } else {
            String::new()
        };
        let time = match (&verdict_times, t) {
            (None, _) => String::new(),
            (Some(_), Some(t)) => format!("{} s/request  ", shown(t, 2)),
            (Some(_), None) => "- s/request  ".to_string(),
        };
        let _ = writeln!(
            s,
            "  {}  {time}{}{engine}",
            crate::escape::terminal(&c.name),
            crate::escape::terminal(&c.line)
        );
    }
    let _ = writeln!(s);
    let _ = write!(s, "{:>5}  {:<order$}", "round", "order", order = 2 * n);
    for c in &r.commands {
        let _ = write!(
            s,
            "  {:>9} {:>9}",
            format!("{} tg t/s", c.name),
            format!("{} pp t/s", c.name)
        );
    }
    let _ = writeln!(s);
    for (i, round) in r.rounds.iter().enumerate() {
        let order: Vec<String> = round.order.iter().map(|&c| command_name(c)).collect();
        let _ = write!(s, "{:>5}  {:<w$}", i + 1, order.join(" "), w = 2 * n);
        for c in 0..n {
            let l = round.launches.iter().find(|l| l.command == c);
            let (g, p) = match l {
                Some(l) if l.gen_tps.is_some() => (fmt_opt(l.gen_tps), fmt_opt(l.prompt_tps)),
                Some(l) => (l.outcome.clone(), "-".into()),
                None => ("-".into(), "-".into()),
            };
            let _ = write!(s, "  {g:>9} {p:>9}");
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "against A (per-round ratios in logs, Student-t {} % interval, tie band ±{} %):",
        (r.confidence * 100.0).round(),
        r.band_pct
    );
    let chosen = verdict_workload(r);
    for a in &r.against_first {
        let name = command_name(a.command);
        match &a.verdict {
            Some(v) => {
                let ratios = |r: &[f64], m: Option<f64>| {
                    let each: Vec<String> = r.iter().map(|&x| crate::stats::fmt_ratio(x)).collect();
                    format!(
                        "median ratio {} (rounds: {})",
                        m.map_or("-".into(), crate::stats::fmt_ratio),
                        each.join(", ")
                    )
                };
                // A comparison too thin to claim says "undecided" itself.
                let said = |c: &crate::stats::Comparison, d: crate::stats::Decision| {
                    if c.too_noisy().is_some() {
                        c.to_string()
                    } else {
                        format!("{c}: {d}")
                    }
                };
                let _ = writeln!(s, "  {name}  generation {}", said(&v.gen, v.gen_decision));
                let _ = writeln!(
                    s,
                    "                {}",
                    ratios(&a.gen_ratios, a.gen_median_ratio)
                );
                let _ = writeln!(s, "     prompt     {}", said(&v.prompt, v.prompt_decision));
                let _ = writeln!(
                    s,
                    "                {}",
                    ratios(&a.prompt_ratios, a.prompt_median_ratio)
                );
                if chosen.is_none() {
                    let _ = writeln!(
                        s,
                        "     verdict: {} (decided by {}; generation leads, prompt speed decides inside a generation tie)",
                        v.decision,
                        v.decided_by.as_str()
                    );
                }
            }
            None => {
                let _ = writeln!(s, "  {name}  no round where both {name} and A measured");
            }
        }
    }
    let peaks: Vec<String> = r
        .peak_vram_mib
        .iter()
        .enumerate()
        .map(|(c, p)| {
            format!(
                "{} {}",
                command_name(c),
                p.map_or("not sampled".into(), |m| crate::util::fmt_mib(m as f64))
            )
        })
        .collect();
    let band = Band { pct: r.band_pct };
    let block = |s: &mut String, w: &WorkloadComparison, verdict: bool| {
        let (head, indent) = if verdict {
            ("verdict on ", "  ")
        } else {
            ("  ", "    ")
        };
        let _ = writeln!(
            s,
            "{head}{} (time per request, medians): {}",
            crate::escape::terminal(&w.workload),
            per_command_times(&w.median_request_s)
        );
        if !w.median_p90_s.is_empty() {
            let _ = writeln!(
                s,
                "  90th percentile of the time per request (medians): {}",
                per_command_times(&w.median_p90_s)
            );
        }
        if !w.median_aggregate_tps.is_empty() {
            aggregate_lines(s, w, indent);
        }
        for p in &w.pairs {
            let (c, reference) = (command_name(p.command), command_name(p.reference));
            let _ = writeln!(
                s,
                "{indent}{}",
                p.comparison
                    .as_ref()
                    .map_or(format!("{c} against {reference}: no paired round"), |x| {
                        crate::report::race::ran(&c, &reference, x, band)
                    })
            );
        }
    };
    let (mine, others): (Vec<&WorkloadComparison>, Vec<&WorkloadComparison>) = r
        .workloads
        .iter()
        .partition(|w| Some(w.workload.as_str()) == chosen);
    for w in &mine {
        block(&mut s, w, true);
    }
    if !others.is_empty() {
        let _ = writeln!(
            s,
            "measured, not raced ({}same rounds; not the verdict):",
            if mine.is_empty() {
                ""
            } else {
                "the other workloads, "
            }
        );
        for w in others {
            block(&mut s, w, false);
        }
    }
    let spec = super::speculation::lines(&r.speculation);
    if !spec.is_empty() {
        let _ = writeln!(
            s,
            "speculative decoding (the server's own counts; answers greedy):"
        );
        for l in spec {
            let _ = writeln!(
                s,
                "  {}",
                crate::util::wrap(&l, crate::util::COLUMNS - 2, "      ")
            );
        }
    }
    let _ = writeln!(s, "peak VRAM: {}", peaks.join(", "));
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}

/// With `--workload`, the verdict is that workload's time per request; the others are
/// measured in the same rounds, not the verdict (None: no workload was asked for).
fn verdict_workload(r: &CompareResult) -> Option<&str> {
    match &r.workload.replay {
        Some(rw) => Some(rw.name.as_str()),
        None => r
            .workload
            .mix
            .as_ref()
            .and(r.workload.objective_mix())
            .map(|m| m.name.as_str()),
    }
}

/// `A 1.86 s, B 1.96 s`: one time per command, `-` where it has none, `implausible` where the
/// number cannot be real ([`shown`]).
fn per_command_times(times: &[Option<f64>]) -> String {
    let each: Vec<String> = times
        .iter()
        .enumerate()
        .map(|(c, t)| {
            let t = t.map_or("-".into(), |t| match shown(t, 2) {
                s if s.starts_with(|c: char| c.is_ascii_digit()) => format!("{s} s"),
                s => s,
            });
            format!("{} {t}", command_name(c))
        })
        .collect();
    each.join(", ")
}

/// A replay's aggregate generation (all generated tokens over its wall clock): each command's
/// median, then every pair's ratio with its interval (shown even where too few rounds support
/// a claim, marked so).
fn aggregate_lines(s: &mut String, w: &WorkloadComparison, indent: &str) {
    use std::fmt::Write;
    let each: Vec<String> = w
        .median_aggregate_tps
        .iter()
        .enumerate()
        .map(|(c, t)| {
            format!(
                "{} {}",
                command_name(c),
                t.map_or("-".into(), |t| shown(t, 1))
            )
        })
        .collect();
    let _ = writeln!(
        s,
        "  aggregate generation (all generated tokens over the replay's wall time, medians, tok/s): {}",
        each.join(", ")
    );
    for p in &w.aggregate_pairs {
        let (c, reference) = (command_name(p.command), command_name(p.reference));
        let Some(x) = p.comparison.as_ref().filter(|x| x.is_plausible()) else {
            let _ = writeln!(s, "{indent}{c} against {reference}: no paired round");
            continue;
        };
        let interval = match (x.lo_log, x.hi_log) {
            (Some(lo), Some(hi)) => format!(
                " [{:.2}, {:.2}] ({} %, {}{})",
                lo.exp(),
                hi.exp(),
                crate::stats::fmt_level(x.confidence),
                crate::stats::plural_rounds(x.rounds),
                x.too_noisy()
                    .map_or(String::new(), |_| ": too few or too noisy to claim".into())
            ),
            _ => format!(" ({})", crate::stats::plural_rounds(x.rounds)),
        };
        let _ = writeln!(
            s,
            "{indent}{c} generated {:.2}× the aggregate tokens/s of {reference}{interval}",
            x.ratio()
        );
    }
}
