//! Two GPUs or more (issue 15): how the layers are split over the cards (`-ts` by each card's
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

/// VRAM each card holds beyond the buffers llama.cpp itemizes (the CUDA context, cuBLAS
/// handles and workspaces): 715-760 MiB measured per launch on the GPU machine (H100, CUDA 13.0,
/// issue 13). On several cards every card holds its own, so each card's buffers must fit its
/// budget minus this (the single-GPU plan keeps the same figure out of its one budget).
pub const CARD_CONTEXT_MIB: f64 = 760.0;

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
