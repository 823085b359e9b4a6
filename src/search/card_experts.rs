//! Two GPUs or more, where the best config keeps routed experts on the CPU: two placements
//! that put some of them on a card instead, without moving the layers (issue 57).
//!
//! - **Experts per card**: the best config's layers and split as they are, and as many of its
//!   CPU blocks' experts as fit moved to the card with the most room (`-ot ...=CUDAn`), one
//!   block at a time, each card's predicted peak (plus what this tune measured beyond the
//!   prediction on it) held against its own budget.
//! - **A smaller card that holds only experts**: every layer on the larger card (`-ts`), the
//!   smaller card filled with routed experts only, then the larger card with more of them, the
//!   CPU last.
//!
//! Each is skipped with a reason where it cannot help: one card, no CPU experts, no room.
//! A proposal that still runs out of memory fails as a variant and is not kept.

use super::context::SearchContext;
use crate::config::{BlockSet, CpuExperts, GpuExperts, LaunchConfig};
use crate::model::memory::host_ram_refusal;

/// The placements proposed, and the ones not proposed with why.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CardExpertPlan {
    pub configs: Vec<LaunchConfig>,
    pub skipped: Vec<String>,
}

const PER_CARD: &str = "routed experts on a card instead of the CPU";
const EXPERTS_ONLY: &str = "the smaller card holding only routed experts";

/// Both placements from `best`, each card holding `extra_mib` (device order) beyond its
/// predicted buffers ([`crate::search::candidates::card_extra_mib`]).
pub fn propose(ctx: &SearchContext, best: &LaunchConfig, extra_mib: &[f64]) -> CardExpertPlan {
    let mut plan = CardExpertPlan::default();
    if !ctx.multi_gpu() {
        for what in [PER_CARD, EXPERTS_ONLY] {
            plan.skipped
                .push(format!("{what}: not tried, the box has one GPU"));
        }
        return plan;
    }
    let cpu_blocks = cpu_blocks(best);
    if cpu_blocks.is_empty() || best.tensor_split.is_empty() {
        for what in [PER_CARD, EXPERTS_ONLY] {
            plan.skipped.push(format!(
                "{what}: not tried, the best config keeps no routed experts on the CPU"
            ));
        }
        return plan;
    }
    let mut push = |r: Result<LaunchConfig, String>, what: &str| match r {
        Ok(c) if c != *best && !plan.configs.contains(&c) => plan.configs.push(c),
        Ok(_) => {}
        Err(why) => plan.skipped.push(format!("{what}: not tried, {why}")),
    };
    push(experts_per_card(ctx, best, extra_mib), PER_CARD);
    push(experts_only_card(ctx, best, extra_mib), EXPERTS_ONLY);
    plan
}

/// The blocks whose routed experts `best` puts on the CPU whole (`-ot ...=CPU`).
fn cpu_blocks(best: &LaunchConfig) -> Vec<u32> {
    best.cpu_experts
        .as_ref()
        .map(|e| e.blocks.iter().collect())
        .unwrap_or_default()
}

/// Each card's room, MiB: its budget minus its predicted buffers and `extra_mib`.
fn rooms(ctx: &SearchContext, c: &LaunchConfig, extra_mib: &[f64]) -> Vec<f64> {
    let p = ctx.predict_cards(c);
    let mut out = vec![0.0; ctx.gpus.len()];
    for d in &p.gpu_devices {
        let i = d.device as usize;
        if let (Some(slot), Some(g)) = (out.get_mut(i), ctx.gpus.get(i)) {
            *slot = g.budget_mib as f64 - d.total_mib - extra_mib.get(i).copied().unwrap_or(0.0);
        }
    }
    out
}

/// Fits every card (with `extra_mib`) and the host's RAM.
fn fits(ctx: &SearchContext, c: &LaunchConfig, extra_mib: &[f64]) -> bool {
    ctx.fits_cards_with(c, extra_mib)
        && ctx
            .ram_available_mib
            .and_then(|ram| host_ram_refusal(&ctx.predict_cards(c), ram))
            .is_none()
}

/// `c` with `cpu` as its whole CPU blocks (its partial block kept) and `on_card` (device,
/// blocks) as its `-ot ...=CUDAn` rules.
fn placed(c: &LaunchConfig, cpu: &[u32], on_card: &[(u32, Vec<u32>)]) -> LaunchConfig {
    let mut out = c.clone();
    let partial = c.cpu_experts.as_ref().and_then(|e| e.partial.clone());
    out.cpu_experts = (!cpu.is_empty() || partial.is_some()).then(|| CpuExperts {
        blocks: BlockSet::new(cpu.iter().copied()),
        partial,
    });
    out.gpu_experts = on_card
        .iter()
        .filter(|(_, b)| !b.is_empty())
        .map(|(d, b)| GpuExperts {
            device: *d,
            blocks: BlockSet::new(b.iter().copied()),
        })
        .collect();
    out.gpu_experts.sort();
    out
}

/// `best` with as many CPU blocks' experts as fit moved to the cards, each to the card with
/// the most room that still fits after the move.
fn experts_per_card(
    ctx: &SearchContext,
    best: &LaunchConfig,
    extra_mib: &[f64],
) -> Result<LaunchConfig, String> {
    let mut cpu = cpu_blocks(best);
    let mut on_card: Vec<(u32, Vec<u32>)> = best
        .gpu_experts
        .iter()
        .map(|g| (g.device, g.blocks.iter().collect()))
        .collect();
    let mut current = best.clone();
    // The first CPU blocks first: the cards' shares end with the blocks the fill moved last.
    while let Some(&block) = cpu.first() {
        let room = rooms(ctx, &current, extra_mib);
        let mut cards: Vec<usize> = (0..ctx.gpus.len()).collect();
        cards.sort_by(|&a, &b| room[b].total_cmp(&room[a]).then(a.cmp(&b)));
        let moved = cards.into_iter().find_map(|d| {
            let mut next = on_card.clone();
            match next.iter_mut().find(|(dev, _)| *dev == d as u32) {
                Some((_, b)) => b.push(block),
                None => next.push((d as u32, vec![block])),
            }
            let c = placed(best, &cpu[1..], &next);
            fits(ctx, &c, extra_mib).then_some((c, next))
        });
        let Some((c, next)) = moved else { break };
        current = c;
        on_card = next;
        cpu.remove(0);
    }
    if current.gpu_experts == best.gpu_experts {
        let block_mib = ctx.layout.blocks[cpu[0] as usize].routed_experts as f64 / 1048576.0;
        let room = rooms(ctx, best, extra_mib);
        let most = room.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        return Err(format!(
            "no room: no card has room for one more block's experts ({block_mib:.0} MiB; {most:.0} MiB \
             left at most)"
        ));
    }
    Ok(current)
}

/// Every layer on the card with the largest budget, the card with the smallest (the last of
/// equal ones) filled with routed experts only, then the larger card with more, the CPU last.
fn experts_only_card(
    ctx: &SearchContext,
    best: &LaunchConfig,
    extra_mib: &[f64],
) -> Result<LaunchConfig, String> {
    let by_budget = |a: &usize, b: &usize| ctx.gpus[*a].budget_mib.cmp(&ctx.gpus[*b].budget_mib);
    let n = ctx.gpus.len();
    let large = (0..n).rev().max_by(by_budget).unwrap_or(0);
    let small = (0..n)
        .min_by(|a, b| by_budget(a, b).then(b.cmp(a)))
        .unwrap_or(0);
    if large == small {
        return Err("no card is smaller than another".into());
    }
    let mut template = best.clone();
    let split: Vec<u32> = (0..n).map(|d| if d == large { 100 } else { 0 }).collect();
    let all: Vec<u32> = (0..ctx.layout.n_blocks).collect();
    template.place_on_gpus(split, BlockSet::default());
    template.gpu_experts = Vec::new();
    let only_layers = placed(&template, &all, &[]);
    if !fits(ctx, &only_layers, extra_mib) {
        return Err(format!(
            "no room: GPU {large} cannot hold every layer with every expert on the CPU"
        ));
    }
    // The smaller card first, from the first block on.
    let mut cpu = all;
    let mut small_blocks: Vec<u32> = Vec::new();
    while let Some(&block) = cpu.first() {
        let mut next = small_blocks.clone();
        next.push(block);
        if !fits(
            ctx,
            &placed(&template, &cpu[1..], &[(small as u32, next.clone())]),
            extra_mib,
        ) {
            break;
        }
        small_blocks = next;
        cpu.remove(0);
    }
    if small_blocks.is_empty() {
        return Err(format!(
            "no room: GPU {small} cannot hold one block's experts"
        ));
    }
    // Then the larger card, from the first block left on; the CPU keeps the last ones.
    let on_card = [(small as u32, small_blocks)];
    while !cpu.is_empty() && fits(ctx, &placed(&template, &cpu[1..], &on_card), extra_mib) {
        cpu.remove(0);
    }
    Ok(placed(&template, &cpu, &on_card))
}
