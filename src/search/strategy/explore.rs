//! The exploration: for each base, find the fitting `--n-cpu-moe` boundary (start at the
//! memory prediction, corrected by what this tune measured; bisect when it was off), and
//! compare each finished base with the incumbent (close results re-measured first).

use super::{Base, QtuneSearch, SearchContext};
use crate::config::LaunchConfig;
use crate::engine::LaunchArgs;
use crate::search::rank::{better, is_tie, Speeds};
use crate::trial::{TrialOutcome, TrialRole};

impl QtuneSearch {
    /// GPU memory beyond the reported buffers, as measured so far in this tune
    /// ([`crate::search::context::unitemized_vram_mib`]).
    pub(super) fn unitemized_mib(&self) -> f64 {
        crate::search::context::unitemized_vram_mib(&self.history)
    }

    /// Two GPUs or more: what each card holds beyond its predicted buffers, as measured so far
    /// in this tune plus a margin ([`crate::search::candidates::card_extra_mib`]).
    pub(super) fn card_extra(&self, ctx: &SearchContext) -> Vec<f64> {
        crate::search::candidates::card_extra_mib(ctx, &self.history)
    }

    /// The fewest CPU blocks the memory prediction, corrected by what this tune measured, says
    /// fit (each card within its own budget on several GPUs).
    pub(super) fn predicted_fit(&self, ctx: &SearchContext, base: &Base) -> Option<u32> {
        if ctx.multi_gpu() {
            return ctx.predicted_fit_cards(base, &self.card_extra(ctx));
        }
        ctx.predicted_fit(base, self.unitemized_mib())
    }

    /// The config the exploration runs for `base` at `n` CPU blocks: `--n-cpu-moe n` on one
    /// GPU; on several, the layers split so that the fullest card, as measured so far, has the
    /// most room.
    pub(super) fn place(&self, ctx: &SearchContext, base: &Base, n: u32) -> LaunchConfig {
        if ctx.multi_gpu() {
            return ctx.config_placed(base, n, &self.card_extra(ctx)).0;
        }
        ctx.config(base, n)
    }

    /// Two GPUs or more: after `base` ran out of memory (or spilled) at `n` CPU blocks, the same
    /// config with the layers split again so that every card fits, when a split does: the one
    /// that leaves the most room on the fullest card, each card's figure what this tune measured
    /// beyond the prediction (the failed trial's own peaks included: what it used on the card
    /// that went over sizes the move) plus a margin. `None` when no split fits (the bisection
    /// then puts more experts on the CPU), when `n` was re-split once already, or when the best
    /// split is the one that failed.
    pub(super) fn resplit(&self, ctx: &SearchContext, base: &Base, n: u32) -> Option<LaunchConfig> {
        let at_n: Vec<&TrialOutcome> = self
            .search_outcomes(ctx, base)
            .filter(|o| ctx.cpu_blocks_of(&o.config) == n)
            .collect();
        let [failed] = at_n[..] else {
            return None;
        };
        if !failed.kind.is_memory_failure() {
            return None;
        }
        let mut extra = self.card_extra(ctx);
        // An out-of-memory trial is not in the learned figures (its peak is the card's limit),
        // but the card that ran out used at least that much: a lower bound.
        let p = ctx.predict_cards(&failed.config);
        for d in &p.gpu_devices {
            let i = d.device as usize;
            if let (Some(e), Some(&peak)) = (extra.get_mut(i), failed.peak_vram_mib.get(i)) {
                *e = e.max(peak as f64 - d.total_mib + crate::model::cards::CARD_MARGIN_MIB);
            }
        }
        let (c, room) = ctx.config_placed(base, n, &extra);
        (room >= 0.0 && c != failed.config).then_some(c)
    }

    pub(super) fn search_outcomes<'a>(
        &'a self,
        ctx: &'a SearchContext,
        base: &'a Base,
    ) -> impl Iterator<Item = &'a TrialOutcome> + 'a {
        self.history.iter().filter(move |o| {
            o.role == TrialRole::Search
                && if ctx.multi_gpu() {
                    // Several GPUs: the split is chosen per config (and again after a
                    // failure), so a trial is this base's when it is this base at its own split.
                    !o.config.tensor_split.is_empty()
                        && o.config
                            == ctx.config_at(
                                base,
                                ctx.cpu_blocks_of(&o.config),
                                &o.config.tensor_split,
                            )
                } else {
                    o.config == ctx.config(base, ctx.cpu_blocks_of(&o.config))
                }
        })
    }

    /// The next config to try for `base`, or None when its boundary is known (or it is hopeless).
    pub(super) fn next_for_base(
        &mut self,
        ctx: &SearchContext,
        base: &Base,
    ) -> Option<LaunchConfig> {
        if !ctx.gpu_moe {
            let cfg = ctx.config(base, 0);
            let tried = self.search_outcomes(ctx, base).next().is_some();
            return (!tried).then_some(cfg);
        }
        let (lo, hi) = ctx.ncmoe_bounds();
        let mut ok_min: Option<u32> = None;
        let mut fails: Vec<u32> = Vec::new();
        let mut oks = 0u32;
        for o in self.search_outcomes(ctx, base) {
            let n = ctx.cpu_blocks_of(&o.config);
            if o.kind.is_ok() {
                oks += 1;
                ok_min = Some(ok_min.map_or(n, |m: u32| m.min(n)));
            } else if o.kind.is_memory_failure() {
                fails.push(n);
            } else {
                // Crash, bad flag, timeout: this base does not run; do not bisect on it.
                return None;
            }
        }
        // A config re-split at the same `n` after a failure counts once.
        fails.sort_unstable();
        fails.dedup();
        let fail_max_below = |limit: Option<u32>| {
            fails
                .iter()
                .copied()
                .filter(|&f| limit.is_none_or(|l| f < l))
                .max()
        };
        // Several GPUs: a failure at the boundary that another split of the layers fits is
        // not a boundary yet; only when no split fits do more experts go to the CPU.
        if let Some(f) = fail_max_below(ok_min).filter(|_| ctx.multi_gpu()) {
            if let Some(c) = self.resplit(ctx, base, f) {
                return Some(c);
            }
        }
        let raw = self.predicted_fit(ctx, base);
        let start = match raw {
            Some(p) => {
                (p as i64 + self.delta.unwrap_or(0) as i64).clamp(lo as i64, hi as i64) as u32
            }
            None => {
                if ctx.budget_mib.is_some() && self.search_outcomes(ctx, base).next().is_none() {
                    let msg = format!(
                        "{}: predicted not to fit even with every expert on the CPU; skipped",
                        self.place(ctx, base, hi).label()
                    );
                    if !self.warnings.contains(&msg) {
                        self.warnings.push(msg);
                    }
                    return None;
                }
                hi
            }
        };
        let n = match (ok_min, fail_max_below(ok_min)) {
            (None, None) => start,
            (None, Some(f)) => {
                if f >= hi {
                    return None;
                }
                let k = fails.len() as u32;
                (f + (1u32 << (k - 1).min(8))).min(hi).max(f + 1)
            }
            (Some(o), None) => {
                if o <= lo {
                    return None;
                }
                let step = 1u32 << oks.saturating_sub(1).min(8);
                o.saturating_sub(step).max(lo)
            }
            (Some(o), Some(f)) => {
                if f + 1 >= o {
                    return None;
                }
                (f + o) / 2
            }
        };
        Some(self.place(ctx, base, n))
    }

    /// The best measured config of a base and its pooled speeds.
    pub(super) fn best_of(
        &self,
        ctx: &SearchContext,
        base: &Base,
    ) -> Option<(LaunchConfig, Speeds)> {
        let best_cfg = self
            .search_outcomes(ctx, base)
            .filter(|o| o.kind.is_ok())
            .min_by_key(|o| ctx.cpu_blocks_of(&o.config))?
            .config
            .clone();
        let speeds = Speeds::pooled(
            self.history
                .iter()
                .filter(|o| o.config == best_cfg && matches!(o.role, TrialRole::Search)),
        )?;
        Some((best_cfg, speeds))
    }

    pub(super) fn baseline_speeds(&self) -> Option<Speeds> {
        Speeds::pooled(
            self.history
                .iter()
                .filter(|o| o.role == TrialRole::Baseline),
        )
    }

    pub(super) fn trials_of(&self, cfg: &LaunchConfig) -> usize {
        self.history
            .iter()
            .filter(|o| &o.config == cfg && o.role == TrialRole::Search && o.kind.is_ok())
            .count()
    }

    /// Compare a finished challenger with the incumbent; may schedule re-measurements.
    pub(super) fn decide(&mut self, ctx: &SearchContext, challenger: Base) {
        let Some(inc) = self.incumbent.clone() else {
            if self.best_of(ctx, &challenger).is_some() {
                self.incumbent = Some(challenger);
            }
            return;
        };
        let (Some((ci, si)), Some((cc, sc))) =
            (self.best_of(ctx, &inc), self.best_of(ctx, &challenger))
        else {
            if self.best_of(ctx, &inc).is_none() && self.best_of(ctx, &challenger).is_some() {
                self.incumbent = Some(challenger);
            }
            return;
        };
        let obj = &ctx.space.objective;
        let reference = self.baseline_speeds();
        let tie = is_tie(
            si.primary(obj, reference.as_ref()),
            sc.primary(obj, reference.as_ref()),
            obj.tie_pct,
        );
        let needed = u32::from(self.trials_of(&ci) < 2) + u32::from(self.trials_of(&cc) < 2);
        // Only when the budget pays for them (the same rule as the pending queue's, so a
        // re-measurement asked for is never dropped and asked for again).
        if tie
            && needed > 0
            && self.launches() + Self::race_reserve(ctx) + needed <= ctx.space.budget.trials
        {
            // Close: measure both again (incumbent first) before deciding.
            if self.trials_of(&ci) < 2 {
                self.pending.push_back((ci, TrialRole::Search));
            }
            if self.trials_of(&cc) < 2 {
                self.pending.push_back((cc, TrialRole::Search));
            }
            self.undecided = Some(challenger);
            return;
        }
        if better(&sc, &si, obj, reference.as_ref()) {
            self.incumbent = Some(challenger);
        }
    }

    /// Launches are left for the exploration: past the race's and the variants' reserves, and
    /// within three quarters of the minutes. The variants' reserve holds only once a searched
    /// config ran: before that there is nothing to vary but the levers on a baseline, and a
    /// first placement that spilled ended the tune with three quarters of its budget unspent
    /// (two H200s at 12 + 8 GiB, 2026-11-28: 5 launches of 20, no searched config ran).
    pub(super) fn budget_left(&self, ctx: &SearchContext) -> bool {
        let b = &ctx.space.budget;
        let searched_one = self
            .history
            .iter()
            .any(|o| o.role == TrialRole::Search && o.kind.is_ok());
        let variants = if searched_one {
            self.variant_reserve(ctx)
        } else {
            0
        };
        self.launches() + Self::race_reserve(ctx) + variants < b.trials
            && self.elapsed_s(ctx.clock.as_ref()) < b.minutes * 60.0 * 0.75
    }
}
