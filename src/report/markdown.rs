//! `report.md`: the tune told for people, meant to read well on GitHub.
//! (One file over 800 lines: one document's sections in reading order, with their tests.)

use crate::config::{shell_line, LaunchConfig};
use crate::objective::Metric;
use crate::run::TuneResult;
use crate::trial::{OutcomeKind, Stat, TrialOutcome, TrialRole};
use crate::util::fmt_mib;
use std::fmt::Write as _;

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

fn role(r: TrialRole) -> &'static str {
    match r {
        TrialRole::Search => "search",
        TrialRole::Baseline => "baseline",
        TrialRole::Confirm => "confirm",
        TrialRole::Sweep => "sweep",
        TrialRole::SecondBaseline => "baseline (fit-target)",
    }
}

fn outcome_cell(t: &TrialOutcome) -> String {
    if t.kind == OutcomeKind::Ok {
        "ok".to_string()
    } else {
        format!("**{}**", t.kind)
    }
}

/// Render the whole report. `plots` are the stems of the plots written next to it.
pub fn render(r: &TuneResult, plots: &[(&str, &str)]) -> String {
    let mut md = String::new();
    let m = &mut md;
    let title = model_title(r);
    let _ = writeln!(
        m,
        "# qtune report: {} — {}\n",
        text(&title),
        text(&date(&r.started_at))
    );

    // The answer first: in the tune's objective.
    if r.space.objective.metric == Metric::Request {
        workload_first(m, r);
    } else {
        generation_first(m, r);
    }

    time_split(m, r);
    model_pick(m, r);

    // Plots, and the ones left out for lack of data (plots::left_out).
    let left_out = super::plots::left_out(r);
    if !plots.is_empty() || !left_out.is_empty() {
        let _ = writeln!(m, "## Plots\n");
        for (stem, title) in plots {
            let _ = writeln!(m, "![{title}]({stem}.png)\n\n{title}: [SVG]({stem}.svg)\n");
        }
        for why in left_out {
            let _ = writeln!(m, "{why}\n");
        }
    }

    hardware(m, r);
    model(m, r);
    search(m, r);
    if let Some(g) = &r.quality {
        m.push_str(&crate::quality::floor::markdown(g));
    }
    confirmation(m, r);
    trials(m, r);

    let _ = writeln!(m, "## Warnings\n");
    let per_trial = r.trials.iter().flat_map(|t| {
        t.warnings
            .iter()
            .map(move |w| format!("trial {}: {w}", t.id))
    });
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
        text(&crate::server_binary::short_version(&r.server_version)),
        r.started_at,
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
    let race = super::race::lines(r);
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
fn workload_first(m: &mut String, r: &TuneResult) {
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
}

/// "Best command for each workload": one row per [`TuneResult::workload_picks`] entry.
fn workload_picks(m: &mut String, r: &TuneResult) {
    let picks = r.workload_picks();
    if picks.is_empty() {
        return;
    }
    let _ = writeln!(m, "## Best command for each workload\n");
    let _ = writeln!(
        m,
        "| workload | flags | time per request (s) | better baseline | its time (s) | ratio | launches | basis |"
    );
    let _ = writeln!(m, "|---|---|---:|---|---:|---:|---:|---|");
    for p in &picks {
        let workload = r
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
        "\nTimes: the median time per request over the config's launches. Ratio: the better \
         baseline's time over the pick's (above 1, the pick is faster). Only the tune's own \
         workload was raced; re-measure another with `qtune compare --workload NAME`.\n"
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
            .unwrap_or_else(|| LaunchConfig::baseline(r.space.fixed.ctx));
        let _ = writeln!(m, "### The baseline (what you get without qtune)\n");
        let _ = writeln!(
            m,
            "{}",
            command_block(&bcfg.command(&r.server_path, &r.model_path, &r.host, r.port))
        );
        return;
    };
    let mut both: Vec<(&crate::run::Reference, bool)> = vec![(rf, true)];
    both.extend(rf.other.as_deref().map(|o| (o, false)));
    both.sort_by_key(|(b, _)| b.name != "default");
    let _ = writeln!(m, "### The baselines (what you get without qtune)\n");
    let workload = text(&r.space.workload.name());
    for (b, is_reference) in both {
        let time = b.request_s.map_or("not measured".to_string(), |t| {
            format!("{t:.2} s per request on {workload}")
        });
        let over = match (b.over_budget, r.vram_budget_mib) {
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
    } else {
        let _ = writeln!(m, "No winner to compare.\n");
    }
    let bcfg = base
        .as_ref()
        .map(|b| b.config.clone())
        .unwrap_or_else(|| LaunchConfig::baseline(r.space.fixed.ctx));
    let _ = writeln!(m, "### The baseline (what you get without qtune)\n");
    let _ = writeln!(
        m,
        "{}",
        command_block(&bcfg.command(&r.server_path, &r.model_path, &r.host, r.port))
    );
}

fn hardware(m: &mut String, r: &TuneResult) {
    let hw = &r.hardware;
    let _ = writeln!(m, "## Hardware\n");
    if hw.gpus.is_empty() {
        let _ = writeln!(
            m,
            "- **GPU:** none ({}): a CPU-only tune, VRAM not measured",
            text(hw.no_gpu_reason.as_deref().unwrap_or("none found"))
        );
    }
    for g in &hw.gpus {
        let link = match (g.pcie.gen_current, g.pcie.width_current) {
            (Some(gen), Some(w)) => format!(" · PCIe {gen}.0 x{w}"),
            _ => String::new(),
        };
        let cc = g
            .compute_capability
            .map(|(a, b)| format!(" · compute {a}.{b}"))
            .unwrap_or_default();
        let _ = writeln!(
            m,
            "- **GPU {}:** {} · {} total, {} free at start{link}{cc}",
            g.index,
            text(&g.name),
            fmt_mib(g.vram_total_mib as f64),
            fmt_mib(g.vram_free_mib as f64)
        );
        if g.vram_total_mib > 0
            && (g.vram_free_mib as f64) < EMULATED_FREE_SHARE * g.vram_total_mib as f64
        {
            let _ = writeln!(
                m,
                "  - **Emulated card:** free VRAM at start {} of {}: another process (e.g. a ballast \
                 emulating a smaller card) held the rest. The tune used only what was free.",
                fmt_mib(g.vram_free_mib as f64),
                fmt_mib(g.vram_total_mib as f64)
            );
        }
    }
    if let (Some(d), c) = (&hw.driver_version, &hw.cuda_version) {
        let _ = writeln!(
            m,
            "- **Driver:** {}{}",
            text(d),
            c.as_ref()
                .map(|c| format!(" (CUDA {})", text(c)))
                .unwrap_or_default()
        );
    }
    if let Some(b) = r.vram_budget_mib {
        let _ = writeln!(
            m,
            "- **VRAM budget:** {} (free at start {} − headroom {})",
            fmt_mib(b as f64),
            fmt_mib(r.free_vram_at_start_mib as f64),
            fmt_mib(r.headroom_mib as f64)
        );
    }
    if !r.gpu_budgets.is_empty() {
        let _ = writeln!(
            m,
            "- **Cards** (device order, `CUDA_DEVICE_ORDER=PCI_BUS_ID`; the headroom is kept on each):"
        );
        for g in &r.gpu_budgets {
            let _ = writeln!(
                m,
                "  - CUDA{}: {} · budget {} (free at start {})",
                g.index,
                text(&g.name),
                fmt_mib(g.budget_mib as f64),
                fmt_mib(g.free_mib as f64)
            );
        }
    }
    let h = &hw.host;
    let _ = writeln!(
        m,
        "- **CPU:** {} · {} cores ({} logical){}",
        text(&h.cpu_model),
        h.physical_cores.map_or("?".to_string(), |c| c.to_string()),
        h.logical_cores,
        h.mem_bandwidth_gbs
            .map(|b| format!(" · memory read {b:.0} GB/s"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        m,
        "- **RAM:** {:.1} GiB ({:.1} GiB available at start)",
        h.ram_total_mib as f64 / 1024.0,
        h.ram_available_mib as f64 / 1024.0
    );
    let _ = writeln!(m, "- **OS:** {}\n", text(&h.os));
}

fn model(m: &mut String, r: &TuneResult) {
    let l = &r.model;
    let _ = writeln!(m, "## Model\n");
    let _ = writeln!(
        m,
        "| architecture | blocks | experts (used) | file type | size | file |"
    );
    let _ = writeln!(m, "|---|---:|---|---|---:|---|");
    let experts = if l.n_experts > 0 {
        format!("{} ({})", l.n_experts, l.n_experts_used)
    } else {
        "dense".to_string()
    };
    let _ = writeln!(
        m,
        "| {} | {} | {} | {} | {:.2} GiB | {} |\n",
        text(&l.arch),
        l.n_blocks,
        experts,
        text(l.file_type.as_deref().unwrap_or("?")),
        l.file_bytes as f64 / (1024.0 * 1024.0 * 1024.0),
        code(&r.model_path.display().to_string())
    );
    let _ = writeln!(
        m,
        "Server: {} ({})\n",
        code(&r.server_path.display().to_string()),
        text(&crate::server_binary::short_version(&r.server_version))
    );
}

fn search(m: &mut String, r: &TuneResult) {
    let s = &r.space;
    let _ = writeln!(m, "## Search space and budget\n");
    let _ = writeln!(
        m,
        "- **Space:** {}{}",
        code(&s.name),
        if s.description.is_empty() {
            String::new()
        } else {
            format!(": {}", text(&s.description))
        }
    );
    let _ = writeln!(
        m,
        "- **Fixed:** context {} tokens, {} slot(s), load mode {}",
        s.fixed.ctx,
        s.fixed.parallel,
        s.load_modes()
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(" / ")
    );
    let w = &s.workload;
    let _ = writeln!(
        m,
        "- **Workload per trial:** {} prompt tokens, {} generated, {} measured request(s){}{}",
        w.prompt_tokens,
        w.gen_tokens,
        w.repetitions,
        if w.warmup { " after a warm-up" } else { "" },
        w.context_depth
            .map(|d| format!(", generation also measured at depth {d}"))
            .unwrap_or_default()
    );
    let vary = serde_json::to_string(&s.vary).unwrap_or_default();
    let _ = writeln!(m, "- **Varied:** {}", code(&vary));
    let _ = writeln!(
        m,
        "- **Objective:** {} (ties within {} %)",
        s.objective.metric.as_str(),
        s.objective.tie_pct
    );
    let b = &s.budget;
    let count = |role: TrialRole| r.trials.iter().filter(|t| t.role == role).count();
    let skipped = r
        .trials
        .iter()
        .filter(|t| t.kind == OutcomeKind::Skipped)
        .count();
    let _ = writeln!(
        m,
        "- **Budget:** {} search trials, {} minutes; top {} confirmed over {} interleaved rounds",
        b.trials, b.minutes, b.confirm_top, b.confirm_rounds
    );
    let _ = writeln!(
        m,
        "- **Used:** {} trials ({} search, {} baseline, {} confirmation, {} sweep; {} skipped by the memory prediction) in {:.1} minutes\n",
        r.trials.len(),
        count(TrialRole::Search),
        count(TrialRole::Baseline),
        count(TrialRole::Confirm),
        count(TrialRole::Sweep),
        skipped,
        r.minutes_used
    );
}

fn confirmation(m: &mut String, r: &TuneResult) {
    if r.confirmation.is_empty() {
        return;
    }
    let _ = writeln!(m, "## Confirmation (interleaved re-measurement)\n");
    let _ = writeln!(
        m,
        "| candidate | generation (tok/s) | prompt (tok/s) | peak VRAM | trials |"
    );
    let _ = writeln!(m, "|---|---:|---:|---:|---|");
    for c in &r.confirmation {
        let name = if c.is_baseline {
            format!("baseline: `{}`", c.config.label())
        } else {
            format!("`{}`", c.config.label())
        };
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} |",
            cell(&name),
            c.gen_tps.as_ref().map_or("failed".to_string(), tps),
            c.prompt_tps.as_ref().map_or("failed".to_string(), tps),
            vram(c.peak_vram_mib),
            ids(&c.trial_ids)
        );
    }
    let _ = writeln!(m);
}

fn trials(m: &mut String, r: &TuneResult) {
    let _ = writeln!(m, "## All trials\n");
    if r.trials.is_empty() {
        let _ = writeln!(m, "No trial ran.\n");
        return;
    }
    let _ = writeln!(
        m,
        "| # | role | config | outcome | generation (tok/s) | prompt (tok/s) | tg % of bound | peak VRAM | time | note |"
    );
    let _ = writeln!(m, "|---:|---|---|---|---:|---:|---:|---:|---:|---|");
    let sb = crate::model::speed::SpeedBox::from_hardware(&r.hardware);
    for t in &r.trials {
        let (g, p) = match &t.metrics {
            Some(x) => (
                format!(
                    "{:.2} ±{:.1} %",
                    x.gen_tps.median,
                    x.gen_tps.spread_pct / 2.0
                ),
                format!("{:.2}", x.prompt_tps.median),
            ),
            None => ("–".to_string(), "–".to_string()),
        };
        let note = if t.kind.is_ok() {
            String::new()
        } else {
            t.message.lines().next().unwrap_or("").to_string()
        };
        let roof = match (&t.metrics, speed_of(r, &sb, &t.config)) {
            (Some(x), Some(sp)) => format!("{:.0} %", x.gen_tps.median / sp.tg_bound_tps * 100.0),
            _ => "–".to_string(),
        };
        let _ = writeln!(
            m,
            "| {} | {} | `{}` | {} | {} | {} | {} | {} | {:.0} s | {} |",
            t.id,
            role(t.role),
            cell(&t.config.label()),
            outcome_cell(t),
            g,
            p,
            roof,
            vram(t.peak_vram_total_mib()),
            t.duration_s,
            prose(&note)
        );
    }
    let _ = writeln!(
        m,
        "\nGeneration: median ± half the spread of the trial's requests. tg % of bound: the \
         measured generation as a share of the speed model's bound for that config (weight and KV \
         bytes over GPU and host bandwidth, no overheads; a config that places itself is modelled \
         as its fit is expected to place it on one GPU, `–` where it cannot be). A failed trial's note is its one-line diagnosis; its log is under `logs/`.\n"
    );
}

/// The speed model's prediction for `cfg` on the run's box and workload. A config that leaves
/// the placement to the server (the baseline) is modelled on one GPU with the placement its
/// own fit is expected to choose ([`crate::search::candidates::predict_server_default`]).
fn speed_of(
    r: &TuneResult,
    sb: &crate::model::speed::SpeedBox,
    cfg: &LaunchConfig,
) -> Option<crate::model::speed::SpeedPrediction> {
    let prompt_tokens = r.space.workload.prompt_tokens;
    if let [gpu] = r.hardware.gpus.as_slice() {
        let free = gpu.vram_free_mib as f64;
        if let Some((_, p)) = crate::search::candidates::predict_server_default(
            &r.model,
            cfg,
            free,
            sb,
            prompt_tokens,
        ) {
            return Some(p);
        }
    }
    crate::model::speed::predict(
        &r.model,
        cfg,
        sb,
        r.hardware.has_gpu(),
        prompt_tokens,
        &crate::model::speed::FITTED,
    )
}

/// The placement the server's own fit is expected to choose for `cfg` (one GPU, a config with
/// no placement flags), as explicit flags.
fn server_placement(r: &TuneResult, cfg: &LaunchConfig) -> Option<LaunchConfig> {
    let [gpu] = r.hardware.gpus.as_slice() else {
        return None;
    };
    crate::search::candidates::server_default_stand_in(&r.model, cfg, gpu.vram_free_mib as f64)
}

/// "Where the time goes": the winner's measured speed against the speed model's prediction,
/// its bound, and the model's split of one token's time.
fn time_split(m: &mut String, r: &TuneResult) {
    let Some(w) = &r.winner else { return };
    let sb = crate::model::speed::SpeedBox::from_hardware(&r.hardware);
    let _ = writeln!(m, "## Where the time goes (speed model)\n");
    let Some(sp) = speed_of(r, &sb, &w.config) else {
        let _ = writeln!(
            m,
            "No model prediction for the winner: {}.\n",
            if w.config.is_auto_placement() {
                "its placement is the server's own, not known before the launch"
            } else {
                "this GPU's memory bandwidth is unknown"
            }
        );
        return;
    };
    if let Some(p) = server_placement(r, &w.config) {
        let _ = writeln!(
            m,
            "The winner places itself: modelled as its fit is expected to place it ({}). Its \
             prompt interval's upper end is {}× the prediction: its CPU experts are \
             memory-mapped, which the fit saw least (the committed runs measured up to 1.74×).\n",
            crate::search::candidates::stand_in_placement(&p),
            crate::search::candidates::SERVER_DEFAULT_PP_HIGH
        );
    }
    let d = &sp.decode;
    let total = d.total_ms().max(1e-9);
    let share = |x: f64| format!("{:.1} ms ({:.0} %)", x, x / total * 100.0);
    let _ = writeln!(m, "| | measured | modelled | bound |");
    let _ = writeln!(m, "|---|---:|---:|---:|");
    let _ = writeln!(
        m,
        "| generation (tok/s) | {:.1} | {} | {:.0} ({:.0} % reached) |",
        w.gen_tps.median,
        sp.tg.text(),
        sp.tg_bound_tps,
        w.gen_tps.median / sp.tg_bound_tps * 100.0
    );
    let _ = writeln!(
        m,
        "| prompt (tok/s, {}-token prompt) | {:.1} | {} | |\n",
        sp.prompt_tokens,
        w.prompt_tps.median,
        sp.pp.text()
    );
    let _ = writeln!(
        m,
        "One generated token, as modelled: GPU weights and KV {}, CPU experts {}, per-layer \
         overhead {}. One {}-token micro-batch of the prompt: copying CPU experts to the GPU \
         {:.0} ms, GPU compute {:.0} ms, CPU compute {:.0} ms.\n",
        share(d.gpu_ms),
        share(d.cpu_experts_ms),
        share(d.overhead_ms),
        sp.prefill.ubatch,
        sp.prefill.copy_ms,
        sp.prefill.gpu_ms,
        sp.prefill.cpu_ms
    );
    let _ = writeln!(
        m,
        "The bound is bytes over bandwidth alone; the model adds the fitted overheads \
         (`src/model/speed.rs`, fitted on the committed GPU runs; interval: its held-out error). \
         Room left is in the largest share: fewer CPU experts (more VRAM) when CPU experts \
         dominate, nothing much when overhead does.\n"
    );
}

/// "The speed model's pick": the config the tune launched right after the baseline as the
/// model's best for this card, its predicted speeds against what its launches
/// measured (the median of their medians), and what became of it.
fn model_pick(m: &mut String, r: &TuneResult) {
    let Some(pick) = &r.model_pick else { return };
    let launched: Vec<&TrialOutcome> = r
        .trials
        .iter()
        .filter(|t| &t.config == pick && t.kind != OutcomeKind::Skipped)
        .collect();
    let _ = writeln!(m, "## The speed model's pick\n");
    let Some(first) = launched.first() else {
        let _ = writeln!(m, "`{}` was chosen but never launched.\n", pick.label());
        return;
    };
    let median = |v: Vec<f64>| Stat::from_samples(&v).map(|s| s.median);
    let ok: Vec<&&TrialOutcome> = launched.iter().filter(|t| t.kind.is_ok()).collect();
    let tg = median(ok.iter().filter_map(|t| t.gen_tps()).collect());
    let pp = median(ok.iter().filter_map(|t| t.prompt_tps()).collect());
    let sb = crate::model::speed::SpeedBox::from_hardware(&r.hardware);
    let pred = speed_of(r, &sb, pick);
    let err = |p: f64, x: Option<f64>| {
        x.map_or(String::new(), |x| {
            format!(" ({:+.1} %)", (p / x - 1.0) * 100.0)
        })
    };
    let fate = if r.winner.as_ref().is_some_and(|w| &w.config == pick) {
        "It is the winner."
    } else if r
        .race
        .as_ref()
        .is_some_and(|race| race.candidates.contains(pick))
    {
        "It raced the baseline (above) and did not win."
    } else if ok.len() < launched.len() {
        "A launch of it failed or went over the budget, so it cannot win."
    } else {
        "The screening ranked others ahead of it, so it was not raced."
    };
    let _ = writeln!(
        m,
        "`{}` was launched as trial {}, the config the speed model rated best for this card \
         (the rule `qtune plan` proposes by), measured over {} ok launch(es).\n",
        pick.label(),
        first.id,
        ok.len()
    );
    let _ = writeln!(m, "| | measured | predicted (error) |");
    let _ = writeln!(m, "|---|---:|---:|");
    let fmt = |x: Option<f64>| x.map_or("–".to_string(), |x| format!("{x:.1}"));
    match &pred {
        Some(p) => {
            let _ = writeln!(
                m,
                "| generation (tok/s) | {} | {}{} |",
                fmt(tg),
                p.tg.text(),
                err(p.tg.tps, tg)
            );
            let _ = writeln!(
                m,
                "| prompt (tok/s) | {} | {}{} |\n",
                fmt(pp),
                p.pp.text(),
                err(p.pp.tps, pp)
            );
        }
        None => {
            let _ = writeln!(m, "| generation (tok/s) | {} | – |", fmt(tg));
            let _ = writeln!(m, "| prompt (tok/s) | {} | – |\n", fmt(pp));
        }
    }
    let _ = writeln!(m, "{fate}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// qtune's sentences keep their code spans; text from outside in them is escaped, and an
    /// unmatched backtick is text.
    #[test]
    fn prose_keeps_qtune_code_spans_and_escapes_the_rest() {
        assert_eq!(
            prose("reference: the better of it and `-c 4096 --fit on`"),
            "reference: the better of it and `-c 4096 --fit on`"
        );
        assert_eq!(
            prose("workload: <b>x</b> [a](javascript:b) `c|d` e`f"),
            r"workload: &lt;b&gt;x&lt;/b&gt; \[a\](javascript:b) `c\|d` e\`f"
        );
        assert_eq!(prose("a\nb"), r"a\\nb");
    }
    use crate::run::sample;
    use std::path::Path;

    #[test]
    fn gpu_report_has_the_commands_every_trial_and_the_emulated_card_note() {
        let (srv, model) = (
            Path::new("/opt/llama cpp/llama-server"),
            Path::new("/m/it's.gguf"),
        );
        let r = sample::gpu_result(srv, model);
        let md = render(&r, &super::super::plots::PLOTS);
        let w = r.winner.as_ref().unwrap();
        assert!(md.contains(&format!("```sh\n{}\n```", shell_line(&w.command))));
        let base = LaunchConfig::baseline(8192).command(srv, model, DEFAULT_HOST, DEFAULT_PORT);
        assert!(md.contains(&shell_line(&base)));
        assert!(md.contains("'/m/it'\\''s.gguf'"), "paths are shell-quoted");
        for t in &r.trials {
            assert!(
                md.contains(&format!("\n| {} | ", t.id)),
                "trial {} missing from the table",
                t.id
            );
        }
        for needle in [
            "# qtune report: Sample qwen3moe — 2025-11-22",
            "**+120.9 %**",
            "Emulated card",
            "another process (e.g. a ballast emulating a smaller card) held the rest",
            "VRAM budget:** 15,360 MiB",
            "**oom-load**",
            "cudaMalloc failed to allocate 1,230 MiB",
            "compute buffer \\| 1,024 MiB",
            "trial 5: spread 14 %",
            "![Generation speed vs peak VRAM](plot-vram.png)",
            "[SVG](plot-ncmoe.svg)",
            "| qwen3moe | 48 | 128 (8) | Q4_K_M |",
            "## Where the time goes (speed model)",
            "| generation (tok/s) | ",
            "% reached) |",
            "One generated token, as modelled: GPU weights and KV ",
            "| tg % of bound |",
            "## The speed model's pick",
            "the config the speed model rated best for this card",
            "It is the winner.",
        ] {
            assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
        }
        // A CPU tune has no pick, and says nothing of one.
        let cpu = sample::cpu_result(srv, model);
        assert!(!render(&cpu, &[]).contains("speed model's pick"));
    }

    #[test]
    fn a_winner_that_places_itself_is_modelled_as_its_fit_would_place_it() {
        let mut r = sample::gpu_result(Path::new("/s"), Path::new("/m.gguf"));
        let base = LaunchConfig::baseline(r.space.fixed.ctx);
        r.winner.as_mut().unwrap().config = base.clone();
        let md = render(&r, &[]);
        assert!(
            md.contains("The winner places itself: modelled as its fit is expected to place it"),
            "{md}"
        );
        assert!(!md.contains("No model prediction for the winner"), "{md}");
        let sb = crate::model::speed::SpeedBox::from_hardware(&r.hardware);
        let stand_in = server_placement(&r, &base).expect("one GPU, a MoE model");
        assert!(!stand_in.is_auto_placement(), "{}", stand_in.label());
        assert!(speed_of(&r, &sb, &base).is_some());
        // Two GPUs: the split is the server's too; not modelled.
        let mut two = r.clone();
        let g = two.hardware.gpus[0].clone();
        two.hardware.gpus.push(g);
        assert!(server_placement(&two, &base).is_none());
    }

    #[test]
    fn cpu_report_says_no_gpu_and_no_winner_is_explained() {
        let mut r = sample::cpu_result(Path::new("/s"), Path::new("/m.gguf"));
        let md = render(&r, &[]);
        assert!(md.contains("**GPU:** none (NVML not found"));
        assert!(!md.contains("Emulated card"));
        assert!(!md.contains("VRAM budget"));
        assert!(md.contains("| dense |"));
        r.winner = None;
        let md = render(&r, &[]);
        assert!(md.contains("**No winner:**"));
        assert!(!md.contains("launch.sh"));
        assert!(md.contains("exited with status 134"));
    }

    #[test]
    fn a_card_with_most_vram_free_is_not_called_emulated() {
        let mut r = sample::gpu_result(Path::new("/s"), Path::new("/m.gguf"));
        r.hardware.gpus[0].vram_total_mib = 24_576;
        r.hardware.gpus[0].vram_free_mib = 23_000;
        assert!(!render(&r, &[]).contains("Emulated card"));
    }
}
