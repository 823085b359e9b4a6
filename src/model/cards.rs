//! Two GPUs or more: how the layers are split over the cards (`-ts` by each card's
//! budget) and whose experts go to the CPU so that each card is filled to its own budget.
//! Pure functions of the model, the config and the cards; the search and `qtune plan` share
//! them.

use super::memory::{fits_devices, layer_devices, predict_devices};
use super::ModelLayout;
use crate::config::{BlockSet, LaunchConfig};
use crate::hardware::GpuBudget;

/// The `-ts` proportions (percent, summing to 100) by the cards' budgets, GPU 0's share moved
/// by `shift_pct` points (at least 5 % per card).
pub fn split_by_budget(budgets_mib: &[f64], shift_pct: i32) -> Vec<u32> {
    let total: f64 = budgets_mib.iter().map(|b| b.max(1.0)).sum();
    let mut pct: Vec<i32> = budgets_mib
        .iter()
        .map(|b| (b.max(1.0) / total * 100.0).round() as i32)
        .collect();
    if pct.is_empty() {
        return Vec::new();
    }
    pct[0] += shift_pct;
    let n = pct.len() as i32;
    pct[0] = pct[0].clamp(5, 100 - 5 * (n - 1));
    // The others share what GPU 0 leaves, in their own proportions, the rest on the last.
    let rest_before: i32 = pct[1..].iter().sum::<i32>().max(1);
    let left = 100 - pct[0];
    let mut given = 0;
    for i in 1..pct.len() {
        pct[i] = if i + 1 == pct.len() {
            left - given
        } else {
            (pct[i] * left / rest_before).max(5)
        };
        given += pct[i];
    }
    pct.into_iter().map(|p| p.max(0) as u32).collect()
}

/// The `n` blocks whose experts go to the CPU under `split`: one at a time from the card
/// furthest over (or least under) its budget (its predicted use plus `extra_mib`: what it
/// holds beyond the prediction, device order), the last block of that card's share not yet
/// moved, so every card is filled to its own budget and the moved experts come from the card
/// that needs the room (`--n-cpu-moe` would take them all from GPU 0, whose layers are the
/// first). One prediction: moving a block takes only its expert bytes off its card once some
/// experts are on the CPU.
pub fn cpu_fill(
    layout: &ModelLayout,
    template: &LaunchConfig,
    split: &[u32],
    gpus: &[GpuBudget],
    extra_mib: &[f64],
    n: u32,
) -> BlockSet {
    let nb = layout.n_blocks;
    let n = n.min(nb);
    if n == 0 || !layout.is_moe() {
        return BlockSet::default();
    }
    let free: Vec<f64> = gpus.iter().map(|g| g.free_mib as f64).collect();
    // Predicted use with one block's experts on the CPU (the compute buffers as they are
    // whenever some are), plus that block's experts back: then moving a block only takes its
    // expert bytes off its card.
    let mut probe = template.clone();
    let last = nb - 1;
    probe.place_on_gpus(split.to_vec(), BlockSet::new([last]));
    let p = predict_devices(layout, &probe, &free);
    let devs = layer_devices(
        nb,
        999,
        &split.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
    );
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut used: Vec<f64> = p.gpu_devices.iter().map(|d| d.total_mib).collect();
    if let Some(d) = devs[last as usize] {
        used[d as usize] += mib(layout.blocks[last as usize].routed_experts);
    }
    let mut moved: Vec<u32> = Vec::new();
    while (moved.len() as u32) < n {
        // The card furthest over its budget that still has a block to give.
        let pick = (0..gpus.len())
            .filter(|&d| {
                (0..nb).any(|il| devs[il as usize] == Some(d as u32) && !moved.contains(&il))
            })
            .max_by(|&a, &b| {
                let over = |d: usize| {
                    used[d] + extra_mib.get(d).copied().unwrap_or(0.0) - gpus[d].budget_mib as f64
                };
                over(a).total_cmp(&over(b)).then(b.cmp(&a))
            });
        let Some(d) = pick else { break };
        let il = (0..nb)
            .rev()
            .find(|&il| devs[il as usize] == Some(d as u32) && !moved.contains(&il))
            .expect("the card has a block left");
        used[d] -= mib(layout.blocks[il as usize].routed_experts);
        moved.push(il);
    }
    BlockSet::new(moved)
}

/// A placement on several cards: the `-ts` split, the blocks whose experts go to the CPU, and
/// the room it leaves on its fullest card.
#[derive(Debug, Clone, PartialEq)]
pub struct CardPlacement {
    pub split: Vec<u32>,
    pub cpu_blocks: BlockSet,
    /// The least room left on any card, MiB: its budget minus its predicted buffers and what it
    /// holds beyond them (`extra_mib`). Negative: that card is over.
    pub room_mib: f64,
}

/// The `-ts` split for `template` with `n` blocks' experts on the CPU (taken by [`cpu_fill`]
/// under each split) that leaves the most room on the card with the least: each card's
/// predicted buffers plus `extra_mib` (what it holds beyond them, device order) against its
/// budget.
///
/// Proportions by budget ([`split_by_budget`]) ignore where llama.cpp's layers fall: whole
/// layers (856 MiB each for Q8_0 Qwen3.5-35B-A3B), the output layer on the last card, one
/// compute buffer per card. On 24 + 16 GiB they gave GPU 0 26 of 41 layers: 455 MiB of room
/// on it, 2,093 on GPU 1 (predicted; measured 503 and 2,175), and `-ub 2048` spilled on GPU 0
/// with 1.4 GiB free on GPU 1; 25 layers leave about 1.3 GiB on each.
///
/// GPU 0's share is scanned over 5..=95 % (the other cards keep their budgets' proportions),
/// each assignment of layers to cards is evaluated once, and of equal ones the share nearest the
/// split by budget is kept. The blocks are taken with [`CARD_CONTEXT_MIB`] on every card, so a
/// split and `n` always give the same blocks.
pub fn balanced_split(
    layout: &ModelLayout,
    template: &LaunchConfig,
    gpus: &[GpuBudget],
    extra_mib: &[f64],
    n: u32,
) -> CardPlacement {
    let nb = layout.n_blocks;
    let free: Vec<f64> = gpus.iter().map(|g| g.free_mib as f64).collect();
    let targets = buffer_budgets_mib(gpus);
    let fill_extra = vec![CARD_CONTEXT_MIB; gpus.len()];
    let mut seen: Vec<Vec<Option<u32>>> = Vec::new();
    let mut best: Option<CardPlacement> = None;
    for shift in std::iter::once(0).chain((1..=95).flat_map(|k| [-k, k])) {
        let split = split_by_budget(&targets, shift);
        let weights: Vec<f64> = split.iter().map(|&x| f64::from(x)).collect();
        let devs = layer_devices(nb, 999, &weights);
        if seen.contains(&devs) {
            continue;
        }
        seen.push(devs);
        let cpu_blocks = cpu_fill(layout, template, &split, gpus, &fill_extra, n);
        let mut c = template.clone();
        c.place_on_gpus(split.clone(), cpu_blocks.clone());
        let p = predict_devices(layout, &c, &free);
        let room_mib = p
            .gpu_devices
            .iter()
            .map(|d| {
                let i = d.device as usize;
                let budget = gpus.get(i).map_or(0.0, |g| g.budget_mib as f64);
                budget - d.total_mib - extra_mib.get(i).copied().unwrap_or(CARD_CONTEXT_MIB)
            })
            .fold(f64::INFINITY, f64::min);
        if best.as_ref().is_none_or(|b| room_mib > b.room_mib) {
            best = Some(CardPlacement {
                split,
                cpu_blocks,
                room_mib,
            });
        }
    }
    best.unwrap_or(CardPlacement {
        split: Vec::new(),
        cpu_blocks: BlockSet::default(),
        room_mib: f64::NEG_INFINITY,
    })
}

/// VRAM each card holds beyond the buffers llama.cpp itemizes (the CUDA context, cuBLAS
/// handles and workspaces): 715-760 MiB measured per launch on the GPU machine (H100, CUDA 13.0,
/// docs/evidence/gpu-h100-proof13). On several cards every card holds its own, so each card's buffers must fit its
/// budget minus this (the single-GPU plan keeps the same figure out of its one budget).
pub const CARD_CONTEXT_MIB: f64 = 760.0;

/// Kept free on a card beyond what it was measured to hold over its predicted buffers, when
/// that measurement places another config: the largest figure of a tune covers the configs
/// it measured, not a new ubatch or split. On 24 + 16 GiB (2x H200, Q8_0 Qwen3.5-35B-A3B) one
/// config peaked the same to the MiB every launch, but across configs the per-card figure moved
/// by up to 214 MiB (608-822 on GPU 0, 650-690 on GPU 1: the compute buffers' error).
pub const CARD_MARGIN_MIB: f64 = 128.0;

/// What each card's predicted buffers may fill: its budget minus [`CARD_CONTEXT_MIB`] (never
/// negative), MiB, device order.
pub fn buffer_budgets_mib(gpus: &[GpuBudget]) -> Vec<f64> {
    gpus.iter()
        .map(|g| (g.budget_mib as f64 - CARD_CONTEXT_MIB).max(0.0))
        .collect()
}

/// `template` placed on the cards: the layers split by `targets_mib` (what each card's buffers
/// may fill, device order), the fewest blocks' experts on the CPU (within `lo..=hi`) for which
/// every card's prediction fits its target. `None` when even `hi` blocks do not fit.
pub fn fill_cards(
    layout: &ModelLayout,
    template: &LaunchConfig,
    gpus: &[GpuBudget],
    targets_mib: &[f64],
    (lo, hi): (u32, u32),
) -> Option<LaunchConfig> {
    let free: Vec<f64> = gpus.iter().map(|g| g.free_mib as f64).collect();
    let split = split_by_budget(targets_mib, 0);
    (lo..=hi.min(layout.n_blocks)).find_map(|n| {
        let mut c = template.clone();
        let extra = vec![CARD_CONTEXT_MIB; gpus.len()];
        c.place_on_gpus(
            split.clone(),
            cpu_fill(layout, template, &split, gpus, &extra, n),
        );
        fits_devices(&predict_devices(layout, &c, &free), targets_mib).then_some(c)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_by_budget_is_in_percent_and_shifts_gpu0s_share() {
        assert_eq!(split_by_budget(&[24064.0, 15872.0], 0), vec![60, 40]);
        assert_eq!(split_by_budget(&[24064.0, 15872.0], 10), vec![70, 30]);
        assert_eq!(split_by_budget(&[24064.0, 15872.0], -10), vec![50, 50]);
        assert_eq!(split_by_budget(&[1000.0, 1000.0], 80), vec![95, 5]);
        assert_eq!(
            split_by_budget(&[1.0, 1.0, 2.0], 0).iter().sum::<u32>(),
            100
        );
        assert!(split_by_budget(&[], 0).is_empty());
    }

    fn layout() -> ModelLayout {
        ModelLayout {
            n_embd: 1024,
            blocks: vec![
                crate::model::BlockBytes {
                    routed_experts: 400 << 20,
                    shared_experts: 1 << 20,
                    rest: 20 << 20,
                };
                20
            ],
            token_embd_bytes: 100 << 20,
            output_bytes: 100 << 20,
            ..ModelLayout::uniform(20, 8, 0, 0)
        }
    }

    fn card(index: u32, budget_mib: u64) -> GpuBudget {
        GpuBudget {
            index,
            name: format!("card {index}"),
            free_mib: budget_mib + 512,
            budget_mib,
        }
    }

    #[test]
    fn the_balanced_split_leaves_the_fullest_card_the_most_room() {
        let l = layout();
        let t = LaunchConfig::baseline(4096);
        let gpus = [card(0, 6000), card(1, 3000)];
        let free = [6512.0, 3512.0];
        let context = [CARD_CONTEXT_MIB; 2];
        let room = |split: &[u32], extra: &[f64], n: u32| {
            let mut c = t.clone();
            c.place_on_gpus(split.to_vec(), cpu_fill(&l, &t, split, &gpus, &context, n));
            let p = predict_devices(&l, &c, &free);
            p.gpu_devices
                .iter()
                .map(|d| {
                    gpus[d.device as usize].budget_mib as f64
                        - d.total_mib
                        - extra[d.device as usize]
                })
                .fold(f64::INFINITY, f64::min)
        };
        let by_budget = split_by_budget(&buffer_budgets_mib(&gpus), 0);
        let b = balanced_split(&l, &t, &gpus, &context, 8);
        assert_eq!(b.room_mib, room(&b.split, &context, 8));
        assert!(b.room_mib >= room(&by_budget, &context, 8), "{b:?}");
        // No other GPU 0 share leaves the fullest card more room.
        for s in 5..=95u32 {
            assert!(room(&[s, 100 - s], &context, 8) <= b.room_mib, "{s}");
        }
        // A card measured to hold more beyond the prediction gets fewer layers.
        let heavier = [CARD_CONTEXT_MIB, CARD_CONTEXT_MIB + 800.0];
        let h = balanced_split(&l, &t, &gpus, &heavier, 8);
        assert!(h.split[0] > b.split[0], "{h:?} vs {b:?}");
        assert_eq!(h.room_mib, room(&h.split, &heavier, 8));
        // Nothing fits: the room is negative, the split still the least bad.
        assert!(balanced_split(&l, &t, &gpus, &context, 0).room_mib < 0.0);
    }

    #[test]
    fn cpu_blocks_come_from_the_card_that_needs_the_room() {
        let l = layout();
        let t = LaunchConfig::baseline(4096);
        let split = [50, 50];
        let devs = layer_devices(20, 999, &[50.0, 50.0]);
        let on = |b: &BlockSet, d: u32| b.iter().filter(|&x| devs[x as usize] == Some(d)).count();
        // GPU 1 much smaller: the first blocks moved are its own, from the end of its share.
        let gpus = [card(0, 6000), card(1, 2500)];
        let none = [0.0, 0.0];
        let b = cpu_fill(&l, &t, &split, &gpus, &none, 3);
        assert_eq!(on(&b, 1), 3, "{b}");
        assert!(b.contains(19) && b.contains(18) && b.contains(17));
        // Equal cards: both give, GPU 0 (11 of the 21 layers) more; what a card holds beyond
        // the prediction counts too.
        let gpus = [card(0, 3000), card(1, 3000)];
        let b = cpu_fill(&l, &t, &split, &gpus, &none, 4);
        assert_eq!((on(&b, 0), on(&b, 1)), (3, 1), "{b}");
        let b = cpu_fill(&l, &t, &split, &gpus, &[0.0, 1000.0], 4);
        assert_eq!((on(&b, 0), on(&b, 1)), (2, 2), "{b}");
        // Filled: the fewest blocks for which both cards fit their targets.
        let targets = [2900.0, 2900.0];
        let c = fill_cards(&l, &t, &gpus, &targets, (0, 20)).unwrap();
        let free = [3512.0, 3512.0];
        assert!(fits_devices(&predict_devices(&l, &c, &free), &targets));
        let n = c.cpu_experts.as_ref().map_or(0, |e| e.blocks.len() as u32);
        let mut fewer = t.clone();
        fewer.place_on_gpus(
            vec![50, 50],
            cpu_fill(&l, &t, &[50, 50], &gpus, &[CARD_CONTEXT_MIB; 2], n - 1),
        );
        assert!(!fits_devices(&predict_devices(&l, &fewer, &free), &targets));
        assert_eq!(fill_cards(&l, &t, &gpus, &[10.0, 10.0], (0, 20)), None);
    }
}
