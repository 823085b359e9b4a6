//! The variants phase: once the exploration has its incumbent, the same config with the
//! space's other load modes, placement styles (the fit candidate included) and
//! `--no-op-offload`, each measured once, and the launches the exploration leaves for them.

use super::{QtuneSearch, SearchContext};
use crate::config::LaunchConfig;
use crate::search::rank::Speeds;
use crate::trial::{TrialOutcome, TrialRole};
use std::collections::VecDeque;

/// Search launches the exploration keeps whatever the variants would like: one measured
/// config (the speed model's pick, or the starting point's boundary) for the variants to
/// start from.
pub(super) const MIN_EXPLORE: u32 = 1;

impl QtuneSearch {
    /// Launches the exploration leaves for the variants: one per other load mode, placement
    /// style and `--no-op-offload` (where the space has them).
    /// None when the whole model is predicted to fit on the GPU: then no expert sits on the CPU,
    /// so load mode, placement and op offload change nothing, and the exploration gets those
    /// launches (KV type, ubatch and threads are what is left to decide by measurement).
    /// Never so many that the exploration is left fewer than [`MIN_EXPLORE`] launches: with
    /// the levers of an agent session (3) on top of the placements, a 20-launch budget once
    /// reserved every launch after the baselines and the tune ended on them (2026-11-26, H200).
    pub(super) fn variant_reserve(&self, ctx: &SearchContext) -> u32 {
        let race = Self::race_reserve(ctx);
        if race == 0 {
            return 0;
        }
        let levers = Self::lever_count(ctx);
        let wanted = if self.whole_model_fits(ctx) {
            levers
        } else {
            Self::nominal_variants(ctx) + levers
        };
        let baselines = Self::probe_launches(ctx)
            + u32::from(ctx.second_baseline().is_some())
            + crate::search::engines::other_baselines(ctx).len() as u32;
        let wanted = wanted + crate::search::engines::variant_count(ctx, &self.history);
        let most = ctx
            .space
            .budget
            .trials
            .saturating_sub(race + baselines + MIN_EXPLORE);
        wanted.min(most)
    }

    /// The better measured of the baselines (by the objective; a launch past the VRAM budget
    /// counts, as a baseline is what the user would type): what the levers are put on when no
    /// searched config ran.
    pub(super) fn reference_config(&self, ctx: &SearchContext) -> Option<LaunchConfig> {
        let obj = &ctx.space.objective;
        let reference = self.baseline_speeds();
        let mut best: Option<(LaunchConfig, Speeds)> = None;
        for cfg in crate::search::engines::all_baselines(ctx) {
            let ran = self.history.iter().filter(|o| {
                o.config == cfg && matches!(o.role, TrialRole::Baseline | TrialRole::SecondBaseline)
            });
            let Some(s) = Speeds::pooled_measured(ran) else {
                continue;
            };
            if best
                .as_ref()
                .is_none_or(|(_, b)| crate::search::rank::better(&s, b, obj, reference.as_ref()))
            {
                best = Some((cfg, s));
            }
        }
        best.map(|(c, _)| c)
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
            + Self::rpc_placements(ctx, &ctx.baseline()).len()
            + placements
            + usize::from(v.no_op_offload_max_ubatch.is_some())) as u32
    }

    /// The placements over the head's RPC workers ([`crate::rpc::placements`]) from `best`;
    /// none without workers.
    pub(super) fn rpc_placements(ctx: &SearchContext, best: &LaunchConfig) -> Vec<LaunchConfig> {
        let workers = &ctx.space.fixed.rpc_workers;
        if workers.is_empty() {
            return Vec::new();
        }
        let local = if ctx.has_gpu {
            ctx.gpus.len().max(1)
        } else {
            0
        };
        crate::rpc::placements_within(
            best,
            &crate::rpc::head_devices(workers, local),
            &ctx.layout,
            u64::from(ctx.fit_target_mib),
        )
    }

    /// The variants of the incumbent's best config: the placements over the RPC workers
    /// (where the tune has some), its other load modes, the
    /// space's placement styles filled to the budget ([`crate::placement::propose`], `fit`
    /// included: `--fit on --fit-target <headroom>` with the incumbent's other choices), and
    /// `--no-op-offload` at a small ubatch. Configs predicted to swap the host are left out.
    /// With them, why the placements of experts on the cards ([`crate::search::card_experts`])
    /// were not proposed, where they were not (two GPUs or more only).
    pub(super) fn build_variants(
        &self,
        ctx: &SearchContext,
    ) -> (VecDeque<LaunchConfig>, Vec<String>) {
        // The incumbent's best config; when the exploration ended before deciding one, the
        // best measured so far.
        let Some(best) = self
            .incumbent
            .as_ref()
            .and_then(|inc| self.best_of(ctx, inc))
            .or_else(|| self.ranked_candidates(ctx).into_iter().next())
            .map(|(c, _)| c)
        else {
            // Nothing searched ran: the levers still apply to the reference as it is (the
            // baseline the user would run), which is what they are measured against.
            let Some(reference) = self.reference_config(ctx) else {
                return (VecDeque::new(), Vec::new());
            };
            let levers = crate::search::levers::propose(
                &ctx.space.vary.levers,
                &reference,
                &ctx.workload_traits,
            )
            .configs
            .into_iter()
            .filter(|c| !self.history.iter().any(|o| &o.config == c))
            .collect();
            return (levers, Vec::new());
        };
        // The levers past placement, on the best config as it is.
        let mut levers =
            crate::search::levers::propose(&ctx.space.vary.levers, &best, &ctx.workload_traits)
                .configs;
        levers.retain(expressible);
        let rpc = Self::rpc_placements(ctx, &best);
        // The best config on each other engine, and the engines' own levers: first, as the
        // engine is the largest lever left (issue 56).
        let (engines, _) = crate::search::engines::variants(ctx, &self.history, &best);
        // Two GPUs or more: the CPU experts moved to a card with room, and the smaller card
        // holding only experts (each skipped with its reason where it cannot help).
        let cards = if ctx.multi_gpu() {
            crate::search::card_experts::propose(ctx, &best, &self.card_extra(ctx))
        } else {
            Default::default()
        };
        if best.no_experts_on_cpu() {
            // Every expert on the GPU (or no GPU): no placement variant but the workers' would
            // change where anything sits.
            let v = rpc
                .into_iter()
                .chain(engines)
                .chain(levers)
                .filter(|c| !self.history.iter().any(|o| &o.config == c))
                .collect();
            return (v, cards.skipped);
        }
        // The CPU experts moved to a card with room first: the best config with fewer experts
        // on the CPU, in the launches the exploration leaves (no reserve of its own: the
        // exploration's launches are what find each card's boundary).
        let (mut out, only): (Vec<LaunchConfig>, Vec<LaunchConfig>) = cards
            .configs
            .into_iter()
            .partition(|c| c.tensor_split == best.tensor_split);
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
            out.extend(only);
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
        // The placements over the workers first: they are what --rpc asked to compare.
        let rpc: Vec<LaunchConfig> = rpc
            .into_iter()
            .filter(|c| !seen.contains(c) && !self.history.iter().any(|o| &o.config == c))
            .collect();
        seen.extend(rpc.iter().cloned());
        let engines: Vec<LaunchConfig> = engines
            .into_iter()
            .filter(|c| !seen.contains(c) && !self.history.iter().any(|o| &o.config == c))
            .collect();
        seen.extend(engines.iter().cloned());
        // The levers right after the placement variant the speed model rates best: the
        // workload's traits are why they are proposed (real text, an edited history,
        // requests at once), and on a small budget the placements it rates lower are the ones
        // to leave out. They are tried on the best placement measured; the speed model
        // cannot rank them.
        let levers: Vec<LaunchConfig> = levers
            .into_iter()
            .filter(|c| !seen.contains(c) && !self.history.iter().any(|o| &o.config == c))
            .collect();
        let at = out.len().min(1);
        out.splice(at..at, levers);
        out.splice(0..0, engines);
        out.splice(0..0, rpc);
        (out.into(), cards.skipped)
    }

    /// The variants (and the model's pick) measured so far, with their pooled speeds (ok ones
    /// only).
    /// Another engine's translation of the best config ran out of memory or spilled: that
    /// engine's buffers are not the first engine's, so the exploration's boundary is not its
    /// boundary (issue 56, ik's own exploration). The same config with one more block's
    /// experts on the CPU goes first, with the engine's own levers on it, and the levers queued
    /// on the placement that failed are dropped (each would fail the same way). Called after
    /// every variant; one GPU and a `--n-cpu-moe` placement, up to the space's bound.
    pub(super) fn place_other_engine_further(&mut self, ctx: &SearchContext) {
        let Some(last) = self.history.last() else {
            return;
        };
        let c = &last.config;
        let plain = c.engine_opts == crate::config::EngineOpts::default();
        if last.role != TrialRole::Search
            || c.engine == ctx.space.fixed.engine
            || !last.kind.is_memory_failure()
            || !plain
            || ctx.multi_gpu()
            || c.cpu_experts.is_some()
            || !self.variant_configs.contains(c)
            || crate::search::engines::is_dropped(ctx, &self.history, c.engine)
        {
            return;
        }
        let (Some(n), (_, hi)) = (c.n_cpu_moe, ctx.ncmoe_bounds()) else {
            return;
        };
        if n >= hi {
            return;
        }
        let further = crate::search::engines::placed_further(ctx, c, n + 1);
        let failed = c.clone();
        let Some(queue) = self.variants.as_mut() else {
            return;
        };
        queue.retain(|v| {
            let without_own = LaunchConfig {
                engine_opts: Default::default(),
                ..v.clone()
            };
            without_own != failed
        });
        let new: Vec<LaunchConfig> = further
            .into_iter()
            .filter(|v| !self.history.iter().any(|o| &o.config == v) && !queue.contains(v))
            .collect();
        for v in new.iter().rev() {
            queue.push_front(v.clone());
        }
        self.variant_configs.extend(new);
    }

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
    crate::engine::of(c.engine).caps().expresses(c)
}
