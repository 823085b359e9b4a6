//! Predict: the plan's speed (the speed model alone, or a profile's measured winner scaled
//! by the model) and the server default's.

use super::*;

/// The server's default, predicted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DefaultSpeed {
    /// The placement its fit is expected to choose, as qtune's flags would say it.
    pub placement: String,
    pub prediction: crate::model::speed::SpeedPrediction,
}

/// [`Plan::server_default`]: one GPU with a speed model for it, a MoE model.
pub(super) fn server_default_speed(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    ctx: u32,
) -> Option<DefaultSpeed> {
    use crate::placement::{predict_server_default, stand_in_placement};
    let [gpu] = hw.gpus.as_slice() else {
        return None;
    };
    let (stand_in, prediction) = predict_server_default(
        layout,
        &LaunchConfig::baseline(ctx),
        gpu.vram_free_mib as f64,
        &crate::model::speed::SpeedBox::from_hardware(hw),
        crate::model::speed::DEFAULT_PROMPT_TOKENS,
    )?;
    Some(DefaultSpeed {
        placement: stand_in_placement(&stand_in),
        prediction,
    })
}

/// The plan's predicted speed (`crate::model::speed`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanSpeed {
    pub prediction: crate::model::speed::SpeedPrediction,
    /// "model" (the speed model alone) or "profile" (the profile's measured winner scaled by
    /// the model's ratio between the two boxes and configs).
    pub basis: String,
}

/// Predict the plan's speed: from the profile's measured winner scaled by the model's ratio
/// (this config on this box over the winner's config on the profile's box) when the profile
/// is for this model, else the model alone.
pub fn plan_speed(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    cfg: &LaunchConfig,
    profile: Option<&Profile>,
) -> (Option<PlanSpeed>, String) {
    use crate::model::speed::{self, SpeedBox, FITTED};
    let here = SpeedBox::from_hardware(hw);
    let prompt = profile
        .map(|p| p.space.workload.prompt_tokens)
        .unwrap_or(speed::DEFAULT_PROMPT_TOKENS);
    let Some(mut pred) = speed::predict(layout, cfg, &here, hw.has_gpu(), prompt, &FITTED) else {
        return (
            None,
            format!(
                "no speed prediction: {}",
                here.sources
                    .iter()
                    .find(|s| s.contains("unknown"))
                    .cloned()
                    .unwrap_or_else(|| "placement is left to the server".into())
            ),
        );
    };
    let model_note = format!(
        "speed from the model alone ({}; pp for a {prompt}-token prompt){}",
        here.sources.join(", "),
        if hw.has_gpu() {
            ""
        } else {
            "; CPU-only: the model was fitted on GPU runs only, so this is a rough estimate \
             and the interval is likely too narrow"
        }
    );
    let Some(p) = profile.filter(|p| model_match(p, layout) > ModelMatch::Other) else {
        return (
            Some(PlanSpeed {
                prediction: pred,
                basis: "model".into(),
            }),
            model_note,
        );
    };
    let there = SpeedBox {
        gpu_bw_gbs: p
            .hardware
            .gpus
            .first()
            .and_then(|g| speed::gpu_bandwidth_by_name(&g.name)),
        pcie_gbs: here.pcie_gbs,
        host_bw_gbs: p
            .hardware
            .mem_bandwidth_gbs
            .unwrap_or(speed::DEFAULT_HOST_BW_GBS),
        physical_cores: p
            .hardware
            .physical_cores
            .unwrap_or(p.hardware.logical_cores)
            .max(1),
        host_bw_share_by_threads: Vec::new(),
        rpc_links: Vec::new(),
        sources: Vec::new(),
    };
    let Some(theirs) = speed::predict(
        layout,
        &p.winner.config,
        &there,
        !p.hardware.gpus.is_empty(),
        prompt,
        &FITTED,
    ) else {
        return (
            Some(PlanSpeed {
                prediction: pred,
                basis: "model".into(),
            }),
            format!("{model_note}; the profile's winner could not be modelled, so it is not used"),
        );
    };
    if p.winner.tg.median <= 0.0 || p.winner.pp.median <= 0.0 {
        return (
            Some(PlanSpeed {
                prediction: pred,
                basis: "model".into(),
            }),
            model_note,
        );
    }
    let scale = |e: &mut speed::Estimate, measured: f64, modelled: f64| {
        let r = measured / modelled;
        e.tps *= r;
        e.low *= r;
        e.high *= r;
    };
    scale(&mut pred.tg, p.winner.tg.median, theirs.tg.tps);
    scale(&mut pred.pp, p.winner.pp.median, theirs.pp.tps);
    (
        Some(PlanSpeed {
            prediction: pred,
            basis: "profile".into(),
        }),
        format!(
            "speed: the profile's measured winner ({:.0} tg, {:.0} pp tok/s on {}) scaled by the \
             model's ratio between that box and config and this one; interval as the model's",
            p.winner.tg.median,
            p.winner.pp.median,
            p.hardware.gpu_label()
        ),
    )
}
