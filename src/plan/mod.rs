//! `qtune plan`: propose a config for this box without trials, from the memory and speed
//! predictions and the best-matching profile (a 24 GB card's profile adapted to a 16 GB card,
//! say). The stages of a plan: [`matching`] (which profile, how far to trust it), [`choose`]
//! (the config, placed for this box), [`predict`] (its speed and the server default's),
//! [`render`] (the text). [`plan`] runs them; it is pure: no probing, no files.

use crate::config::LaunchConfig;
use crate::hardware::{HardwareProfile, HostInfo};
use crate::model::ModelLayout;
use crate::profile::*;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub mod boxes;
mod choose;
pub mod described;
pub mod known_quality;
mod matching;
mod predict;
mod render;
pub mod seeds;

use choose::*;
pub use choose::{PlanCandidate, PLAN_TIE_PCT};
use matching::*;
pub use matching::{
    best_profile, box_budget_mib, model_match, profile_budget_mib, scale_threads, Confidence,
    ModelMatch,
};
use predict::*;
pub use predict::{plan_speed, DefaultSpeed, PlanSpeed};
pub use render::plan_text;

/// What the plan's predicted buffers may fill of a VRAM budget: the budget minus the larger of
/// the card's CUDA context ([`crate::model::cards::CARD_CONTEXT_MIB`]: a plan launches nothing,
/// so it cannot measure it as a tune does) and a 3 % margin for prediction error.
pub fn plan_fit_target_mib(budget_mib: f64) -> f64 {
    budget_mib - crate::model::cards::CARD_CONTEXT_MIB.max(budget_mib * 0.03)
}

/// A launch config proposed for this box, with why and how far to trust it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub config: LaunchConfig,
    pub confidence: Confidence,
    /// Why the config is what it is, one sentence each.
    pub reasons: Vec<String>,
    /// Things the user should check (host RAM, nothing fits).
    pub warnings: Vec<String>,
    pub predicted_gpu_mib: f64,
    pub predicted_host_mib: f64,
    /// Free VRAM minus headroom; None with no GPU.
    pub budget_mib: Option<u64>,
    /// Name of the profile the plan started from.
    pub from_profile: Option<String>,
    /// How that profile was chosen (`--profile`, or the best match of those found), when the
    /// caller says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_chosen: Option<String>,
    /// False when even all experts on the CPU do not fit the budget.
    pub fits: bool,
    /// Predicted generation and prompt speed, with intervals; None with the reason in
    /// `speed_note` when the model cannot predict this box.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed: Option<PlanSpeed>,
    /// Why there is no speed prediction, or what it rests on.
    pub speed_note: String,
    /// Two GPUs or more: each card's budget and predicted VRAM, MiB, device order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cards: Vec<(crate::hardware::GpuBudget, f64)>,
    /// No profile: the configs compared by predicted speed (each batch/KV pair, placed with
    /// `--n-cpu-moe` and, on one GPU, with the space's placement styles; empty when none were).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compared: Vec<PlanCandidate>,
    /// One GPU: what `llama-server` gives with no flags, predicted from the placement its own
    /// fit is expected to choose ([`crate::placement::server_default_stand_in`]): the
    /// tune's reference, and what it keeps when nothing is proven faster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_default: Option<DefaultSpeed>,
    /// The model's quality as `qtune quality --against` measured it on this box (from qtune's
    /// cache), cited; the caller fills it (a plan reads no files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality: Option<known_quality::KnownQuality>,
}

/// Propose a config for `layout` on `hw` from `profile` (or the defaults) at context `ctx`,
/// leaving `headroom_mib` of free VRAM unused. Pure: no probing, no files.
///
/// With a profile its choices are kept and only placed again. Without one the `default`
/// space's batch sizes and KV types are compared by predicted speed ([`PLAN_TIE_PCT`]).
pub fn plan(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    profile: Option<&Profile>,
    ctx: u32,
    headroom_mib: u64,
) -> Plan {
    let mut reasons = Vec::new();
    let budget = box_budget_mib(hw, headroom_mib);
    let matched = profile.map(|p| model_match(p, layout));
    let cards = crate::run::gpu_budgets(hw, headroom_mib);

    let (placed, compared) = match profile {
        Some(p) => {
            let cfg = from_profile(p, layout, hw, ctx, &mut reasons);
            (place(layout, profile, cfg, budget, &cards), Vec::new())
        }
        None => match default_choices(ctx, &hw.host) {
            Ok(choices) => choose_by_speed(layout, hw, &choices, budget, &cards, &mut reasons),
            Err(e) => {
                reasons.push(format!(
                    "no profile for this model and the default space did not load ({e}): server defaults"
                ));
                (
                    place(layout, None, LaunchConfig::baseline(ctx), budget, &cards),
                    Vec::new(),
                )
            }
        },
    };
    let Placed {
        cfg,
        fits,
        reasons: place_reasons,
        mut warnings,
    } = placed;
    reasons.extend(place_reasons);
    if let Some(p) = profile.filter(|p| p.space.ctx != ctx) {
        warnings.push(format!(
            "the profile was tuned at ctx {}; this plan is for ctx {ctx}: the KV cache and \
             placement are re-predicted, its measured speeds were at ctx {} (drop --ctx to \
             plan at the profile's context)",
            p.space.ctx, p.space.ctx
        ));
    }

    let pred = if cards.len() >= 2 {
        let free: Vec<f64> = cards.iter().map(|g| g.free_mib as f64).collect();
        crate::model::memory::predict_devices(layout, &cfg, &free)
    } else {
        crate::model::memory::predict(layout, &cfg, hw.has_gpu())
    };
    if pred.host_mib > hw.host.ram_available_mib as f64 {
        warnings.push(format!(
            "predicted host memory {} exceeds this box's available RAM {}{}",
            crate::util::fmt_mib(pred.host_mib),
            crate::util::fmt_mib(hw.host.ram_available_mib as f64),
            if cfg.load_mode.maps_file() {
                " (the model is memory-mapped: expect paging from disk)"
            } else {
                ""
            }
        ));
    }

    let spread = profile.map_or(0.0, profile_spread_pct);
    if let Some(p) = profile {
        reasons.push(format!(
            "profile '{}' was tuned for {}",
            p.name,
            crate::profile::tuned_for(p)
        ));
        if spread > NOISY_SPREAD_PCT {
            warnings.push(format!(
                "profile '{}''s winner spread {spread:.0} % between its measurements (more than \
                 {NOISY_SPREAD_PCT:.0} %): its measured speeds are not a reliable guide",
                p.name
            ));
        }
    }
    let confidence = match (profile, matched) {
        (Some(p), Some(ModelMatch::Fingerprint))
            if same_gpus(p, hw) && same_budget(p, budget) && spread > NOISY_SPREAD_PCT =>
        {
            reasons.push(format!(
                "same model, same card and a VRAM budget within 10 %, but the profile's \
                 measurements spread by {spread:.0} % (more than {NOISY_SPREAD_PCT:.0} %): \
                 its winner was not told apart from its neighbours"
            ));
            Confidence::Medium
        }
        (Some(p), Some(ModelMatch::Fingerprint)) if same_gpus(p, hw) && same_budget(p, budget) => {
            reasons.push("same model, same card and a VRAM budget within 10 %".to_string());
            Confidence::High
        }
        (Some(p), Some(ModelMatch::Fingerprint | ModelMatch::Shape)) => {
            if !same_gpus(p, hw) {
                reasons.push(format!(
                    "the profile ran on {}; this box has {}",
                    p.hardware.gpu_label(),
                    if hw.gpus.is_empty() {
                        "no GPU".to_string()
                    } else {
                        hw.gpus
                            .iter()
                            .map(|g| g.name.as_str())
                            .collect::<Vec<_>>()
                            .join(" + ")
                    }
                ));
            } else if !same_budget(p, budget) {
                reasons.push(format!(
                    "the profile's VRAM budget ({}) differs from this box's ({}) by 10 % or more",
                    profile_budget_mib(p).map_or("-".into(), |v| crate::util::fmt_mib(v as f64)),
                    budget.map_or("-".into(), |v| crate::util::fmt_mib(v as f64))
                ));
            }
            Confidence::Medium
        }
        _ => Confidence::Low,
    };

    let (speed, speed_note) = plan_speed(layout, hw, &cfg, profile);
    Plan {
        server_default: server_default_speed(layout, hw, ctx),
        quality: None,
        config: cfg,
        speed,
        speed_note,
        confidence,
        reasons,
        warnings,
        predicted_gpu_mib: pred.gpu_mib,
        predicted_host_mib: pred.host_mib,
        budget_mib: budget,
        from_profile: profile.map(|p| p.name.clone()),
        profile_chosen: None,
        fits,
        cards: cards
            .iter()
            .map(|g| {
                let used = pred
                    .gpu_devices
                    .iter()
                    .find(|d| d.device == g.index)
                    .map_or(0.0, |d| d.total_mib);
                (g.clone(), used)
            })
            .collect(),
        compared,
    }
}

/// A profile whose winner's measurements spread by more than this (max - min over the
/// median, percent, the larger of tg and pp) cannot give a plan high confidence.
pub const NOISY_SPREAD_PCT: f64 = 25.0;

/// The larger spread of the profile winner's generation and prompt measurements, percent.
fn profile_spread_pct(p: &Profile) -> f64 {
    let w = &p.winner;
    [w.tg.spread_pct, w.pp.spread_pct]
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
}

fn p_ncmoe(profile: Option<&Profile>) -> Option<u32> {
    profile.and_then(|p| p.winner.config.n_cpu_moe)
}

/// A speed for a reason: "10,512 tok/s"; "no believable speed" for one that is not finite or
/// is past the trials' absolute ceiling (never a number of 300 digits).
fn fmt_tps(v: f64) -> String {
    match shown_tps(v) {
        Some(_) => format!("{} tok/s", crate::util::fmt_thousands(v)),
        None => "no believable speed".to_string(),
    }
}

/// A predicted speed as a plan prints it ("1234"), or None where it is no speed: not finite,
/// negative, or past the trials' absolute prompt ceiling.
pub(crate) fn shown_tps(v: f64) -> Option<String> {
    let max = crate::trial::plausible::SpeedCeiling::ABSOLUTE.prompt_tps;
    (v.is_finite() && (0.0..=max).contains(&v)).then(|| format!("{v:.0}"))
}

#[cfg(test)]
mod tests;
