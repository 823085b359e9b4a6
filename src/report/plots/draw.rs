//! The plots' shared drawing: legend, symbols, areas, axes, captions.

use super::*;

/// A legend entry's symbol.
#[derive(Clone, Copy)]
pub(super) enum Sym {
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
pub(super) struct Item {
    pub(super) sym: Sym,
    pub(super) color: RGBColor,
    pub(super) text: String,
}

pub(super) fn item(sym: Sym, color: RGBColor, text: impl Into<String>) -> Item {
    Item {
        sym,
        color,
        text: text.into(),
    }
}

/// The markers of the recommended config and of each baseline: (symbol, colour, legend text).
pub(super) fn marker_styles(d: &PlotData) -> (Option<Item>, Vec<Item>) {
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
pub(super) const NBSP: char = '\u{a0}';

/// Flags for a legend: each flag bound to its value (`-c 2048` is one word when wrapping).
pub(super) fn flag_words(flags: &str) -> String {
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
pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
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
pub(super) fn draw_sym<DB: DrawingBackend>(
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
pub(super) fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    items: &[Item],
) -> Result<()>
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
pub(super) struct Areas<DB: DrawingBackend> {
    pub(super) plot: DrawingArea<DB, Shift>,
    pub(super) legend: DrawingArea<DB, Shift>,
    pub(super) caption: DrawingArea<DB, Shift>,
}

pub(super) fn areas<DB: DrawingBackend>(
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

pub(super) fn draw_caption<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lines: &[String],
) -> Result<()>
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
pub(super) fn zoomed(values: &[f64]) -> std::ops::Range<f64> {
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
pub(super) struct FrontAxis {
    pub(super) better: &'static str,
    pub(super) unit: &'static str,
    pub(super) point: fn(&Point) -> Option<f64>,
    pub(super) marker: fn(&Marker) -> Option<f64>,
    pub(super) goal: Goal,
}

/// Why each point on the Pareto front other than the recommended config is not recommended,
/// one sentence each, from the numbers of the plot's two axes.
pub(super) fn front_caption(
    front: &[&Point],
    winner: Option<&Marker>,
    x: FrontAxis,
) -> Vec<String> {
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

pub(super) fn draw<DB: DrawingBackend>(
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
        Plot::Objective => draw_objective(root, d, title),
        Plot::Vram => draw_vram(root, d, title),
        Plot::TgPp => draw_tg_pp(root, d, title),
        Plot::NCpuMoe => draw_ncmoe(root, d, title),
    }
}

pub(super) fn font(size: f64) -> TextStyle<'static> {
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
pub(super) fn int_tick(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-6 && *v >= 0.0 {
        format!("{v:.0}")
    } else {
        String::new()
    }
}

pub(super) type Chart<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The Pareto front (a staircase, its points ringed) under every ok trial's point; returns the
/// front's points.
pub(super) fn draw_front_and_points<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    xy: &[(f64, f64)],
    marks: &[(f64, f64)],
    (gx, gy): (Goal, Goal),
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    // The front of everything the chart marks (trials, the recommendation's and the
    // baselines' markers, the picks): no mark on the chart dominates it.
    let all: Vec<(f64, f64)> = xy.iter().chain(marks).copied().collect();
    let front: Vec<(f64, f64)> = pareto::front(&all, gx, gy)
        .into_iter()
        .map(|i| all[i])
        .collect();
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
    Ok(())
}

/// The trials on the front of everything the chart marks ([`draw_front_and_points`]): `xy`
/// are the trials' coordinates (in `pts` order), `marks` the other marks'.
pub(super) fn front_points<'p>(
    pts: &[&'p Point],
    xy: &[(f64, f64)],
    marks: &[(f64, f64)],
    (gx, gy): (Goal, Goal),
) -> Vec<&'p Point> {
    let all: Vec<(f64, f64)> = xy.iter().chain(marks).copied().collect();
    pareto::front(&all, gx, gy)
        .into_iter()
        .filter(|&i| i < pts.len())
        .map(|i| pts[i])
        .collect()
}

/// Where the chart marks the recommendation, the baselines and (`picks`) each workload's
/// pick, at `at`'s coordinates.
pub(super) fn marks(
    d: &PlotData,
    picks: bool,
    at: impl Fn(&Marker) -> Option<(f64, f64)>,
) -> Vec<(f64, f64)> {
    let picked = d.picks.iter().filter(|_| picks).map(|p| &p.at);
    d.baselines
        .iter()
        .chain(d.winner.as_ref())
        .chain(picked)
        .filter_map(at)
        .collect()
}

/// The recommended config and each baseline at their measured values, labelled in the legend.
pub(super) fn draw_markers<DB: DrawingBackend>(
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

pub(super) fn mesh<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, x: &str, y: &str) -> Result<()>
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
