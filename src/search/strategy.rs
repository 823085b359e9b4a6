//! The search strategy, an argmin [`Solver`]: one trial per iteration.
//! (One job in one file, over 600 lines: the solver is one state machine whose steps share its
//! state; its behaviour is tested through replayed landscapes in tests/search_replay.rs.)
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

use super::objective::{better, is_tie, Speeds};
use crate::config::LaunchConfig;
use crate::trial::{OutcomeKind, TrialOutcome, TrialRole, TrialRunner};
use argmin::core::{
    Error as ArgminError, Problem, Solver, State, TerminationReason, TerminationStatus, KV,
};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

pub use super::TuneState;

pub use crate::config::Base;

pub use super::context::SearchContext;

mod dry_run;
pub use dry_run::{first_launches, PlannedLaunch};

/// The argmin problem: runs trials (or replays journaled ones after a resume).
pub struct TuneProblem {
    pub ctx: SearchContext,
    runner: RefCell<Box<dyn TrialRunner>>,
    /// Journaled outcomes not yet seen by the solver (a resumed tune): used instead of launching.
    replay: RefCell<VecDeque<TrialOutcome>>,
    progress: Option<Arc<dyn super::progress::Watch>>,
}

impl TuneProblem {
    pub fn new(
        ctx: SearchContext,
        runner: Box<dyn TrialRunner>,
        replay: Vec<TrialOutcome>,
        progress: Option<Arc<dyn super::progress::Watch>>,
    ) -> Self {
        TuneProblem {
            ctx,
            runner: RefCell::new(runner),
            replay: RefCell::new(replay.into()),
            progress,
        }
    }

    /// Run (or replay) one trial. Fails with [`Interrupted`] when qtune is being interrupted:
    /// a trial cut short by Ctrl-C is not a result (its runner did not journal it).
    ///
    /// [`Interrupted`]: crate::trial::cleanup::Interrupted
    fn evaluate(
        &self,
        config: &LaunchConfig,
        role: TrialRole,
    ) -> Result<TrialOutcome, ArgminError> {
        let interrupted = || {
            crate::trial::cleanup::interrupted()
                .map(|signal| ArgminError::new(crate::trial::cleanup::Interrupted { signal }))
        };
        let mut replay = self.replay.borrow_mut();
        if let Some(front) = replay.front() {
            if &front.config == config && front.role == role {
                return Ok(replay.pop_front().expect("front exists"));
            }
            // The journal diverged from the plan (edited by hand?): stop replaying.
            tracing::warn!("journal does not match the search path; running trials afresh");
            replay.clear();
        }
        drop(replay);
        if let Some(e) = interrupted() {
            return Err(e);
        }
        // A model deleted, replaced or truncated mid-tune stops the tune before a launch is
        // charged to it.
        if let Err(why) = self.runner.borrow().check_inputs() {
            return Err(ArgminError::msg(why));
        }
        // Launch feasibility (host RAM): a config predicted to push the box into
        // swap is never launched; it is recorded as skipped, with the reason.
        if let Some(why) = crate::model::memory::launch_refusal(
            &self.ctx.layout,
            config,
            self.ctx.has_gpu,
            self.ctx.ram_available_mib,
        ) {
            return Ok(TrialOutcome::skipped(config, role, why));
        }
        if let Some(p) = &self.progress {
            p.starting(config, role);
        }
        let outcome = self.runner.borrow_mut().run(config, role);
        if let Some(why) = self.runner.borrow().fatal() {
            return Err(ArgminError::msg(why));
        }
        match interrupted() {
            Some(e) => Err(e),
            None => Ok(outcome),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
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
    pub phase: Phase,
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
            phase: Phase::Baseline,
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

    /// Launches the exploration leaves for the variants: one per other load mode, placement
    /// style and `--no-op-offload` (where the space has them).
    /// None when the whole model is predicted to fit on the GPU: then no expert sits on the CPU,
    /// so load mode, placement and op offload change nothing, and the exploration gets those
    /// launches (KV type, ubatch and threads are what is left to decide by measurement).
    fn variant_reserve(&self, ctx: &SearchContext) -> u32 {
        if Self::race_reserve(ctx) == 0 || self.whole_model_fits(ctx) {
            return 0;
        }
        Self::nominal_variants(ctx)
    }

    /// The memory prediction (with the VRAM measured beyond the buffers so far) puts every
    /// expert on the GPU at the starting point.
    fn whole_model_fits(&self, ctx: &SearchContext) -> bool {
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

    fn nominal_variants(ctx: &SearchContext) -> u32 {
        let v = &ctx.space.vary;
        let placements = if ctx.multi_gpu() {
            super::candidates::card_variant_count(&ctx.space)
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
    fn build_variants(&self, ctx: &SearchContext) -> VecDeque<LaunchConfig> {
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
        if best.no_experts_on_cpu() {
            // Every expert on the GPU: no variant would change where anything sits.
            return VecDeque::new();
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
            out.extend(super::candidates::propose_cards(ctx, &best, &self.history));
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
            let order = super::pick::order_by_predicted(
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
        out.into()
    }

    /// The variants (and the model's pick) measured so far, with their pooled speeds (ok ones
    /// only).
    fn variant_outcomes(&self) -> Vec<(LaunchConfig, Speeds)> {
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

    /// GPU memory beyond the reported buffers, as measured so far in this tune
    /// ([`super::context::unitemized_vram_mib`]).
    fn unitemized_mib(&self) -> f64 {
        super::context::unitemized_vram_mib(&self.history)
    }

    /// Two GPUs or more: what each card holds beyond its predicted buffers, as measured so far
    /// in this tune plus a margin ([`super::candidates::card_extra_mib`]).
    fn card_extra(&self, ctx: &SearchContext) -> Vec<f64> {
        super::candidates::card_extra_mib(ctx, &self.history)
    }

    /// The fewest CPU blocks the memory prediction, corrected by what this tune measured, says
    /// fit (each card within its own budget on several GPUs).
    fn predicted_fit(&self, ctx: &SearchContext, base: &Base) -> Option<u32> {
        if ctx.multi_gpu() {
            return ctx.predicted_fit_cards(base, &self.card_extra(ctx));
        }
        ctx.predicted_fit(base, self.unitemized_mib())
    }

    /// The config the exploration runs for `base` at `n` CPU blocks: `--n-cpu-moe n` on one
    /// GPU; on several, the layers split so that the fullest card, as measured so far, has the
    /// most room.
    fn place(&self, ctx: &SearchContext, base: &Base, n: u32) -> LaunchConfig {
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
    fn resplit(&self, ctx: &SearchContext, base: &Base, n: u32) -> Option<LaunchConfig> {
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

    /// Launches spent so far. A config skipped before launching (predicted not to fit) costs
    /// one too: a search that keeps proposing configs it cannot launch still ends (issue 33).
    pub fn launches(&self) -> u32 {
        self.history.len() as u32
    }

    /// A finished search given a larger budget (`--resume DIR --budget-trials N`): the race
    /// goes on where it has candidates; else the exploration goes on from where it stopped.
    pub fn reopen(&mut self) {
        if self.phase != Phase::Done {
            return;
        }
        if self.race_candidates.is_empty() {
            self.phase = Phase::Explore;
            self.variants = None;
        } else {
            self.phase = Phase::Confirm;
        }
    }

    /// Launches the search leaves for the race.
    /// A budget too small for the baseline, two search launches, the variants and the race
    /// goes to the search first: the variants and the race get what it leaves.
    fn race_reserve(ctx: &SearchContext) -> u32 {
        let b = &ctx.space.budget;
        let race = b.confirm_rounds.max(2) * (b.confirm_top.max(1) + 1);
        if b.trials >= race + Self::nominal_variants(ctx) + 3 {
            race
        } else {
            0
        }
    }

    /// Launches of the baseline at the start: 2 (the box's noise) when the budget races and
    /// has a launch to spare for it, else 1.
    fn probe_launches(ctx: &SearchContext) -> u32 {
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
            by_request: ctx.space.objective.metric == crate::space::Metric::Request,
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
        let default = ctx.baseline();
        let mut out = vec![default.clone()];
        let Some(second) = ctx.second_baseline() else {
            return out;
        };
        if !self
            .history
            .iter()
            .any(|o| o.role == TrialRole::SecondBaseline)
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
    fn probe_samples(&self, ctx: &SearchContext) -> Vec<crate::stats::Sample> {
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
    fn next_race_launch(&self, ctx: &SearchContext) -> Option<(LaunchConfig, TrialRole)> {
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

    /// Seconds spent on this tune, over every session, read from `clock`.
    pub fn elapsed_s(&self, clock: &dyn crate::clock::Clock) -> f64 {
        self.elapsed_before_s
            + self
                .session_start
                .map_or(0.0, |s| (clock.seconds() - s).max(0.0))
    }

    fn search_outcomes<'a>(
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
    fn next_for_base(&mut self, ctx: &SearchContext, base: &Base) -> Option<LaunchConfig> {
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
    fn best_of(&self, ctx: &SearchContext, base: &Base) -> Option<(LaunchConfig, Speeds)> {
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

    fn baseline_speeds(&self) -> Option<Speeds> {
        Speeds::pooled(
            self.history
                .iter()
                .filter(|o| o.role == TrialRole::Baseline),
        )
    }

    fn trials_of(&self, cfg: &LaunchConfig) -> usize {
        self.history
            .iter()
            .filter(|o| &o.config == cfg && o.role == TrialRole::Search && o.kind.is_ok())
            .count()
    }

    /// Compare a finished challenger with the incumbent; may schedule re-measurements.
    fn decide(&mut self, ctx: &SearchContext, challenger: Base) {
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

    fn budget_left(&self, ctx: &SearchContext) -> bool {
        let b = &ctx.space.budget;
        self.launches() + Self::race_reserve(ctx) + self.variant_reserve(ctx) < b.trials
            && self.elapsed_s(ctx.clock.as_ref()) < b.minutes * 60.0 * 0.75
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

    fn plan_confirmation(&mut self, ctx: &SearchContext) {
        let b = &ctx.space.budget;
        let baseline = ctx.baseline();
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
            let sigma = super::pick::launch_sigma(&gen, &self.race_settings(ctx));
            let band = super::pick::noise_band_pct(sigma, ctx.space.objective.tie_pct);
            let reference = self.baseline_speeds();
            if let Some(note) = super::pick::pick_first(
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
                Phase::Baseline => {
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
                    if let Some(second) = ctx.second_baseline() {
                        if !self
                            .history
                            .iter()
                            .any(|o| o.role == TrialRole::SecondBaseline)
                        {
                            return Some((second, TrialRole::SecondBaseline));
                        }
                    }
                    self.phase = Phase::Explore;
                }
                Phase::Explore => {
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
                        self.phase = Phase::Variants;
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
                            self.phase = Phase::Variants;
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
                Phase::Variants => {
                    if self.variants.is_none() {
                        let v = self.build_variants(ctx);
                        self.variant_configs = v.iter().cloned().collect();
                        self.variants = Some(v);
                    }
                    let room = self.launches() + Self::race_reserve(ctx) < ctx.space.budget.trials
                        && self.elapsed_s(ctx.clock.as_ref())
                            < ctx.space.budget.minutes * 60.0 * 0.75;
                    let next = self.variants.as_mut().and_then(|v| v.pop_front());
                    match next {
                        Some(cfg) if room => return Some((cfg, TrialRole::Search)),
                        _ => {
                            self.variants = Some(VecDeque::new());
                            self.phase = Phase::Confirm;
                            self.plan_confirmation(ctx);
                        }
                    }
                }
                Phase::Confirm => {
                    if let Some(next) = self.next_race_launch(ctx) {
                        return Some(next);
                    }
                    self.phase = Phase::Done;
                    return None;
                }
                Phase::Done => return None,
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
            self.phase = Phase::Done;
            return Ok((
                state.terminate_with(TerminationReason::SolverConverged),
                None,
            ));
        }
        let outcome = problem.problem("trial_count", |p| p.evaluate(&cfg, role))?;
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
        if self.phase == Phase::Done {
            TerminationStatus::Terminated(TerminationReason::SolverConverged)
        } else {
            TerminationStatus::NotTerminated
        }
    }
}
