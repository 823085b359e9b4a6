//! `report.md`: the tune told for people, meant to read well on GitHub.
//! (One file over 800 lines: one document's sections in reading order, with their tests.)

use crate::config::{shell_line, LaunchConfig};
use crate::engine::LaunchArgs;
use crate::objective::Metric;
use crate::run::TuneResult;
use crate::trial::{OutcomeKind, Stat, TrialOutcome, TrialRole};
use crate::util::fmt_mib;
use std::fmt::Write as _;

mod appendix;
pub mod session;
#[cfg(test)]
mod tests;

use appendix::*;

/// Host and port the report's commands use when a run does not say (older results).
pub use crate::run::{DEFAULT_HOST, DEFAULT_PORT};

/// Free VRAM below this share of the total at start means another process held the rest.
const EMULATED_FREE_SHARE: f64 = 0.60;

/// How the report names the model: its GGUF name, else its file name.
pub fn model_title(r: &TuneResult) -> String {
    r.model.name.clone().unwrap_or_else(|| super::model_stem(r))
}

fn date(ts: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(ts)
        .map(|t| {
            t.with_timezone(&chrono::Utc)
                .format("%Y-%m-%d %H:%M UTC")
                .to_string()
        })
        .unwrap_or_else(|_| ts.to_string())
}

/// Escape a table cell of qtune's own Markdown (a config label in backticks): pipes and
/// newlines would break the row. Text from outside goes through [`text`] or [`code`].
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// Text from outside (a model's name, a path, a card's name, a trial's message, a warning)
/// as data: no tag, link, code span, table cell or line of its own ([`crate::escape`]).
fn text(s: &str) -> String {
    crate::escape::markdown(s)
}

/// Text from outside in an inline code span.
fn code(s: &str) -> String {
    crate::escape::markdown_code(s)
}

/// qtune's own sentence with text from outside in it (a fact naming a workload, a warning, a
/// trial's diagnosis): its backtick spans stay code ([`code`]), the rest is [`text`]. Whatever
/// the outside text holds, each piece is escaped, so nothing in it is live.
fn prose(s: &str) -> String {
    let parts: Vec<&str> = s.split('`').collect();
    // An unmatched backtick is text: the last piece of an even split is not code.
    let paired = parts.len() % 2 == 1;
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i % 2 == 1 && (paired || i + 1 < parts.len()) {
            out.push_str(&code(p));
        } else {
            if i % 2 == 1 {
                out.push_str(&text("`"));
            }
            out.push_str(&text(p));
        }
    }
    out
}

/// A command in a fenced `sh` block (ends with a line break).
fn command_block(argv: &[String]) -> String {
    crate::escape::markdown_code_block("sh", &shell_line(argv))
}

fn tps(s: &Stat) -> String {
    format!("{:.2} (spread {:.1} %)", s.median, s.spread_pct)
}

fn pct(p: Option<f64>) -> String {
    match p {
        Some(p) => format!("**{p:+.1} %**"),
        None => "n/a".to_string(),
    }
}

fn vram(v: Option<u64>) -> String {
    v.map_or("–".to_string(), |v| fmt_mib(v as f64))
}

/// What the baseline measured: the confirmation's pooled samples, else its own trial.
struct BaselineView {
    config: LaunchConfig,
    gen: Option<Stat>,
    prompt: Option<Stat>,
    vram: Option<u64>,
    source: String,
    failure: Option<String>,
}

fn baseline_view(r: &TuneResult) -> Option<BaselineView> {
    let b = r.baseline()?;
    let source = if b.confirmed {
        format!("confirmation trials {}", ids(&b.trial_ids))
    } else if b.trial_ids.len() == 1 {
        format!("trial {}", b.trial_ids[0])
    } else {
        format!("trials {}", ids(&b.trial_ids))
    };
    Some(BaselineView {
        config: b.config,
        gen: b.gen,
        prompt: b.prompt,
        vram: b.peak_vram_mib,
        source,
        failure: b.failure,
    })
}

fn ids(v: &[u32]) -> String {
    v.iter()
        .map(|i| format!("#{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn outcome_cell(t: &TrialOutcome) -> String {
    if t.kind == OutcomeKind::Ok {
        "ok".to_string()
    } else {
        format!("**{}**", t.kind)
    }
}

/// The plot of the objective: the report's first picture, under the verdict.
const OBJECTIVE_PLOT: &str = "plot-objective";

/// Render the whole report. `plots` are the stems of the plots written next to it.
pub fn render(r: &TuneResult, plots: &[(&str, &str)]) -> String {
    let mut md = String::new();
    let m = &mut md;
    let title = model_title(r);
    let _ = writeln!(
        m,
        "# qtune report: {} — {}\n",
        text(&title),
        text(&date(&r.inputs.started_at))
    );

    // The answer first: in the tune's objective.
    if r.inputs.space.objective.metric == Metric::Request {
        workload_first(m, r, plots);
    } else {
        generation_first(m, r);
    }

    time_split(m, r);
    model_pick(m, r);

    // Plots, and the ones left out for lack of data (plots::left_out).
    let left_out = super::plots::left_out(r);
    if plots.iter().any(|p| p.0 != OBJECTIVE_PLOT) || !left_out.is_empty() {
        let _ = writeln!(m, "## Plots\n");
        for (stem, title) in plots.iter().filter(|p| p.0 != OBJECTIVE_PLOT) {
            let _ = writeln!(m, "![{title}]({stem}.png)\n\n{title}: [SVG]({stem}.svg)\n");
        }
        for why in left_out {
            let _ = writeln!(m, "{why}\n");
        }
    }

    hardware(m, r);
    model(m, r);
    search(m, r);
    if let Some(g) = &r.inputs.quality {
        m.push_str(&crate::quality::floor::markdown(g));
    }
    confirmation(m, r);
    trials(m, r);

    let _ = writeln!(m, "## Warnings\n");
    let per_trial = crate::trial::grouped_warnings(&r.trials, |_| false);
    let all: Vec<String> = r.warnings.iter().cloned().chain(per_trial).collect();
    if all.is_empty() {
        let _ = writeln!(m, "None.\n");
    } else {
        for w in &all {
            let _ = writeln!(m, "- {}", prose(w));
        }
        let _ = writeln!(m);
    }

    let _ = writeln!(m, "## Files\n");
    let _ = writeln!(
        m,
        "- [`results.json`](results.json): everything above, machine-readable (`qtune report DIR` re-renders this file)"
    );
    let _ = writeln!(
        m,
        "- [`journal.jsonl`](journal.jsonl): one line per trial, written as each ended (`--resume` reads it)"
    );
    let _ = writeln!(m, "- [`logs/`](logs/): each trial's llama-server log");
    if r.winner.is_some() {
        let _ = writeln!(m, "- [`launch.sh`](launch.sh): starts the winner");
    }
    let _ = writeln!(
        m,
        "\n<sub>qtune {} · {} · started {} · finished {}</sub>",
        r.qtune_version,
        text(&crate::engine::binary::short_version(
            &r.inputs.server_version
        )),
        r.inputs.started_at,
        r.finished_at
    );
    md
}

/// No configuration finished: said once, whatever the objective.
fn no_winner(m: &mut String) {
    let _ = writeln!(
        m,
        "**No winner:** no configuration completed the workload within the budget. \
         The trials table below says why each one failed.\n"
    );
}

/// The race in the words of [`super::race::lines`]: a line of its own is a paragraph, an
/// indented one a list item, a deeper one a nested item.
fn race_section(m: &mut String, r: &TuneResult, title: &str) {
    let race = super::race::lines(r, crate::escape::markdown);
    if race.is_empty() {
        return;
    }
    let _ = writeln!(m, "## {title}\n");
    for l in race {
        let t = l.trim_start();
        if l.starts_with("    ") {
            let _ = writeln!(m, "  - {t}");
        } else if l.starts_with("  ") {
            let _ = writeln!(m, "- {t}");
        } else {
            let _ = writeln!(m, "\n{t}\n");
        }
    }
    let _ = writeln!(m);
}

/// The top of a tune whose objective is a workload's time per request: the verdict as the
/// terminal states it ([`super::summary::verdict`]), the best command for each workload, the
/// launch command, both baselines' commands, then the race against the reference.
fn workload_first(m: &mut String, r: &TuneResult, plots: &[(&str, &str)]) {
    match (super::summary::verdict(r), &r.winner) {
        (Some(v), Some(w)) => {
            let _ = writeln!(
                m,
                "**Recommended for {}:** {}\n",
                text(&v.workload),
                code(&v.flags)
            );
            for f in &v.facts {
                let _ = writeln!(m, "- {}", prose(f));
            }
            let _ = writeln!(m);
            // The first picture: the objective, reference against pick on each workload.
            if let Some((stem, title)) = plots.iter().find(|p| p.0 == OBJECTIVE_PLOT) {
                let _ = writeln!(m, "![{title}]({stem}.png)\n\n{title}: [SVG]({stem}.svg)\n");
            }
            workload_picks(m, r);
            let _ = writeln!(m, "### Launch the recommendation\n");
            let _ = writeln!(m, "{}", command_block(&w.command));
            let _ = writeln!(
                m,
                "Or run [`launch.sh`](launch.sh): it checks the model, the server binary and free VRAM \
                 first, waits for `/health`, and stops the server on Ctrl-C.\n"
            );
        }
        _ => no_winner(m),
    }
    baselines(m, r);
    race_section(m, r, "Race against the reference");
    session::section(m, r);
}

/// "Measured, not raced": one row per workload the verdict is not about
/// ([`super::summary::not_raced`]).
fn workload_picks(m: &mut String, r: &TuneResult) {
    let all = r.workload_picks();
    let picks = super::summary::not_raced(r, &all);
    if picks.is_empty() {
        return;
    }
    let _ = writeln!(m, "## Other workloads: measured, not raced\n");
    let _ = writeln!(
        m,
        "| workload | flags | time per request (s) | better baseline | its time (s) | ratio | launches | basis |"
    );
    let _ = writeln!(m, "|---|---|---:|---|---:|---:|---:|---|");
    for p in &picks {
        let workload = r
            .inputs
            .space
            .workload
            .mixes
            .iter()
            .find(|x| x.name == p.workload)
            .map_or_else(|| p.workload.clone(), |x| x.describe());
        let _ = writeln!(
            m,
            "| {} | {} | {:.2} | {} | {} | {} | {} | {} |",
            text(&workload),
            code(&super::summary::flags(&p.config)),
            p.request_s,
            text(p.reference_name.as_deref().unwrap_or("–")),
            p.reference_request_s
                .map_or("–".to_string(), |t| format!("{t:.2}")),
            p.ratio().map_or("–".to_string(), |x| format!("{x:.2}×")),
            p.launches,
            cell(p.why())
        );
    }
    let _ = writeln!(
        m,
        "\nTimes: the median time per request over the config's launches (the same rule as the \
         verdict's). Ratio: the better baseline's median over the pick's (above 1, the pick is \
         faster), with no interval: these workloads were not raced. Race one with \
         `qtune compare --workload NAME`.\n"
    );
}

/// Both baselines' commands (the bare default and `--fit on --fit-target`), with their time
/// per request on the objective and their peak VRAM; the default alone where the result names
/// no reference (a tune without a winner).
fn baselines(m: &mut String, r: &TuneResult) {
    let Some(rf) = r.winner.as_ref().and_then(|w| w.reference.as_ref()) else {
        let bcfg = r
            .baseline()
            .map(|b| b.config)
            .unwrap_or_else(|| LaunchConfig::baseline(r.inputs.space.fixed.ctx));
        let _ = writeln!(m, "### The baseline (what you get without qtune)\n");
        let _ = writeln!(m, "{}", command_block(&r.inputs.command(&bcfg)));
        return;
    };
    let mut both: Vec<(&crate::run::Reference, bool)> = vec![(rf, true)];
    both.extend(rf.other.as_deref().map(|o| (o, false)));
    both.sort_by_key(|(b, _)| b.name != "default");
    let _ = writeln!(m, "### The baselines (what you get without qtune)\n");
    let workload = text(&r.inputs.space.workload.name());
    for (b, is_reference) in both {
        let time = r
            .objective_time(&b.config, b.request_s)
            .map_or("not measured".to_string(), |t| {
                format!("{} per request on {workload}", super::summary::fmt_time(t))
            });
        let over = match (b.over_budget, r.inputs.vram_budget_mib) {
            (true, Some(budget)) => {
                format!(", **over the VRAM budget** of {}", fmt_mib(budget as f64))
            }
            (true, None) => ", **over the VRAM budget**".to_string(),
            _ => String::new(),
        };
        let _ = writeln!(
            m,
            "**{}**{}: {time}, peak VRAM {}{over}\n",
            text(&b.name),
            if is_reference { " (the reference)" } else { "" },
            vram(b.peak_vram_mib)
        );
        let _ = writeln!(m, "{}", command_block(&b.command));
    }
}

/// The top of a result whose objective is not the workload's time per request (older tunes,
/// `--objective gen` and the like): the winner's generation and prompt speed against the
/// default, in tok/s.
fn generation_first(m: &mut String, r: &TuneResult) {
    let base = baseline_view(r);
    match &r.winner {
        Some(w) => {
            let _ = writeln!(
                m,
                "**Winner:** `{}`: generation **{:.2} tok/s** ({} vs the baseline), prompt {:.2} tok/s ({}){}.\n",
                w.config.label(),
                w.gen_tps.median,
                pct(w.gen_gain_pct),
                w.prompt_tps.median,
                pct(w.prompt_gain_pct),
                w.peak_vram_mib
                    .map(|v| format!(", peak VRAM {}", fmt_mib(v as f64)))
                    .unwrap_or_default()
            );
        }
        None => no_winner(m),
    }
    // How the engines compared (the summary's verdict says the same lines).
    let engines = super::engines::lines(r);
    for l in &engines {
        let _ = writeln!(m, "- {}", prose(l));
    }
    if !engines.is_empty() {
        let _ = writeln!(m);
    }

    if let Some(w) = r.winner.as_ref().filter(|w| w.gen_vs_baseline.is_some()) {
        let _ = writeln!(
            m,
            "Paired against the baseline in interleaved rounds: {}.\n",
            super::race::gains(w.gen_vs_baseline.as_ref(), w.prompt_vs_baseline.as_ref())
        );
    }
    race_section(m, r, "Race against the baseline");

    let _ = writeln!(m, "## Winner vs baseline\n");
    if let Some(w) = &r.winner {
        let (bg, bp, bv, blabel) = match &base {
            Some(b) => (
                b.gen.as_ref().map_or("failed".to_string(), tps),
                b.prompt.as_ref().map_or("failed".to_string(), tps),
                vram(b.vram),
                b.config.label(),
            ),
            None => (
                "not run".into(),
                "not run".into(),
                "–".into(),
                "baseline".into(),
            ),
        };
        let _ = writeln!(m, "| | baseline | winner | gain |");
        let _ = writeln!(m, "|---|---:|---:|---:|");
        let _ = writeln!(
            m,
            "| generation (tok/s) | {bg} | {} | {} |",
            tps(&w.gen_tps),
            pct(w.gen_gain_pct)
        );
        let _ = writeln!(
            m,
            "| prompt processing (tok/s) | {bp} | {} | {} |",
            tps(&w.prompt_tps),
            pct(w.prompt_gain_pct)
        );
        let _ = writeln!(m, "| peak VRAM | {bv} | {} | |", vram(w.peak_vram_mib));
        let _ = writeln!(
            m,
            "| config | `{}` | `{}` | |\n",
            cell(&blabel),
            cell(&w.config.label())
        );
        let wsrc = r
            .confirmation
            .iter()
            .find(|c| !c.is_baseline && c.config == w.config)
            .map(|c| format!("confirmation trials {}", ids(&c.trial_ids)));
        let _ = writeln!(
            m,
            "Medians over all samples; spread = (max − min) / median. Winner: {}; baseline: {}.\n",
            wsrc.as_deref().unwrap_or("its search trials"),
            base.as_ref()
                .map_or("not measured".to_string(), |b| b.source.clone())
        );
        if let Some(f) = base.as_ref().and_then(|b| b.failure.as_ref()) {
            let _ = writeln!(m, "The baseline failed: {}\n", prose(f));
        }
        let _ = writeln!(m, "### Launch the winner\n");
        let _ = writeln!(m, "{}", command_block(&w.command));
        let _ = writeln!(
            m,
            "Or run [`launch.sh`](launch.sh): it checks the model, the server binary and free VRAM \
             first, waits for `/health`, and stops the server on Ctrl-C.\n"
        );
        if let Some(n) = crate::report::slots::note(&w.config) {
            let _ = writeln!(m, "Slots: {}.\n", prose(&n));
        }
    } else {
        let _ = writeln!(m, "No winner to compare.\n");
    }
    let bcfg = base
        .as_ref()
        .map(|b| b.config.clone())
        .unwrap_or_else(|| LaunchConfig::baseline(r.inputs.space.fixed.ctx));
    let _ = writeln!(m, "### The baseline (what you get without qtune)\n");
    let _ = writeln!(m, "{}", command_block(&r.inputs.command(&bcfg)));
}
