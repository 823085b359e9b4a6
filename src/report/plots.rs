//! The report's plots, each rendered as SVG and PNG with plotters and the embedded DejaVu Sans
//! (no system fonts: nothing links fontconfig or freetype).
//! (One file over 800 lines: four plots sharing one drawing setup, with their tests.)
//!
//! - `plot-vram`: generation tok/s vs peak VRAM, Pareto front (fastest for its VRAM), budget.
//! - `plot-tg-pp`: generation vs prompt tok/s, Pareto front (both higher).
//! - `plot-ncmoe`: tok/s and peak VRAM across `--n-cpu-moe`, with the budget.
//!
//! Over 600 lines on purpose: one job (the three plots share one data extraction, one style
//! and one SVG/PNG backend setup); splitting by plot would duplicate that setup.

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

const W: u32 = 1000;
/// Axis text for `--n-cpu-moe` (plotters' glyph layout merges the two leading hyphens).
const NCMOE_DESC: &str = "n-cpu-moe: blocks whose routed experts stay on the CPU";
const H: u32 = 600;
const H_NCMOE: u32 = 760;

const C_POINT: RGBColor = RGBColor(31, 119, 180);
const C_PP: RGBColor = RGBColor(255, 127, 14);
const C_FRONT: RGBColor = RGBColor(44, 160, 44);
const C_WINNER: RGBColor = RGBColor(230, 171, 2);
const C_BASE: RGBColor = RGBColor(90, 90, 90);
const C_FAIL: RGBColor = RGBColor(214, 39, 40);
const C_BUDGET: RGBColor = RGBColor(170, 0, 0);
const C_MODEL: RGBColor = RGBColor(148, 103, 189);

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
}

/// A failed trial (anything but ok and skipped).
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    pub id: u32,
    pub kind: OutcomeKind,
    pub vram: Option<f64>,
    pub ncmoe: Option<u32>,
}

/// The winner or the baseline, as confirmed.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    pub tg: f64,
    pub pp: f64,
    pub vram: Option<f64>,
    pub ncmoe: Option<u32>,
}

/// What the plots draw, extracted from a [`TuneResult`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlotData {
    pub model: String,
    pub points: Vec<Point>,
    pub failed: Vec<Failed>,
    pub winner: Option<Marker>,
    pub baseline: Option<Marker>,
    pub budget: Option<f64>,
    pub has_gpu: bool,
    /// The speed model's generation for the winner's config at each --n-cpu-moe (empty when
    /// it cannot predict this run): (n_cpu_moe, modelled tg, bound tg).
    pub modelled: Vec<(u32, f64, f64)>,
}

impl PlotData {
    pub fn from_result(r: &TuneResult) -> PlotData {
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
        });
        let baseline = r.baseline().and_then(|b| {
            Some(Marker {
                tg: b.gen.as_ref()?.median,
                pp: b.prompt.as_ref()?.median,
                vram: b.peak_vram_mib.map(|v| v as f64),
                ncmoe: b.config.n_cpu_moe,
            })
        });
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
            model: r
                .model
                .name
                .clone()
                .unwrap_or_else(|| super::markdown::model_stem(r)),
            points,
            failed,
            winner,
            baseline,
            budget: r.vram_budget_mib.map(|v| v as f64),
            has_gpu: r.hardware.has_gpu(),
        }
    }

    fn max_tg(&self) -> f64 {
        self.points
            .iter()
            .map(|p| p.tg)
            .chain(self.winner.iter().map(|m| m.tg))
            .chain(self.baseline.iter().map(|m| m.tg))
            .fold(0.0, f64::max)
    }

    fn max_pp(&self) -> f64 {
        self.points
            .iter()
            .map(|p| p.pp)
            .chain(self.winner.iter().map(|m| m.pp))
            .chain(self.baseline.iter().map(|m| m.pp))
            .fold(0.0, f64::max)
    }

    fn max_vram(&self) -> Option<f64> {
        self.points
            .iter()
            .filter_map(|p| p.vram)
            .chain(self.failed.iter().filter_map(|f| f.vram))
            .chain(self.winner.iter().filter_map(|m| m.vram))
            .chain(self.baseline.iter().filter_map(|m| m.vram))
            .chain(self.budget)
            .reduce(f64::max)
    }

    fn has_vram(&self) -> bool {
        self.points.iter().any(|p| p.vram.is_some())
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
}

/// Render every plot of a result, SVG and PNG.
pub fn render_all(r: &TuneResult) -> Result<Vec<RenderedPlot>> {
    ensure_font()?;
    let d = PlotData::from_result(r);
    let mut out = Vec::new();
    for (stem, title) in PLOTS {
        let h = if stem == "plot-ncmoe" { H_NCMOE } else { H };
        let draw = |stem: &str| match stem {
            "plot-vram" => Plot::Vram,
            "plot-tg-pp" => Plot::TgPp,
            _ => Plot::NCpuMoe,
        };
        let which = draw(stem);
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
    // Keep the caption inside the 1000 px canvas at 24 px (about 75 characters).
    let mut caption = format!("{title} — {}", d.model);
    if caption.chars().count() > 75 {
        caption = caption.chars().take(74).collect::<String>() + "…";
    }
    match which {
        Plot::Vram => draw_vram(root, d, &caption),
        Plot::TgPp => draw_tg_pp(root, d, &caption),
        Plot::NCpuMoe => draw_ncmoe(root, d, &caption),
    }
}

fn font(size: f64) -> TextStyle<'static> {
    (FAMILY, size).into_font().into()
}

/// A big grey note in the middle of an area ("no GPU: VRAM not measured").
fn note<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, lines: &[&str]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let (w, h) = area.dim_in_pixel();
    let style =
        font(22.0)
            .color(&RGBColor(110, 110, 110))
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Center,
            ));
    for (i, l) in lines.iter().enumerate() {
        let y = h as i32 / 2 + (i as i32 - lines.len() as i32 / 2) * 32;
        area.draw(&Text::new(l.to_string(), (w as i32 / 2, y), style.clone()))?;
    }
    Ok(())
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

/// The legend square for a series.
fn legend_dot(color: RGBColor) -> impl Fn((i32, i32)) -> Circle<(i32, i32), i32> {
    move |(x, y)| Circle::new((x + 10, y), 5, color.filled())
}

fn draw_vram<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &PlotData,
    caption: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let has_vram = d.has_vram();
    let x_max = d.max_vram().filter(|_| has_vram).unwrap_or(1000.0) * 1.1;
    let y_max = (d.max_tg() * 1.15).max(1.0);
    let mut chart = ChartBuilder::on(root)
        .caption(caption, font(24.0))
        .margin(18)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("peak VRAM (MiB)")
        .y_desc("generation (tok/s)")
        .axis_desc_style(font(18.0))
        .label_style(font(14.0))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    if !has_vram {
        let lines: &[&str] = if d.has_gpu {
            &["VRAM was not measured in this run"]
        } else {
            &[
                "no GPU: VRAM not measured",
                "(see plot-tg-pp for the speeds)",
            ]
        };
        return note(&chart.plotting_area().strip_coord_spec(), lines);
    }
    let pts: Vec<&Point> = d.points.iter().filter(|p| p.vram.is_some()).collect();
    let xy: Vec<(f64, f64)> = pts.iter().map(|p| (p.vram.unwrap_or(0.0), p.tg)).collect();
    draw_front_and_points(
        &mut chart,
        &xy,
        (Goal::Min, Goal::Max),
        "Pareto front (fastest for its VRAM)",
    )?;
    chart.draw_series(
        pts.iter()
            .map(|p| id_label!(p.id, (p.vram.unwrap_or(0.0), p.tg))),
    )?;
    if let Some(b) = d.budget {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(b, 0.0), (b, y_max)],
                10,
                6,
                C_BUDGET.stroke_width(2),
            ))?
            .label(format!("VRAM budget ({})", crate::util::fmt_mib(b)))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], C_BUDGET.stroke_width(2)));
    }
    if !d.failed.is_empty() {
        let at = |f: &Failed| f.vram.or(d.budget).unwrap_or(0.0);
        chart
            .draw_series(
                d.failed
                    .iter()
                    .map(|f| Cross::new((at(f), 0.0), 8, C_FAIL.stroke_width(3))),
            )?
            .label(d.failed_label())
            .legend(|(x, y)| Cross::new((x + 10, y), 6, C_FAIL.stroke_width(3)));
    }
    draw_highlights(&mut chart, d, |m| m.vram.map(|v| (v, m.tg)))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(font(15.0))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()?;
    Ok(())
}

/// The Pareto front (a staircase, its points ringed) drawn under every ok trial's point.
fn draw_front_and_points<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    xy: &[(f64, f64)],
    (gx, gy): (Goal, Goal),
    front_label: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let front: Vec<(f64, f64)> = pareto::front(xy, gx, gy)
        .into_iter()
        .map(|i| xy[i])
        .collect();
    chart
        .draw_series(LineSeries::new(
            pareto::staircase(&front, gx, gy),
            C_FRONT.stroke_width(3),
        ))?
        .label(front_label)
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], C_FRONT.stroke_width(3)));
    chart.draw_series(
        front
            .iter()
            .map(|&c| Circle::new(c, 9, C_FRONT.stroke_width(3))),
    )?;
    chart
        .draw_series(xy.iter().map(|&c| Circle::new(c, 5, C_POINT.filled())))?
        .label("trial (ok)")
        .legend(legend_dot(C_POINT));
    Ok(())
}

/// Winner (gold triangle) and baseline (grey square) at their confirmed values.
fn draw_highlights<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    d: &PlotData,
    at: impl Fn(&Marker) -> Option<(f64, f64)>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    if let Some(c) = d.baseline.as_ref().and_then(&at) {
        chart
            .draw_series(std::iter::once(
                EmptyElement::at(c)
                    + Rectangle::new([(-7, -7), (7, 7)], C_BASE.filled())
                    + Rectangle::new([(-7, -7), (7, 7)], BLACK.stroke_width(1)),
            ))?
            .label("baseline (server defaults, confirmed)")
            .legend(|(x, y)| Rectangle::new([(x + 4, y - 6), (x + 16, y + 6)], C_BASE.filled()));
    }
    if let Some(c) = d.winner.as_ref().and_then(&at) {
        chart
            .draw_series(std::iter::once(
                EmptyElement::at(c)
                    + TriangleMarker::new((0, 0), 15, BLACK.filled())
                    + TriangleMarker::new((0, 0), 12, C_WINNER.filled()),
            ))?
            .label("winner (confirmed)")
            .legend(|(x, y)| TriangleMarker::new((x + 10, y), 9, C_WINNER.filled()));
    }
    Ok(())
}

fn draw_tg_pp<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &PlotData,
    caption: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let x_max = (d.max_pp() * 1.15).max(1.0);
    let y_max = (d.max_tg() * 1.15).max(1.0);
    let mut chart = ChartBuilder::on(root)
        .caption(caption, font(24.0))
        .margin(18)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("prompt processing (tok/s)")
        .y_desc("generation (tok/s)")
        .axis_desc_style(font(18.0))
        .label_style(font(14.0))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    if d.points.is_empty() {
        return note(
            &chart.plotting_area().strip_coord_spec(),
            &["no trial completed: nothing measured"],
        );
    }
    let xy: Vec<(f64, f64)> = d.points.iter().map(|p| (p.pp, p.tg)).collect();
    draw_front_and_points(
        &mut chart,
        &xy,
        (Goal::Max, Goal::Max),
        "Pareto front (faster at both)",
    )?;
    chart.draw_series(d.points.iter().map(|p| id_label!(p.id, (p.pp, p.tg))))?;
    draw_highlights(&mut chart, d, |m| Some((m.pp, m.tg)))?;
    if !d.failed.is_empty() {
        let style = font(14.0).color(&C_FAIL);
        let (_, h) = chart.plotting_area().dim_in_pixel();
        chart.plotting_area().strip_coord_spec().draw(&Text::new(
            format!("{} not shown (no speeds)", d.failed_label()),
            (10, h as i32 - 24),
            style,
        ))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(font(15.0))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()?;
    Ok(())
}

fn draw_ncmoe<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &PlotData,
    caption: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let titled = root.margin(14, 0, 0, 0).titled(caption, font(24.0))?;
    let pts: Vec<&Point> = d.points.iter().filter(|p| p.ncmoe.is_some()).collect();
    let fails: Vec<&Failed> = d.failed.iter().filter(|f| f.ncmoe.is_some()).collect();
    if pts.is_empty() && fails.is_empty() {
        return note(
            &titled,
            &[
                "this run did not vary n-cpu-moe",
                "(a dense model or a CPU-only search space):",
                "see plot-tg-pp for the speeds",
            ],
        );
    }
    let (top, bottom) = titled.split_vertically(titled.dim_in_pixel().1 / 2 + 10);
    let n_max = pts
        .iter()
        .filter_map(|p| p.ncmoe)
        .chain(fails.iter().filter_map(|f| f.ncmoe))
        .max()
        .unwrap_or(1) as f64;
    let x_range = -0.5f64..(n_max + 1.5);
    let tg_max = (d.max_tg() * 1.15).max(1.0);
    let pp_max = (d.max_pp() * 1.15).max(1.0);

    // Top panel: speeds.
    let mut chart = ChartBuilder::on(&top)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .right_y_label_area_size(70)
        .build_cartesian_2d(x_range.clone(), 0f64..tg_max)?
        .set_secondary_coord(x_range.clone(), 0f64..pp_max);
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
    // Best generation speed per n_cpu_moe, as a line; every trial as a point.
    let best = |key: fn(&Point) -> f64| -> Vec<(f64, f64)> {
        let mut m: std::collections::BTreeMap<u32, f64> = Default::default();
        for p in &pts {
            let n = p.ncmoe.unwrap_or(0);
            let e = m.entry(n).or_insert(f64::MIN);
            *e = e.max(key(p));
        }
        m.into_iter().map(|(n, v)| (n as f64, v)).collect()
    };
    chart
        .draw_series(LineSeries::new(best(|p| p.tg), C_POINT.stroke_width(2)))?
        .label("generation, best per value")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], C_POINT.stroke_width(2)));
    chart.draw_series(
        pts.iter()
            .map(|p| Circle::new((p.ncmoe.unwrap_or(0) as f64, p.tg), 4, C_POINT.filled())),
    )?;
    // The speed model's generation for the winner's config across --n-cpu-moe.
    let modelled: Vec<(f64, f64)> = d
        .modelled
        .iter()
        .filter(|(n, _, _)| *n as f64 <= n_max + 1.0)
        .map(|&(n, tg, _)| (n as f64, tg.min(tg_max)))
        .collect();
    if !modelled.is_empty() {
        chart
            .draw_series(DashedLineSeries::new(
                modelled,
                5,
                4,
                C_MODEL.stroke_width(2),
            ))?
            .label("generation, speed model (winner's other flags)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], C_MODEL.stroke_width(2)));
    }
    chart
        .draw_secondary_series(LineSeries::new(best(|p| p.pp), C_PP.stroke_width(2)))?
        .label("prompt, best per value (right axis)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], C_PP.stroke_width(2)));
    chart.draw_secondary_series(pts.iter().map(|p| {
        EmptyElement::at((p.ncmoe.unwrap_or(0) as f64, p.pp))
            + Rectangle::new([(-4, -4), (4, 4)], C_PP.filled())
    }))?;
    if let Some(b) = &d.baseline {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(-0.5, b.tg), (n_max + 1.5, b.tg)],
                8,
                6,
                C_BASE.stroke_width(2),
            ))?
            .label(format!("baseline generation ({:.1} tok/s)", b.tg))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], C_BASE.stroke_width(2)));
    }
    if let Some(w) = &d.winner {
        if let Some(n) = w.ncmoe {
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((n as f64, w.tg))
                        + TriangleMarker::new((0, 0), 15, BLACK.filled())
                        + TriangleMarker::new((0, 0), 12, C_WINNER.filled()),
                ))?
                .label("winner (confirmed)")
                .legend(|(x, y)| TriangleMarker::new((x + 10, y), 9, C_WINNER.filled()));
        }
    }
    if !fails.is_empty() {
        chart
            .draw_series(fails.iter().map(|f| {
                Cross::new(
                    (f.ncmoe.unwrap_or(0) as f64, 0.0),
                    8,
                    C_FAIL.stroke_width(3),
                )
            }))?
            .label(d.failed_label())
            .legend(|(x, y)| Cross::new((x + 10, y), 6, C_FAIL.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(font(14.0))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()?;

    // Bottom panel: peak VRAM.
    let has_vram = pts.iter().any(|p| p.vram.is_some());
    let v_max = d.max_vram().filter(|_| has_vram).unwrap_or(1000.0) * 1.12;
    let mut chart = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .right_y_label_area_size(70)
        .build_cartesian_2d(x_range, 0f64..v_max)?;
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
    if !has_vram {
        let msg = if d.has_gpu {
            "VRAM was not measured in this run"
        } else {
            "no GPU: VRAM not measured"
        };
        return note(&chart.plotting_area().strip_coord_spec(), &[msg]);
    }
    chart
        .draw_series(LineSeries::new(
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
            C_POINT.stroke_width(2),
        ))?
        .label("peak VRAM (ok trials)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], C_POINT.stroke_width(2)));
    chart.draw_series(
        pts.iter()
            .filter_map(|p| Some(Circle::new((p.ncmoe? as f64, p.vram?), 4, C_POINT.filled()))),
    )?;
    if let Some(b) = d.budget {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(-0.5, b), (n_max + 1.5, b)],
                10,
                6,
                C_BUDGET.stroke_width(2),
            ))?
            .label(format!("VRAM budget ({})", crate::util::fmt_mib(b)))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], C_BUDGET.stroke_width(2)));
    }
    if !fails.is_empty() {
        let at = |f: &Failed| f.vram.or(d.budget).unwrap_or(0.0);
        chart
            .draw_series(fails.iter().map(|f| {
                Cross::new(
                    (f.ncmoe.unwrap_or(0) as f64, at(f)),
                    8,
                    C_FAIL.stroke_width(3),
                )
            }))?
            .label("failed (at its peak, or at the budget if unknown)")
            .legend(|(x, y)| Cross::new((x + 10, y), 6, C_FAIL.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(font(14.0))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::sample;
    use std::path::Path;

    fn check(plots: &[RenderedPlot]) {
        assert_eq!(plots.len(), 3);
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
            assert!(
                p.png.len() > 10_000,
                "{}.png is {} bytes",
                p.stem,
                p.png.len()
            );
            assert!(p.svg.starts_with("<svg"), "{}", p.stem);
            assert!(p.svg.contains(&p.title), "{} lacks its title", p.stem);
        }
    }

    #[test]
    fn gpu_plots_decode_and_carry_axis_labels_budget_and_failures() {
        let r = sample::gpu_result(Path::new("/s"), Path::new("/m.gguf"));
        let plots = render_all(&r).unwrap();
        check(&plots);
        let svg = |stem: &str| &plots.iter().find(|p| p.stem == stem).unwrap().svg;
        let vram = svg("plot-vram");
        for needle in [
            "peak VRAM (MiB)",
            "generation (tok/s)",
            "Pareto front",
            "VRAM budget (15,360 MiB)",
            "failed: 4 (oom-load, spill, oom-runtime, bad-flag)",
            "winner (confirmed)",
            "baseline (server defaults, confirmed)",
            "#12",
        ] {
            assert!(vram.contains(needle), "plot-vram.svg lacks {needle:?}");
        }
        assert!(svg("plot-tg-pp").contains("prompt processing (tok/s)"));
        let nc = svg("plot-ncmoe");
        for needle in [
            NCMOE_DESC,
            "prompt (tok/s)",
            "peak VRAM (MiB)",
            "VRAM budget",
        ] {
            assert!(nc.contains(needle), "plot-ncmoe.svg lacks {needle:?}");
        }
    }

    #[test]
    fn cpu_plots_say_no_gpu_and_do_not_panic() {
        let r = sample::cpu_result(Path::new("/s"), Path::new("/m.gguf"));
        let plots = render_all(&r).unwrap();
        check(&plots);
        assert!(plots[0].svg.contains("no GPU: VRAM not measured"));
        assert!(plots[0].svg.contains("peak VRAM (MiB)"));
        assert!(plots[2].svg.contains("did not vary n-cpu-moe"));
    }

    #[test]
    fn nothing_measured_still_renders() {
        let mut r = sample::gpu_result(Path::new("/s"), Path::new("/m.gguf"));
        r.trials.retain(|t| !t.kind.is_ok());
        r.confirmation.clear();
        r.winner = None;
        let plots = render_all(&r).unwrap();
        assert_eq!(plots.len(), 3);
        assert!(plots[1].svg.contains("no trial completed"));
        // GPU with failures only: plot a has no measured VRAM.
        assert!(plots[0].svg.contains("VRAM was not measured"));
    }
}
