//! The report's plots, each rendered as SVG and PNG with plotters and the embedded DejaVu Sans
//! (no system fonts: nothing links fontconfig or freetype).
//! (`mod.rs`: the data and the backends; `draw`: the shared drawing; `charts`: each plot.)
//!
//! - `plot-vram`: generation tok/s vs peak VRAM, Pareto front (fastest for its VRAM), budget.
//! - `plot-tg-pp`: generation vs prompt tok/s, Pareto front (both higher).
//! - `plot-ncmoe`: tok/s and peak VRAM across `--n-cpu-moe`, with the budget.
//!
//! Each plot: the title and the model above, the axes zoomed to the data (and the budget),
//! the legend in a column right of the plot area (never over a point), the recommended config
//! and every baseline marked and labelled with their llama.cpp flags, and a caption under the
//! plot saying why a point on the Pareto front is not the recommended one. A plot with no
//! data (on the CPU: no VRAM, no `--n-cpu-moe`) is left out ([`available`]) and the report
//! says why ([`left_out`]).

use crate::engine::LaunchArgs;
use crate::run::pareto::{self, Goal};
use crate::run::TuneResult;
use crate::trial::{OutcomeKind, TrialRole};
use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

#[macro_use]
mod draw;
mod charts;
pub mod objective;
#[cfg(test)]
mod tests;

use charts::*;
use draw::*;
use objective::draw_objective;

/// The font every plot uses, compiled into the binary.
static FONT: &[u8] = include_bytes!("../../../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

/// One plot in both formats.
pub struct RenderedPlot {
    /// File stem, e.g. `plot-vram` (files `plot-vram.svg` and `plot-vram.png`).
    pub stem: &'static str,
    pub title: String,
    pub svg: String,
    pub png: Vec<u8>,
}

/// The plots' stems and titles, in report order (a title that names a flag has it spelled by
/// the engine, once).
pub static PLOTS: std::sync::LazyLock<[(&str, &str); 4]> = std::sync::LazyLock::new(|| {
    let ncmoe = format!(
        "Speed and peak VRAM across {}",
        crate::engine::Flag::NCpuMoe
    );
    [
        (
            "plot-objective",
            "Time per request per workload: reference against pick",
        ),
        ("plot-vram", "Generation speed vs peak VRAM"),
        ("plot-tg-pp", "Generation vs prompt speed"),
        ("plot-ncmoe", Box::leak(ncmoe.into_boxed_str())),
    ]
});

const W: u32 = 1200;
/// Axis text for `--n-cpu-moe` (plotters' glyph layout merges the two leading hyphens).
const NCMOE_DESC: &str = "n-cpu-moe: blocks whose routed experts stay on the CPU";
const H: u32 = 640;
const H_NCMOE: u32 = 820;
/// The legend column, right of the plot area.
const LEGEND_W: u32 = 330;
/// The title and subtitle band.
const TITLE_H: u32 = 64;
/// Characters per line of the legend (13 px) and of the caption (14 px).
const LEGEND_CHARS: usize = 40;
const CAPTION_CHARS: usize = 150;

const C_POINT: RGBColor = RGBColor(31, 119, 180);
const C_PP: RGBColor = RGBColor(255, 127, 14);
const C_FRONT: RGBColor = RGBColor(44, 160, 44);
const C_WINNER: RGBColor = RGBColor(230, 171, 2);
const C_BASE: RGBColor = RGBColor(90, 90, 90);
const C_BASE2: RGBColor = RGBColor(23, 190, 207);
const C_FAIL: RGBColor = RGBColor(214, 39, 40);
const C_BUDGET: RGBColor = RGBColor(170, 0, 0);
const C_MODEL: RGBColor = RGBColor(148, 103, 189);
const C_PICK: RGBColor = RGBColor(204, 51, 153);
/// A workload pick's label: its text size and line height (px), and its distance right of the
/// marker's centre.
const PICK_FONT: f64 = 13.0;
const PICK_LINE: i32 = 16;
const PICK_GAP: i32 = 19;

/// Register the embedded font with plotters (once per process).
fn ensure_font() -> Result<()> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok()
            && plotters::style::register_font(FAMILY, FontStyle::Bold, FONT).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(anyhow!(
            "the embedded plot font could not be loaded (a broken qtune build?)"
        ))
    }
}

/// A measured, successful trial (confirmation re-runs are not separate points).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub id: u32,
    pub tg: f64,
    pub pp: f64,
    pub vram: Option<f64>,
    pub ncmoe: Option<u32>,
    /// The trial ran the recommended config.
    pub recommended: bool,
    /// The trial was a baseline launch.
    pub baseline: bool,
}

/// A failed trial (anything but ok and skipped).
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    pub id: u32,
    pub kind: OutcomeKind,
    pub vram: Option<f64>,
    pub ncmoe: Option<u32>,
}

/// The recommended config or a baseline, at its measured values, with its flags.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    pub tg: f64,
    pub pp: f64,
    pub vram: Option<f64>,
    pub ncmoe: Option<u32>,
    /// The llama.cpp flags (no server, model, host, port).
    pub flags: String,
}

/// One config that is the best command for one workload or more, where it measured.
#[derive(Debug, Clone, PartialEq)]
pub struct PickMark {
    pub at: Marker,
    /// `workload: config` for each workload it is the pick of (`chat: fit-target`,
    /// `long-doc: --n-cpu-moe 13 -b 2048 -ub 2048`).
    pub labels: Vec<String>,
}

/// What the plots draw, extracted from a [`TuneResult`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlotData {
    pub model: String,
    pub points: Vec<Point>,
    pub failed: Vec<Failed>,
    pub winner: Option<Marker>,
    /// Every baseline config (the server's default, and `--fit on --fit-target` where the tune
    /// launched it), in launch order, at the median of its ok trials.
    pub baselines: Vec<Marker>,
    /// Each workload's best command ([`TuneResult::workload_picks`]), one per config: picks
    /// of the same config share it, with a label each.
    pub picks: Vec<PickMark>,
    pub budget: Option<f64>,
    pub has_gpu: bool,
    /// The speed model's generation for the winner's config at each --n-cpu-moe (empty when
    /// it cannot predict this run): (n_cpu_moe, modelled tg, bound tg).
    pub modelled: Vec<(u32, f64, f64)>,
    /// Time per request on each workload, reference against pick (`plot-objective`).
    pub objective: Vec<objective::WorkloadBars>,
    /// The tune replayed a trace (its objective is the replay's time per request).
    pub replay: bool,
}

fn median(v: Vec<f64>) -> Option<f64> {
    crate::objective::median(&v)
}

fn flags(c: &crate::config::LaunchConfig) -> String {
    crate::config::shell_line(&c.server_args())
}

/// A config at the median of every sample of its confirmation rounds when it had some, else
/// of its other launches (as the summary pools a baseline). A baseline's launch over the VRAM
/// budget counts: it is what the user would get. None when nothing measured it.
fn measured(r: &TuneResult, c: &crate::config::LaunchConfig) -> Option<Marker> {
    let baseline = r.baseline_name(c).is_some();
    let counts = |t: &crate::trial::TrialOutcome| {
        t.kind.is_ok() || (baseline && t.kind == OutcomeKind::Spill)
    };
    let of = |confirm: bool| -> Vec<&crate::trial::TrialOutcome> {
        r.trials
            .iter()
            .filter(|t| &t.config == c && counts(t) && (t.role == TrialRole::Confirm) == confirm)
            .collect()
    };
    let mut ok = of(true);
    if ok.is_empty() {
        ok = of(false);
    }
    let pooled = |f: fn(&crate::trial::Metrics) -> &crate::trial::Stat| {
        median(
            ok.iter()
                .filter_map(|t| t.metrics.as_ref())
                .flat_map(|m| f(m).samples.clone())
                .collect(),
        )
    };
    Some(Marker {
        tg: pooled(|m| &m.gen_tps)?,
        pp: pooled(|m| &m.prompt_tps)?,
        vram: median(
            ok.iter()
                .filter_map(|t| t.peak_vram_total_mib().map(|v| v as f64))
                .collect(),
        ),
        ncmoe: c.n_cpu_moe,
        flags: flags(c),
    })
}

/// A config in a few words, for a label on the plot: the baseline's name (`default`,
/// `fit-target`), else the words of its label that set it apart from the other configs qtune
/// launched (those every one of them shares say nothing), else its whole label.
fn short_name(r: &TuneResult, c: &crate::config::LaunchConfig) -> String {
    if let Some(name) = r.baseline_name(c) {
        return name.to_string();
    }
    let mut launched: Vec<Vec<String>> = Vec::new();
    for t in r.trials.iter().filter(|t| t.kind != OutcomeKind::Skipped) {
        let parts = t.config.label_parts();
        if r.baseline_name(&t.config).is_none() && !launched.contains(&parts) {
            launched.push(parts);
        }
    }
    let own: Vec<String> = c
        .label_parts()
        .into_iter()
        .filter(|f| !launched.iter().all(|l| l.contains(f)))
        .collect();
    if own.is_empty() {
        c.label()
    } else {
        own.join(" ")
    }
}

impl PlotData {
    pub fn from_result(r: &TuneResult) -> PlotData {
        let winner_config = r.winner.as_ref().map(|w| &w.config);
        let points = r
            .trials
            .iter()
            .filter(|t| t.kind.is_ok() && t.role != TrialRole::Confirm)
            .filter_map(|t| {
                Some(Point {
                    id: t.id,
                    tg: t.gen_tps()?,
                    pp: t.prompt_tps()?,
                    vram: t.peak_vram_total_mib().map(|v| v as f64),
                    ncmoe: t.config.n_cpu_moe,
                    recommended: winner_config == Some(&t.config),
                    baseline: t.role == TrialRole::Baseline,
                })
            })
            .collect();
        let failed = r
            .trials
            .iter()
            .filter(|t| !t.kind.is_ok() && t.kind != OutcomeKind::Skipped)
            .map(|t| Failed {
                id: t.id,
                kind: t.kind,
                vram: t.peak_vram_total_mib().map(|v| v as f64),
                ncmoe: t.config.n_cpu_moe,
            })
            .collect();
        let winner = r.winner.as_ref().map(|w| Marker {
            tg: w.gen_tps.median,
            pp: w.prompt_tps.median,
            vram: w.peak_vram_mib.map(|v| v as f64),
            ncmoe: w.config.n_cpu_moe,
            flags: flags(&w.config),
        });
        let mut configs: Vec<&crate::config::LaunchConfig> = Vec::new();
        for t in r
            .trials
            .iter()
            .filter(|t| matches!(t.role, TrialRole::Baseline | TrialRole::SecondBaseline))
        {
            if !configs.contains(&&t.config) {
                configs.push(&t.config);
            }
        }
        // The recommended config is drawn once: a baseline kept as the recommendation is not
        // drawn again as a baseline.
        let baselines = configs
            .into_iter()
            .filter(|c| winner_config != Some(*c))
            .filter_map(|c| measured(r, c))
            .collect();
        let mut picks: Vec<(&crate::config::LaunchConfig, Vec<String>)> = Vec::new();
        let workload_picks = r.workload_picks();
        for p in &workload_picks {
            let label = format!("{}: {}", p.workload, short_name(r, &p.config));
            match picks.iter_mut().find(|(c, _)| *c == &p.config) {
                Some((_, labels)) => labels.push(label),
                None => picks.push((&p.config, vec![label])),
            }
        }
        let picks = picks
            .into_iter()
            .filter_map(|(c, labels)| {
                let at = match &winner {
                    Some(w) if winner_config == Some(c) => w.clone(),
                    _ => measured(r, c)?,
                };
                Some(PickMark { at, labels })
            })
            .collect();
        let modelled = r
            .winner
            .as_ref()
            .filter(|w| w.config.n_cpu_moe.is_some() && w.config.cpu_experts.is_none())
            .map(|w| {
                let sb = crate::model::speed::SpeedBox::from_hardware(&r.inputs.hardware);
                (0..=r.model.n_blocks)
                    .filter_map(|n| {
                        let cfg = w.config.clone().with_experts_on_cpu(n);
                        let sp = crate::model::speed::predict(
                            &r.model,
                            &cfg,
                            &sb,
                            r.inputs.hardware.has_gpu(),
                            r.inputs.space.workload.prompt_tokens,
                            &crate::model::speed::FITTED,
                        )?;
                        Some((n, sp.tg.tps, sp.tg_bound_tps))
                    })
                    .collect()
            })
            .unwrap_or_default();
        PlotData {
            objective: objective::workload_bars(r),
            replay: r.inputs.space.workload.replay.is_some(),
            modelled,
            // Drawn text from outside: no control character (an SVG could not hold it).
            model: crate::escape::terminal(
                &r.model.name.clone().unwrap_or_else(|| super::model_stem(r)),
            ),
            points,
            failed,
            winner,
            baselines,
            picks,
            budget: r.inputs.vram_budget_mib.map(|v| v as f64),
            has_gpu: r.inputs.hardware.has_gpu(),
        }
    }

    fn markers(&self) -> impl Iterator<Item = &Marker> {
        self.winner
            .iter()
            .chain(self.baselines.iter())
            .chain(self.picks.iter().map(|p| &p.at))
    }

    fn tgs(&self) -> Vec<f64> {
        self.points
            .iter()
            .map(|p| p.tg)
            .chain(self.markers().map(|m| m.tg))
            .collect()
    }

    fn pps(&self) -> Vec<f64> {
        self.points
            .iter()
            .map(|p| p.pp)
            .chain(self.markers().map(|m| m.pp))
            .collect()
    }

    /// Every VRAM value drawn: points, failures, markers and the budget.
    fn vrams(&self) -> Vec<f64> {
        self.points
            .iter()
            .filter_map(|p| p.vram)
            .chain(self.failed.iter().filter_map(|f| f.vram))
            .chain(self.markers().filter_map(|m| m.vram))
            .chain(self.budget)
            .collect()
    }

    fn has_vram(&self) -> bool {
        self.points.iter().any(|p| p.vram.is_some())
    }

    fn has_ncmoe(&self) -> bool {
        self.points.iter().any(|p| p.ncmoe.is_some())
            || self.failed.iter().any(|f| f.ncmoe.is_some())
    }

    /// A short legend text for the failures, e.g. `failed: 3 (oom-load, spill)`.
    fn failed_label(&self) -> String {
        let mut kinds: Vec<&str> = Vec::new();
        for f in &self.failed {
            if !kinds.contains(&f.kind.as_str()) {
                kinds.push(f.kind.as_str());
            }
        }
        format!("failed: {} ({})", self.failed.len(), kinds.join(", "))
    }

    /// Why the plot `stem` has nothing to show, or None when it has.
    fn empty_because(&self, stem: &str) -> Option<String> {
        match stem {
            "plot-vram" if !self.has_vram() => Some(if self.has_gpu {
                "VRAM was not measured in this run".into()
            } else {
                "no GPU, so no VRAM was measured".into()
            }),
            "plot-objective" if self.objective.is_empty() => Some(if self.replay {
                "the trace's replay gave no time per request to compare (no winner)".into()
            } else {
                "the tune measured no workload's time per request (a single request)".into()
            }),
            "plot-tg-pp" if self.points.is_empty() => Some("no trial completed".into()),
            "plot-ncmoe" if !self.has_ncmoe() => Some(if self.has_gpu {
                format!(
                    "this run did not vary {} (a dense model, or a space without it)",
                    crate::engine::Flag::NCpuMoe
                )
            } else {
                format!("no GPU, so {} was not varied", crate::engine::Flag::NCpuMoe)
            }),
            _ => None,
        }
    }
}

/// The plots a result has data for (stem, title), in report order.
pub fn available(r: &TuneResult) -> Vec<(&'static str, &'static str)> {
    let d = PlotData::from_result(r);
    PLOTS
        .iter()
        .copied()
        .filter(|(stem, _)| d.empty_because(stem).is_none())
        .collect()
}

/// One line per plot left out for lack of data, saying why (for the report).
pub fn left_out(r: &TuneResult) -> Vec<String> {
    let d = PlotData::from_result(r);
    PLOTS
        .iter()
        .filter_map(|(stem, title)| {
            d.empty_because(stem)
                .map(|why| format!("{title} ({stem}) is left out: {why}."))
        })
        .collect()
}

/// Render every plot of a result that has data ([`available`]), SVG and PNG.
pub fn render_all(r: &TuneResult) -> Result<Vec<RenderedPlot>> {
    ensure_font()?;
    let d = PlotData::from_result(r);
    let mut out = Vec::new();
    for (stem, title) in *PLOTS {
        if d.empty_because(stem).is_some() {
            continue;
        }
        let h = if stem == "plot-ncmoe" { H_NCMOE } else { H };
        let which = match stem {
            "plot-vram" => Plot::Vram,
            "plot-tg-pp" => Plot::TgPp,
            "plot-objective" => Plot::Objective,
            _ => Plot::NCpuMoe,
        };
        let svg = render_svg(which, &d, title, W, h)
            .map_err(|e| anyhow!("cannot draw {stem}.svg: {e:#}"))?;
        let png = render_png(which, &d, title, W, h)
            .map_err(|e| anyhow!("cannot draw {stem}.png: {e:#}"))?;
        out.push(RenderedPlot {
            stem,
            title: title.to_string(),
            svg,
            png,
        });
    }
    Ok(out)
}

#[derive(Clone, Copy)]
enum Plot {
    Objective,
    Vram,
    TgPp,
    NCpuMoe,
}

fn render_svg(which: Plot, d: &PlotData, title: &str, w: u32, h: u32) -> Result<String> {
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (w, h)).into_drawing_area();
        draw(which, &root, d, title)?;
        root.present()?;
    }
    Ok(s)
}

fn render_png(which: Plot, d: &PlotData, title: &str, w: u32, h: u32) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        draw(which, &root, d, title)?;
        root.present()?;
    }
    let mut png = Vec::new();
    image::ImageEncoder::write_image(
        image::codecs::png::PngEncoder::new(&mut png),
        &buf,
        w,
        h,
        image::ColorType::Rgb8,
    )?;
    Ok(png)
}
