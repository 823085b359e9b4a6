//! report.md of a tune whose objective is a workload's time per request, rendered from a
//! committed GPU result (docs/evidence/gpu-h100-workload1/work35-16: the default kept for chat,
//! `--fit-target` over the budget, long-doc led by another config): the verdict as the terminal
//! words it, a row per workload, both baselines' commands, the race against the reference; and
//! results written before the workload objective still rendering in their generation-first words.

use crate::support;

use qtune::config::shell_line;
use qtune::report::{markdown, plots, summary};
use qtune::run::TuneResult;

/// A committed results.json, read as `qtune report` reads it.
fn result(rel: &str) -> TuneResult {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("results.json");
    std::fs::write(&file, support::evidence::read(rel)).unwrap();
    qtune::run::read_result(&file).unwrap().1
}

/// Markdown text as it reads: each backslash escape of a punctuation character taken.
fn unescape(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut chars = md.chars().peekable();
    while let Some(c) = chars.next() {
        match chars.peek() {
            Some(&n) if c == '\\' && n.is_ascii_punctuation() => {
                out.push(n);
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

const WORKLOAD: &str = "gpu-h100-workload1/work35-16/results.json";

#[test]
fn a_workload_tune_reports_the_verdict_each_workload_and_both_baselines() {
    let r = result(WORKLOAD);
    let md = markdown::render(&r, &plots::available(&r));
    let v = summary::verdict(&r).expect("the tune has a winner");
    let top = format!("**Recommended for {}:** `{}`", v.workload, v.flags);
    assert!(md.contains(&top), "{md}");
    // The report backslash-escapes Markdown punctuation in its sentences (`\[`, issue 48): the
    // facts are read as GitHub shows them.
    let shown = unescape(&md);
    for f in &v.facts {
        assert!(
            shown.contains(&format!("\n- {f}\n")),
            "missing the fact {f:?}:\n{md}"
        );
    }
    assert!(md.contains("- reference: the bare default, the better of it and"));
    assert!(md.contains("- status: the reference is kept"));

    let all = r.workload_picks();
    assert_eq!(all.len(), 3, "chat, agent, long-doc");
    // The verdict is chat's; the other two are measured, not raced.
    let picks = summary::not_raced(&r, &all);
    assert_eq!(picks.len(), 2, "agent, long-doc");
    assert!(
        !md.contains("| chat ("),
        "chat is the verdict's, not a row:\n{md}"
    );
    for p in &picks {
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| {} (", p.workload)))
            .unwrap_or_else(|| panic!("no row for {}:\n{md}", p.workload));
        for cell in [
            format!("{:.2}", p.request_s),
            p.reference_name.clone().unwrap(),
            format!("{:.2}×", p.ratio().unwrap()),
            p.why().to_string(),
        ] {
            assert!(row.contains(&cell), "{row} lacks {cell}");
        }
    }

    let rf = r.winner.as_ref().unwrap().reference.as_ref().unwrap();
    let other = rf.other.as_deref().unwrap();
    assert_eq!(
        (rf.name.as_str(), other.name.as_str()),
        ("default", "fit-target")
    );
    for b in [rf, other] {
        assert!(md.contains(&format!("```sh\n{}\n```", shell_line(&b.command))));
    }
    // Each baseline's time: the one rule (the median over its launches), as the verdict says it.
    let time = |b: &qtune::run::Reference| {
        summary::fmt_time(r.objective_time(&b.config, b.request_s).unwrap())
    };
    assert!(md.contains(&format!(
        "**default** (the reference): {} per request on chat",
        time(rf)
    )));
    assert!(md.contains(&format!(
        "**fit-target**: {} per request on chat, peak VRAM 15,884 MiB, **over the VRAM budget**",
        time(other)
    )));

    assert!(md.contains("## Race against the reference"));
    assert!(md.contains("race against the reference (default, the better baseline)"));
    assert!(
        md.contains(" ran ") && md.contains("than the reference ("),
        "per request first, in hyperfine's words"
    );
    assert!(
        md.contains("\n  - generation +"),
        "generation and prompt second"
    );
    // In reading order, and none of the generation-first story.
    let at = |s: &str| md.find(s).unwrap_or_else(|| panic!("no {s:?}"));
    assert!(at(&top) < at("## Other workloads: measured, not raced"));
    assert!(at("## Other workloads: measured, not raced") < at("### Launch the recommendation"));
    assert!(at("### Launch the recommendation") < at("### The baselines"));
    assert!(at("### The baselines") < at("## Race against the reference"));
    for old in [
        "**Winner:**",
        "## Winner vs baseline",
        "fastest generation",
        "Race against the baseline",
    ] {
        assert!(!md.contains(old), "{old:?} in:\n{md}");
    }
}

#[test]
fn results_from_before_the_workload_objective_still_render_generation_first() {
    // gpu-h100-run9: raced against the default alone; the H200 run: before the race.
    for rel in [
        "gpu-h100-run9/proof35-16/results.json",
        "gpu-h200-qwen3-30b-a3b-16gib/results.json",
    ] {
        let r = result(rel);
        let md = markdown::render(&r, &plots::available(&r));
        for needle in [
            "**Winner:**",
            "## Winner vs baseline",
            "### The baseline (what you get without qtune)",
        ] {
            assert!(md.contains(needle), "{rel}: no {needle:?}");
        }
        assert!(!md.contains("measured, not raced"), "{rel}");
        assert!(!md.contains("Recommended for"), "{rel}");
        plots::render_all(&r).unwrap_or_else(|e| panic!("{rel}: {e:#}"));
    }
}
