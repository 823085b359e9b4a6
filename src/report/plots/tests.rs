use super::*;
use crate::config::LaunchConfig;
use crate::run::sample;
use std::path::Path;

fn check(plots: &[RenderedPlot], stems: &[&str]) {
    assert_eq!(
        plots.iter().map(|p| p.stem).collect::<Vec<_>>(),
        stems,
        "the plots with data"
    );
    for p in plots {
        let img = image::load_from_memory_with_format(&p.png, image::ImageFormat::Png)
            .unwrap_or_else(|e| panic!("{}.png does not decode: {e}", p.stem));
        assert_eq!(img.width(), W);
        assert!(img.height() >= H);
        // Not a blank canvas: plenty of non-white pixels.
        let rgb = img.to_rgb8();
        let inked = rgb.pixels().filter(|px| px.0 != [255, 255, 255]).count();
        assert!(
            inked > 5_000,
            "{}.png has only {inked} inked pixels",
            p.stem
        );
        assert!(p.svg.starts_with("<svg"), "{}", p.stem);
        // The whole title, never cut with an ellipsis.
        assert!(p.svg.contains(&p.title), "{} lacks its title", p.stem);
        assert!(!p.svg.contains('…'), "{}: a cut title", p.stem);
    }
}

/// The x of every SVG `<text>` element whose content starts with `needle`.
fn text_x(svg: &str, needle: &str) -> Vec<f64> {
    svg.split("<text")
        .skip(1)
        .filter(|t| {
            t.split_once('>')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(needle))
        })
        .filter_map(|t| {
            let x = t.split("x=\"").nth(1)?.split('"').next()?;
            x.parse().ok()
        })
        .collect()
}

/// The labels of the x axis's ticks: numbers drawn under the plot area.
fn numbers_drawn(svg: &str) -> Vec<f64> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let (_, rest) = t.split_once('>')?;
            rest.split('<').next()?.trim().parse().ok()
        })
        .collect()
}

#[test]
fn gpu_plots_mark_the_recommended_config_and_both_baselines_with_their_flags() {
    let mut r = sample::gpu_result(Path::new("/s"), Path::new("/m.gguf"));
    // The second baseline of issue 30: --fit on --fit-target 512, role Baseline.
    let fit = LaunchConfig::baseline(8192).with_fit_placement(512);
    let mut b2 = r
        .trials
        .iter()
        .find(|t| t.role == TrialRole::Baseline)
        .unwrap()
        .clone();
    b2.id = 99;
    b2.config = fit;
    r.trials.push(b2);
    let plots = render_all(&r).unwrap();
    if let Some(dir) = std::env::var_os("QTUNE_REPORT_PREVIEW") {
        let dir = std::path::PathBuf::from(dir).join("two-baselines");
        std::fs::create_dir_all(&dir).unwrap();
        for p in &plots {
            std::fs::write(dir.join(format!("{}.png", p.stem)), &p.png).unwrap();
        }
    }
    check(&plots, &["plot-vram", "plot-tg-pp", "plot-ncmoe"]);
    let svg = |stem: &str| &plots.iter().find(|p| p.stem == stem).unwrap().svg;
    let vram = svg("plot-vram");
    for needle in [
        "peak VRAM (MiB)",
        "generation (tok/s)",
        "Pareto front",
        "VRAM budget (15,360 MiB)",
        "failed: 4 (oom-load, spill, oom-runtime,",
        "recommended:",
        "-c 8192 -np 1 -ngl 999",
        "--n-cpu-moe 11",
        "baseline:",
        "--fit on --fit-target 512",
        "is on the Pareto front but not recommended: uses less VRAM",
        "#12",
    ] {
        assert!(vram.contains(needle), "plot-vram.svg lacks {needle:?}");
    }
    assert_eq!(vram.matches("baseline:").count(), 2, "two baselines");
    assert!(svg("plot-tg-pp").contains("prompt processing (tok/s)"));
    let nc = svg("plot-ncmoe");
    for needle in [
        NCMOE_DESC,
        "prompt (tok/s)",
        "peak VRAM (MiB)",
        "VRAM budget",
        "recommended:",
    ] {
        assert!(nc.contains(needle), "plot-ncmoe.svg lacks {needle:?}");
    }
    // The legend is right of the plot area, never over a point.
    for p in &plots {
        for x in text_x(&p.svg, "Pareto front")
            .into_iter()
            .chain(text_x(&p.svg, "recommended:"))
        {
            assert!(
                x >= f64::from(W - LEGEND_W),
                "{}: legend text at x {x}",
                p.stem
            );
        }
    }
}

#[test]
fn the_tg_pp_plot_labels_each_workloads_pick_inside_the_plot_area() {
    // A committed GPU tune for chat: the default kept for chat by its race, fit-target (it
    // keeps more of the model on the card, and the default was not faster beyond the noise)
    // for agent, another config for long-doc.
    let r = crate::run::sample::committed("gpu-h100-workload1/work35-16");
    let plots = render_all(&r).unwrap();
    let svg = &plots.iter().find(|p| p.stem == "plot-tg-pp").unwrap().svg;
    for (label, at) in [
        ("chat: default", 1),
        ("agent: fit-target", 1),
        (
            "long-doc: -ngl 999 --n-cpu-moe 13 -ub 512 --fit off --load-mode none",
            1,
        ),
    ] {
        let xs = text_x(svg, label);
        assert_eq!(xs.len(), at, "{label:?} drawn {} times", xs.len());
        assert!(
            xs[0] > 0.0 && xs[0] + 150.0 < f64::from(W - LEGEND_W),
            "{label:?} at x {} is outside the plot area",
            xs[0]
        );
    }
    // The 30B's tune on the same card: fit-target for chat (its race) and agent, one
    // config under one marker, its labels stacked.
    let r30 = crate::run::sample::committed("gpu-h100-workload1/work30-16");
    let plots30 = render_all(&r30).unwrap();
    let svg30 = &plots30.iter().find(|p| p.stem == "plot-tg-pp").unwrap().svg;
    let (chat, agent) = (
        text_x(svg30, "chat: fit-target"),
        text_x(svg30, "agent: fit-target"),
    );
    assert_eq!(chat.len(), 1, "chat's label drawn once");
    assert_eq!(chat, agent, "one config, one marker: its labels stacked");
    assert!(
        svg.contains("best command for a workload"),
        "its legend entry"
    );
    // Both baselines are marked, the one over the budget said so.
    assert!(svg.contains("baseline, its peak over the VRAM budget:"));
}

#[test]
fn axes_are_zoomed_to_the_data() {
    assert_eq!(zoomed(&[]), 0.0..1.0);
    let r = zoomed(&[15_300.0, 15_800.0]);
    assert!(r.start > 15_000.0 && r.start < 15_300.0, "{r:?}");
    assert!(r.end > 15_800.0 && r.end < 16_000.0, "{r:?}");
    let one = zoomed(&[40.0]);
    assert!(one.start > 35.0 && one.end < 45.0, "{one:?}");
    // Data near 0 stays at or above 0.
    assert_eq!(zoomed(&[1.0, 100.0]).start, 0.0);
    // A VRAM plot whose points sit at 15.3-15.8k MiB does not start at 0.
    let mut r = sample::gpu_result(Path::new("/s"), Path::new("/m.gguf"));
    r.trials
        .retain(|t| !t.kind.is_ok() || t.peak_vram_total_mib().is_some_and(|v| v >= 14_000));
    let plots = render_all(&r).unwrap();
    let vram = &plots.iter().find(|p| p.stem == "plot-vram").unwrap().svg;
    let lowest = numbers_drawn(vram)
        .into_iter()
        .filter(|v| *v >= 1000.0)
        .fold(f64::INFINITY, f64::min);
    assert!(lowest >= 13_000.0, "the VRAM axis starts at {lowest}");
}

#[test]
fn on_the_cpu_plots_without_data_are_left_out_and_said_so() {
    let r = sample::cpu_result(Path::new("/s"), Path::new("/m.gguf"));
    let plots = render_all(&r).unwrap();
    check(&plots, &["plot-tg-pp"]);
    assert_eq!(available(&r), vec![PLOTS[2]]);
    let why = left_out(&r);
    assert_eq!(why.len(), 3, "{why:?}");
    assert!(
        why[0].contains("plot-objective") && why[0].contains("single request"),
        "{why:?}"
    );
    assert!(
        why[1].contains("plot-vram") && why[1].contains("no GPU"),
        "{why:?}"
    );
    assert!(why[2].contains("plot-ncmoe"), "{why:?}");
}

#[test]
fn nothing_measured_renders_no_plot() {
    let mut r = sample::gpu_result(Path::new("/s"), Path::new("/m.gguf"));
    r.trials.retain(|t| !t.kind.is_ok());
    r.confirmation.clear();
    r.winner = None;
    let plots = render_all(&r).unwrap();
    // Failures at known --n-cpu-moe are still worth their plot; nothing else is.
    check(&plots, &["plot-ncmoe"]);
    assert!(left_out(&r)
        .iter()
        .any(|l| l.contains("no trial completed")));
}

#[test]
fn a_word_longer_than_a_line_is_cut() {
    let text = "-ot 'blk\\.(3[6-9]|4[0-7])\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU'";
    let lines = wrap(text, 20);
    assert!(lines.iter().all(|l| l.chars().count() <= 20), "{lines:?}");
    assert_eq!(lines.concat().replace(' ', ""), text.replace(' ', ""));
}

#[test]
fn legend_text_wraps_keeping_each_flag_with_its_value() {
    let flags = "-c 32768 -np 1 -ngl 999 --n-cpu-moe 11 -t 8 -b 2048 -ub 512 --fit off";
    let lines = wrap(&format!("recommended:\n{}", flag_words(flags)), 24);
    assert_eq!(lines[0], "recommended:");
    assert_eq!(lines[1..].join(" "), flags);
    for pair in lines[1..].windows(2) {
        // A line never ends with a flag whose value starts the next line.
        let last = pair[0].rsplit(' ').next().unwrap();
        assert!(
            !last.starts_with('-') || pair[1].starts_with('-'),
            "{lines:?}"
        );
    }
}
