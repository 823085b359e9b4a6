//! `plot-objective`, the report's first picture: time per request on each workload, the
//! reference against the pick, each at the median over its launches ([`crate::run::figures`],
//! the numbers the summary prints) with a whisker from its fastest to its slowest launch.

use super::*;
use crate::run::figures::RequestTime;

/// One workload's pair: the better baseline and the pick (the same config where the baseline
/// was kept).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadBars {
    pub workload: String,
    /// The tune's own workload, raced against the reference (the verdict's paired ratio); the
    /// others were measured, not raced.
    pub raced: bool,
    /// The reference's name (`default`, `fit-target`) and its time.
    pub reference: Option<(String, RequestTime)>,
    /// The pick's time, None where the pick is the reference itself.
    pub pick: Option<RequestTime>,
}

/// The bars of every workload the tune measured, the tune's own first.
pub fn workload_bars(r: &TuneResult) -> Vec<WorkloadBars> {
    if let Some(t) = &r.inputs.space.workload.replay {
        return trace_bars(r, &t.name).into_iter().collect();
    }
    let own = r
        .inputs
        .space
        .workload
        .objective_mix()
        .map(|m| m.name.clone());
    r.workload_picks()
        .iter()
        .map(|p| {
            let reference_cfg = p.reference_name.as_deref().and_then(|n| {
                r.trials
                    .iter()
                    .map(|t| &t.config)
                    .find(|c| r.baseline_name(c) == Some(n))
            });
            let reference = reference_cfg.and_then(|c| {
                Some((
                    p.reference_name.clone()?,
                    r.request_time(c, Some(&p.workload))?,
                ))
            });
            let pick = match reference_cfg {
                Some(c) if *c == p.config => None,
                _ => r.request_time(&p.config, Some(&p.workload)),
            };
            WorkloadBars {
                raced: own.as_deref() == Some(p.workload.as_str())
                    && r.winner
                        .as_ref()
                        .is_some_and(|w| w.request_vs_baseline.is_some()),
                workload: p.workload.clone(),
                reference,
                pick,
            }
        })
        .filter(|b| b.reference.is_some() || b.pick.is_some())
        .collect()
}

/// A replayed trace's one pair: the verdict's reference against its recommendation, each at
/// the time per request the verdict prints ([`TuneResult::objective_time`]).
fn trace_bars(r: &TuneResult, name: &str) -> Option<WorkloadBars> {
    let w = r.winner.as_ref()?;
    let rf = w.reference.as_ref();
    let reference =
        rf.and_then(|b| Some((b.name.clone(), r.objective_time(&b.config, b.request_s)?)));
    let pick = match rf {
        Some(b) if b.config == w.config => None,
        _ => r.objective_time(&w.config, w.request_s),
    };
    (reference.is_some() || pick.is_some()).then(|| WorkloadBars {
        workload: name.to_string(),
        raced: w.request_vs_baseline.is_some(),
        reference,
        pick,
    })
}

pub(super) fn draw_objective<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &PlotData,
    title: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let bars = &d.objective;
    let caption = vec![
        "Each dot: the median time per request over the config's launches (the number the summary prints);"
            .to_string(),
        "whiskers: its fastest and slowest launch. Lower is faster. Only a workload marked (raced) was raced"
            .to_string(),
        "against the reference; the others were measured in the same launches, not raced.".to_string(),
    ];
    let a = areas(root, title, &d.model, caption.len())?;
    let ys: Vec<f64> = bars
        .iter()
        .flat_map(|b| {
            let r = b
                .reference
                .as_ref()
                .map(|(_, t)| [t.fastest_s, t.slowest_s]);
            let p = b.pick.map(|t| [t.fastest_s, t.slowest_s]);
            r.into_iter().chain(p).flatten()
        })
        .collect();
    // From 0: a time per request's scale, so the gap between two dots reads as a ratio.
    let y = 0.0..zoomed(&ys).end;
    let n = bars.len().max(1) as f64;
    let names: Vec<String> = bars
        .iter()
        .map(|b| {
            if b.raced {
                format!("{} (raced)", b.workload)
            } else {
                b.workload.clone()
            }
        })
        .collect();
    let mut chart = ChartBuilder::on(&a.plot)
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n - 0.5, y.clone())?;
    chart
        .configure_mesh()
        .x_desc("workload")
        .y_desc("time per request (s)")
        .axis_desc_style(font(17.0))
        .label_style(font(14.0))
        .x_labels(bars.len().max(1))
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| format!("{v:.2}"))
        .disable_x_mesh()
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    let whisker = |x: f64, t: &RequestTime, color: RGBColor| {
        PathElement::new(
            vec![(x, t.fastest_s), (x, t.slowest_s)],
            color.stroke_width(2),
        )
    };
    for (i, b) in bars.iter().enumerate() {
        let x = i as f64;
        let (rx, px) = if b.pick.is_some() {
            (x - 0.15, x + 0.15)
        } else {
            (x, x)
        };
        if let Some((_, t)) = &b.reference {
            chart.draw_series(std::iter::once(whisker(rx, t, C_BASE)))?;
            chart.draw_series(std::iter::once(
                EmptyElement::at((rx, t.seconds))
                    + Rectangle::new([(-6, -6), (6, 6)], C_BASE.filled()),
            ))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{:.2} s", t.seconds),
                (rx + 0.05, t.seconds),
                font(13.0),
            )))?;
        }
        if let Some(t) = &b.pick {
            chart.draw_series(std::iter::once(whisker(px, t, C_WINNER)))?;
            chart.draw_series(std::iter::once(TriangleMarker::new(
                (px, t.seconds),
                8,
                C_WINNER.filled(),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{:.2} s", t.seconds),
                (px + 0.05, t.seconds),
                font(13.0),
            )))?;
        }
    }
    let legend = vec![
        item(
            Sym::Square,
            C_BASE,
            "reference: the better baseline on that workload (where it is the pick too, alone)",
        ),
        item(
            Sym::Triangle,
            C_WINNER,
            "pick: the verdict's recommendation (raced), else the best command measured",
        ),
        item(Sym::Line, C_BASE, "whisker: fastest to slowest launch"),
    ];
    draw_legend(&a.legend, &legend)?;
    draw_caption(&a.caption, &caption)?;
    Ok(())
}
