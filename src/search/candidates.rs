//! The best config's variants on a box with two GPUs or more: its layer split moved, its CPU
//! experts refilled so every card fits its own budget, and `--fit`'s multi-GPU placement. The
//! placements on one card are [`crate::placement`]'s.

use super::context::SearchContext;
use crate::config::{LaunchConfig, PartialBlock};
use crate::model::memory::host_ram_refusal;
use crate::placement::{partial_subsets, with_partial};
use crate::space::{PlacementStyle, SearchSpace};

// The stand-in for the server's default, where the report still names it.
pub use crate::placement::{
    predict_server_default, server_default_stand_in, stand_in_placement, SERVER_DEFAULT_PP_HIGH,
};

/// The variants of `best` on a box with two GPUs or more: `best`'s layer split moved
/// by each of the space's `split_shift_pct` (GPU 0's share, percentage points), its CPU
/// experts refilled so every card fits its own budget; with a `*-split` style, `best` filled
/// further by one boundary block split per projection; and, with the `fit` style, `--fit`'s
/// multi-GPU placement (`--fit on --fit-target h,h`: one target per card,
/// no `-ts`, which fit refuses). Configs predicted not to fit, or to swap the host, are left
/// out.
pub fn propose_cards(
    ctx: &SearchContext,
    best: &LaunchConfig,
    history: &[crate::trial::TrialOutcome],
) -> Vec<LaunchConfig> {
    let mut out: Vec<LaunchConfig> = Vec::new();
    if !ctx.multi_gpu() {
        return out;
    }
    let extra = card_extra_mib(ctx, history);
    let (lo, hi) = ctx.ncmoe_bounds();
    // `best`'s own split as a shift of the split by budget (the exploration balances each
    // config's split, so it is rarely the split by budget itself).
    let by_budget = ctx.split_by_budget(0);
    let own = match (best.tensor_split.first(), by_budget.first()) {
        (Some(&b), Some(&g)) => b as i32 - g as i32,
        _ => 0,
    };
    for shift in ctx.space.vary.split_shifts() {
        let split = ctx.split_by_budget(own + shift);
        if split == best.tensor_split {
            continue;
        }
        let placed = (lo..=hi).map(|n| {
            let mut c = best.clone();
            let blocks = ctx.cpu_fill_with(best, &split, &extra, n);
            c.place_on_gpus(split.clone(), blocks);
            c
        });
        if let Some(c) = placed.into_iter().find(|c| ctx.fits_cards_with(c, &extra)) {
            let refused = ctx
                .ram_available_mib
                .and_then(|ram| host_ram_refusal(&ctx.predict_cards(&c), ram));
            if refused.is_none() && !out.contains(&c) {
                out.push(c);
            }
        }
    }
    // Filled further (with a `*-split` style in the space): the last block `best` moved to the
    // CPU goes back to its card with only the projections that do not fit on the CPU, when the
    // corrected prediction agrees with what was measured (one block fewer does not fit).
    let split_style = ctx
        .space
        .vary
        .placement
        .iter()
        .any(|p| matches!(p, PlacementStyle::FirstSplit | PlacementStyle::LastSplit));
    let n = ctx.cpu_blocks_of(best);
    let split = best.tensor_split.clone();
    if split_style && n > lo && !split.is_empty() && best.n_gpu_layers.is_some() {
        let fewer = ctx.cpu_fill(best, &split, n - 1);
        let all = ctx.cpu_fill(best, &split, n);
        let mut at_fewer = best.clone();
        at_fewer.place_on_gpus(split.clone(), fewer.clone());
        let boundary = all.iter().find(|b| !fewer.contains(*b));
        if let Some(boundary) = boundary {
            if !ctx.fits_cards_with(&at_fewer, &extra) {
                let filled = partial_subsets(&ctx.layout, boundary)
                    .into_iter()
                    .map(|projs| with_partial(&at_fewer, PartialBlock::new(boundary, projs)))
                    .find(|c| ctx.fits_cards_with(c, &extra));
                if let Some(c) = filled.filter(|c| !out.contains(c) && c != best) {
                    out.push(c);
                }
            }
        }
    }
    if ctx.space.vary.placement.contains(&PlacementStyle::Fit) {
        out.push(best.with_fit_targets(vec![ctx.fit_candidate_target_mib(); ctx.gpus.len()]));
    }
    out
}

/// What each card holds beyond its predicted buffers, as this tune's explicit placements
/// measured it (device order): the largest measured peak minus prediction over the trials that
/// ran, spilled ones included (not the out-of-memory ones, whose peak is the card's limit),
/// plus [`crate::model::cards::CARD_MARGIN_MIB`]: the CUDA context and the prediction's error
/// on that card. [`crate::model::cards::CARD_CONTEXT_MIB`] for a card nothing measured yet.
/// The exploration splits the layers and the variants are filled against it, so a card the
/// prediction under-estimates is not filled past its budget again.
pub fn card_extra_mib(ctx: &SearchContext, history: &[crate::trial::TrialOutcome]) -> Vec<f64> {
    use crate::trial::OutcomeKind;
    let mut extra: Vec<Option<f64>> = vec![None; ctx.gpus.len()];
    for o in history.iter().filter(|o| {
        matches!(o.kind, OutcomeKind::Ok | OutcomeKind::Spill)
            && o.config.n_gpu_layers.is_some()
            && o.peak_vram_mib.len() >= 2
    }) {
        let p = ctx.predict_cards(&o.config);
        for d in &p.gpu_devices {
            let i = d.device as usize;
            if let (Some(slot), Some(&peak)) = (extra.get_mut(i), o.peak_vram_mib.get(i)) {
                let e = peak as f64 - d.total_mib;
                *slot = Some(slot.map_or(e, |s: f64| s.max(e)));
            }
        }
    }
    extra
        .into_iter()
        .map(|e| {
            e.map_or(crate::model::cards::CARD_CONTEXT_MIB, |e| {
                e + crate::model::cards::CARD_MARGIN_MIB
            })
        })
        .collect()
}

/// How many variants [`propose_cards`] proposes at most for this space.
pub fn card_variant_count(space: &SearchSpace) -> usize {
    let split = space
        .vary
        .placement
        .iter()
        .any(|p| matches!(p, PlacementStyle::FirstSplit | PlacementStyle::LastSplit));
    space.vary.split_shifts().len()
        + usize::from(split)
        + usize::from(space.vary.placement.contains(&PlacementStyle::Fit))
}
