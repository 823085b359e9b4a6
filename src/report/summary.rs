//! The one-screen summary printed after a tune.

use super::TuneResult;
use crate::engine::LaunchArgs;
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
        r.inputs.hardware.summary(),
        match r.inputs.vram_budget_mib {
            Some(b) if !r.inputs.gpu_budgets.is_empty() => format!(
                "VRAM budget {} = {} (free − headroom {} on each card)",
                fmt_mib(b as f64),
                r.inputs
                    .gpu_budgets
                    .iter()
                    .map(|g| format!("CUDA{} {}", g.index, fmt_mib(g.budget_mib as f64)))
                    .collect::<Vec<_>>()
                    .join(" + "),
                fmt_mib(r.inputs.headroom_mib as f64)
            ),
            Some(b) => format!(
                "VRAM budget {} (free {} − headroom {})",
                fmt_mib(b as f64),
                fmt_mib(r.inputs.free_vram_at_start_mib as f64),
                fmt_mib(r.inputs.headroom_mib as f64)
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
    // Every config once, in the tune's objective: the lowest time per request first (the
    // number the verdict prints, [`TuneResult::objective_time`]), the ones that failed last.
    let mut rows: Vec<(Option<f64>, f64, Vec<String>)> = Vec::new();
    // Where the tune raced two engines, the other engine's configs say whose they are (its
    // `server defaults` is not the tuned engine's).
    let first_engine = r.inputs.space.fixed.engine;
    let label = |baseline: bool, c: &crate::config::LaunchConfig| {
        let engine = (c.engine != first_engine).then(|| c.engine.to_string());
        let tag = match (engine, baseline) {
            (Some(e), true) => format!("[{e} baseline] "),
            (Some(e), false) => format!("[{e}] "),
            (None, true) => "[baseline] ".to_string(),
            (None, false) => String::new(),
        };
        format!("{tag}{}", c.label())
    };
    let time = |c: &crate::config::LaunchConfig, stored: Option<f64>| {
        r.objective_time(c, stored).map(|t| t.seconds)
    };
    for c in &r.confirmation {
        let stored = r
            .winner
            .as_ref()
            .filter(|w| w.config == c.config)
            .and_then(|w| w.request_s);
        let t = time(&c.config, stored);
        let mut outcome = format!(
            "confirmed ({})",
            crate::util::count(c.trial_ids.len() as u64, "round", "rounds")
        );
        if r.winner.as_ref().is_some_and(|w| w.config == c.config) {
            outcome.push_str(", recommended");
        }
        rows.push((
            t,
            c.gen_tps.as_ref().map_or(f64::NEG_INFINITY, |s| s.median),
            vec![
                label(c.is_baseline, &c.config),
                seconds(t),
                stat(c.gen_tps.as_ref()),
                stat(c.prompt_tps.as_ref()),
                c.peak_vram_mib.map_or("-".into(), |v| fmt_mib(v as f64)),
                outcome,
            ],
        ));
    }
    for g in pooled_configs(r) {
        let t = time(&g.config, None);
        rows.push((
            t,
            g.gen.as_ref().map_or(f64::NEG_INFINITY, |s| s.median),
            vec![
                label(g.baseline, &g.config),
                seconds(t),
                stat(g.gen.as_ref()),
                stat(g.prompt.as_ref()),
                g.peak_vram_mib.map_or("-".into(), |v| fmt_mib(v as f64)),
                g.outcome,
            ],
        ));
    }
    rows.sort_by(|a, b| crate::util::by_time(a.0, a.1, b.0, b.1));
    let rows: Vec<Vec<String>> = rows.into_iter().map(|(_, _, row)| row).collect();
    out.push_str(&stacked_table(
        &[
            "config",
            "s/request",
            "tg t/s",
            "pp t/s",
            "peak VRAM",
            "outcome",
        ],
        &rows,
        &[1, 2, 3, 4],
    ));
    for line in verdict_lines(r) {
        out.push_str(&line);
        out.push('\n');
    }
    for line in super::race::lines(r, crate::escape::terminal) {
        out.push_str(&line);
        out.push('\n');
    }
    for w in &r.warnings {
        out.push_str(&format!("warning: {}\n", terminal(w)));
    }
    out
}

/// One config's launches outside the confirmation, pooled for the summary's table.
struct Pooled {
    config: crate::config::LaunchConfig,
    baseline: bool,
    gen: Option<crate::trial::Stat>,
    prompt: Option<crate::trial::Stat>,
    peak_vram_mib: Option<u64>,
    outcome: String,
}

/// Every config launched outside the confirmation and not in it, once: the samples of its
/// launches pooled, the highest peak, `ok (3 launches)` or its failure (`oom-load`, or
/// `ok 1, oom-runtime 1` for mixed outcomes), in trial order ([`table`] sorts them).
fn pooled_configs(r: &TuneResult) -> Vec<Pooled> {
    let confirmed: Vec<&crate::config::LaunchConfig> =
        r.confirmation.iter().map(|c| &c.config).collect();
    let mut groups: Vec<(
        crate::config::LaunchConfig,
        Vec<&crate::trial::TrialOutcome>,
    )> = Vec::new();
    for t in r.trials.iter().filter(|t| t.role != TrialRole::Confirm) {
        if confirmed.contains(&&t.config) {
            continue;
        }
        match groups.iter_mut().find(|(c, _)| c == &t.config) {
            Some((_, v)) => v.push(t),
            None => groups.push((t.config.clone(), vec![t])),
        }
    }
    let out: Vec<Pooled> = groups
        .into_iter()
        .map(|(config, ts)| {
            let samples = |f: &dyn Fn(&crate::trial::Metrics) -> &crate::trial::Stat| {
                let v: Vec<f64> = ts
                    .iter()
                    .filter_map(|t| t.metrics.as_ref())
                    .flat_map(|m| f(m).samples.iter().copied())
                    .collect();
                crate::trial::Stat::from_samples(&v)
            };
            let mut kinds: Vec<(&str, u64)> = Vec::new();
            for t in &ts {
                match kinds.iter_mut().find(|(k, _)| *k == t.kind.as_str()) {
                    Some((_, n)) => *n += 1,
                    None => kinds.push((t.kind.as_str(), 1)),
                }
            }
            let outcome = match kinds.as_slice() {
                [(k, 1)] => k.to_string(),
                [(k, n)] => format!("{k} ({n} launches)"),
                _ => kinds
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            Pooled {
                baseline: ts
                    .iter()
                    .any(|t| matches!(t.role, TrialRole::Baseline | TrialRole::SecondBaseline)),
                gen: samples(&|m| &m.gen_tps),
                prompt: samples(&|m| &m.prompt_tps),
                peak_vram_mib: ts.iter().filter_map(|t| t.peak_vram_total_mib()).max(),
                outcome,
                config,
            }
        })
        .collect();
    out
}

/// A table whose first column is a config's label: as one table where it fits the terminal's
/// columns, else stacked (each label on a line of its own above its row's other columns).
pub fn stacked_table(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let t = crate::util::text_table(header, rows, right);
    if t.lines().all(|l| l.chars().count() <= crate::util::COLUMNS) {
        return t;
    }
    let rest: Vec<Vec<String>> = rows.iter().map(|r| r[1..].to_vec()).collect();
    let right: Vec<usize> = right.iter().filter(|&&i| i > 0).map(|i| i - 1).collect();
    let t = crate::util::text_table(&header[1..], &rest, &right);
    let mut out = format!("{} (on its own line), then:\n", header[0]);
    for (i, line) in t.lines().enumerate() {
        if i > 0 {
            out.push_str(&crate::util::fit(&rows[i - 1][0]));
            out.push('\n');
        }
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A time per request in the tables (`-` for none).
fn seconds(t: Option<f64>) -> String {
    t.map_or("-".into(), |t| format!("{t:.2}"))
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
        Some(t) => format!(
            "the bare default at {} {t} (the tune's thread cap)",
            crate::engine::Flag::Threads
        ),
        None => "the bare default".to_string(),
    }
}

fn reference_phrase(rf: &crate::run::Reference, r: &TuneResult) -> String {
    let trials = &r.trials;
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
            let time = |b: &crate::run::Reference| r.objective_time(&b.config, b.request_s);
            if let (Some(a), Some(b)) = (time(rf), time(o)) {
                s.push_str(&format!(
                    " ({:.2} s vs {:.2} s per request)",
                    a.seconds, b.seconds
                ));
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
pub struct VerdictText {
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
pub fn verdict(r: &TuneResult) -> Option<VerdictText> {
    let w = r.winner.as_ref()?;
    let mut facts = Vec::new();
    if let Some(m) = r.inputs.space.workload.objective_mix() {
        facts.push(format!("workload: {}", m.describe()));
    }
    if let Some(t) = &r.inputs.space.workload.replay {
        facts.push(format!("workload: {}, {}", t.name, t.plan.describe()));
    }
    if let Some(rf) = &w.reference {
        facts.push(format!("reference: {}", reference_phrase(rf, r)));
    }
    facts.extend(time_fact(r));
    facts.extend(replay_p90(
        r,
        &w.config,
        w.reference.as_ref().map(|rf| &rf.config),
    ));
    facts.extend(reread_fact(r));
    facts.extend(aggregate_fact(r).map(|f| format!("aggregate {f}")));
    facts.extend(crate::report::slots::note(&w.config).map(|n| format!("slots: {n}")));
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
    facts.extend(speculation_fact(r));
    facts.extend(super::engines::lines(r));
    let status = match w.status {
        Some(crate::run::VerdictStatus::Proven) => {
            "proven faster than the reference beyond its interval".to_string()
        }
        Some(crate::run::VerdictStatus::Likely) => {
            "likely faster (faster by its estimate, not measurably slower), not proven".to_string()
        }
        Some(crate::run::VerdictStatus::Kept) => {
            "the reference is kept: nothing was shown faster than it".to_string()
        }
        Some(crate::run::VerdictStatus::Unraced) | None => {
            "single launches only (no race): a ranking, not a proof".to_string()
        }
    };
    facts.push(format!("status: {status}"));
    Some(VerdictText {
        workload: r.inputs.space.workload.name(),
        flags: flags(&w.config),
        facts,
    })
}

/// A speculative recommendation's acceptance over its launches, beside its gain, and what the
/// losslessness check found: "speculative decoding: ngram-mod: 61 % of drafted tokens accepted
/// (...); answers identical to the same config's without it (...)".
pub fn speculation_fact(r: &TuneResult) -> Option<String> {
    use crate::trial::{acceptance, lossless};
    let w = r.winner.as_ref()?;
    let spec = w.config.spec_type?;
    let launches = || {
        r.trials
            .iter()
            .filter(|t| t.config == w.config && t.kind.is_ok())
            .filter_map(|t| t.metrics.as_ref())
    };
    let a = acceptance::Acceptance::sum(launches().filter_map(acceptance::of_metrics));
    let check = launches().find_map(|m| lossless::check(&w.config, m, &r.trials));
    let drafted = a.map_or(format!("{}: nothing drafted", spec.as_str()), |a| {
        a.line(spec.as_str())
    });
    let checked = check.map_or(
        "losslessness not checked (no launch without it kept its answers)".to_string(),
        |c| lossless::check_phrase(&c),
    );
    Some(format!("speculative decoding: {drafted}; {checked}"))
}

/// For a replayed trace: the 90th percentile of the time per request (median over the
/// config's launches), against the reference's.
fn replay_p90(
    r: &TuneResult,
    config: &crate::config::LaunchConfig,
    reference: Option<&crate::config::LaunchConfig>,
) -> Option<String> {
    r.inputs.space.workload.replay.as_ref()?;
    let p90 = |c: &crate::config::LaunchConfig| {
        let v: Vec<f64> = r
            .trials
            .iter()
            .filter(|t| &t.config == c && t.kind.is_ok())
            .filter_map(|t| Some(t.metrics.as_ref()?.replay.as_ref()?.p90_s))
            .collect();
        crate::trial::Stat::from_samples(&v).map(|s| s.median)
    };
    let own = p90(config)?;
    Some(match reference.filter(|c| *c != config).and_then(p90) {
        Some(b) => format!("90th percentile of the time per request: {own:.2} s against {b:.2} s"),
        None => format!("90th percentile of the time per request: {own:.2} s"),
    })
}

/// The recommendation's time per request and the reference's ([`crate::run::figures`]: the
/// median over launches), then the race's paired ratio in hyperfine's words (no interval where
/// the rounds support no claim).
fn time_fact(r: &TuneResult) -> Option<String> {
    let w = r.winner.as_ref()?;
    let mine = r.objective_time(&w.config, w.request_s)?;
    let reference = w.reference.as_ref().filter(|rf| rf.config != w.config);
    let theirs = reference.and_then(|rf| r.objective_time(&rf.config, rf.request_s));
    let mut s = format!("time per request: {}", fmt_time(mine));
    if let Some(t) = theirs {
        s.push_str(&format!(" against the reference's {}", fmt_time(t)));
    }
    match &w.request_vs_baseline {
        Some(c) => s.push_str(&format!(
            "; paired: {}",
            super::race::ran(
                "the recommendation",
                "the reference",
                c,
                crate::stats::Band::default()
            )
        )),
        None if theirs.is_some() => s.push_str(" (not raced: no paired ratio)"),
        None => {}
    }
    Some(s)
}

/// `0.84 s (median of 5 launches)`.
pub fn fmt_time(t: crate::run::figures::RequestTime) -> String {
    match t.launches {
        0 => format!("{:.2} s", t.seconds),
        1 => format!("{:.2} s (1 launch)", t.seconds),
        n => format!("{:.2} s (median of {n} launches)", t.seconds),
    }
}

/// The verdict as the terminal prints it; then the other built-in workloads, measured in the
/// same launches but not raced.
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
    let others = not_raced(r, &picks);
    if !others.is_empty() {
        out.push(
            "measured, not raced (the other workloads, from the same launches; race one with \
             `qtune compare --workload NAME`):"
                .into(),
        );
        for p in others {
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

/// The workloads measured but not raced: every pick but the tune's own workload's (the
/// verdict says that one).
pub fn not_raced<'a>(
    r: &TuneResult,
    picks: &'a [crate::run::WorkloadPick],
) -> Vec<&'a crate::run::WorkloadPick> {
    let own = r
        .inputs
        .space
        .workload
        .objective_mix()
        .map(|m| m.name.as_str());
    picks
        .iter()
        .filter(|p| Some(p.workload.as_str()) != own || r.winner.is_none())
        .collect()
}

/// The ok launch of `config` whose replay took the median mean time (the one a reader can
/// take as typical), if any launch of it replayed the trace.
pub fn typical_replay<'a>(
    r: &'a TuneResult,
    config: &crate::config::LaunchConfig,
) -> Option<&'a crate::trial::replay_trace::ReplayTiming> {
    let mut v: Vec<&crate::trial::replay_trace::ReplayTiming> = r
        .trials
        .iter()
        .filter(|t| &t.config == config && t.kind.is_ok())
        .filter_map(|t| t.metrics.as_ref()?.replay.as_ref())
        .collect();
    v.sort_by(|a, b| a.mean_s.total_cmp(&b.mean_s));
    v.get(v.len().checked_sub(1)? / 2).copied()
}

/// The aggregate generation of the recommendation's typical replay (all generated tokens over
/// the replay's wall time), and the reference's, for the summary: `None` unless a trace was
/// replayed (and kept the aggregate).
pub fn aggregate_fact(r: &TuneResult) -> Option<String> {
    let w = r.winner.as_ref()?;
    let mine = typical_replay(r, &w.config)?.aggregate_tps?;
    let theirs = w
        .reference
        .as_ref()
        .filter(|rf| rf.config != w.config)
        .and_then(|rf| typical_replay(r, &rf.config)?.aggregate_tps);
    Some(match theirs {
        Some(t) => format!(
            "generation: {mine:.1} tok/s against the reference's {t:.1} (all generated tokens over the replay's wall time, typical launch)"
        ),
        None => format!(
            "generation: {mine:.1} tok/s (all generated tokens over the replay's wall time, typical launch)"
        ),
    })
}

/// What the server read again per request, for the summary: `None` unless a trace was
/// replayed. Read tokens include each turn's new ones; the cache covers the rest.
pub fn reread_fact(r: &TuneResult) -> Option<String> {
    let w = r.winner.as_ref()?;
    let t = typical_replay(r, &w.config)?;
    let n = t.requests.len().max(1) as f64;
    let read: f64 = t
        .requests
        .iter()
        .map(|q| f64::from(q.prompt_n))
        .sum::<f64>()
        / n;
    let prompt: f64 = t
        .requests
        .iter()
        .map(|q| f64::from(q.prompt_tokens))
        .sum::<f64>()
        / n;
    (prompt > 0.0).then(|| {
        format!(
            "the server read {read:.0} prompt tokens per request, of {prompt:.0} in each prompt on average ({:.0} %; the rest came from its cache)",
            100.0 * read / prompt
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Issue 56 on the GPU: a tune that raced two engines printed ik_llama.cpp's crashed
    /// `server defaults` as a second, untagged `server defaults` row. The other engine's rows
    /// say whose they are, and its auto-fit baseline is called one.
    #[test]
    fn the_other_engines_rows_say_whose_they_are() {
        let r = crate::run::sample::committed("gpu-h200-ik56/tune35-16");
        let t = table(&r);
        assert!(t.contains("[baseline] server defaults"), "{t}");
        assert!(t.contains("[ik_llama.cpp baseline] server defaults"), "{t}");
        assert!(
            t.contains("[ik_llama.cpp baseline] --fit --fit-margin 512"),
            "{t}"
        );
        assert!(t.contains("[ik_llama.cpp] -ngl 999 --n-cpu-moe 13"), "{t}");
        assert!(!t.contains("[llama.cpp"), "{t}");
        // One engine: no engine tags.
        let one = table(&crate::run::sample::committed(
            "gpu-h100-workload3/work35-16",
        ));
        assert!(
            !one.contains("[llama.cpp") && one.contains("[baseline]"),
            "{one}"
        );
    }

    #[test]
    fn a_config_confirmed_in_one_round_says_round() {
        let r = crate::run::sample::cpu_result(
            std::path::Path::new("/s/llama-server"),
            std::path::Path::new("/m/m.gguf"),
        );
        assert_eq!(r.confirmation[0].trial_ids.len(), 1);
        let t = table(&r);
        assert!(t.contains("confirmed (1 round)"), "{t}");
        assert!(!t.contains("(1 rounds)"), "{t}");
    }

    /// Issue 43: the table showed the baseline again for each of its launches, unsorted. Each
    /// config is one row (its launches pooled). Issue 52: sorted by generation, a single lucky
    /// launch sat above the recommendation; the rows lead with the time per request the verdict
    /// prints and are sorted by it, the lowest first, the confirmed configs among them.
    #[test]
    fn the_table_shows_each_config_once_lowest_time_per_request_first() {
        let r = crate::run::sample::committed("gpu-h100-workload3/work35-16");
        let t = table(&r);
        // Columns are two spaces apart or more; a config's flags have single spaces.
        let cols = |l: &str| -> Vec<String> {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect()
        };
        let mut lines = t.lines().skip_while(|l| !l.starts_with("config"));
        let stacked = lines.next().unwrap().contains("(on its own line)");
        if stacked {
            lines.next(); // the numbers' header
        }
        let mut rows: Vec<String> = Vec::new();
        while let Some(l) = lines.next() {
            if l.trim().is_empty() || l.starts_with("recommended") {
                break;
            }
            // Stacked: the config on its own line, its numbers indented under it.
            let numbers = if stacked { lines.next() } else { None };
            match numbers {
                Some(n) => rows.push(format!("{l}  {n}")),
                None => rows.push(l.to_string()),
            }
        }
        let fitted = crate::util::fit(&t);
        assert!(
            fitted
                .lines()
                .all(|l| l.chars().count() <= crate::util::COLUMNS),
            "{fitted}"
        );
        let mut labels: Vec<String> = rows.iter().map(|l| cols(l)[0].clone()).collect();
        let n = labels.len();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), n, "a config twice:\n{t}");
        let times: Vec<f64> = rows
            .iter()
            .filter_map(|l| cols(l)[1].parse::<f64>().ok())
            .collect();
        assert!(times.len() >= 4, "{t}");
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "not lowest time first: {times:?}\n{t}"
        );
        // The recommendation's row prints the verdict's number.
        let w = r.winner.as_ref().unwrap();
        let mine = r.objective_time(&w.config, w.request_s).unwrap().seconds;
        let row = rows
            .iter()
            .find(|l| l.contains("recommended"))
            .unwrap_or_else(|| panic!("no recommended row:\n{t}"));
        assert_eq!(cols(row)[1], format!("{mine:.2}"), "{t}");
        assert!(t.contains(&format!("time per request: {mine:.2} s")), "{t}");
    }
}
