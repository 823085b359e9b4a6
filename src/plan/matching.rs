//! Match: which profile a plan starts from (same model, same card, about the same budget)
//! and how far to trust it.

use super::*;

/// Budgets within this fraction of the profile's count as "the same card budget".
pub(super) const SAME_BUDGET_FRACTION: f64 = 0.10;

/// How far a plan can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// Same model, same card, about the same VRAM budget: the profile's winner, re-checked.
    High,
    /// Same model (or its shape) on another card or budget: placement re-predicted.
    Medium,
    /// No matching profile: the default search space's first choices.
    Low,
}

impl Confidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
        }
    }
}

/// How a profile's model relates to the model being planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ModelMatch {
    /// Different architecture or shape.
    Other,
    /// Same architecture, block count and expert count (e.g. another quantization).
    Shape,
    /// Same model fingerprint (shape and tensor types).
    Fingerprint,
}

/// How `p`'s model relates to `layout`.
pub fn model_match(p: &Profile, layout: &ModelLayout) -> ModelMatch {
    if p.model.fingerprint == layout.fingerprint {
        ModelMatch::Fingerprint
    } else if p.model.arch == layout.arch
        && p.model.n_blocks == layout.n_blocks
        && p.model.n_experts == layout.n_experts
    {
        ModelMatch::Shape
    } else {
        ModelMatch::Other
    }
}

/// The VRAM budget a profile was tuned under (None for a CPU-only tune).
pub fn profile_budget_mib(p: &Profile) -> Option<u64> {
    if p.hardware.gpus.is_empty() {
        return None;
    }
    p.hardware.vram_budget_mib.or_else(|| {
        crate::run::vram_budget_mib(
            true,
            p.hardware.free_vram_at_start_mib,
            p.hardware.headroom_mib,
        )
    })
}

/// This box's VRAM budget: free VRAM (summed) minus headroom; None with no GPU. With two GPUs
/// or more, the sum of each card's budget (the headroom kept on each).
pub fn box_budget_mib(hw: &HardwareProfile, headroom_mib: u64) -> Option<u64> {
    crate::run::box_vram_budget_mib(hw, headroom_mib)
}

pub(super) fn same_gpus(p: &Profile, hw: &HardwareProfile) -> bool {
    let mine: Vec<String> = hw.gpus.iter().map(|g| sanitize_label(&g.name)).collect();
    let theirs: Vec<String> = p.hardware.gpus.iter().map(|g| g.name.clone()).collect();
    mine == theirs
}

pub(super) fn same_budget(p: &Profile, budget: Option<u64>) -> bool {
    match (profile_budget_mib(p), budget) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            (a as f64 - b as f64).abs() < SAME_BUDGET_FRACTION * (a.max(b).max(1)) as f64
        }
        _ => false,
    }
}

/// The best profile for `layout` on `hw` among `profiles`: same model fingerprint first, then
/// same architecture and shape; among those the same GPUs, then the closest VRAM budget.
/// None when no profile is for this model.
pub fn best_profile<'a>(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    headroom_mib: u64,
    profiles: &'a [Profile],
) -> Option<&'a Profile> {
    let budget = box_budget_mib(hw, headroom_mib);
    profiles
        .iter()
        .filter(|p| model_match(p, layout) > ModelMatch::Other)
        .min_by_key(|p| {
            let distance = match (profile_budget_mib(p), budget) {
                (Some(a), Some(b)) => a.abs_diff(b),
                (None, None) => 0,
                _ => u64::MAX,
            };
            (
                std::cmp::Reverse(model_match(p, layout)),
                !same_gpus(p, hw),
                distance,
            )
        })
}

/// Threads for this box from a profile's thread count: a profile that used all its physical
/// cores uses all of ours; otherwise its count, at most our logical cores.
pub fn scale_threads(profile_threads: u32, p: &ProfileHardware, host: &HostInfo) -> u32 {
    let ours_physical = host.physical_cores.unwrap_or(host.logical_cores).max(1);
    if p.physical_cores == Some(profile_threads) {
        ours_physical
    } else {
        profile_threads.min(host.logical_cores.max(1))
    }
}
