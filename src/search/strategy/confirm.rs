//! The confirmation phase: the top candidates race the baselines in paired rounds
//! ([`crate::stats::race`]). The race is rebuilt from the history before every launch, so a
//! killed race resumes identically; the launches it is owed are reserved from the start.

use super::{base_of, thread_twins_on_gpu, Base, QtuneSearch, SearchContext};
use crate::config::LaunchConfig;
use crate::search::rank::{better, Speeds};
use crate::trial::{OutcomeKind, TrialOutcome, TrialRole};

impl QtuneSearch {
    /// Launches the search leaves for the race.
    /// A budget too small for the baseline, two search launches, the variants and the race
    /// goes to the search first: the variants and the race get what it leaves.
    pub(super) fn race_reserve(ctx: &SearchContext) -> u32 {
        let b = &ctx.space.budget;
        let race = b.confirm_rounds.max(crate::stats::MIN_CLAIM_ROUNDS as u32)
            * (b.confirm_top.max(1) + 1);
        if b.trials >= race + Self::nominal_variants(ctx) + 3 {
            race
        } else {
            0
        }
    }

    /// Launches of the baseline at the start: 2 (the box's noise) when the budget races and
    /// has a launch to spare for it, else 1.
    pub(super) fn probe_launches(ctx: &SearchContext) -> u32 {
        let race = Self::race_reserve(ctx);
        if race > 0 && ctx.space.budget.trials >= race + Self::nominal_variants(ctx) + 4 {
            2
        } else {
            1
        }
    }

    /// How the race spends its launches: what the budget left, the space's tie band.
    pub fn race_settings(&self, ctx: &SearchContext) -> crate::stats::race::RaceSettings {
        let race_launches = self
            .history
            .iter()
            .filter(|o| o.role == TrialRole::Confirm && o.kind != OutcomeKind::Skipped)
            .count() as u32;
        let before_race = self.launches() - race_launches;
        crate::stats::race::RaceSettings {
            budget_launches: ctx.space.budget.trials.saturating_sub(before_race),
            noise_launches: 0,
            // The practical band (±3 %): a tie is an interval inside it, and a
            // config without a proven gain is recommended only at or above its lower edge. The
            // space's `tie_pct` ranks single launches of the search, not paired rounds.
            band: crate::stats::Band::default(),
            // Two rounds gave a claim of +16.9 % [+11.6, +22.4] on the GPU machine that a
            // separate re-measurement put at +15.6 % [+3.6, +28.9]: one degree of freedom is
            // too little to trust the spread; a claim needs three rounds.
            min_rounds: 3,
            look_every: 2,
            by_request: ctx.space.objective.metric == crate::objective::Metric::Request,
            ..Default::default()
        }
    }

    /// The baselines the race launches every round: the default, and the second baseline when
    /// the tune measured it ([`SearchContext::second_baseline`]) and it is not the default over
    /// again. Where the model fits the card with room to spare, `--fit-target` changes nothing:
    /// both launches loaded the same buffers ([`crate::trial::loaded_alike`]), so on this card
    /// it is the same configuration as the default, and racing it again every round would
    /// measure nothing new at the cost of one launch a round. The default alone is then the
    /// reference (the rule's choice where both loaded the same). This is judged on the launches
    /// before the race, so the race keeps its arms while it runs; a history whose race already
    /// launched the second baseline (a tune by an older qtune, resumed or reported) keeps it,
    /// so that its rounds are rebuilt as they ran.
    pub fn race_baselines(&self, ctx: &SearchContext) -> Vec<LaunchConfig> {
        // The reference engine's pair: the best of every engine's baselines (issue 56).
        let (default, second) = crate::search::engines::reference_pair(ctx, &self.history);
        let mut out = vec![default.clone()];
        let Some(second) = second else {
            return out;
        };
        if !self
            .history
            .iter()
            .any(|o| o.role == TrialRole::SecondBaseline && o.config == second)
        {
            return out;
        }
        let race_start = self
            .history
            .iter()
            .position(|o| o.role == TrialRole::Confirm)
            .unwrap_or(self.history.len());
        let raced = self.history[race_start..]
            .iter()
            .any(|o| o.role == TrialRole::Confirm && o.config == second);
        if raced || !crate::trial::loaded_alike(&self.history[..race_start], &default, &second) {
            out.push(second);
        }
        out
    }

    /// The baseline's launches before the search (the box's noise probe), as race samples.
    pub(super) fn probe_samples(&self, ctx: &SearchContext) -> Vec<crate::stats::Sample> {
        let baseline = ctx.baseline();
        self.history
            .iter()
            .filter(|o| o.role == TrialRole::Baseline && o.config == baseline)
            .filter_map(crate::stats::Sample::from_outcome)
            .collect()
    }

    /// The race as the history left it: rebuilt by feeding the race's trials back in order.
    pub fn race(&self, ctx: &SearchContext) -> crate::stats::race::Race {
        use crate::stats::{race::Race, Sample};
        let probe = self.probe_samples(ctx);
        let n_baselines = self.race_baselines(ctx).len();
        let mut race = Race::with_baselines(
            self.race_settings(ctx),
            n_baselines,
            self.race_candidates.len(),
        );
        if !probe.is_empty() {
            race = race.with_probe(probe);
        }
        // While the two baselines are not told apart, the reference is the one that keeps more
        // of the model on the GPU (fit-target, where it fills the card further).
        let baselines = self.race_baselines(ctx);
        if let [first, second] = baselines.as_slice() {
            if crate::trial::keeps_more_on_gpu(&self.history, second, first) {
                race = race.with_tie_to(1);
            }
        }
        for o in self.history.iter().filter(|o| o.role == TrialRole::Confirm) {
            match race.next_launch() {
                // A baseline is what the user would type: measured even past the budget.
                Some(l) if l.arm < n_baselines => race.record(l, Sample::measured(o)),
                Some(l) => race.record(l, Sample::from_outcome(o)),
                None => break,
            }
        }
        race
    }

    /// The race's outcome (None when no race ran).
    pub fn race_outcome(&self, ctx: &SearchContext) -> Option<crate::stats::race::RaceOutcome> {
        (!self.race_candidates.is_empty()).then(|| self.race(ctx).outcome())
    }

    /// The next launch of the race, None when it is over (or the minutes would run out).
    pub(super) fn next_race_launch(
        &self,
        ctx: &SearchContext,
    ) -> Option<(LaunchConfig, TrialRole)> {
        if self.race_candidates.is_empty() {
            return None;
        }
        let launched: Vec<&TrialOutcome> = self
            .history
            .iter()
            .filter(|o| o.kind != OutcomeKind::Skipped)
            .collect();
        let per_launch = if launched.is_empty() {
            0.0
        } else {
            launched.iter().map(|o| o.duration_s).sum::<f64>() / launched.len() as f64
        };
        if self.elapsed_s(ctx.clock.as_ref()) + per_launch > ctx.space.budget.minutes * 60.0 {
            return None;
        }
        let l = self.race(ctx).next_launch()?;
        let baselines = self.race_baselines(ctx);
        let cfg = match baselines.get(l.arm) {
            Some(b) => b.clone(),
            None => self.race_candidates[l.arm - baselines.len()].clone(),
        };
        Some((cfg, TrialRole::Confirm))
    }

    /// Where the race's next launch (of `cfg`) stands: its round, the most rounds the budget
    /// leaves, and whether it launches a baseline or a candidate (for the heartbeat).
    pub(super) fn race_step(
        &self,
        ctx: &SearchContext,
        cfg: &LaunchConfig,
    ) -> Option<crate::search::progress::RaceStep> {
        let mut race = self.race(ctx);
        let l = race.next_launch()?;
        Some(crate::search::progress::RaceStep {
            round: l.round? + 1,
            rounds_at_most: race.rounds_at_most(),
            arm: if self.race_baselines(ctx).contains(cfg) {
                "the baseline"
            } else {
                "a candidate"
            },
        })
    }

    /// Top distinct candidates for the confirmation, best first.
    pub fn ranked_candidates(&self, ctx: &SearchContext) -> Vec<(LaunchConfig, Speeds)> {
        let mut bases: Vec<Base> = Vec::new();
        for o in self.history.iter().filter(|o| o.role == TrialRole::Search) {
            let b = base_of(&o.config);
            if !bases.contains(&b) {
                bases.push(b);
            }
        }
        let mut cands: Vec<(LaunchConfig, Speeds)> =
            bases.iter().filter_map(|b| self.best_of(ctx, b)).collect();
        for v in self.variant_outcomes() {
            if !cands.iter().any(|(c, _)| c == &v.0) {
                cands.push(v);
            }
        }
        let obj = &ctx.space.objective;
        let reference = self.baseline_speeds();
        cands.sort_by(|a, b| {
            if better(&a.1, &b.1, obj, reference.as_ref()) {
                std::cmp::Ordering::Less
            } else if better(&b.1, &a.1, obj, reference.as_ref()) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        cands
    }

    pub(super) fn plan_confirmation(&mut self, ctx: &SearchContext) {
        let b = &ctx.space.budget;
        let baseline = crate::search::engines::reference_pair(ctx, &self.history).0;
        let baseline_ok = self
            .history
            .iter()
            .any(|o| o.role == TrialRole::Baseline && o.kind.is_ok());
        if !baseline_ok {
            // Nothing to pair with: the search's own measurements decide.
            return;
        }
        let mut ranked = self.ranked_candidates(ctx);
        if let Some(pick) = &self.model_pick {
            let gen: Vec<f64> = self.probe_samples(ctx).iter().map(|s| s.gen_tps).collect();
            let sigma = crate::search::pick::launch_sigma(&gen, &self.race_settings(ctx));
            let band = crate::search::pick::noise_band_pct(sigma, ctx.space.objective.tie_pct);
            let reference = self.baseline_speeds();
            if let Some(note) = crate::search::pick::pick_first(
                &mut ranked,
                pick,
                &ctx.space.objective,
                reference.as_ref(),
                band,
            ) {
                self.warnings.push(note);
            }
        }
        let mut raced: Vec<LaunchConfig> = Vec::new();
        for c in ranked.into_iter().map(|(c, _)| c) {
            if raced.len() >= b.confirm_top.max(1) as usize {
                break;
            }
            if c == baseline || raced.iter().any(|r| thread_twins_on_gpu(r, &c, ctx)) {
                continue;
            }
            raced.push(c);
        }
        self.race_candidates = raced;
    }
}
