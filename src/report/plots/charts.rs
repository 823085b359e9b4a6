//! Each plot drawn: peak VRAM, generation against prompt, `--n-cpu-moe`.

use super::*;

pub(super) fn draw_vram<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &PlotData,
    title: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let pts: Vec<&Point> = d.points.iter().filter(|p| p.vram.is_some()).collect();
    let xy: Vec<(f64, f64)> = pts.iter().map(|p| (p.vram.unwrap_or(0.0), p.tg)).collect();
    let marked = marks(d, false, |m| m.vram.map(|v| (v, m.tg)));
    let front_pts = front_points(&pts, &xy, &marked, (Goal::Min, Goal::Max));
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
    draw_front_and_points(&mut chart, &xy, &marked, (Goal::Min, Goal::Max))?;
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

pub(super) fn draw_tg_pp<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &PlotData,
    title: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let pts: Vec<&Point> = d.points.iter().collect();
    let xy: Vec<(f64, f64)> = pts.iter().map(|p| (p.pp, p.tg)).collect();
    let marked = marks(d, true, |m| Some((m.pp, m.tg)));
    let front_pts = front_points(&pts, &xy, &marked, (Goal::Max, Goal::Max));
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
    draw_front_and_points(&mut chart, &xy, &marked, (Goal::Max, Goal::Max))?;
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
pub(super) fn draw_picks<DB: DrawingBackend>(
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

pub(super) fn draw_ncmoe<DB: DrawingBackend>(
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
