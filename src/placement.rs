//! Expert placements that fill the card: for each placement style of the space, the
//! most routed-expert bytes on the GPU whose predicted VRAM fits the budget.
//!
//! How full the card is mattered more than which blocks sit on the CPU (first-3, last-3 and
//! `--fit`'s placement measured within the noise at one card size), so every style is filled to
//! the budget: whole blocks from the first or the last block, and for the `*-split` styles one
//! more boundary block split per projection, keeping on the GPU the projections that still fit.
//! `--fit`'s own placement is a candidate too: it places itself at launch, so its prediction is
//! the one of the placement fit is expected to choose (`last-split` at the same budget).
//!
//! This module only proposes: the search decides which candidates to launch and in what order,
//! and `qtune plan` which one to print. Both call it; it knows neither.

use crate::config::{CpuExperts, ExpertProj, LaunchConfig, PartialBlock};
use crate::model::memory::{
    host_ram_refusal, predict_with, ComputeModel, HostCaps, MemoryPrediction,
};
use crate::model::ModelLayout;
use crate::space::{NCpuMoe, PlacementStyle, SearchSpace};

/// How far `--fit` overshot its own target on the GPU machine (H100, 16 GiB free,
/// docs/evidence/gpu-h100-proof13): `--fit-target 512` peaked 100-110 MiB over free-minus-512
/// in three models/runs
/// (15,878 / 15,884 / 15,888 MiB against 15,778). The `fit` candidate asks for this much more
/// headroom than the tune's, so that fit's placement stays within the tune's budget.
pub const FIT_OVERSHOOT_MIB: u32 = 160;

/// What a placement must fit in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// VRAM the config's buffers may use, MiB: free VRAM before the tune minus the headroom,
    /// minus what the launch uses beyond its buffers (the CUDA context), as measured.
    pub vram_budget_mib: f64,
    /// Host RAM available before the tune, MiB; `None`: unknown (not checked).
    pub ram_available_mib: Option<f64>,
    /// `--fit-target` of the `fit` candidate, MiB (the tune's VRAM headroom plus [`FIT_OVERSHOOT_MIB`]).
    pub fit_target_mib: u32,
}

/// One proposed placement.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub style: PlacementStyle,
    /// The template with this placement's flags.
    pub config: LaunchConfig,
    /// Predicted memory (for `fit`: of the `last-split` placement at the same budget).
    pub prediction: MemoryPrediction,
    /// Routed-expert bytes left on the GPU: how full the card is.
    pub gpu_expert_bytes: u64,
    /// Why it must not be launched (host RAM over the available RAM), if so.
    pub refused: Option<String>,
}

/// The placements of `space.vary.placement` for `template`'s other choices (ubatch, KV type,
/// threads, load mode, op offload), each filled to `limits.vram_budget_mib`. A style for which
/// nothing fits, even with every expert on the CPU, proposes nothing (`fit` included: it would
/// have nothing left to place). The number of whole CPU blocks stays within the space's
/// `n_cpu_moe` range. Duplicates (two styles giving the same flags) are proposed once.
pub fn propose(
    layout: &ModelLayout,
    template: &LaunchConfig,
    space: &SearchSpace,
    limits: &Limits,
) -> Vec<Candidate> {
    propose_with(
        layout,
        template,
        space,
        limits,
        HostCaps::detect(),
        &crate::model::memory::CPU_COMPUTE,
    )
}

/// [`propose`] with explicit host capabilities and compute constants (for tests).
pub fn propose_with(
    layout: &ModelLayout,
    template: &LaunchConfig,
    space: &SearchSpace,
    limits: &Limits,
    host: HostCaps,
    cm: &ComputeModel,
) -> Vec<Candidate> {
    if !layout.is_moe() {
        return Vec::new();
    }
    let nb = layout.n_blocks;
    let (lo, hi) = match &space.vary.n_cpu_moe {
        Some(NCpuMoe::Range { min, max }) => ((*min).min(nb), (*max).min(nb)),
        _ => (0, nb),
    };
    let base = LaunchConfig {
        n_gpu_layers: Some(999),
        n_cpu_moe: None,
        cpu_experts: None,
        fit: Some(false),
        fit_target_mib: Vec::new(),
        ..template.clone()
    };
    let predict = |c: &LaunchConfig| predict_with(layout, c, true, host, cm);
    let candidate = |style: PlacementStyle, config: LaunchConfig| {
        let prediction = predict(&config);
        let gpu_expert_bytes = gpu_expert_bytes(layout, &config);
        let refused = limits
            .ram_available_mib
            .and_then(|ram| host_ram_refusal(&prediction, ram));
        Candidate {
            style,
            config,
            prediction,
            gpu_expert_bytes,
            refused,
        }
    };
    let fits = |c: &LaunchConfig| predict(c).gpu_mib <= limits.vram_budget_mib;

    let mut out: Vec<Candidate> = Vec::new();
    for &style in &space.vary.placement {
        let from_end = matches!(style, PlacementStyle::Last | PlacementStyle::LastSplit);
        let split = matches!(
            style,
            PlacementStyle::FirstSplit | PlacementStyle::LastSplit | PlacementStyle::Fit
        );
        let whole = |n: u32| -> LaunchConfig {
            if from_end || style == PlacementStyle::Fit {
                LaunchConfig {
                    cpu_experts: (n > 0).then(|| CpuExperts::last(n, nb)),
                    ..base.clone()
                }
            } else {
                LaunchConfig {
                    n_cpu_moe: Some(n),
                    ..base.clone()
                }
            }
        };
        // The fewest whole blocks on the CPU that fit.
        let Some(n) = (lo..=hi).find(|&n| fits(&whole(n))) else {
            continue;
        };
        let mut best = whole(n);
        // One block fewer, plus the boundary block's projections that do not fit on the GPU.
        if split && n > lo {
            let boundary = if from_end || style == PlacementStyle::Fit {
                nb - n
            } else {
                n - 1
            };
            let fewer = whole(n - 1);
            if let Some(cfg) = partial_subsets(layout, boundary)
                .into_iter()
                .map(|projs| with_partial(&fewer, PartialBlock::new(boundary, projs)))
                .find(|c| fits(c))
            {
                best = cfg;
            }
        }
        let c = if style == PlacementStyle::Fit {
            // Fit places itself; predict the placement it is expected to choose.
            let mut c = candidate(style, best);
            c.config = base.with_fit_placement(limits.fit_target_mib);
            c
        } else {
            candidate(style, best)
        };
        if !out.iter().any(|o| o.config == c.config) {
            out.push(c);
        }
    }
    out
}

/// `--fit`'s default target: the VRAM `llama-server` leaves free on each card when it places
/// the model itself (no placement flags).
pub const SERVER_FIT_TARGET_MIB: f64 = 1024.0;

/// What `server` (a config with no placement flags, e.g. `llama-server -m M -c CTX -np 1`)
/// places by itself on one GPU with `free_mib` free, as explicit flags: its fit puts the last
/// blocks' experts on the CPU and splits the boundary block per projection (the `last-split`
/// style), filled to the free VRAM less fit's 1 GiB target and the CUDA context; its other
/// choices (mmap, f16 KV, the ubatch) stay. A stand-in for the speed model: a tune
/// keeps the default when nothing is proven faster, and a plan says what the default gives next
/// to what it proposes. None for a dense model, a config that places itself otherwise (a fit
/// target, a split), or when nothing fits.
pub fn server_default_stand_in(
    layout: &ModelLayout,
    server: &LaunchConfig,
    free_mib: f64,
) -> Option<LaunchConfig> {
    if !server.is_auto_placement() || server.is_fit_placement() {
        return None;
    }
    let mut space = crate::space::load("default").ok()?;
    space.vary.placement = vec![PlacementStyle::LastSplit];
    space.vary.n_cpu_moe = None;
    let limits = Limits {
        vram_budget_mib: free_mib - SERVER_FIT_TARGET_MIB - crate::model::cards::CARD_CONTEXT_MIB,
        ram_available_mib: None,
        fit_target_mib: 0,
    };
    propose(layout, server, &space, &limits)
        .into_iter()
        .next()
        .map(|c| c.config)
}

/// The upper end of a stand-in's predicted prompt speed, as a multiple of the prediction. Its
/// placement is inferred (fit's, not known before the launch) and its CPU experts are
/// memory-mapped, which the fitted runs saw least. The synthetic Qwen3-30B-A3B's fitted touch at
/// its last blocks is set by its pinned `-ot` placements; its default on 16 GiB, whose last
/// blocks' experts are on the CPU memory-mapped, measured 1.62x that prediction in prompt on
/// the H100 and 1.74x on the H200 (3 launches), while generation stays within the stated
/// error (`tests/it/speed_replay.rs`, the server default's replay). Pinned and memory-mapped
/// copies of the deep blocks do not agree on one touch; this end says so rather than hiding it.
pub const SERVER_DEFAULT_PP_HIGH: f64 = 1.8;

/// The speed model's prediction for a config that places itself (`server`, one GPU with
/// `free_mib` free), through [`server_default_stand_in`], its prompt interval's upper end at
/// [`SERVER_DEFAULT_PP_HIGH`]; with the stand-in.
pub fn predict_server_default(
    layout: &ModelLayout,
    server: &LaunchConfig,
    free_mib: f64,
    sb: &crate::model::speed::SpeedBox,
    prompt_tokens: u32,
) -> Option<(LaunchConfig, crate::model::speed::SpeedPrediction)> {
    use crate::model::speed::{predict, FITTED};
    let stand_in = server_default_stand_in(layout, server, free_mib)?;
    let mut p = predict(layout, &stand_in, sb, true, prompt_tokens, &FITTED)?;
    p.pp.high = p.pp.tps * SERVER_DEFAULT_PP_HIGH;
    Some((stand_in, p))
}

/// How a stand-in's placement reads: "experts of 26-39 on the CPU", "every expert on the GPU".
pub fn stand_in_placement(stand_in: &LaunchConfig) -> String {
    match &stand_in.cpu_experts {
        Some(e) => format!("experts of {} on the CPU", e.label()),
        None => "every expert on the GPU".into(),
    }
}

/// Routed-expert bytes a config leaves on the GPU (all blocks on the GPU, as proposed here).
fn gpu_expert_bytes(layout: &ModelLayout, c: &LaunchConfig) -> u64 {
    let ncmoe = c.n_cpu_moe.unwrap_or(0);
    (0..layout.n_blocks)
        .filter(|&il| il >= ncmoe)
        .map(|il| {
            let all = layout.blocks[il as usize].routed_experts;
            all - c
                .cpu_experts
                .as_ref()
                .map_or(0, |e| layout.cpu_expert_bytes(il, e))
        })
        .sum()
}

/// The proper, non-empty subsets of a block's projections to put on the CPU, fewest bytes on
/// the CPU first (ties in `--fit`'s order: `down` first, then `gate`, then `up`).
pub(crate) fn partial_subsets(layout: &ModelLayout, block: u32) -> Vec<Vec<ExpertProj>> {
    let bytes = layout.expert_proj_bytes(block);
    let present: Vec<ExpertProj> = ExpertProj::ALL
        .into_iter()
        .filter(|&p| bytes.get(p) > 0)
        .collect();
    let fit_rank = |p: ExpertProj| match p {
        ExpertProj::Down => 0,
        ExpertProj::Gate | ExpertProj::GateUp => 1,
        ExpertProj::Up => 2,
    };
    let mut subsets: Vec<(u64, Vec<u32>, Vec<ExpertProj>)> = Vec::new();
    let k = present.len();
    for mask in 1u32..(1u32 << k).saturating_sub(1) {
        let s: Vec<ExpertProj> = (0..k)
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| present[i])
            .collect();
        let total = s.iter().map(|&p| bytes.get(p)).sum();
        let mut ranks: Vec<u32> = s.iter().map(|&p| fit_rank(p)).collect();
        ranks.sort_unstable();
        subsets.push((total, ranks, s));
    }
    subsets.sort();
    subsets.into_iter().map(|(_, _, s)| s).collect()
}

pub(crate) fn with_partial(cfg: &LaunchConfig, partial: PartialBlock) -> LaunchConfig {
    let mut c = cfg.clone();
    let mut experts = c.cpu_experts.take().unwrap_or_default();
    experts.partial = Some(partial);
    c.cpu_experts = Some(experts);
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BlockSet, LoadMode};
    use crate::engine::LaunchArgs;
    use crate::model::memory::CPU_COMPUTE;
    use crate::model::{BlockBytes, ExpertProjBytes};

    fn layout() -> ModelLayout {
        let mut l = ModelLayout {
            n_embd: 1024,
            token_embd_bytes: 50 << 20,
            output_bytes: 60 << 20,
            blocks: vec![
                BlockBytes {
                    routed_experts: 100 << 20,
                    shared_experts: 1 << 20,
                    rest: 10 << 20,
                };
                10
            ],
            tensor_bytes: 10 * (111 << 20) + (110 << 20),
            ..ModelLayout::uniform(10, 8, 0, 0)
        };
        l.details.expert_proj = vec![
            ExpertProjBytes {
                up: 30 << 20,
                gate: 30 << 20,
                gate_up: 0,
                down: 40 << 20,
            };
            10
        ];
        l
    }

    fn space(placement: &[PlacementStyle]) -> SearchSpace {
        let mut s = crate::space::load("default").unwrap();
        s.vary.placement = placement.to_vec();
        s
    }

    fn caps() -> HostCaps {
        HostCaps { repack: false }
    }

    fn template() -> LaunchConfig {
        LaunchConfig {
            ubatch: Some(512),
            batch: Some(2048),
            load_mode: LoadMode::None,
            ..LaunchConfig::baseline(4096)
        }
    }

    fn limits(vram: f64) -> Limits {
        Limits {
            vram_budget_mib: vram,
            ram_available_mib: None,
            fit_target_mib: 512,
        }
    }

    fn gpu_mib(c: &LaunchConfig) -> f64 {
        predict_with(&layout(), c, true, caps(), &CPU_COMPUTE).gpu_mib
    }

    #[test]
    fn every_style_fills_the_card_and_split_styles_fill_it_more() {
        let l = layout();
        let all = [
            PlacementStyle::First,
            PlacementStyle::Last,
            PlacementStyle::FirstSplit,
            PlacementStyle::LastSplit,
            PlacementStyle::Fit,
        ];
        let full = gpu_mib(&LaunchConfig {
            n_gpu_layers: Some(999),
            fit: Some(false),
            ..template()
        });
        // 3.5 blocks' experts too many: whole styles need 4 (or more) blocks on the CPU, split
        // styles 3 blocks plus a part of a fourth.
        let budget = full - 350.0 - 100.0;
        let c = propose_with(
            &l,
            &template(),
            &space(&all),
            &limits(budget),
            caps(),
            &CPU_COMPUTE,
        );
        assert_eq!(c.len(), 5, "{c:#?}");
        for x in &c {
            assert!(x.prediction.gpu_mib <= budget, "{:?}", x.config);
            // The load mode and ubatch of the template are kept.
            assert_eq!(x.config.load_mode, LoadMode::None);
            assert_eq!(x.config.ubatch, Some(512));
        }
        let by = |s: PlacementStyle| c.iter().find(|x| x.style == s).unwrap();
        let first = by(PlacementStyle::First);
        let n = first.config.n_cpu_moe.unwrap();
        assert_eq!(first.config.cpu_experts, None);
        // Maximal: one block fewer does not fit.
        assert!(
            gpu_mib(&LaunchConfig {
                n_cpu_moe: Some(n - 1),
                ..first.config.clone()
            }) > budget
        );
        let last = by(PlacementStyle::Last);
        assert_eq!(
            last.config.cpu_experts,
            Some(CpuExperts::last(n, 10)),
            "same fill from the other end"
        );
        assert_eq!(last.gpu_expert_bytes, first.gpu_expert_bytes);
        let fs = by(PlacementStyle::FirstSplit);
        assert_eq!(fs.config.n_cpu_moe, Some(n - 1));
        let p = fs
            .config
            .cpu_experts
            .as_ref()
            .unwrap()
            .partial
            .clone()
            .unwrap();
        assert_eq!(p.block, n - 1);
        assert!(fs.gpu_expert_bytes > first.gpu_expert_bytes);
        let ls = by(PlacementStyle::LastSplit);
        let e = ls.config.cpu_experts.as_ref().unwrap();
        assert_eq!(e.blocks, BlockSet::last(n - 1, 10));
        assert_eq!(e.partial.as_ref().unwrap().block, 10 - n);
        assert_eq!(ls.gpu_expert_bytes, fs.gpu_expert_bytes);
        // The split keeps on the GPU what still fits: with any projection fewer on the CPU
        // it would not fit.
        let fit = by(PlacementStyle::Fit);
        assert!(fit.config.is_fit_placement());
        assert_eq!(
            fit.config.server_args().join(" "),
            "-c 4096 -np 1 -b 2048 -ub 512 --fit on --fit-target 512 --load-mode none"
        );
        assert_eq!(fit.prediction, ls.prediction);
    }

    #[test]
    fn split_keeps_the_projections_that_fit_cheapest_first() {
        let l = layout();
        let sp = space(&[PlacementStyle::LastSplit]);
        // The budget is exactly the VRAM of one whole block (9) and these projections of
        // block 8 on the CPU: the proposal moves the fewest bytes that fit.
        for (budget_of, want) in [
            // up and gate are 30 MiB each: a tie, broken in --fit's order (gate before up).
            (vec![ExpertProj::Up], "9+8:gate"),
            (vec![ExpertProj::Down], "9+8:down"),
            // up+gate (60 MiB) before gate+down or up+down (70).
            (vec![ExpertProj::Up, ExpertProj::Gate], "9+8:up,gate"),
        ] {
            let at = LaunchConfig {
                n_gpu_layers: Some(999),
                fit: Some(false),
                cpu_experts: Some(CpuExperts {
                    blocks: BlockSet::last(1, 10),
                    partial: Some(PartialBlock::new(8, budget_of)),
                }),
                ..template()
            };
            let c = propose_with(
                &l,
                &template(),
                &sp,
                &limits(gpu_mib(&at)),
                caps(),
                &CPU_COMPUTE,
            )
            .pop()
            .unwrap();
            assert_eq!(c.config.cpu_experts.unwrap().label(), want);
        }
    }

    #[test]
    fn nothing_fits_proposes_nothing_and_pinned_overflow_is_refused() {
        let l = layout();
        let sp = space(&[PlacementStyle::First, PlacementStyle::Fit]);
        let c = propose_with(&l, &template(), &sp, &limits(10.0), caps(), &CPU_COMPUTE);
        assert!(c.is_empty(), "{c:#?}");
        // All experts fit: no split, one candidate per distinct flag set.
        let c = propose_with(&l, &template(), &sp, &limits(1e9), caps(), &CPU_COMPUTE);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].config.n_cpu_moe, Some(0));
        assert_eq!(c[0].gpu_expert_bytes, 10 * (100 << 20));
        // Pinned experts over the available RAM: proposed, but marked refused.
        let full = gpu_mib(&LaunchConfig {
            n_gpu_layers: Some(999),
            fit: Some(false),
            ..template()
        });
        let tight = Limits {
            ram_available_mib: Some(100.0),
            ..limits(full - 500.0)
        };
        let c = propose_with(&l, &template(), &sp, &tight, caps(), &CPU_COMPUTE);
        assert!(c[0].refused.as_deref().unwrap().contains("would swap"));
        let mapped = LaunchConfig {
            load_mode: LoadMode::Auto,
            ..template()
        };
        let c = propose_with(&l, &mapped, &sp, &tight, caps(), &CPU_COMPUTE);
        assert!(c[0].prediction.host_required_mib < c[0].prediction.host_mib);
    }

    #[test]
    fn dense_models_have_no_placement_to_propose() {
        let dense = ModelLayout::uniform(10, 0, 0, 10 << 20);
        let sp = space(&[PlacementStyle::First]);
        assert!(
            propose_with(&dense, &template(), &sp, &limits(1e9), caps(), &CPU_COMPUTE).is_empty()
        );
    }
}
