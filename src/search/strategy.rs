//! The search strategy, an argmin [`Solver`]: one trial per iteration.
//! The solver is one state machine whose steps share its state: this file holds the state and
//! the phase loop (`next_action`); each phase's steps are in a submodule
//! (`explore`, `variants`, `confirm`), and `problem` runs the trials. Its behaviour is tested
//! through replayed landscapes in tests/it/search_replay.rs.
//!
//! 1. Baseline: what the user gets without qtune (no placement flags, the build auto-fits),
//!    launched twice back to back when the budget races: the box's launch-to-launch noise.
//! 2. Explore: for the starting point, find the fitting `--n-cpu-moe` boundary (start at the
//!    memory prediction, confirm the boundary once below it, bisect when the prediction was off),
//!    then improve KV type, batch/ubatch, threads and flash attention by coordinate steps, each
//!    alternative placed at its own predicted boundary (shifted by what the first boundary taught).
//!    Close results (a tie within `tie_pct`) are re-measured before deciding.
//! 3. Race: the top candidates race the baseline in paired ABBA rounds
//!    ([`crate::stats::race`]): clear losers leave early, a claim needs its interval to clear
//!    the band. The race is rebuilt from the history before every launch (it is a deterministic
//!    state machine), so a killed race resumes identically.
//!
//! Budget: `budget.trials` counts every launch (baseline, search, race). The search stops
//! `confirm_rounds * (confirm_top + 1)` launches early to leave the race its rounds; whatever
//! the search did not spend goes to the race. The race stops before the minutes run out.
//!
//! The solver's decisions depend only on the trial history, so a tune that is killed and
//! resumed (argmin checkpoint + journal replay) takes exactly the same path.

use super::rank::Speeds;
use crate::config::LaunchConfig;
use crate::engine::LaunchArgs;
use crate::trial::{OutcomeKind, TrialOutcome, TrialRole};
use argmin::core::{
    Error as ArgminError, Problem, Solver, State, TerminationReason, TerminationStatus, KV,
};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

pub use super::TuneState;

pub use crate::config::Base;

pub use super::context::SearchContext;

mod confirm;
mod dry_run;
mod explore;
mod problem;
mod variants;
pub use dry_run::{first_launches, PlannedLaunch};
pub use problem::TuneProblem;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SearchPhase {
    Baseline,
    Explore,
    /// The incumbent with the space's other load modes, placement styles (the fit candidate
    /// included) and `--no-op-offload`, each measured once.
    Variants,
    Confirm,
    Done,
}

/// The solver. All of its state is serializable (argmin checkpoints it after every trial).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QtuneSearch {
    pub history: Vec<TrialOutcome>,
    pub phase: SearchPhase,
    /// Best base so far and the dimension being stepped.
    incumbent: Option<Base>,
    dim: usize,
    /// Bases waiting to be evaluated (front: in progress).
    queue: VecDeque<Base>,
    /// Configs to run before the next decision (re-measurements, confirmation rounds).
    pending: VecDeque<(LaunchConfig, TrialRole)>,
    /// A challenger waiting for its re-measurement before it is compared.
    undecided: Option<Base>,
    /// Observed boundary minus predicted, learned from the first base.
    delta: Option<i32>,
    /// The starting base has been queued.
    seeded: bool,
    pub search_trials: u32,
    /// Seconds spent in earlier sessions of this tune (resume).
    pub elapsed_before_s: f64,
    /// The clock's reading when this session started (not saved: a resumed session restarts it).
    #[serde(skip)]
    session_start: Option<f64>,
    pub warnings: Vec<String>,
    /// The configs racing the baseline (set when the search ends), best-ranked first.
    #[serde(default)]
    pub race_candidates: Vec<LaunchConfig>,
    /// The variants of the incumbent still to measure (set when the exploration ends).
    #[serde(default)]
    variants: Option<VecDeque<LaunchConfig>>,
    /// Every variant planned (measured or pending).
    #[serde(default)]
    pub variant_configs: Vec<LaunchConfig>,
    /// The config the speed model rates best ([`super::pick::model_pick`]): launched
    /// first in the exploration, a race candidate like a variant, and raced first when its
    /// measurement is within the box's launch noise of the screening's leader.
    #[serde(default)]
    pub model_pick: Option<LaunchConfig>,
    /// The pick was chosen (or there was none to choose).
    #[serde(default)]
    pick_chosen: bool,
}

impl Default for QtuneSearch {
    fn default() -> Self {
        Self::new()
    }
}

impl QtuneSearch {
    pub fn new() -> Self {
        QtuneSearch {
            history: Vec::new(),
            phase: SearchPhase::Baseline,
            incumbent: None,
            dim: 0,
            queue: VecDeque::new(),
            pending: VecDeque::new(),
            undecided: None,
            delta: None,
            seeded: false,
            search_trials: 0,
            elapsed_before_s: 0.0,
            session_start: None,
            warnings: Vec::new(),
            race_candidates: Vec::new(),
            variants: None,
            variant_configs: Vec::new(),
            model_pick: None,
            pick_chosen: false,
        }
    }

    /// Launches spent so far. A config skipped before launching (predicted not to fit) costs
    /// one too: a search that keeps proposing configs it cannot launch still ends (issue 33).
    pub fn launches(&self) -> u32 {
        self.history.len() as u32
    }

    /// A finished search given a larger budget (`--resume DIR --budget-trials N`): the race
    /// goes on where it has candidates; else the exploration goes on from where it stopped.
    /// Variants the first budget left no room for (speculative decoding, a load mode) are
    /// measured first where no race round ran yet, and the race is planned again with them.
    pub fn reopen(&mut self) {
        if self.phase != SearchPhase::Done {
            return;
        }
        let raced = self.history.iter().any(|o| o.role == TrialRole::Confirm);
        let dropped: VecDeque<LaunchConfig> = self
            .variant_configs
            .iter()
            .filter(|c| !self.history.iter().any(|o| &o.config == *c))
            .cloned()
            .collect();
        if self.race_candidates.is_empty() {
            self.phase = SearchPhase::Explore;
            self.variants = None;
        } else if !raced && !dropped.is_empty() {
            self.phase = SearchPhase::Variants;
            self.variants = Some(dropped);
        } else {
            self.phase = SearchPhase::Confirm;
        }
    }

    /// Seconds spent on this tune, over every session, read from `clock`.
    pub fn elapsed_s(&self, clock: &dyn crate::clock::Clock) -> f64 {
        self.elapsed_before_s
            + self
                .session_start
                .map_or(0.0, |s| (clock.seconds() - s).max(0.0))
    }

    /// Decide what to run next; None when the tune is finished.
    fn next_action(&mut self, ctx: &SearchContext) -> Option<(LaunchConfig, TrialRole)> {
        loop {
            // Nothing starts once the minutes budget is spent (issue 33: the budget is a wall).
            if !self.pending.is_empty()
                && self.elapsed_s(ctx.clock.as_ref()) >= ctx.space.budget.minutes * 60.0
            {
                self.pending.clear();
            }
            if let Some(p) = self.pending.pop_front() {
                // Re-measurements count against the search budget; confirmation rounds do not.
                if p.1 == TrialRole::Search
                    && self.launches() + Self::race_reserve(ctx) >= ctx.space.budget.trials
                {
                    self.pending.retain(|q| q.1 != TrialRole::Search);
                    continue;
                }
                return Some(p);
            }
            match self.phase {
                SearchPhase::Baseline => {
                    // The baseline first, and again right after it (when the budget races):
                    // the box's launch-to-launch noise, measured before anything is decided,
                    // sizes the race (how many candidates it can resolve).
                    // A skipped baseline counts: it would be skipped again (issue 33).
                    let baselines: Vec<&TrialOutcome> = self
                        .history
                        .iter()
                        .filter(|o| o.role == TrialRole::Baseline)
                        .collect();
                    let again = baselines.len() < Self::probe_launches(ctx) as usize
                        && baselines.iter().all(|o| o.kind.is_ok())
                        && self.elapsed_s(ctx.clock.as_ref()) < ctx.space.budget.minutes * 60.0;
                    if baselines.is_empty() || again {
                        return Some((ctx.baseline(), TrialRole::Baseline));
                    }
                    // Then the best command the user could type without qtune, once.
                    // Then every other engine's baselines, once each (`--engine both`).
                    for b in ctx
                        .second_baseline()
                        .into_iter()
                        .chain(super::engines::other_baselines(ctx))
                    {
                        if !self
                            .history
                            .iter()
                            .any(|o| o.role == TrialRole::SecondBaseline && o.config == b)
                        {
                            return Some((b, TrialRole::SecondBaseline));
                        }
                    }
                    self.phase = SearchPhase::Explore;
                }
                SearchPhase::Explore => {
                    if let Some(ch) = self.undecided.take() {
                        self.decide(ctx, ch);
                        continue;
                    }
                    if !self.budget_left(ctx) {
                        // A base whose boundary is already known is still compared with the
                        // incumbent (that costs no launch) before the exploration ends.
                        if let Some(base) = self.queue.front().cloned() {
                            if self.search_outcomes(ctx, &base).next().is_some()
                                && self.next_for_base(ctx, &base).is_none()
                            {
                                self.queue.pop_front();
                                self.decide(ctx, base);
                                continue;
                            }
                        }
                        self.phase = SearchPhase::Variants;
                        continue;
                    }
                    if !self.pick_chosen {
                        // The speed model's pick first: the config `qtune plan`
                        // would propose here, measured before the screening ranks anything.
                        self.pick_chosen = true;
                        self.model_pick = super::pick::model_pick(ctx, self.unitemized_mib());
                        if let Some(p) = &self.model_pick {
                            if !self.history.iter().any(|o| &o.config == p) {
                                return Some((p.clone(), TrialRole::Search));
                            }
                        }
                    }
                    if !self.seeded {
                        self.seeded = true;
                        self.queue.push_back(ctx.start_base());
                    }
                    let Some(base) = self.queue.front().cloned() else {
                        // Dimension finished: step the next one from the incumbent (or from the
                        // starting point when nothing has run yet).
                        let inc = self.incumbent.clone().unwrap_or_else(|| ctx.start_base());
                        if self.dim >= 4 {
                            self.phase = SearchPhase::Variants;
                            continue;
                        }
                        self.queue = ctx.alternatives(&inc, self.dim).into();
                        self.dim += 1;
                        continue;
                    };
                    if let Some(cfg) = self.next_for_base(ctx, &base) {
                        return Some((cfg, TrialRole::Search));
                    }
                    // This base is done: learn the prediction offset once, then compare.
                    self.queue.pop_front();
                    if self.delta.is_none() && ctx.gpu_moe {
                        if let (Some(p), Some((cfg, _))) =
                            (self.predicted_fit(ctx, &base), self.best_of(ctx, &base))
                        {
                            self.delta = Some(ctx.cpu_blocks_of(&cfg) as i32 - p as i32);
                        }
                    }
                    self.decide(ctx, base);
                }
                SearchPhase::Variants => {
                    if self.variants.is_none() {
                        let (v, skipped) = self.build_variants(ctx);
                        for line in skipped {
                            if !self.warnings.contains(&line) {
                                self.warnings.push(line);
                            }
                        }
                        self.variant_configs = v.iter().cloned().collect();
                        self.variants = Some(v);
                    }
                    self.place_other_engine_further(ctx);
                    let room = self.launches() + Self::race_reserve(ctx) < ctx.space.budget.trials
                        && self.elapsed_s(ctx.clock.as_ref())
                            < ctx.space.budget.minutes * 60.0 * 0.75;
                    let next = self.variants.as_mut().and_then(|v| v.pop_front());
                    match next {
                        Some(cfg) if room => return Some((cfg, TrialRole::Search)),
                        _ => {
                            self.variants = Some(VecDeque::new());
                            self.phase = SearchPhase::Confirm;
                            self.plan_confirmation(ctx);
                        }
                    }
                }
                SearchPhase::Confirm => {
                    if let Some(next) = self.next_race_launch(ctx) {
                        return Some(next);
                    }
                    self.phase = SearchPhase::Done;
                    return None;
                }
                SearchPhase::Done => return None,
            }
        }
    }

    fn record(&mut self, outcome: TrialOutcome) {
        if outcome.role == TrialRole::Search {
            self.search_trials += 1;
        }
        self.history.push(outcome);
    }
}

/// Two configs that differ only in `--threads` while every weight sits on the GPU: their
/// decode and prefill run on the card, so the race would measure the same thing twice (issue
/// 13's 24 GiB runs raced `-t 16` and `-t 8` twins of one config and gave each 3 rounds instead
/// of giving one 4). The race keeps the better-ranked twin.
pub fn thread_twins_on_gpu(a: &LaunchConfig, b: &LaunchConfig, ctx: &SearchContext) -> bool {
    let on_gpu = |c: &LaunchConfig| {
        ctx.has_gpu
            && c.no_experts_on_cpu()
            && !c.is_fit_placement()
            && c.n_gpu_layers.is_none_or(|n| n > ctx.layout.n_blocks)
    };
    a.threads != b.threads
        && on_gpu(a)
        && on_gpu(b)
        && LaunchConfig {
            threads: b.threads,
            ..a.clone()
        } == *b
}

/// The non-placement part of a config ([`LaunchConfig::base`]).
pub fn base_of(c: &LaunchConfig) -> Base {
    c.base()
}

fn cost_of(o: &TrialOutcome, ctx: &SearchContext, reference: Option<&Speeds>) -> f64 {
    match Speeds::pooled(std::iter::once(o)) {
        Some(s) if o.kind == OutcomeKind::Ok => -s.primary(&ctx.space.objective, reference),
        _ => f64::INFINITY,
    }
}

impl Solver<TuneProblem, TuneState> for QtuneSearch {
    fn name(&self) -> &str {
        "qtune boundary + coordinate search"
    }

    fn init(
        &mut self,
        problem: &mut Problem<TuneProblem>,
        state: TuneState,
    ) -> Result<(TuneState, Option<KV>), ArgminError> {
        let clock = &problem.problem.as_ref().expect("problem present").ctx.clock;
        self.session_start = Some(clock.seconds());
        Ok((state, None))
    }

    fn next_iter(
        &mut self,
        problem: &mut Problem<TuneProblem>,
        state: TuneState,
    ) -> Result<(TuneState, Option<KV>), ArgminError> {
        let ctx = problem
            .problem
            .as_ref()
            .expect("problem present")
            .ctx
            .clone();
        if self.session_start.is_none() {
            // Resumed from a checkpoint: the clock restarts from what was spent before.
            self.session_start = Some(ctx.clock.seconds());
        }
        let Some((cfg, role)) = self.next_action(&ctx) else {
            return Ok((
                state.terminate_with(TerminationReason::SolverConverged),
                None,
            ));
        };
        // A config skipped before launching would be skipped again: never propose it twice.
        // Should a path of the search still do so, the search ends instead of spinning.
        if self
            .history
            .iter()
            .any(|o| o.kind == OutcomeKind::Skipped && o.config == cfg && o.role == role)
        {
            self.warnings.push(format!(
                "the search proposed {} again after it was skipped (predicted not to fit); it stopped there",
                cfg.label()
            ));
            self.phase = SearchPhase::Done;
            return Ok((
                state.terminate_with(TerminationReason::SolverConverged),
                None,
            ));
        }
        let race = (role == TrialRole::Confirm)
            .then(|| self.race_step(&ctx, &cfg))
            .flatten();
        let outcome = problem.problem("trial_count", |p| p.evaluate(&cfg, role, race.as_ref()))?;
        // A speculative launch whose greedy answers differ from the same config's without
        // speculation is never ranked (issue 54).
        let outcome = crate::trial::lossless::classify(outcome, &self.history);
        let cost = cost_of(&outcome, &ctx, self.baseline_speeds().as_ref());
        self.record(outcome.clone());
        let line = super::progress::line(&outcome, self.search_trials, ctx.space.budget.trials);
        let kv = argmin::kv!(
            "trial" => outcome.id;
            "outcome" => outcome.kind.as_str().to_string();
            "line" => line;
        );
        Ok((state.param(cfg).cost(cost), Some(kv)))
    }

    fn terminate(&mut self, _state: &TuneState) -> TerminationStatus {
        if self.phase == SearchPhase::Done {
            TerminationStatus::Terminated(TerminationReason::SolverConverged)
        } else {
            TerminationStatus::NotTerminated
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(config: &LaunchConfig, role: TrialRole) -> TrialOutcome {
        let mut o = TrialOutcome::skipped(config, role, "test".into());
        o.kind = crate::trial::OutcomeKind::Ok;
        o
    }

    /// A tune whose first budget left no room for a variant (the speculative launch), given
    /// more launches before any race round: the variant is measured, then the race is planned.
    #[test]
    fn a_reopened_search_measures_the_variants_its_first_budget_dropped() {
        let base = LaunchConfig::baseline(4096);
        let spec = LaunchConfig {
            threads: Some(3),
            ..base.clone()
        };
        let mut s = QtuneSearch::new();
        s.history.push(outcome(&base, TrialRole::Baseline));
        s.variant_configs = vec![base.clone(), spec.clone()];
        s.variants = Some(VecDeque::new());
        s.race_candidates = vec![base.clone()];
        s.phase = SearchPhase::Done;
        s.reopen();
        assert_eq!(s.phase, SearchPhase::Variants);
        assert_eq!(s.variants, Some(VecDeque::from([spec.clone()])));

        // Once a race round ran, the race goes on as planned.
        let mut s2 = s.clone();
        s2.phase = SearchPhase::Done;
        s2.history.push(outcome(&base, TrialRole::Confirm));
        s2.reopen();
        assert_eq!(s2.phase, SearchPhase::Confirm);

        // Nothing dropped: the race goes on.
        let mut s3 = s.clone();
        s3.phase = SearchPhase::Done;
        s3.history.push(outcome(&spec, TrialRole::Search));
        s3.reopen();
        assert_eq!(s3.phase, SearchPhase::Confirm);
    }
}
