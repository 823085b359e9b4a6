//! `qtune plan --box NAME|FILE --shape NAME --quant A,B`: plan a box described rather than
//! probed, for models that need not be on disk ([`crate::plan::described`]).

use crate::model::synth::{self, SynthFtype};
use crate::plan::described::{box_plan_text, plan_box as plan, PlanModel};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;

/// What `qtune plan --box` was asked.
#[derive(Debug, Clone)]
pub struct BoxPlanOptions {
    /// A catalog name or a box file; None: this box, probed.
    pub box_spec: Option<String>,
    /// A model on disk instead of --shape/--quant.
    pub model: Option<PathBuf>,
    pub shape: Option<String>,
    pub quants: Vec<String>,
    pub workload: Option<String>,
    pub cores: Option<u32>,
    pub ram_gib: Option<u64>,
    pub host_bw_gbs: Option<f64>,
    pub ctx: Option<u32>,
    pub headroom_mib: u64,
    pub json: bool,
}

/// The context a box plan uses without --ctx: what a tune uses on a GPU box.
pub const BOX_PLAN_CTX: u32 = 32_768;

pub fn plan_box(o: BoxPlanOptions) -> Result<()> {
    if let Some(ctx) = o.ctx.filter(|c| !(256..=1 << 20).contains(c)) {
        bail!(
            "--ctx {ctx} is outside 256..=1048576 (the context the server would be started with)"
        );
    }
    let models = models(&o)?;
    let (name, hw) = match &o.box_spec {
        Some(spec) => {
            let hw = crate::plan::boxes::load_box(spec)?;
            let hw = if o.cores.is_some() || o.ram_gib.is_some() || o.host_bw_gbs.is_some() {
                crate::plan::boxes::with_host(hw, o.cores, o.ram_gib, o.host_bw_gbs)?
            } else {
                hw
            };
            (spec.clone(), hw)
        }
        None => ("this box".to_string(), crate::hardware::probe(true)),
    };
    let mut workloads = crate::workloads::builtins();
    // A recorded trace: the plan's times are the default mix's; the trace predicts
    // speculative decoding (issue 54).
    let trace = match o.workload.as_deref().filter(|w| w.ends_with(".jsonl")) {
        Some(w) => Some(crate::traffic::trace::read(std::path::Path::new(w))?),
        None => None,
    };
    let main = match o.workload.as_deref().filter(|_| trace.is_none()) {
        None => workloads
            .iter()
            .position(|w| w.name == crate::workloads::DEFAULT)
            .unwrap_or(0),
        Some(w) => match workloads.iter().position(|b| b.name == w) {
            Some(i) => i,
            None => {
                workloads.push(crate::workloads::load(w).map_err(|e| anyhow::anyhow!("{e}"))?);
                workloads.len() - 1
            }
        },
    };
    let ctx = o.ctx.unwrap_or(BOX_PLAN_CTX);
    let mut p = plan(&name, &hw, &models, ctx, o.headroom_mib, &workloads, main);
    let spec = trace.as_ref().map(|t| speculation(t, &mut p));
    if o.json {
        if let Some((_, pred)) = &spec {
            let mut v = serde_json::to_value(&p)?;
            v["speculation"] = serde_json::to_value(pred)?;
            println!("{}", serde_json::to_string_pretty(&v)?);
            return Ok(());
        }
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(());
    }
    eprint!("{}", crate::util::fit(&box_plan_text(&p)));
    if let Some((lines, _)) = &spec {
        eprint!("{}", crate::util::fit(&(lines.join("\n") + "\n")));
    }
    if p.command.is_empty() {
        bail!("{}", p.why);
    }
    println!("{}", crate::config::shell_line(&p.command));
    Ok(())
}

/// The models to plan: each --quant of --shape, or the --model file.
fn models(o: &BoxPlanOptions) -> Result<Vec<PlanModel>> {
    if let Some(path) = &o.model {
        let src = crate::model::header::load_for_plan(path)?;
        let recipe = match &src.header_only {
            None => format!("the tensor types of {}", path.display()),
            Some(h) => format!(
                "the tensor types in the header of {}; {}",
                path.display(),
                h.text(&src.command_path)
            ),
        };
        return Ok(vec![PlanModel {
            quant: src
                .layout
                .file_type
                .clone()
                .unwrap_or_else(|| "the file".into()),
            recipe,
            recipe_exact: true,
            shape: None,
            // A header alone (or a URL) holds no weights to match a measurement by.
            measured_quality: if src.header_only.is_none() {
                crate::plan::known_quality::for_file(path, &src.layout)
            } else {
                None
            },
            path: src.command_path,
            layout: src.layout,
        }]);
    }
    let Some(shape) = &o.shape else {
        bail!("give --shape NAME --quant Q (or --model M.gguf)");
    };
    let shape_def = synth::shape_by_name(shape)?;
    if o.quants.is_empty() {
        bail!("give --quant with --shape, e.g. --quant q4_k_m,mxfp4_moe");
    }
    let mut out: Vec<PlanModel> = Vec::new();
    for q in &o.quants {
        // A quant without a known recipe is planned from its own header instead.
        let ftype = SynthFtype::parse_flag(q, "--quant").map_err(|e| {
            anyhow::anyhow!(
                "{e}: plan it from its file's header instead: `{}`, then `qtune plan -m \
                 head.gguf --box NAME`",
                crate::model::header::CURL_HEADER
            )
        })?;
        if out.iter().any(|m| m.quant == ftype.name()) {
            continue;
        }
        let layout = synth::planned_layout(shape, ftype)
            .with_context(|| format!("cannot lay out {shape} as {}", ftype.name()))?;
        let model = shape_def.model_name.split(" (").next().unwrap_or(shape);
        out.push(PlanModel {
            quant: ftype.name(),
            recipe: ftype.recipe().to_string(),
            recipe_exact: ftype.recipe_exact(),
            shape: Some(shape.clone()),
            measured_quality: None,
            path: PathBuf::from(format!("{model}-{}.gguf", ftype.name())),
            layout,
        });
    }
    Ok(out)
}

/// Speculative decoding on the planned box, predicted from the trace's answers: its lines,
/// and `--spec-type ngram-mod` added to the command where it pays. The box's own predicted
/// speeds (the recommended quantization's generation and prompt) price the verify batches.
fn speculation(
    t: &crate::traffic::trace::Trace,
    p: &mut crate::plan::described::BoxPlan,
) -> (Vec<String>, crate::traffic::speculate::Prediction) {
    use crate::traffic::speculate::{predict_on, NgramMod, Speeds};
    let q = p
        .recommended
        .as_ref()
        .and_then(|r| p.quants.iter().find(|q| &q.quant == r));
    let speeds = q.and_then(|q| match (&q.generation, &q.prompt) {
        (Some(g), Some(pp)) if g.tps > 0.0 && pp.tps > 0.0 => Some(Speeds {
            gen_ms: 1000.0 / g.tps,
            prompt_ms: 1000.0 / pp.tps,
        }),
        _ => None,
    });
    let pred = predict_on(
        t,
        NgramMod::default(),
        speeds.or_else(|| Speeds::of(&t.requests)),
    );
    let mut lines = pred.lines();
    if pred.predicted > 0 && !p.command.is_empty() {
        if pred.cannot_pay() {
            lines.push("  so the command leaves speculative decoding off".into());
        } else {
            // The engine renders the flags: the same config's args with speculation, less
            // those without it.
            use crate::config::{LaunchConfig, SpecType};
            let engine = crate::engine::of(crate::config::EngineKind::default());
            let plain = LaunchConfig::baseline(p.ctx);
            let off = engine.server_args(&plain);
            let on = engine.server_args(&LaunchConfig {
                spec_type: Some(SpecType::NgramMod),
                ..plain
            });
            let added: Vec<String> = on.into_iter().filter(|a| !off.contains(a)).collect();
            lines.push(format!("  so the command adds {}", added.join(" ")));
            p.command.extend(added);
        }
    }
    (lines, pred)
}
