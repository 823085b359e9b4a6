//! Racing candidates against a reference in paired, interleaved rounds.
//! (The race is one state machine: this file drives it; `sizing` holds its settings and the
//! probe's sizing, `judge` the verdicts and the look after each round, `outcome` what it decided.)
//!
//! # Design: a sequential paired t-race
//! Every round launches the reference and each surviving candidate once, in ABBA order
//! (forward, then reversed: a drift linear in time cancels over two rounds). After each round:
//! - **clear losers go** (from round 1): a candidate whose generation is below another
//!   survivor's (or the reference's) even at the upper end of an interval built with the
//!   *pooled* noise (the noise probe plus every paired series so far) is dropped. Drops are not
//!   claims: a wrong drop only costs a chance, so they may use the pooled estimate, which has
//!   enough degrees of freedom to act after one or two rounds;
//! - **claims** (from `min_rounds`, at every `look_every`-th round): each survivor's own paired
//!   Student-t interval against the reference decides Better / Worse / Tie / Undecided (generation
//!   leads, prompt speed decides inside a generation tie). Worse or Tie against the reference, or
//!   Worse / Tie against another survivor, and it is dropped;
//! - the race ends when one survivor is Better than the reference beyond its interval, when
//!   none is left (the reference stays), or when the budget cannot pay for another round.
//!
//! **Why this and not successive halving or F-race.** Successive halving allocates rounds by
//! rank and drops the bottom half on a fixed schedule: it never says whether a gain is real, and
//! with 2-4 candidates and ~20 launches its halvings are too coarse. F-race (Friedman test over
//! rounds as blocks) is rank-based: with the few rounds a tune can afford, ranks discard the
//! magnitudes and have little power, and it still needs a separate interval for the report.
//! The paired t-race uses the same statistic that is reported (per-round log ratios, Student-t
//! interval), so what ends the race is exactly what the user reads; drift is removed by pairing
//! within a round; and the noise probe sizes the race (how many candidates the budget can
//! resolve) before any launch is spent on them.
//!
//! # Noise probe and sizing
//! The race starts with `noise_launches` back-to-back launches of the reference. Their spread
//! (σ of `ln tg`), pooled with a prior σ of the box (a probe of 2-3 launches has 1-2 degrees of
//! freedom and read the GPU machine at a third of the noise its rounds then showed), gives the
//! paired noise (σ·√2) and the rounds needed to decide either way: a gain of `target_gain_pct`
//! with 80 % power, and a tie whose interval fits inside the band. The race keeps as many
//! candidates (best-ranked first) as the budget can give that many rounds: on a 20-launch tune
//! that is usually one, raced for every round the budget has left, rather than two for three. The others wait: one takes the place of a candidate
//! that fails or is dropped while the budget still allows; the rest are reported as not raced.
//!
//! # Claims and their level
//! Peeking after every ABBA pair of rounds, at several candidates, would inflate the chance of a
//! false win. A "better" claim therefore uses the family level (95 %) split (Bonferroni) over
//! the looks the budget allows and the candidates given; `RaceOutcome::claim_confidence` says
//! which level that was, and `CandidateResult::claim` carries the interval at that level.
//! Drops (Worse, Tie) use the plain 95 % interval: a wrong drop only costs a chance.
//!
//! # Driving it
//! The race is a pure state machine: [`Race::next_launch`] says which arm to launch next
//! (arm 0 is the reference, arm `i` is `candidates[i - 1]`), [`Race::record`] takes what that
//! launch measured (`None` when it failed), [`Race::outcome`] says what was decided. [`run`]
//! loops over a callback; [`run_trials`] drives it with a [`TrialRunner`]. The budget is never
//! exceeded. The machine is deterministic: a resumed tune rebuilds it by feeding the journaled
//! trials back through `next_launch` / `record` in order, then goes on launching.
//!
//! From `tune`: after the search, rank its candidates (best first), then
//! `run_trials(RaceSettings { budget_launches, ..Default::default() }, &baseline, &top,
//! runner, baseline_samples)`; `outcome.winner` indexes `top` (None: the baseline stays), each
//! `candidates[i].vs_reference` carries the intervals to report, `outcome.noise` and
//! `pair_sigma_pct` the noise measured on the box.

use super::{Comparison, PairedVerdict, Sample};
use crate::config::LaunchConfig;
use crate::objective::Metric;
use crate::trial::{TrialOutcome, TrialRole, TrialRunner};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// The reference's arm (the baseline, e.g. the plain default).
pub const REFERENCE: usize = 0;

mod judge;
mod outcome;
mod sizing;
pub use outcome::{ArmStatus, CandidateResult, NoiseEstimate, RaceOutcome, Round};
pub use sizing::{pooled_launch_sigma, RaceSettings};

/// One launch the race asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// 0: the reference; `i`: candidate `i - 1`.
    pub arm: usize,
    /// The paired round (0-based); None for the noise probe.
    pub round: Option<u32>,
    /// Position within the round (or within the probe).
    pub slot: u32,
}

/// The race. See the module documentation.
#[derive(Debug, Clone)]
pub struct Race {
    s: RaceSettings,
    n_arms: usize,
    /// Arms `0..baselines` are baselines (0: the default; 1: a second baseline).
    baselines: usize,
    queue: VecDeque<Launch>,
    pending: Option<Launch>,
    probe: Vec<Sample>,
    probe_planned: bool,
    rounds: Vec<Round>,
    status: Vec<ArmStatus>,
    used: u32,
    reference_failures: u32,
    noise: Option<NoiseEstimate>,
    /// Confidence of the "better than the reference" claims (set when the rounds start).
    claim_confidence: f64,
    finished: Option<String>,
    /// Rounds the last look saw (the look after a round is taken when the next launch is
    /// asked for).
    looked: usize,
    /// The baseline that is the reference while the two are not told apart (the one that
    /// keeps more of the model on the GPU: [`Race::with_tie_to`]).
    tie_to: usize,
}

/// Run a race to its end: `measure(launch)` launches `launch.arm` once and returns what it
/// measured, or None when the launch failed.
pub fn run(
    settings: RaceSettings,
    n_candidates: usize,
    mut measure: impl FnMut(Launch) -> Option<Sample>,
) -> RaceOutcome {
    let mut race = Race::new(settings, n_candidates);
    while let Some(l) = race.next_launch() {
        let s = measure(l);
        race.record(l, s);
    }
    race.outcome()
}

/// Drive a race with a trial runner (the real [`crate::trial::llama_runner::LlamaServerRunner`] or a
/// replay): the probe's launches run the reference as [`TrialRole::Baseline`], the rounds run as
/// [`TrialRole::Confirm`]. A launch that does not end `ok` (a failure, or `spill` over the VRAM
/// budget) counts as failed: that candidate leaves the race and never wins. `probe`: launches
/// of the reference already measured (e.g. a tune's baseline trials) to use instead of new
/// ones; empty to launch the probe. Returns the outcome and every trial, in order.
pub fn run_trials(
    settings: RaceSettings,
    reference: &LaunchConfig,
    candidates: &[LaunchConfig],
    runner: &mut dyn TrialRunner,
    probe: Vec<Sample>,
) -> (RaceOutcome, Vec<TrialOutcome>) {
    let mut race = Race::new(settings, candidates.len());
    if !probe.is_empty() {
        race = race.with_probe(probe);
    }
    let mut trials = Vec::new();
    while let Some(l) = race.next_launch() {
        let (config, role) = match l.arm {
            REFERENCE if l.round.is_none() => (reference, TrialRole::Baseline),
            REFERENCE => (reference, TrialRole::Confirm),
            i => (&candidates[i - 1], TrialRole::Confirm),
        };
        let o = runner.run(config, role);
        race.record(l, Sample::from_outcome(&o));
        trials.push(o);
    }
    (race.outcome(), trials)
}

impl Race {
    /// A race of `n_candidates` against the reference.
    pub fn new(settings: RaceSettings, n_candidates: usize) -> Self {
        Self::with_baselines(settings, 1, n_candidates)
    }

    /// A race of `n_candidates` against `baselines` baselines (1 or 2): arm 0 is the first
    /// baseline (the probe's), arm 1 the second. Every round launches each baseline still in
    /// the race; a baseline clearly slower than the other leaves it. Candidates are judged
    /// against the better baseline on the objective (the reference).
    pub fn with_baselines(settings: RaceSettings, baselines: usize, n_candidates: usize) -> Self {
        let baselines = baselines.clamp(1, 2);
        let status = vec![ArmStatus::Racing; n_candidates + baselines];
        Race {
            s: settings,
            n_arms: n_candidates + baselines,
            baselines,
            queue: VecDeque::new(),
            pending: None,
            probe: Vec::new(),
            probe_planned: false,
            rounds: Vec::new(),
            status,
            used: 0,
            reference_failures: 0,
            noise: None,
            claim_confidence: settings.confidence,
            finished: (n_candidates == 0).then(|| "no candidates to race".to_string()),
            looked: 0,
            tie_to: REFERENCE,
        }
    }

    /// Which baseline is the reference while the two baselines are not told apart (0: the
    /// first, 1: the second). The other becomes the reference only when it is faster on the
    /// objective beyond the noise (its paired interval above 0). Name the one that keeps more
    /// of the model on the GPU: on a noisy box the better of two means is a coin flip when the
    /// two are a few percent apart, and the fuller card is the one expected to be faster.
    pub fn with_tie_to(mut self, arm: usize) -> Self {
        self.tie_to = arm.min(self.baselines - 1);
        self
    }

    /// Use launches of the reference already made (e.g. a tune's baseline trials) as the
    /// noise probe instead of launching new ones.
    pub fn with_probe(mut self, samples: Vec<Sample>) -> Self {
        self.probe = samples.into_iter().filter(Sample::is_valid).collect();
        self.probe_planned = true;
        self.size_from_probe();
        self
    }

    pub fn settings(&self) -> &RaceSettings {
        &self.s
    }

    /// Launches handed out so far (probe included).
    pub fn launches_used(&self) -> u32 {
        self.used
    }

    pub fn is_finished(&self) -> bool {
        self.finished.is_some() && self.queue.is_empty()
    }

    fn budget_left(&self) -> u32 {
        self.s.budget_launches.saturating_sub(self.used)
    }

    /// Candidates still racing (arms past the baselines).
    fn racing(&self) -> Vec<usize> {
        (self.baselines..self.n_arms)
            .filter(|&i| self.status[i] == ArmStatus::Racing)
            .collect()
    }

    /// Baselines still launched every round.
    fn live_baselines(&self) -> Vec<usize> {
        (0..self.baselines)
            .filter(|&i| self.status[i] == ArmStatus::Racing)
            .collect()
    }

    fn arm_name(&self, arm: usize) -> String {
        match arm {
            REFERENCE if self.baselines > 1 => "the first baseline".into(),
            REFERENCE => "the reference".into(),
            1 if self.baselines > 1 => "the second baseline".into(),
            i => format!("candidate {}", i - self.baselines),
        }
    }

    /// The next launch, or None when the race is over. Call [`Race::record`] with its result
    /// before asking again (asking again without recording returns the same launch).
    pub fn next_launch(&mut self) -> Option<Launch> {
        if let Some(p) = self.pending {
            return Some(p);
        }
        loop {
            if let Some(l) = self.queue.pop_front() {
                self.used += 1;
                self.pending = Some(l);
                return Some(l);
            }
            if self.finished.is_some() {
                return None;
            }
            self.plan();
        }
    }

    /// What the last launch measured (None: it failed).
    pub fn record(&mut self, launch: Launch, sample: Option<Sample>) {
        if self.pending != Some(launch) {
            debug_assert!(false, "record() for a launch that was not handed out");
            return;
        }
        self.pending = None;
        let sample = sample.filter(Sample::is_valid);
        match launch.round {
            None => match sample {
                Some(s) => self.probe.push(s),
                None => self.reference_failed(),
            },
            Some(r) => {
                let r = r as usize;
                self.rounds[r].samples[launch.arm] = sample;
                if sample.is_none() {
                    if launch.arm == REFERENCE {
                        self.reference_failed();
                        if self.baselines > 1 && self.finished.is_some() {
                            // The default failed twice: the second baseline is the reference.
                            self.finished = None;
                            self.status[REFERENCE] = ArmStatus::Failed { round: r as u32 };
                            if self.status[1] != ArmStatus::Racing {
                                self.finished = Some(
                                    "both baselines failed: nothing can be compared against them"
                                        .into(),
                                );
                            }
                        }
                    } else {
                        self.status[launch.arm] = ArmStatus::Failed { round: r as u32 };
                    }
                }
            }
        }
    }

    fn reference_failed(&mut self) {
        self.reference_failures += 1;
        if self.reference_failures >= 2 {
            self.queue.clear();
            self.finished =
                Some("the reference failed twice: nothing can be compared against it".to_string());
        }
    }

    /// Plan the next launches (the queue is empty and the race not finished).
    fn plan(&mut self) {
        if !self.probe_planned {
            self.probe_planned = true;
            // Leave room for at least two paired rounds of one candidate.
            let n = self
                .s
                .noise_launches
                .min(self.s.budget_launches.saturating_sub(4));
            for slot in 0..n {
                self.queue.push_back(Launch {
                    arm: REFERENCE,
                    round: None,
                    slot,
                });
            }
            if n > 0 {
                return;
            }
        }
        if self.rounds.is_empty() {
            if self.noise.is_none() {
                self.size_from_probe();
            }
            self.claim_confidence = self.claim_level();
        }
        if !self.rounds.is_empty() {
            self.look();
        }
        if self.finished.is_some() {
            return;
        }
        self.promote();
        // Next round: the reference and every survivor, trimmed to the budget (best first).
        let mut racing = self.racing();
        if racing.is_empty() {
            self.finished = Some(self.nobody_left());
            return;
        }
        let left = self.budget_left() as usize;
        let mut arms = self.live_baselines();
        if arms.is_empty() {
            self.finished = Some("no baseline is left to compare against".into());
            return;
        }
        if left < arms.len() + 1 {
            self.finished = Some(self.budget_spent());
            return;
        }
        if racing.len() + arms.len() > left {
            racing.sort_by(|a, b| self.gen_mean(*b).total_cmp(&self.gen_mean(*a)));
            racing.truncate(left - arms.len());
            racing.sort_unstable();
        }
        arms.extend(racing);
        let r = self.rounds.len();
        let order: Vec<usize> = super::abba_order(arms.len(), r)
            .into_iter()
            .map(|i| arms[i])
            .collect();
        for (slot, &arm) in order.iter().enumerate() {
            self.queue.push_back(Launch {
                arm,
                round: Some(r as u32),
                slot: slot as u32,
            });
        }
        self.rounds.push(Round {
            order,
            samples: vec![None; self.n_arms],
        });
    }

    // The race's own outcome only: where no candidate beat the reference, the verdict may still
    // recommend one (tied in generation and faster in prompt) and says so, so these lines must
    // not say "the reference stays" above a candidate the verdict recommends.
    fn budget_spent(&self) -> String {
        format!(
            "the budget of {} launches is spent before any candidate beat the reference beyond the noise",
            self.s.budget_launches
        )
    }

    fn nobody_left(&self) -> String {
        let failed = (self.baselines..self.n_arms)
            .filter(|&i| matches!(self.status[i], ArmStatus::Failed { .. }))
            .count();
        if failed == self.n_arms - self.baselines {
            "every candidate failed: the reference stays".into()
        } else {
            "no candidate beat the reference beyond the noise".into()
        }
    }

    /// A candidate left (failed or dropped): the next one waiting takes its place, if the
    /// budget can still give it `min_rounds` rounds.
    fn promote(&mut self) {
        let Some(noise) = self.noise else { return };
        loop {
            let n = self.racing().len() as u32;
            let per_round = n + 1 + self.live_baselines().len() as u32;
            let fits = self.budget_left() / per_round >= self.s.min_rounds.max(2);
            let waiting = (self.baselines..self.n_arms)
                .find(|&i| matches!(self.status[i], ArmStatus::NotRaced { .. }));
            match waiting {
                Some(i) if n < noise.affordable_candidates && fits => {
                    self.status[i] = ArmStatus::Racing
                }
                _ => break,
            }
        }
    }

    /// The most paired rounds the race can run, the planned ones included: the launches its
    /// budget leaves after the rounds planned so far, in rounds of the smallest size (the
    /// baselines still racing and one candidate). It may end sooner, once the rounds decide.
    pub fn rounds_at_most(&self) -> u32 {
        let planned = self.rounds.len() as u32;
        let per_round = self.live_baselines().len() as u32 + 1;
        let left = self.budget_left().saturating_sub(self.queue.len() as u32);
        planned + left / per_round
    }

    /// The level the race's claims use.
    pub fn claim_confidence(&self) -> f64 {
        self.claim_confidence
    }
}

/// `generation +4.1 % [−1.2, +9.6] (95 %, 6 rounds), prompt …`.
pub fn describe(v: &PairedVerdict) -> String {
    format!("generation {}, prompt {}", v.gen, v.prompt)
}

fn sd(x: &[f64]) -> f64 {
    let m = x.iter().sum::<f64>() / x.len() as f64;
    (x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (x.len() - 1) as f64).sqrt()
}

/// A comparison of one metric of an arm against the reference over a finished race's rounds.
pub fn compare_rounds(
    rounds: &[Round],
    arm: usize,
    reference: usize,
    metric: Metric,
    confidence: f64,
) -> Option<Comparison> {
    let pairs: Vec<(f64, f64)> = rounds
        .iter()
        .filter_map(|r| {
            Some((
                r.samples[arm]?.get(metric),
                r.samples[reference]?.get(metric),
            ))
        })
        .collect();
    Comparison::from_pairs(&pairs, confidence)
}

#[cfg(test)]
mod tests;
