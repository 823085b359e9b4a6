//! `qtune compare` for people: commands, per-round speeds, paired ratios, peak VRAM.

use super::*;
use crate::util::COLUMNS;

/// A space that no line breaks at (`A 8.10 s` stays whole); a space again once the text is
/// wrapped. Text from outside never holds it: [`crate::escape::terminal`] escapes it.
const GLUE: char = '\u{1}';

fn glued(text: &str) -> String {
    text.replace(' ', &GLUE.to_string())
}

/// A command whose flags stay on one line with their values when it wraps (`-t 1`, never `-t`
/// at a line's end and `1` below it).
fn flags_with_values(line: &str) -> String {
    let words: Vec<&str> = line.split(' ').collect();
    let mut out = String::with_capacity(line.len());
    for (i, w) in words.iter().enumerate() {
        out.push_str(w);
        if let Some(next) = words.get(i + 1) {
            let value = w.starts_with('-') && !next.starts_with('-');
            out.push(if value { GLUE } else { ' ' });
        }
    }
    out
}

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
            "{}-token prompts, {} generated tokens, {} request{} per launch",
            r.workload.prompt_tokens,
            r.workload.gen_tokens,
            r.workload.repetitions,
            if r.workload.repetitions == 1 { "" } else { "s" }
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
    // A command wider than the columns continues past its name's column.
    let name_w = r
        .commands
        .iter()
        .map(|c| c.name.chars().count())
        .max()
        .unwrap_or(1);
    let cont = " ".repeat(name_w + 4);
    for (i, t, _) in order {
        let c = &r.commands[i];
        let engine = if engines {
            format!("{GLUE}{GLUE}({})", c.config.engine)
        } else {
            String::new()
        };
        let time = match (&verdict_times, t) {
            (None, _) => String::new(),
            (Some(_), Some(t)) => format!("{} s/request  ", shown(t, 2)),
            (Some(_), None) => "- s/request  ".to_string(),
        };
        let line = format!(
            "{}{}{}",
            glued(&format!(
                "{:<name_w$}  {time}",
                crate::escape::terminal(&c.name)
            )),
            flags_with_values(&crate::escape::terminal(&c.line)),
            engine
        );
        let _ = writeln!(s, "  {}", crate::util::wrap(&line, COLUMNS - 2, &cont));
    }
    let _ = writeln!(s);
    round_table(&mut s, r);
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "against A (per-round ratios in logs, Student-t {} % interval, tie band ±{} %):",
        (r.confidence * 100.0).round(),
        r.band_pct
    );
    let chosen = verdict_workload(r);
    // The commands with no round beside A: one line for them all, where the first stood.
    let unpaired: Vec<String> = r
        .against_first
        .iter()
        .filter(|a| a.verdict.is_none())
        .map(|a| command_name(a.command))
        .collect();
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
            None if unpaired.len() == 1 => {
                let _ = writeln!(s, "  {name}  no round where both {name} and A measured");
            }
            None if unpaired.first() == Some(&name) => {
                let _ = writeln!(
                    s,
                    "  {}  no round where A and any of them both measured",
                    unpaired.join(", ")
                );
            }
            None => {}
        }
    }
    let peaks: Vec<String> = r
        .peak_vram_mib
        .iter()
        .enumerate()
        .map(|(c, p)| {
            glued(&format!(
                "{} {}",
                command_name(c),
                p.map_or("not sampled".into(), |m| crate::util::fmt_mib(m as f64))
            ))
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
        // A command with no time here pairs with none: one line for them all.
        let nothing = unmeasured(&w.median_request_s);
        if !nothing.is_empty() {
            let names: Vec<String> = nothing.iter().map(|&c| command_name(c)).collect();
            let _ = writeln!(
                s,
                "{indent}{}: measured nothing here, so no paired round{}",
                names.join(", "),
                if r.warnings.is_empty() {
                    ""
                } else {
                    " (see the warnings)"
                }
            );
        }
        if !w.median_aggregate_tps.is_empty() {
            aggregate_lines(s, w, indent, &nothing);
        }
        for p in &w.pairs {
            if nothing.contains(&p.command) || nothing.contains(&p.reference) {
                continue;
            }
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
    // Every line within the columns: each wider one wraps, its continuation indented past
    // its own indent (the table and the commands are already within them).
    crate::util::fit(&s).replace(GLUE, " ")
}

/// The per-round table: each round's order and each command's generation and prompt speeds
/// (or its outcome), in chunks of commands that fit the columns, each repeating `round` and
/// `order`.
fn round_table(s: &mut String, r: &CompareResult) {
    use std::fmt::Write;
    let cells: Vec<Vec<(String, String)>> = (0..r.commands.len())
        .map(|c| {
            r.rounds
                .iter()
                .map(
                    |round| match round.launches.iter().find(|l| l.command == c) {
                        Some(l) if l.gen_tps.is_some() => {
                            (fmt_opt(l.gen_tps), fmt_opt(l.prompt_tps))
                        }
                        Some(l) => (crate::escape::terminal(&l.outcome), "-".into()),
                        None => ("-".into(), "-".into()),
                    },
                )
                .collect()
        })
        .collect();
    let heads: Vec<(String, String)> = r
        .commands
        .iter()
        .map(|c| {
            let name = crate::escape::terminal(&c.name);
            (format!("{name} tg t/s"), format!("{name} pp t/s"))
        })
        .collect();
    // Each command's column: two cells of the widest of its header and values.
    let widths: Vec<usize> = heads
        .iter()
        .zip(&cells)
        .map(|((g, p), rows)| {
            rows.iter()
                .flat_map(|(g, p)| [g, p])
                .chain([g, p])
                .map(|x| x.chars().count())
                .max()
                .unwrap_or(9)
                .max(9)
        })
        .collect();
    let orders: Vec<String> = r
        .rounds
        .iter()
        .map(|round| {
            let o: Vec<String> = round.order.iter().map(|&c| command_name(c)).collect();
            o.join(" ")
        })
        .collect();
    let order_w = orders
        .iter()
        .map(|o| o.chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    let fixed = 5 + 2 + order_w;
    // Commands in chunks as wide as the columns allow (at least one command each).
    let mut chunks: Vec<Vec<usize>> = Vec::new();
    let mut width = fixed;
    for (c, w) in widths.iter().enumerate() {
        let add = 2 + 2 * w + 1;
        match chunks.last_mut() {
            Some(chunk) if width + add <= COLUMNS => chunk.push(c),
            _ => {
                chunks.push(vec![c]);
                width = fixed;
            }
        }
        width += add;
    }
    for (k, chunk) in chunks.iter().enumerate() {
        if k > 0 {
            let _ = writeln!(s);
        }
        let _ = write!(s, "{:>5}  {:<order_w$}", "round", "order");
        for &c in chunk {
            let (g, p, w) = (&heads[c].0, &heads[c].1, widths[c]);
            let _ = write!(s, "  {g:>w$} {p:>w$}");
        }
        let _ = writeln!(s);
        for (i, order) in orders.iter().enumerate() {
            let _ = write!(s, "{:>5}  {order:<order_w$}", i + 1);
            for &c in chunk {
                let ((g, p), w) = (&cells[c][i], widths[c]);
                let _ = write!(s, "  {g:>w$} {p:>w$}");
            }
            let _ = writeln!(s);
        }
    }
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
            glued(&format!("{} {t}", command_name(c)))
        })
        .collect();
    each.join(", ")
}

/// The commands (indices) with no value in `per_command`.
fn unmeasured(per_command: &[Option<f64>]) -> Vec<usize> {
    (0..per_command.len())
        .filter(|&c| per_command[c].is_none())
        .collect()
}

/// A replay's aggregate generation (all generated tokens over its wall clock): each command's
/// median, then every pair's ratio with its interval (shown even where too few rounds support
/// a claim, marked so).
/// Pairs with a command of `nothing` (no time here, said once above) are left out, and so are
/// those with a command that has no aggregate, named once.
fn aggregate_lines(s: &mut String, w: &WorkloadComparison, indent: &str, nothing: &[usize]) {
    use std::fmt::Write;
    let each: Vec<String> = w
        .median_aggregate_tps
        .iter()
        .enumerate()
        .map(|(c, t)| {
            glued(&format!(
                "{} {}",
                command_name(c),
                t.map_or("-".into(), |t| shown(t, 1))
            ))
        })
        .collect();
    let _ = writeln!(
        s,
        "  aggregate generation (all generated tokens over the replay's wall time, medians, tok/s): {}",
        each.join(", ")
    );
    let none = unmeasured(&w.median_aggregate_tps);
    let unsaid: Vec<String> = none
        .iter()
        .filter(|c| !nothing.contains(c))
        .map(|&c| command_name(c))
        .collect();
    if !unsaid.is_empty() {
        let _ = writeln!(
            s,
            "{indent}{}: no aggregate generation here, so no paired round",
            unsaid.join(", ")
        );
    }
    for p in &w.aggregate_pairs {
        if none.contains(&p.command) || none.contains(&p.reference) {
            continue;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrapped command keeps each flag with its value; a switch before a flag stays apart.
    #[test]
    fn a_flag_keeps_its_value_on_its_line() {
        let g = flags_with_values("llama-server -m m.gguf -t 1 --mlock -fa on");
        assert_eq!(
            g.split(' ').collect::<Vec<_>>(),
            [
                "llama-server",
                "-m\u{1}m.gguf",
                "-t\u{1}1",
                "--mlock",
                "-fa\u{1}on"
            ]
        );
        let wrapped = crate::util::wrap(&g, 20, "  ").replace(GLUE, " ");
        assert_eq!(wrapped, "llama-server\n  -m m.gguf -t 1\n  --mlock -fa on");
    }

    /// Issue 56's GPU probe: 8 commands, one round, A measured and B..H each aborted with the
    /// same CUDA fault; its warnings summarized again (compare.json keeps the old wording).
    fn seven_crashed() -> CompareResult {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/evidence/gpu-h200-ik56-2/probe30-16/compare.json.gz"
        );
        let f = std::fs::File::open(path).unwrap();
        let mut r: CompareResult =
            serde_json::from_reader(flate2::read::GzDecoder::new(f)).unwrap();
        let band = Band { pct: r.band_pct };
        r.warnings = summarize(&r.rounds, r.commands.len(), r.confidence, band).2;
        r
    }

    #[test]
    fn seven_crashed_commands_read_in_few_lines_within_the_columns() {
        let r = seven_crashed();
        let t = render_text(&r);
        for l in t.lines() {
            assert!(
                l.chars().count() <= COLUMNS,
                "{} columns: {l}",
                l.chars().count()
            );
        }
        // No pair among the crashed ones, and no pair of a crashed one with A, on its own line.
        assert!(!t.contains("against B: no paired round"), "{t}");
        assert!(!t.contains("B against A: no paired round"), "{t}");
        let nothing = "B, C, D, E, F, G, H: measured nothing here, so no paired round";
        assert_eq!(t.matches(nothing).count(), r.workloads.len(), "{t}");
        // One warning per reason: B..G aborted loading, H serving a request.
        assert_eq!(r.warnings.len(), 2, "{:#?}", r.warnings);
        assert!(
            r.warnings[0].starts_with(
                "B, C, D, E, F, G in round 1 did not measure (crash: llama-server aborted while"
            ),
            "{}",
            r.warnings[0]
        );
        assert!(
            r.warnings[1].starts_with("H in round 1 did not measure (crash: llama-server aborted"),
            "{}",
            r.warnings[1]
        );
        assert_eq!(t.matches("warning: ").count(), 2, "{t}");
        let against = "B, C, D, E, F, G, H  no round where A and any of them both measured";
        assert_eq!(t.matches(against).count(), 1, "{t}");
        assert!(!t.contains("no round where both"), "{t}");
        // The per-round table, in chunks that each repeat the round column.
        assert!(t.matches("round  order").count() >= 2, "{t}");
        assert!(t.contains("H tg t/s"), "{t}");
    }

    /// Two commands that measured but never in one round keep their pair's own line; only
    /// those that measured nothing are said together.
    #[test]
    fn commands_that_measured_but_never_together_keep_their_pair_line() {
        let mut r = seven_crashed();
        r.workloads[0].median_request_s[1] = Some(9.0);
        r.workloads[0].median_request_s[2] = Some(9.5);
        let t = render_text(&r);
        let chat: Vec<&str> = t
            .lines()
            .skip_while(|l| !l.starts_with("verdict on chat"))
            .take_while(|l| !l.starts_with("measured, not raced"))
            .collect();
        assert_eq!(
            chat[1..],
            [
                "  D, E, F, G, H: measured nothing here, so no paired round (see the warnings)",
                "  B against A: no paired round",
                "  C against A: no paired round",
                "  C against B: no paired round",
            ],
            "{t}"
        );
    }
}
