//! The variants phase: once the exploration has its incumbent, the same config with the
//! space's other load modes, placement styles (the fit candidate included) and
//! `--no-op-offload`, each measured once, and the launches the exploration leaves for them.

use super::{QtuneSearch, SearchContext};
use crate::config::LaunchConfig;
use crate::search::rank::Speeds;
use crate::trial::{TrialOutcome, TrialRole};
use std::collections::VecDeque;

impl QtuneSearch {
    /// Launches the exploration leaves for the variants: one per other load mode, placement
    /// style and `--no-op-offload` (where the space has them).
    /// None when the whole model is predicted to fit on the GPU: then no expert sits on the CPU,
    /// so load mode, placement and op offload change nothing, and the exploration gets those
    /// launches (KV type, ubatch and threads are what is left to decide by measurement).
    pub(super) fn variant_reserve(&self, ctx: &SearchContext) -> u32 {
        if Self::race_reserve(ctx) == 0 {
            return 0;
        }
        let levers = Self::lever_count(ctx);
        if self.whole_model_fits(ctx) {
            return levers;
        }
        Self::nominal_variants(ctx) + levers
    }

    /// Launches for the levers past placement this workload can show ([`crate::search::levers`]).
    pub(super) fn lever_count(ctx: &SearchContext) -> u32 {
        let probe = LaunchConfig {
            engine: ctx.space.fixed.engine,
            ..LaunchConfig::baseline(ctx.space.fixed.ctx)
        };
        crate::search::levers::propose(&ctx.space.vary.levers, &probe, &ctx.workload_traits)
            .configs
            .iter()
            .filter(|c| expressible(c))
            .count() as u32
    }

    /// The memory prediction (with the VRAM measured beyond the buffers so far) puts every
    /// expert on the GPU at the starting point.
    pub(super) fn whole_model_fits(&self, ctx: &SearchContext) -> bool {
        if !ctx.gpu_moe || ctx.ncmoe_bounds().0 != 0 {
            return false;
        }
        if ctx.multi_gpu() {
            return ctx
                .config_placed(&ctx.start_base(), 0, &self.card_extra(ctx))
                .1
                >= 0.0;
        }
        ctx.predicted_fit(&ctx.start_base(), self.unitemized_mib()) == Some(0)
    }

    pub(super) fn nominal_variants(ctx: &SearchContext) -> u32 {
        let v = &ctx.space.vary;
        let placements = if ctx.multi_gpu() {
            crate::search::candidates::card_variant_count(&ctx.space)
        } else if ctx.gpu_moe {
            v.placement.len()
        } else {
            0
        };
        (ctx.space.load_modes().len().saturating_sub(1)
            + placements
            + usize::from(v.no_op_offload_max_ubatch.is_some())) as u32
    }

    /// The variants of the incumbent's best config: its other load modes, the
    /// space's placement styles filled to the budget ([`crate::placement::propose`], `fit`
    /// included: `--fit on --fit-target <headroom>` with the incumbent's other choices), and
    /// `--no-op-offload` at a small ubatch. Configs predicted to swap the host are left out.
    pub(super) fn build_variants(&self, ctx: &SearchContext) -> VecDeque<LaunchConfig> {
        // The incumbent's best config; when the exploration ended before deciding one, the
        // best measured so far.
        let Some(best) = self
            .incumbent
            .as_ref()
            .and_then(|inc| self.best_of(ctx, inc))
            .or_else(|| self.ranked_candidates(ctx).into_iter().next())
            .map(|(c, _)| c)
        else {
            return VecDeque::new();
        };
        // The levers past placement, on the best config as it is.
        let mut levers =
            crate::search::levers::propose(&ctx.space.vary.levers, &best, &ctx.workload_traits)
                .configs;
        levers.retain(expressible);
        if best.no_experts_on_cpu() {
            // Every expert on the GPU: no placement variant would change where anything sits.
            return levers
                .into_iter()
                .filter(|c| !self.history.iter().any(|o| &o.config == c))
                .collect();
        }
        let mut out: Vec<LaunchConfig> = Vec::new();
        for m in ctx.space.load_modes().into_iter().skip(1) {
            out.push(LaunchConfig {
                load_mode: m,
                ..best.clone()
            });
        }
        if ctx.multi_gpu() {
            // Two GPUs or more: other layer splits, refilled per card, and fit's.
            out.extend(crate::search::candidates::propose_cards(
                ctx,
                &best,
                &self.history,
            ));
        }
        if let (true, Some(budget)) = (ctx.gpu_moe && !ctx.multi_gpu(), ctx.budget_mib) {
            let limits = crate::placement::Limits {
                vram_budget_mib: budget - self.unitemized_mib(),
                ram_available_mib: ctx.ram_available_mib,
                fit_target_mib: ctx.fit_candidate_target_mib(),
            };
            for c in crate::placement::propose(&ctx.layout, &best, &ctx.space, &limits) {
                if c.refused.is_none() {
                    out.push(c.config);
                }
            }
        }
        if ctx
            .space
            .op_offload_choices(best.ubatch.unwrap_or(512))
            .contains(&false)
            && ctx.gpu_moe
        {
            out.push(LaunchConfig {
                op_offload: false,
                ..best.clone()
            });
        }
        let mut seen: Vec<LaunchConfig> = vec![best];
        out.retain(expressible);
        out.retain(|c| {
            let new = !seen.contains(c) && !self.history.iter().any(|o| &o.config == c);
            if new {
                seen.push(c.clone());
            }
            new
        });
        // The likely winner first: if the budget runs out before every variant is
        // measured, the ones the speed model rates lower are the ones left out.
        if let Some(sb) = &ctx.speed {
            let order = crate::search::pick::order_by_predicted(
                &ctx.layout,
                sb,
                ctx.has_gpu,
                ctx.space.workload.prompt_tokens,
                &ctx.space.objective,
                ctx.space.workload.request_tokens(),
                &out,
            );
            out = order.into_iter().map(|k| out[k].clone()).collect();
        }
        // The levers after the placement variants: they are tried on the best placement, and
        // the speed model cannot rank them.
        out.extend(
            levers
                .into_iter()
                .filter(|c| !seen.contains(c) && !self.history.iter().any(|o| &o.config == c)),
        );
        out.into()
    }

    /// The variants (and the model's pick) measured so far, with their pooled speeds (ok ones
    /// only).
    pub(super) fn variant_outcomes(&self) -> Vec<(LaunchConfig, Speeds)> {
        let mut out: Vec<(LaunchConfig, Speeds)> = Vec::new();
        for o in self.history.iter().filter(|o| {
            o.role == TrialRole::Search
                && (self.variant_configs.contains(&o.config)
                    || self.model_pick.as_ref() == Some(&o.config))
        }) {
            if out.iter().any(|(c, _)| c == &o.config) {
                continue;
            }
            let trials: Vec<&TrialOutcome> = self
                .history
                .iter()
                .filter(|t| t.config == o.config && t.role == TrialRole::Search)
                .collect();
            if trials.iter().any(|t| !t.kind.is_ok()) {
                continue;
            }
            if let Some(s) = Speeds::pooled(trials) {
                out.push((o.config.clone(), s));
            }
        }
        out
    }
}

/// Whether the config's engine can launch it as meant (ik_llama.cpp has no
/// `--checkpoint-min-step`, `-kvu`, `--no-op-offload`...): a config it cannot is not proposed.
fn expressible(c: &LaunchConfig) -> bool {
    crate::engine::of(c.engine).unsupported(c).is_empty()
}
