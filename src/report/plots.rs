//! The report's plots, each rendered as SVG and PNG with plotters and the embedded DejaVu Sans
//! (no system fonts: nothing links fontconfig or freetype).
//! (One file over 800 lines: four plots sharing one drawing setup, with their tests.)
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
//!
//! Over 600 lines on purpose: one job (the three plots share one data extraction, one style,
//! one legend and one SVG/PNG backend setup); splitting by plot would duplicate that setup.

use crate::run::pareto::{self, Goal};
use crate::run::TuneResult;
use crate::trial::{OutcomeKind, TrialRole};
use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// The font every plot uses, compiled into the binary.
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

/// One plot in both formats.
pub struct RenderedPlot {
    /// File stem, e.g. `plot-vram` (files `plot-vram.svg` and `plot-vram.png`).
    pub stem: &'static str,
    pub title: String,
    pub svg: String,
    pub png: Vec<u8>,
}

/// The plots' stems and titles, in report order.
pub const PLOTS: [(&str, &str); 3] = [
    ("plot-vram", "Generation speed vs peak VRAM"),
    ("plot-tg-pp", "Generation vs prompt speed"),
    ("plot-ncmoe", "Speed and peak VRAM across --n-cpu-moe"),
];

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
pub struct Pick {
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
    pub picks: Vec<Pick>,
    pub budget: Option<f64>,
    pub has_gpu: bool,
    /// The speed model's generation for the winner's config at each --n-cpu-moe (empty when
    /// it cannot predict this run): (n_cpu_moe, modelled tg, bound tg).
    pub modelled: Vec<(u32, f64, f64)>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
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
                Some(Pick { at, labels })
            })
            .collect();
        let modelled = r
            .winner
            .as_ref()
            .filter(|w| w.config.n_cpu_moe.is_some() && w.config.cpu_experts.is_none())
            .map(|w| {
                let sb = crate::model::speed::SpeedBox::from_hardware(&r.hardware);
                (0..=r.model.n_blocks)
                    .filter_map(|n| {
                        let cfg = w.config.clone().with_experts_on_cpu(n);
                        let sp = crate::model::speed::predict(
                            &r.model,
                            &cfg,
                            &sb,
                            r.hardware.has_gpu(),
                            r.space.workload.prompt_tokens,
                            &crate::model::speed::FITTED,
                        )?;
                        Some((n, sp.tg.tps, sp.tg_bound_tps))
                    })
                    .collect()
            })
            .unwrap_or_default();
        PlotData {
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
            budget: r.vram_budget_mib.map(|v| v as f64),
            has_gpu: r.hardware.has_gpu(),
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
            "plot-tg-pp" if self.points.is_empty() => Some("no trial completed".into()),
            "plot-ncmoe" if !self.has_ncmoe() => Some(if self.has_gpu {
                "this run did not vary --n-cpu-moe (a dense model, or a space without it)".into()
            } else {
                "no GPU, so --n-cpu-moe was not varied".into()
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
    for (stem, title) in PLOTS {
        if d.empty_because(stem).is_some() {
            continue;
        }
        let h = if stem == "plot-ncmoe" { H_NCMOE } else { H };
        let which = match stem {
            "plot-vram" => Plot::Vram,
            "plot-tg-pp" => Plot::TgPp,
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

/// A legend entry's symbol.
#[derive(Clone, Copy)]
enum Sym {
    Line,
    Dashed,
    Dot,
    Square,
    Diamond,
    Triangle,
    Cross,
    Ring,
}

/// One legend entry: its symbol, colour and text (wrapped in the legend column).
struct Item {
    sym: Sym,
    color: RGBColor,
    text: String,
}

fn item(sym: Sym, color: RGBColor, text: impl Into<String>) -> Item {
    Item {
        sym,
        color,
        text: text.into(),
    }
}

/// The markers of the recommended config and of each baseline: (symbol, colour, legend text).
fn marker_styles(d: &PlotData) -> (Option<Item>, Vec<Item>) {
    let rec = d.winner.as_ref().map(|w| {
        let kept = d.points.iter().any(|p| p.recommended && p.baseline);
        item(
            Sym::Triangle,
            C_WINNER,
            if kept {
                format!(
                    "recommended (the baseline, kept):\n{}",
                    flag_words(&w.flags)
                )
            } else {
                format!("recommended:\n{}", flag_words(&w.flags))
            },
        )
    });
    let bases = d
        .baselines
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let (sym, color) = if i == 0 {
                (Sym::Square, C_BASE)
            } else {
                (Sym::Diamond, C_BASE2)
            };
            let over = matches!((b.vram, d.budget), (Some(v), Some(budget)) if v > budget);
            let what = if over {
                "baseline, its peak over the VRAM budget:"
            } else {
                "baseline:"
            };
            item(sym, color, format!("{what}\n{}", flag_words(&b.flags)))
        })
        .collect();
    (rec, bases)
}

/// A no-break space: keeps a flag and its value on one line of a wrapped legend.
const NBSP: char = '\u{a0}';

/// Flags for a legend: each flag bound to its value (`-c 2048` is one word when wrapping).
fn flag_words(flags: &str) -> String {
    let mut out = String::new();
    for w in flags.split(' ') {
        if !out.is_empty() {
            out.push(if w.starts_with('-') { ' ' } else { NBSP });
        }
        out.push_str(w);
    }
    out
}

/// Words of `text` in lines of at most `width` characters (a longer word gets its own line);
/// a '\n' starts a new line.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for para in text.split('\n') {
        let mut cur = String::new();
        // A word longer than a line (an -ot regex) is cut into pieces of a line each.
        let words = para.split(' ').filter(|w| !w.is_empty()).flat_map(|w| {
            let chars: Vec<char> = w.chars().collect();
            chars
                .chunks(width.max(1))
                .map(|c| c.iter().collect::<String>())
                .collect::<Vec<_>>()
        });
        for word in words {
            if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > width {
                lines.push(std::mem::take(&mut cur));
            }
            if !cur.is_empty() {
                cur.push(' ');
            }
            cur.push_str(&word);
        }
        if !cur.is_empty() {
            lines.push(cur);
        }
    }
    lines.into_iter().map(|l| l.replace(NBSP, " ")).collect()
}

/// Draw a symbol centred at `(x, y)` (pixels of `area`).
fn draw_sym<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    sym: Sym,
    color: RGBColor,
    (x, y): (i32, i32),
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    match sym {
        Sym::Line => area.draw(&PathElement::new(
            vec![(x - 10, y), (x + 10, y)],
            color.stroke_width(3),
        ))?,
        Sym::Dashed => {
            area.draw(&PathElement::new(
                vec![(x - 11, y), (x - 3, y)],
                color.stroke_width(2),
            ))?;
            area.draw(&PathElement::new(
                vec![(x + 3, y), (x + 11, y)],
                color.stroke_width(2),
            ))?
        }
        Sym::Dot => area.draw(&Circle::new((x, y), 5, color.filled()))?,
        Sym::Square => {
            area.draw(&Rectangle::new(
                [(x - 7, y - 7), (x + 7, y + 7)],
                color.filled(),
            ))?;
            area.draw(&Rectangle::new(
                [(x - 7, y - 7), (x + 7, y + 7)],
                BLACK.stroke_width(1),
            ))?
        }
        Sym::Diamond => {
            let pts = vec![(x, y - 9), (x + 9, y), (x, y + 9), (x - 9, y)];
            area.draw(&Polygon::new(pts.clone(), color.filled()))?;
            let mut ring = pts;
            ring.push((x, y - 9));
            area.draw(&PathElement::new(ring, BLACK.stroke_width(1)))?
        }
        Sym::Triangle => {
            area.draw(&TriangleMarker::new((x, y), 14, BLACK.filled()))?;
            area.draw(&TriangleMarker::new((x, y), 11, color.filled()))?
        }
        Sym::Cross => area.draw(&Cross::new((x, y), 6, color.stroke_width(3)))?,
        Sym::Ring => area.draw(&Circle::new((x, y), 13, color.stroke_width(3)))?,
    }
    Ok(())
}

/// The legend, top to bottom in its column, each text wrapped.
fn draw_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, items: &[Item]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let mut y = 16;
    for it in items {
        draw_sym(area, it.sym, it.color, (22, y + 8))?;
        for (i, line) in wrap(&it.text, LEGEND_CHARS).iter().enumerate() {
            area.draw(&Text::new(
                line.clone(),
                (44, y + i as i32 * 17),
                font(13.0).color(&RGBColor(40, 40, 40)),
            ))?;
        }
        y += 17 * wrap(&it.text, LEGEND_CHARS).len().max(1) as i32 + 10;
    }
    Ok(())
}

/// The canvas cut into the title band, the plot area, the legend column and the caption band
/// (one line of caption text per entry of `caption`).
struct Areas<DB: DrawingBackend> {
    plot: DrawingArea<DB, Shift>,
    legend: DrawingArea<DB, Shift>,
    caption: DrawingArea<DB, Shift>,
}

fn areas<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    model: &str,
    caption_lines: usize,
) -> Result<Areas<DB>>
where
    DB::ErrorType: 'static,
{
    let (w, h) = root.dim_in_pixel();
    let (top, rest) = root.split_vertically(TITLE_H);
    top.draw(&Text::new(
        title.to_string(),
        (18, 10),
        font(24.0).color(&BLACK),
    ))?;
    top.draw(&Text::new(
        model.to_string(),
        (18, 40),
        font(15.0).color(&RGBColor(90, 90, 90)),
    ))?;
    let caption_h = if caption_lines == 0 {
        0
    } else {
        caption_lines as u32 * 19 + 14
    };
    let (main, caption) = rest.split_vertically(h - TITLE_H - caption_h);
    let (plot, legend) = main.split_horizontally(w - LEGEND_W);
    Ok(Areas {
        plot,
        legend,
        caption,
    })
}

fn draw_caption<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, lines: &[String]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    for (i, l) in lines.iter().enumerate() {
        area.draw(&Text::new(
            l.clone(),
            (18, 4 + i as i32 * 19),
            font(14.0).color(&RGBColor(60, 60, 60)),
        ))?;
    }
    Ok(())
}

/// The axis range of `values`, zoomed to them: their span plus a margin on each side (never
/// below 0 when every value is at or above 0); a single value gets ±5 %.
fn zoomed(values: &[f64]) -> std::ops::Range<f64> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.is_empty() {
        return 0.0..1.0;
    }
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let span = hi - lo;
    let pad = if span > hi.abs() * 1e-3 {
        span * 0.08
    } else {
        (hi.abs() * 0.05).max(1.0)
    };
    let start = if lo >= 0.0 {
        (lo - pad).max(0.0)
    } else {
        lo - pad
    };
    start..(hi + pad)
}

/// The x axis of a front, for [`front_caption`]: what being better on it is called ("uses
/// less VRAM"), its unit, the value of a point and of a marker, and which way is better.
struct FrontAxis {
    better: &'static str,
    unit: &'static str,
    point: fn(&Point) -> Option<f64>,
    marker: fn(&Marker) -> Option<f64>,
    goal: Goal,
}

/// Why each point on the Pareto front other than the recommended config is not recommended,
/// one sentence each, from the numbers of the plot's two axes.
fn front_caption(front: &[&Point], winner: Option<&Marker>, x: FrontAxis) -> Vec<String> {
    let FrontAxis {
        better: x_better,
        unit: x_unit,
        point: px,
        marker: mx,
        goal: gx,
    } = x;
    let Some(w) = winner else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // The recommended config's own launch, when the race's pooled value (the marker) differs.
    for p in front.iter().filter(|p| p.recommended) {
        if (p.tg - w.tg).abs() > 0.02 * w.tg.abs() {
            out.push(format!(
                "#{} is the recommended config's own launch ({:.1} tok/s generation); its marker is at the value the race's rounds measured ({:.1}).",
                p.id, p.tg, w.tg
            ));
        }
    }
    for p in front.iter().filter(|p| !p.recommended) {
        let mut said: Vec<String> = Vec::new();
        if let (Some(a), Some(b)) = (px(p), mx(w)) {
            let better = match gx {
                Goal::Min => a < b,
                Goal::Max => a > b,
            };
            if better {
                said.push(format!(
                    "{x_better} ({} vs {} {x_unit})",
                    crate::util::fmt_thousands(a),
                    crate::util::fmt_thousands(b)
                ));
            }
        }
        if p.tg < w.tg {
            said.push(format!(
                "but slower generation ({:.1} vs {:.1} tok/s)",
                p.tg, w.tg
            ));
        } else {
            said.push(format!(
                "and {:.1} tok/s generation in its own launch, not proven faster than the recommended {:.1} by the race's paired rounds",
                p.tg, w.tg
            ));
        }
        out.push(format!(
            "#{}{} is on the Pareto front but not recommended: {}.",
            p.id,
            if p.baseline { " (a baseline)" } else { "" },
            said.join(" ")
        ));
    }
    out.into_iter()
        .flat_map(|s| wrap(&s, CAPTION_CHARS))
        .collect()
}

fn draw<DB: DrawingBackend>(
    which: Plot,
    root: &DrawingArea<DB, Shift>,
    d: &PlotData,
    title: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    match which {
        Plot::Vram => draw_vram(root, d, title),
        Plot::TgPp => draw_tg_pp(root, d, title),
        Plot::NCpuMoe => draw_ncmoe(root, d, title),
    }
}

fn font(size: f64) -> TextStyle<'static> {
    (FAMILY, size).into_font().into()
}

/// A trial's id next to its point (up and right, clear of the marker).
macro_rules! id_label {
    ($id:expr, $at:expr) => {
        EmptyElement::at($at)
            + Text::new(
                format!("#{}", $id),
                (7, -17),
                font(12.0).color(&RGBColor(70, 70, 70)),
            )
    };
}

/// Tick text for an integer axis drawn on f64 coordinates: only whole numbers get a label.
fn int_tick(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-6 && *v >= 0.0 {
        format!("{v:.0}")
    } else {
        String::new()
    }
}

type Chart<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The Pareto front (a staircase, its points ringed) under every ok trial's point; returns the
/// front's points.
fn draw_front_and_points<'p, DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    pts: &[&'p Point],
    xy: &[(f64, f64)],
    (gx, gy): (Goal, Goal),
) -> Result<Vec<&'p Point>>
where
    DB::ErrorType: 'static,
{
    let idx = pareto::front(xy, gx, gy);
    let front: Vec<(f64, f64)> = idx.iter().map(|&i| xy[i]).collect();
    chart.draw_series(LineSeries::new(
        pareto::staircase(&front, gx, gy),
        C_FRONT.stroke_width(3),
    ))?;
    chart.draw_series(
        front
            .iter()
            .map(|&c| Circle::new(c, 9, C_FRONT.stroke_width(3))),
    )?;
    chart.draw_series(xy.iter().map(|&c| Circle::new(c, 5, C_POINT.filled())))?;
    Ok(idx.into_iter().map(|i| pts[i]).collect())
}

/// The recommended config and each baseline at their measured values, labelled in the legend.
fn draw_markers<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    d: &PlotData,
    at: impl Fn(&Marker) -> Option<(f64, f64)>,
    legend: &mut Vec<Item>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let (rec, bases) = marker_styles(d);
    let marked = d
        .baselines
        .iter()
        .zip(bases)
        .chain(d.winner.as_ref().zip(rec));
    for (m, it) in marked {
        if let Some(c) = at(m) {
            let area = chart.plotting_area();
            let (px, py) = area.map_coordinate(&c);
            draw_sym(
                &area.strip_coord_spec(),
                it.sym,
                it.color,
                (px - area.get_base_pixel().0, py - area.get_base_pixel().1),
            )?;
            legend.push(it);
        }
    }
    Ok(())
}

fn mesh<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, x: &str, y: &str) -> Result<()>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_mesh()
        .x_desc(x)
        .y_desc(y)
        .axis_desc_style(font(17.0))
        .label_style(font(14.0))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    Ok(())
}

fn draw_vram<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &PlotData,
    title: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let pts: Vec<&Point> = d.points.iter().filter(|p| p.vram.is_some()).collect();
    let xy: Vec<(f64, f64)> = pts.iter().map(|p| (p.vram.unwrap_or(0.0), p.tg)).collect();
    let front_idx = pareto::front(&xy, Goal::Min, Goal::Max);
    let front_pts: Vec<&Point> = front_idx.iter().map(|&i| pts[i]).collect();
    let caption = front_caption(
        &front_pts,
        d.winner.as_ref(),
        FrontAxis {
            better: "uses less VRAM",
            unit: "MiB",
            point: |p| p.vram,
            marker: |m| m.vram,
            goal: Goal::Min,
        },
    );
    let a = areas(root, title, &d.model, caption.len())?;
    let x = zoomed(&d.vrams());
    let y = zoomed(&d.tgs());
    let y_floor = y.start;
    let mut chart = ChartBuilder::on(&a.plot)
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(x.clone(), y.clone())?;
    mesh(&mut chart, "peak VRAM (MiB)", "generation (tok/s)")?;
    let mut legend = vec![
        item(Sym::Line, C_FRONT, "Pareto front (fastest for its VRAM)"),
        item(Sym::Dot, C_POINT, "trial (ok), #id"),
    ];
    draw_front_and_points(&mut chart, &pts, &xy, (Goal::Min, Goal::Max))?;
    chart.draw_series(
        pts.iter()
            .map(|p| id_label!(p.id, (p.vram.unwrap_or(0.0), p.tg))),
    )?;
    if let Some(b) = d.budget {
        chart.draw_series(DashedLineSeries::new(
            vec![(b, y.start), (b, y.end)],
            10,
            6,
            C_BUDGET.stroke_width(2),
        ))?;
        legend.push(item(
            Sym::Dashed,
            C_BUDGET,
            format!("VRAM budget ({})", crate::util::fmt_mib(b)),
        ));
    }
    if !d.failed.is_empty() {
        let at = |f: &Failed| f.vram.or(d.budget).unwrap_or(x.start);
        chart.draw_series(
            d.failed
                .iter()
                .map(|f| Cross::new((at(f), y_floor), 8, C_FAIL.stroke_width(3))),
        )?;
        legend.push(item(
            Sym::Cross,
            C_FAIL,
            format!("{} (at the bottom: no speed)", d.failed_label()),
        ));
    }
    draw_markers(&mut chart, d, |m| m.vram.map(|v| (v, m.tg)), &mut legend)?;
    draw_legend(&a.legend, &legend)?;
    draw_caption(&a.caption, &caption)?;
    Ok(())
}

fn draw_tg_pp<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &PlotData,
    title: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let pts: Vec<&Point> = d.points.iter().collect();
    let xy: Vec<(f64, f64)> = pts.iter().map(|p| (p.pp, p.tg)).collect();
    let front_idx = pareto::front(&xy, Goal::Max, Goal::Max);
    let front_pts: Vec<&Point> = front_idx.iter().map(|&i| pts[i]).collect();
    let mut caption = front_caption(
        &front_pts,
        d.winner.as_ref(),
        FrontAxis {
            better: "faster prompt",
            unit: "tok/s",
            point: |p| Some(p.pp),
            marker: |m| Some(m.pp),
            goal: Goal::Max,
        },
    );
    if !d.failed.is_empty() {
        caption.push(format!("{} not shown (no speeds).", d.failed_label()));
    }
    let a = areas(root, title, &d.model, caption.len())?;
    let x = zoomed(&d.pps());
    let y = zoomed(&d.tgs());
    let mut chart = ChartBuilder::on(&a.plot)
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)?;
    mesh(
        &mut chart,
        "prompt processing (tok/s)",
        "generation (tok/s)",
    )?;
    let mut legend = vec![
        item(Sym::Line, C_FRONT, "Pareto front (faster at both)"),
        item(Sym::Dot, C_POINT, "trial (ok), #id"),
    ];
    draw_front_and_points(&mut chart, &pts, &xy, (Goal::Max, Goal::Max))?;
    chart.draw_series(d.points.iter().map(|p| id_label!(p.id, (p.pp, p.tg))))?;
    draw_markers(&mut chart, d, |m| Some((m.pp, m.tg)), &mut legend)?;
    draw_picks(&mut chart, d, &mut legend)?;
    draw_legend(&a.legend, &legend)?;
    draw_caption(&a.caption, &caption)?;
    Ok(())
}

/// Each workload's pick ringed at its generation and prompt speed, with its labels stacked
/// beside the ring on a pale backing: below right of it where that is free, else above right,
/// below left, above left (free: inside the plot area, clear of every trial's `#id` and of the
/// labels already drawn), else below right moved down past what it would cover.
fn draw_picks<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    d: &PlotData,
    legend: &mut Vec<Item>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    if d.picks.is_empty() {
        return Ok(());
    }
    let area = chart.plotting_area();
    let (base_x, base_y) = area.get_base_pixel();
    let (w, h) = area.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    let canvas = area.strip_coord_spec();
    let at = |pp: f64, tg: f64| {
        let (px, py) = area.map_coordinate(&(pp, tg));
        (px - base_x, py - base_y)
    };
    let text_w = |text: &str, size: f64| -> Result<i32> {
        let (tw, _) = canvas.estimate_text_size(text, &font(size))?;
        Ok(tw as i32)
    };
    // Pixel boxes (left, top, right, bottom) already taken: each trial's point and #id (see
    // id_label!), the recommended config's and the baselines' markers, the picks' rings.
    let mut taken: Vec<(i32, i32, i32, i32)> = Vec::new();
    for p in &d.points {
        let (x, y) = at(p.pp, p.tg);
        let id = text_w(&format!("#{}", p.id), 12.0)?;
        taken.push((x - 6, y - 6, x + 6, y + 6));
        taken.push((x + 7, y - 17, x + 7 + id, y - 3));
    }
    for m in d.winner.iter().chain(&d.baselines) {
        let (x, y) = at(m.pp, m.tg);
        taken.push((x - 9, y - 9, x + 9, y + 9));
    }
    for p in &d.picks {
        let (x, y) = at(p.at.pp, p.at.tg);
        taken.push((x - 15, y - 15, x + 15, y + 15));
    }
    let overlaps = |a: &(i32, i32, i32, i32), b: &(i32, i32, i32, i32)| {
        a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
    };
    for p in &d.picks {
        let (x, y) = at(p.at.pp, p.at.tg);
        draw_sym(&canvas, Sym::Ring, C_PICK, (x, y))?;
        let mut bw = 0;
        for l in &p.labels {
            bw = bw.max(text_w(l, PICK_FONT)?);
        }
        let bh = PICK_LINE * p.labels.len() as i32;
        let right = (x + PICK_GAP, x + PICK_GAP + bw);
        let left = (x - PICK_GAP - bw, x - PICK_GAP);
        let below = (y + 2, y + 2 + bh);
        let above = (y - 2 - bh, y - 2);
        let boxes = [(right, below), (right, above), (left, below), (left, above)]
            .map(|((l, r), (t, b))| (l, t, r, b));
        let free = |b: &(i32, i32, i32, i32)| {
            b.0 >= 0 && b.2 <= w && b.1 >= 0 && b.3 <= h && !taken.iter().any(|t| overlaps(b, t))
        };
        let mut b = boxes.iter().copied().find(|b| free(b)).unwrap_or(boxes[0]);
        while let Some(t) = taken.iter().find(|t| overlaps(&b, t)) {
            b = (b.0, t.3 + 2, b.2, t.3 + 2 + bh);
        }
        taken.push(b);
        canvas.draw(&Rectangle::new(
            [(b.0 - 2, b.1), (b.2 + 2, b.3)],
            WHITE.mix(0.85).filled(),
        ))?;
        let style = font(PICK_FONT)
            .color(&C_PICK)
            .pos(Pos::new(HPos::Left, VPos::Top));
        for (i, l) in p.labels.iter().enumerate() {
            canvas.draw(&Text::new(
                l.clone(),
                (b.0, b.1 + i as i32 * PICK_LINE),
                style.clone(),
            ))?;
        }
    }
    legend.push(item(
        Sym::Ring,
        C_PICK,
        "best command for a workload (workload: config; flags in report.md)",
    ));
    Ok(())
}

fn draw_ncmoe<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &PlotData,
    title: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let a = areas(root, title, &d.model, 0)?;
    let pts: Vec<&Point> = d.points.iter().filter(|p| p.ncmoe.is_some()).collect();
    let fails: Vec<&Failed> = d.failed.iter().filter(|f| f.ncmoe.is_some()).collect();
    let (top, bottom) = a.plot.split_vertically(a.plot.dim_in_pixel().1 / 2 + 10);
    let ns: Vec<u32> = pts
        .iter()
        .filter_map(|p| p.ncmoe)
        .chain(fails.iter().filter_map(|f| f.ncmoe))
        .collect();
    let n_min = ns.iter().copied().min().unwrap_or(0) as f64;
    let n_max = ns.iter().copied().max().unwrap_or(1) as f64;
    let x_range = (n_min - 0.5)..(n_max + 0.5);
    let mut tgs = d.tgs();
    tgs.extend(
        d.modelled
            .iter()
            .filter(|(n, _, _)| (*n as f64) >= n_min && (*n as f64) <= n_max)
            .map(|&(_, v, _)| v),
    );
    let tg = zoomed(&tgs);
    let pp = zoomed(&d.pps());
    let mut legend: Vec<Item> = Vec::new();

    // Top panel: speeds.
    let mut chart = ChartBuilder::on(&top)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .right_y_label_area_size(70)
        .build_cartesian_2d(x_range.clone(), tg.clone())?
        .set_secondary_coord(x_range.clone(), pp.clone());
    chart
        .configure_mesh()
        .x_desc(NCMOE_DESC)
        .y_desc("generation (tok/s)")
        .axis_desc_style(font(16.0))
        .label_style(font(14.0))
        .x_label_formatter(&int_tick)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    chart
        .configure_secondary_axes()
        .y_desc("prompt (tok/s)")
        .axis_desc_style(font(16.0))
        .label_style(font(14.0))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    // Best speed per n_cpu_moe, as a line; every trial as a point.
    let best = |key: fn(&Point) -> f64| -> Vec<(f64, f64)> {
        let mut m: std::collections::BTreeMap<u32, f64> = Default::default();
        for p in &pts {
            let n = p.ncmoe.unwrap_or(0);
            let e = m.entry(n).or_insert(f64::MIN);
            *e = e.max(key(p));
        }
        m.into_iter().map(|(n, v)| (n as f64, v)).collect()
    };
    chart.draw_series(LineSeries::new(best(|p| p.tg), C_POINT.stroke_width(2)))?;
    legend.push(item(Sym::Line, C_POINT, "generation, best per value"));
    chart.draw_series(
        pts.iter()
            .map(|p| Circle::new((p.ncmoe.unwrap_or(0) as f64, p.tg), 4, C_POINT.filled())),
    )?;
    // The speed model's generation for the winner's config across --n-cpu-moe.
    let modelled: Vec<(f64, f64)> = d
        .modelled
        .iter()
        .filter(|(n, _, _)| (*n as f64) >= n_min && (*n as f64) <= n_max)
        .map(|&(n, v, _)| (n as f64, v))
        .collect();
    if !modelled.is_empty() {
        chart.draw_series(DashedLineSeries::new(
            modelled,
            5,
            4,
            C_MODEL.stroke_width(2),
        ))?;
        legend.push(item(
            Sym::Dashed,
            C_MODEL,
            "generation, speed model (the recommended config's other flags)",
        ));
    }
    chart.draw_secondary_series(LineSeries::new(best(|p| p.pp), C_PP.stroke_width(2)))?;
    legend.push(item(Sym::Line, C_PP, "prompt, best per value (right axis)"));
    chart.draw_secondary_series(pts.iter().map(|p| {
        EmptyElement::at((p.ncmoe.unwrap_or(0) as f64, p.pp))
            + Rectangle::new([(-4, -4), (4, 4)], C_PP.filled())
    }))?;
    let (rec, bases) = marker_styles(d);
    for (b, it) in d.baselines.iter().zip(bases) {
        chart.draw_series(DashedLineSeries::new(
            vec![(x_range.start, b.tg), (x_range.end, b.tg)],
            8,
            6,
            it.color.stroke_width(2),
        ))?;
        legend.push(item(
            Sym::Dashed,
            it.color,
            format!("{} ({:.1} tok/s generation)", it.text, b.tg),
        ));
    }
    if let (Some(w), Some(it)) = (&d.winner, rec) {
        if let Some(n) = w.ncmoe {
            chart.draw_series(std::iter::once(
                EmptyElement::at((n as f64, w.tg))
                    + TriangleMarker::new((0, 0), 15, BLACK.filled())
                    + TriangleMarker::new((0, 0), 12, C_WINNER.filled()),
            ))?;
            legend.push(it);
        }
    }
    if !fails.is_empty() {
        chart.draw_series(fails.iter().map(|f| {
            Cross::new(
                (f.ncmoe.unwrap_or(0) as f64, tg.start),
                8,
                C_FAIL.stroke_width(3),
            )
        }))?;
        legend.push(item(
            Sym::Cross,
            C_FAIL,
            format!(
                "{} (top: at the bottom; below: at its peak VRAM, or at the budget if unknown)",
                d.failed_label()
            ),
        ));
    }

    // Bottom panel: peak VRAM.
    let has_vram = pts.iter().any(|p| p.vram.is_some());
    let v = zoomed(&d.vrams());
    let mut chart = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .right_y_label_area_size(70)
        .build_cartesian_2d(x_range.clone(), v.clone())?;
    chart
        .configure_mesh()
        .x_desc(NCMOE_DESC)
        .y_desc("peak VRAM (MiB)")
        .axis_desc_style(font(16.0))
        .label_style(font(14.0))
        .x_label_formatter(&int_tick)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    if has_vram {
        chart.draw_series(LineSeries::new(
            {
                let mut m: std::collections::BTreeMap<u32, f64> = Default::default();
                for p in &pts {
                    if let (Some(n), Some(v)) = (p.ncmoe, p.vram) {
                        let e = m.entry(n).or_insert(f64::MAX);
                        *e = e.min(v);
                    }
                }
                m.into_iter()
                    .map(|(n, v)| (n as f64, v))
                    .collect::<Vec<_>>()
            },
            RGBColor(31, 119, 180).mix(0.6).stroke_width(2),
        ))?;
        legend.push(item(Sym::Dot, C_POINT, "below: peak VRAM of the ok trials"));
        chart
            .draw_series(pts.iter().filter_map(|p| {
                Some(Circle::new((p.ncmoe? as f64, p.vram?), 4, C_POINT.filled()))
            }))?;
    }
    if let Some(b) = d.budget {
        chart.draw_series(DashedLineSeries::new(
            vec![(x_range.start, b), (x_range.end, b)],
            10,
            6,
            C_BUDGET.stroke_width(2),
        ))?;
        legend.push(item(
            Sym::Dashed,
            C_BUDGET,
            format!("VRAM budget ({})", crate::util::fmt_mib(b)),
        ));
    }
    if !fails.is_empty() {
        let at = |f: &Failed| f.vram.or(d.budget).unwrap_or(v.start);
        chart.draw_series(fails.iter().map(|f| {
            Cross::new(
                (f.ncmoe.unwrap_or(0) as f64, at(f)),
                8,
                C_FAIL.stroke_width(3),
            )
        }))?;
    }
    draw_legend(&a.legend, &legend)?;
    Ok(())
}

#[cfg(test)]
mod tests {
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
                "long-doc: -ngl 999 --n-cpu-moe 13 -ub 2048 --fit off --load-mode none",
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
        assert_eq!(available(&r), vec![PLOTS[1]]);
        let why = left_out(&r);
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(
            why[0].contains("plot-vram") && why[0].contains("no GPU"),
            "{why:?}"
        );
        assert!(why[1].contains("plot-ncmoe"), "{why:?}");
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
}
