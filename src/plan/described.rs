//! A plan for a box described rather than probed (`qtune plan --box`) and models that need
//! not be on disk (`--shape NAME --quant A,B`): for each quantization whether it fits, where
//! its experts go, predicted generation, prompt and time per request per workload with
//! intervals, and what is known of its quality; then the one to start with. Pure: the box,
//! the layouts and the workloads come in, the plan goes out.

use super::known_quality::{known_quality, KnownQuality};
use super::*;
use crate::engine::LaunchArgs;
use crate::model::speed::{self, Estimate, SpeedBox, FITTED};
use crate::workloads::Mix;

/// One model to plan: a quantization of a shape, or a file.
#[derive(Debug, Clone)]
pub struct PlanModel {
    /// "Q4_K_M", or the file's name.
    pub quant: String,
    /// Where its tensor types come from ("llama.cpp's Q4_K_M mix ...", or "the file's header").
    pub recipe: String,
    /// False when the recipe is only approximately known (the real file may be larger).
    pub recipe_exact: bool,
    /// The shape it is a quantization of, for the known quality ("qwen3.5-35b-a3b").
    pub shape: Option<String>,
    /// The path a launch command names.
    pub path: PathBuf,
    pub layout: ModelLayout,
    /// A file's quality as qtune measured it (`qtune quality --against`, from its cache);
    /// cited before the shape's published numbers.
    pub measured_quality: Option<KnownQuality>,
}

/// Predicted time per request of one workload, seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadTime {
    pub workload: String,
    pub request_s: f64,
    pub low_s: f64,
    pub high_s: f64,
}

/// The plan of one quantization on the box.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuantPlan {
    pub quant: String,
    pub recipe: String,
    /// False when the recipe is only approximately known: the real file may be larger than laid
    /// out, and on a card it nearly fills, slower.
    pub recipe_exact: bool,
    pub file_bytes: u64,
    /// False when even every expert on the CPU does not fit the box's VRAM budget.
    pub fits: bool,
    /// Where the routed experts go, in words.
    pub experts: String,
    /// The config, short.
    pub config: String,
    pub predicted_vram_mib: f64,
    pub predicted_host_mib: f64,
    /// Generation and prompt (a 2048-token prompt) speed; None when nothing fits or the box's
    /// GPU bandwidth is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<Estimate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Estimate>,
    /// The server's default (its own fit), predicted generation, for comparison.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_default_generation: Option<Estimate>,
    pub per_workload: Vec<WorkloadTime>,
    /// What is known of its quality, cited; None when nothing is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality: Option<KnownQuality>,
    pub command: Vec<String>,
    /// Why there is no speed prediction, or what it rests on.
    pub speed_note: String,
    /// Its weights are largely of types the speed model was never fitted on
    /// ([`speed::unfitted_types`]): its speeds count bytes only.
    pub extrapolated: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The plan for a described box: every quantization, and the one to start with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BoxPlan {
    #[serde(rename = "box")]
    pub box_name: String,
    pub box_summary: String,
    pub ctx: u32,
    /// The workload the recommendation is for.
    pub workload: String,
    pub quants: Vec<QuantPlan>,
    /// The quantization to start with (None: none fits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recommended: Option<String>,
    pub why: String,
    /// Its launch command.
    pub command: Vec<String>,
    /// Where the speed model's inputs come from.
    pub speed_note: String,
    pub note: &'static str,
}

/// Plan every model in `models` on `hw` (a described box named `box_name`) at context `ctx`,
/// keeping `headroom_mib` of each card free; time per request for each of `workloads`, the
/// recommendation for `workloads[main]`.
pub fn plan_box(
    box_name: &str,
    hw: &HardwareProfile,
    models: &[PlanModel],
    ctx: u32,
    headroom_mib: u64,
    workloads: &[Mix],
    main: usize,
) -> BoxPlan {
    let sb = SpeedBox::from_hardware(hw);
    let quants: Vec<QuantPlan> = models
        .iter()
        .map(|m| plan_one(m, hw, &sb, ctx, headroom_mib, workloads))
        .collect();
    let main_name = workloads.get(main).map_or("", |w| w.name.as_str());
    let (recommended, why) = recommend(&quants, main);
    let command = recommended
        .and_then(|i| quants.get(i))
        .map(|q| q.command.clone())
        .unwrap_or_default();
    BoxPlan {
        box_name: box_name.to_string(),
        box_summary: hw.summary(),
        ctx,
        workload: main_name.to_string(),
        recommended: recommended.map(|i| quants[i].quant.clone()),
        why,
        command,
        speed_note: described_sources(&sb),
        quants,
        note: "a plan for a described box: predicted by the speed model fitted on qtune's own \
               measured runs, not measured on this box",
    }
}

/// The speed model's inputs, said for a described box ("as described", not "measured").
fn described_sources(sb: &SpeedBox) -> String {
    sb.sources
        .iter()
        .map(|s| {
            s.replace("(NVML)", "(as described)")
                .replace("(measured)", "(as described)")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn plan_one(
    m: &PlanModel,
    hw: &HardwareProfile,
    sb: &SpeedBox,
    ctx: u32,
    headroom_mib: u64,
    workloads: &[Mix],
) -> QuantPlan {
    let ctx = if m.layout.ctx_train > 0 {
        ctx.min(m.layout.ctx_train)
    } else {
        ctx
    };
    let p = super::plan(&m.layout, hw, None, ctx, headroom_mib);
    let has_gpu = hw.has_gpu();
    let per_workload = if p.fits {
        workloads
            .iter()
            .filter_map(|w| workload_time(&m.layout, &p.config, sb, has_gpu, w, ctx))
            .collect()
    } else {
        Vec::new()
    };
    let speed = p.speed.as_ref().filter(|_| p.fits);
    let mut warnings = p.warnings;
    let unfitted = speed::unfitted_types(&m.layout);
    if let Some((types, share)) = &unfitted {
        let measured = if types.iter().any(|t| t == "MXFP4") {
            "; measured apart from the model, MXFP4_MOE generated 0.91x [0.89, 0.93] to 0.94x \
             [0.88, 1.00] Q4_K_M's speed at the same placements (5 rounds, 2 H200 leases; \
             docs/results.md)"
        } else {
            " (their kernels may read slower or faster per byte)"
        };
        warnings.push(format!(
            "{:.0} % of its weights are {}, which no run of the speed model measured: its speeds \
             count their bytes only{measured}",
            share * 100.0,
            types.join(", ")
        ));
    }
    if !m.recipe_exact {
        warnings.push(
            "its per-tensor recipe is only approximately known: the real file may be larger than \
             laid out here, and on a card it nearly fills, slower (on a tie it is not preferred)"
                .to_string(),
        );
    }
    QuantPlan {
        recipe_exact: m.recipe_exact,
        speed_note: p.speed_note.clone(),
        extrapolated: unfitted.is_some(),
        quant: m.quant.clone(),
        recipe: m.recipe.clone(),
        file_bytes: m.layout.file_bytes,
        fits: p.fits,
        experts: experts_text(&m.layout, &p.config, has_gpu),
        config: p.config.label(),
        predicted_vram_mib: p.predicted_gpu_mib,
        predicted_host_mib: p.predicted_host_mib,
        generation: speed.map(|s| s.prediction.tg),
        prompt: speed.map(|s| s.prediction.pp),
        server_default_generation: p.server_default.as_ref().map(|d| d.prediction.tg),
        per_workload,
        quality: m
            .measured_quality
            .clone()
            .or_else(|| m.shape.as_deref().and_then(|s| known_quality(s, &m.quant))),
        command: p.config.command(
            Path::new("llama-server"),
            &m.path,
            crate::run::DEFAULT_HOST,
            crate::run::DEFAULT_PORT,
        ),
        warnings,
    }
}

/// Where a config puts the routed experts, in words.
pub fn experts_text(layout: &ModelLayout, cfg: &LaunchConfig, has_gpu: bool) -> String {
    if !layout.is_moe() {
        return "a dense model: no experts".into();
    }
    if !has_gpu {
        return "all on the CPU (no GPU)".into();
    }
    let host = crate::model::speed::host_expert_bytes(layout, cfg, has_gpu);
    let cpu_blocks = host.iter().filter(|&&b| b > 0).count();
    let nb = layout.n_blocks as usize;
    match cpu_blocks {
        0 => "all on the GPU".into(),
        n if n == nb
            && host
                .iter()
                .zip(&layout.blocks)
                .all(|(h, b)| *h == b.routed_experts) =>
        {
            "all on the CPU".into()
        }
        n => format!("{n} of {nb} blocks' experts on the CPU ({})", cpu_rule(cfg)),
    }
}

fn cpu_rule(cfg: &LaunchConfig) -> String {
    let mut parts = Vec::new();
    if let Some(n) = cfg.n_cpu_moe.filter(|&n| n > 0) {
        parts.push(format!("{} {n}", crate::engine::Flag::NCpuMoe));
    }
    if let Some(e) = &cfg.cpu_experts {
        parts.push(format!("experts of {}", e.label()));
    }
    parts.join(" + ")
}

/// Predicted time per request of workload `w` for `cfg`: each shape's new tokens at the
/// predicted prompt speed for that many tokens, its generated tokens at the generation speed
/// predicted at its depth (held + new), weighted over the mix. The interval from the ends of
/// both intervals. None when the model cannot predict the config.
pub fn workload_time(
    layout: &ModelLayout,
    cfg: &LaunchConfig,
    sb: &SpeedBox,
    has_gpu: bool,
    w: &Mix,
    ctx: u32,
) -> Option<WorkloadTime> {
    let (fitted, _) = w.fitted(ctx);
    // (weight, time, fastest time, slowest time) of each request of the mix.
    let mut parts = Vec::with_capacity(fitted.shapes.len());
    for s in &fitted.shapes {
        let pp = speed::predict(layout, cfg, sb, has_gpu, s.new.max(1), &FITTED)?.pp;
        let tg = speed::predict(
            layout,
            cfg,
            sb,
            has_gpu,
            s.held.saturating_add(s.new).max(1),
            &FITTED,
        )?
        .tg;
        let t = |pp: f64, tg: f64| {
            crate::objective::request_seconds(f64::from(s.new) / pp, f64::from(s.gen), tg)
        };
        parts.push((
            s.weight,
            t(pp.tps, tg.tps),
            t(pp.high, tg.high),
            t(pp.low, tg.low),
        ));
    }
    let mean = |f: fn(&(f64, f64, f64, f64)) -> f64| {
        crate::objective::weighted_mean(parts.iter().map(|p| (p.0, f(p))))
    };
    Some(WorkloadTime {
        workload: w.name.clone(),
        request_s: mean(|p| p.1)?,
        low_s: mean(|p| p.2)?,
        high_s: mean(|p| p.3)?,
    })
}

/// The quantization to start with: the shortest predicted time per request of the main
/// workload among those that fit, the speed model's own weight types first (an extrapolated
/// prediction is chosen only when nothing else fits); among those within [`PLAN_TIE_PCT`] of
/// it, the better known quality (lower mean KLD against Q8_0), else the first listed. With the
/// reason.
fn recommend(quants: &[QuantPlan], main: usize) -> (Option<usize>, String) {
    let trusted = quants.iter().any(|q| q.fits && !q.extrapolated);
    let (pick, why) = recommend_among(quants, main, |q| !trusted || !q.extrapolated);
    let time = |q: &QuantPlan| q.per_workload.get(main).map(|t| t.request_s);
    let chosen = pick.and_then(|i| time(&quants[i]));
    let faster: Vec<&str> = quants
        .iter()
        .filter(|q| trusted && q.fits && q.extrapolated)
        .filter(|q| matches!((time(q), chosen), (Some(a), Some(b)) if a < b))
        .map(|q| q.quant.as_str())
        .collect();
    if !faster.is_empty() {
        return (
            pick,
            format!(
                "{why}; {} predicted faster, but from bytes alone (weight types the speed model never measured), so not chosen",
                faster.join(", ")
            ),
        );
    }
    (pick, why)
}

fn recommend_among(
    quants: &[QuantPlan],
    main: usize,
    eligible: impl Fn(&QuantPlan) -> bool,
) -> (Option<usize>, String) {
    let time = |q: &QuantPlan| q.per_workload.get(main).map(|t| t.request_s);
    let Some((best_i, best)) = quants
        .iter()
        .enumerate()
        .filter(|(_, q)| q.fits && eligible(q))
        .filter_map(|(i, q)| time(q).map(|t| (i, t)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
    else {
        if let Some(i) = quants.iter().position(|q| q.fits && eligible(q)) {
            return (
                Some(i),
                format!(
                    "{}: the first listed that fits; no time per request to compare ({})",
                    quants[i].quant, quants[i].speed_note
                ),
            );
        }
        return (
            None,
            if quants.iter().any(|q| q.fits) {
                "no speed prediction for this box".into()
            } else {
                "none fits this box's VRAM, even with every expert on the CPU: a smaller quantization, a lower --ctx or a larger card".into()
            },
        );
    };
    let tied: Vec<usize> = quants
        .iter()
        .enumerate()
        .filter(|(_, q)| q.fits && eligible(q))
        .filter(|(_, q)| time(q).is_some_and(|t| (t - best) / best * 100.0 <= PLAN_TIE_PCT))
        .map(|(i, _)| i)
        .collect();
    let kld = |i: usize| quants[i].quality.as_ref().and_then(|k| k.mean_kld);
    // On a tie, the quants whose recipe is exactly known over those laid out approximately,
    // then the lowest known KLD, then the fastest.
    let exact: Vec<usize> = tied
        .iter()
        .copied()
        .filter(|&i| quants[i].recipe_exact)
        .collect();
    let pool = if exact.is_empty() {
        tied.clone()
    } else {
        exact
    };
    let fastest_in_pool = if pool.contains(&best_i) {
        best_i
    } else {
        pool[0]
    };
    let pick = pool
        .iter()
        .copied()
        .filter(|&i| kld(i).is_some())
        .min_by(|&a, &b| kld(a).unwrap().total_cmp(&kld(b).unwrap()))
        .filter(|_| pool.len() > 1)
        .unwrap_or(fastest_in_pool);
    let q = &quants[pick];
    let why = if pick != best_i {
        let reason = if !quants[best_i].recipe_exact && q.recipe_exact {
            format!(
                "its recipe is exactly known ({}'s is approximate)",
                quants[best_i].quant
            )
        } else {
            "has the lower known KLD".to_string()
        };
        format!(
            "{} is within {PLAN_TIE_PCT:.0} % of the fastest predicted time per request ({}) and {reason}",
            q.quant, quants[best_i].quant
        )
    } else if tied.len() > 1 {
        let approximate: Vec<&str> = tied
            .iter()
            .filter(|&&i| !pool.contains(&i))
            .map(|&i| quants[i].quant.as_str())
            .collect();
        let others = pool.len() - 1;
        let mut text = format!("{}: the shortest predicted time per request", q.quant);
        if others > 0 {
            text.push_str(&format!(
                "; {others} more within {PLAN_TIE_PCT:.0} % (a tie the prediction cannot break{})",
                if kld(pick).is_some() {
                    "; its known KLD is the lowest of them"
                } else {
                    ""
                }
            ));
        }
        if !approximate.is_empty() {
            text.push_str(&format!(
                "; {} within {PLAN_TIE_PCT:.0} % too, but laid out from an approximate recipe",
                approximate.join(", ")
            ));
        }
        text
    } else {
        format!("{}: the shortest predicted time per request", q.quant)
    };
    (Some(pick), why)
}

/// The text `qtune plan --box` prints.
pub fn box_plan_text(p: &BoxPlan) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "Plan for box {}: {}", p.box_name, p.box_summary);
    let _ = writeln!(o, "  ctx {}; {}", p.ctx, p.note);
    let _ = writeln!(o, "  speed model inputs: {}", p.speed_note);
    let mut header = vec![
        "quant",
        "file",
        "fits",
        "experts",
        "VRAM",
        "generation tok/s",
        "prompt tok/s",
    ];
    let names: Vec<String> = p
        .quants
        .first()
        .map(|q| {
            q.per_workload
                .iter()
                .map(|w| format!("{} s/request", w.workload))
                .collect()
        })
        .unwrap_or_default();
    header.extend(names.iter().map(String::as_str));
    header.push("mean KLD (source)");
    let est = |e: &Option<Estimate>| e.map_or("-".into(), |e| e.text().replace(" tok/s", ""));
    let rows: Vec<Vec<String>> = p
        .quants
        .iter()
        .map(|q| {
            let mark = if p.recommended.as_deref() == Some(q.quant.as_str()) {
                "*"
            } else {
                ""
            };
            let mut r = vec![
                format!("{mark}{}", q.quant),
                format!("{:.1} GB", q.file_bytes as f64 / 1e9),
                if q.fits { "yes" } else { "no" }.into(),
                q.experts.clone(),
                crate::util::fmt_mib(q.predicted_vram_mib),
                est(&q.generation),
                est(&q.prompt),
            ];
            for i in 0..names.len() {
                r.push(q.per_workload.get(i).map_or("-".into(), |w| {
                    format!("{:.1} [{:.1}, {:.1}]", w.request_s, w.low_s, w.high_s)
                }));
            }
            r.push(q.quality.as_ref().map_or("unknown".into(), |k| {
                k.mean_kld
                    .map_or("-".into(), |v| format!("{v:.3} ({})", k.source_short))
            }));
            r
        })
        .collect();
    for line in crate::util::text_table(&header, &rows, &[]).lines() {
        let _ = writeln!(o, "  {line}");
    }
    let _ = writeln!(
        o,
        "  (* recommended; prompt for a 2048-token prompt; intervals are the speed model's error on its held-out runs)"
    );
    for q in &p.quants {
        let _ = writeln!(o, "  {}: {}", q.quant, q.recipe);
        if let Some(d) = q.server_default_generation {
            let _ = writeln!(
                o,
                "    the server's own fit (no placement flags), predicted generation: {}",
                d.text()
            );
        }
        if let Some(k) = &q.quality {
            let _ = writeln!(o, "    quality: {}", crate::escape::terminal(&k.text()));
        }
        for w in &q.warnings {
            let _ = writeln!(o, "    warning: {w}");
        }
    }
    match &p.recommended {
        Some(r) => {
            let _ = writeln!(o, "Recommended for {}: {r} ({})", p.workload, p.why);
        }
        None => {
            let _ = writeln!(o, "No recommendation: {}", p.why);
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str, secs: f64, kld: Option<f64>, exact: bool, extrapolated: bool) -> QuantPlan {
        QuantPlan {
            quant: name.into(),
            recipe: String::new(),
            recipe_exact: exact,
            file_bytes: 0,
            fits: secs.is_finite(),
            experts: String::new(),
            config: String::new(),
            predicted_vram_mib: 0.0,
            predicted_host_mib: 0.0,
            generation: None,
            prompt: None,
            server_default_generation: None,
            per_workload: if secs.is_finite() {
                vec![WorkloadTime {
                    workload: "chat".into(),
                    request_s: secs,
                    low_s: secs * 0.9,
                    high_s: secs * 1.1,
                }]
            } else {
                Vec::new()
            },
            quality: kld.map(|k| KnownQuality {
                reference: "Q8_0".into(),
                mean_kld: Some(k),
                same_top1_pct: None,
                perplexity: None,
                reference_perplexity: None,
                source: "test".into(),
                source_short: "test".into(),
            }),
            speed_note: String::new(),
            extrapolated,
            command: vec![name.to_string()],
            warnings: Vec::new(),
        }
    }

    fn pick(qs: &[QuantPlan]) -> Option<String> {
        recommend(qs, 0).0.map(|i| qs[i].quant.clone())
    }

    #[test]
    fn the_recommendation_follows_its_rules() {
        let inf = f64::INFINITY;
        // Fastest wins outside the tie band.
        let qs = [
            q("A", 5.0, Some(0.05), true, false),
            q("B", 6.0, Some(0.01), true, false),
        ];
        assert_eq!(pick(&qs).as_deref(), Some("A"));
        // Within 3 %: the lower known KLD.
        let qs = [
            q("A", 5.0, Some(0.05), true, false),
            q("B", 5.1, Some(0.01), true, false),
        ];
        assert_eq!(pick(&qs).as_deref(), Some("B"));
        assert!(recommend(&qs, 0).1.contains("lower known KLD"));
        // Within 3 %: an exact recipe over an approximate one, whatever its KLD.
        let qs = [
            q("A", 5.1, Some(0.05), true, false),
            q("L", 5.0, Some(0.01), false, false),
        ];
        assert_eq!(pick(&qs).as_deref(), Some("A"));
        assert!(recommend(&qs, 0).1.contains("approximate"));
        // An extrapolated quant is not chosen while a measured-type one fits...
        let qs = [
            q("M", 5.0, None, true, false),
            q("X", 3.0, None, true, true),
        ];
        assert_eq!(pick(&qs).as_deref(), Some("M"));
        assert!(recommend(&qs, 0).1.contains("X predicted faster"));
        // ... but is when nothing else fits; nothing fits: no recommendation.
        let qs = [
            q("M", inf, None, true, false),
            q("X", 3.0, None, true, true),
        ];
        assert_eq!(pick(&qs).as_deref(), Some("X"));
        let qs = [q("M", inf, None, true, false)];
        assert_eq!(pick(&qs), None);
        assert!(recommend(&qs, 0).1.contains("none fits"));
    }
}
