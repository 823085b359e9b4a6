//! Racing candidates against a reference in paired, interleaved rounds.
//! (One job in one file, over 600 lines with its tests: the race is one state machine.)
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

use super::{Band, Comparison, Decision, Metric, PairedVerdict, Sample};
use crate::config::LaunchConfig;
use crate::trial::{TrialOutcome, TrialRole, TrialRunner};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// The reference's arm (the baseline, e.g. the plain default).
pub const REFERENCE: usize = 0;

/// How a race spends its launches and what it counts as a difference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RaceSettings {
    /// Most launches in all, noise probe included.
    pub budget_launches: u32,
    /// Back-to-back launches of the reference at the start, to measure the box's noise
    /// (0: skip the probe; then nothing is trimmed by sizing).
    pub noise_launches: u32,
    /// Differences inside this band do not matter (a tie).
    pub band: Band,
    /// Two-sided confidence of the reported intervals and of the claims.
    pub confidence: f64,
    /// No claim (Better / Worse / Tie) before this many paired rounds.
    pub min_rounds: u32,
    /// Claims are looked at every this many rounds (2: after each ABBA pair of rounds).
    pub look_every: u32,
    /// Two-sided confidence of the clear-loser drops (pooled noise).
    pub drop_confidence: f64,
    /// The smallest gain worth resolving: sizes how many candidates are raced.
    pub target_gain_pct: f64,
    /// What sizing assumes of the box before the probe says otherwise: a launch σ (percent)
    /// the probe's estimate is pooled with, weighted as this many degrees of freedom. Sizing
    /// only: claims and drops use what the rounds measured.
    #[serde(default = "default_prior_launch_sigma_pct")]
    pub prior_launch_sigma_pct: f64,
    #[serde(default = "default_prior_df")]
    pub prior_df: u32,
    /// Decide on time per request (the workload's requests per second) where every launch
    /// measured it, instead of generation first.
    #[serde(default)]
    pub by_request: bool,
}

/// The GPU machine's paired σ over the committed races was 1-6.5 %, mostly 2-4 %
/// (docs/evidence/): about 2 % per launch. Two back-to-back probe launches there once read
/// 0.7-0.8 %, and a race sized from that one degree of freedom gave two candidates 3 rounds
/// each: too few to prove either within ±3 %.
fn default_prior_launch_sigma_pct() -> f64 {
    2.0
}

fn default_prior_df() -> u32 {
    4
}

impl Default for RaceSettings {
    fn default() -> Self {
        RaceSettings {
            budget_launches: 20,
            noise_launches: 3,
            band: Band::default(),
            confidence: 0.95,
            min_rounds: 4,
            look_every: 2,
            drop_confidence: 0.95,
            target_gain_pct: 8.0,
            prior_launch_sigma_pct: default_prior_launch_sigma_pct(),
            prior_df: default_prior_df(),
            by_request: false,
        }
    }
}

/// σ of one launch's `ln` generation speed for sizing: the sample σ of `logs` (launches of one
/// config) pooled with the prior ([`RaceSettings::prior_launch_sigma_pct`]), as a variance
/// weighted by degrees of freedom. One or two degrees of freedom can read the box at a fraction
/// of its noise (as two probe launches on the GPU machine did). The prior alone with fewer than 2 launches.
pub fn pooled_launch_sigma(logs: &[f64], s: &RaceSettings) -> f64 {
    let prior = (1.0 + s.prior_launch_sigma_pct / 100.0).ln();
    if logs.len() < 2 {
        return prior;
    }
    let sigma = sd(logs);
    let (df, prior_df) = ((logs.len() - 1) as f64, f64::from(s.prior_df));
    ((df * sigma * sigma + prior_df * prior * prior) / (df + prior_df)).sqrt()
}

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

/// Where a candidate stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum ArmStatus {
    Racing,
    /// Left the race after `after_round` rounds, for `reason`.
    Dropped {
        after_round: u32,
        reason: String,
    },
    /// A launch failed: a config that fails is never the winner.
    Failed {
        round: u32,
    },
    /// The budget could not resolve it at the measured noise.
    NotRaced {
        reason: String,
    },
}

/// One paired round: what each arm measured (None: not launched or failed), and the order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    pub order: Vec<usize>,
    pub samples: Vec<Option<Sample>>,
}

/// The noise the probe (and later the rounds) measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NoiseEstimate {
    /// σ of `ln tg` between the probe's launches of one config, in percent.
    pub launch_sigma_pct: f64,
    /// Degrees of freedom behind it.
    pub df: u32,
    /// The σ sizing used (percent): the probe's pooled with the prior
    /// ([`RaceSettings::prior_launch_sigma_pct`]).
    #[serde(default)]
    pub sizing_sigma_pct: f64,
    /// Rounds needed to decide either way at the sizing σ: a gain of `target_gain_pct` with
    /// 80 % power, and a tie (the 95 % interval's half-width inside the band).
    pub rounds_to_resolve: u32,
    /// Candidates the budget can race that many rounds.
    pub affordable_candidates: u32,
}

/// A candidate's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateResult {
    /// Index into the caller's candidate list.
    pub index: usize,
    pub status: ArmStatus,
    /// Paired verdict against the reference over the rounds it ran, at the reporting
    /// confidence (None: no paired round).
    pub vs_reference: Option<PairedVerdict>,
    /// The same at the claim confidence: what decides a win.
    pub claim: Option<PairedVerdict>,
}

/// What a race decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RaceOutcome {
    /// The winning candidate (index into the caller's list); None: the reference stays.
    pub winner: Option<usize>,
    /// Why the winner won, or why none did.
    pub reason: String,
    pub candidates: Vec<CandidateResult>,
    /// From the probe (None without a probe or with fewer than 2 ok probe launches).
    pub noise: Option<NoiseEstimate>,
    /// σ of a paired `ln` generation ratio (percent) pooled over the probe and every paired
    /// series at the end, and its degrees of freedom: the box's noise as the race saw it.
    pub pair_sigma_pct: Option<f64>,
    pub pair_sigma_df: Option<u32>,
    pub launches: u32,
    /// Confidence of the win claims (the family level split over looks and candidates).
    pub claim_confidence: f64,
    pub rounds: Vec<Round>,
    /// The probe's samples of the reference.
    pub probe: Vec<Sample>,
    /// Baselines raced (1: the default alone; 2: the default and a second command the user
    /// could type, e.g. `--fit-target`); 0 in files written before there were two.
    #[serde(default)]
    pub baselines: usize,
    /// The baseline every candidate was judged against: the better of the two on the
    /// objective (0: the first, 1: the second).
    #[serde(default)]
    pub reference_arm: usize,
    /// The second baseline against the first, over the rounds both ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_vs_first: Option<PairedVerdict>,
    /// Where each baseline stands (racing to the end, dropped as clearly slower, failed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline_status: Vec<ArmStatus>,
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

    /// The baseline candidates are judged against: the only one left, or of two, the one named
    /// by [`Race::with_tie_to`] unless the other is faster on the objective beyond the noise
    /// (its paired interval against it above 0, over the rounds both ran).
    pub fn reference(&self) -> usize {
        if self.baselines < 2 {
            return REFERENCE;
        }
        let second_out = matches!(self.status[1], ArmStatus::Failed { .. })
            || (matches!(self.status[1], ArmStatus::Dropped { .. })
                && self.status[REFERENCE] == ArmStatus::Racing);
        if second_out {
            return REFERENCE;
        }
        if self.status[REFERENCE] != ArmStatus::Racing {
            return 1;
        }
        let (tie, other) = (self.tie_to, 1 - self.tie_to);
        let other_faster = self
            .verdict(other, tie)
            .and_then(|v| v.comparison(self.primary_metric()).lo_log)
            .is_some_and(|lo| lo > 0.0);
        if other_faster {
            other
        } else {
            tie
        }
    }

    /// What the race decides on: time per request, or generation speed.
    fn primary_metric(&self) -> crate::stats::Metric {
        if self.s.by_request {
            crate::stats::Metric::Request
        } else {
            crate::stats::Metric::Gen
        }
    }

    /// Mean `ln(a / b)` of the primary metric (or prompt speed) over their paired rounds;
    /// −∞ when they share none.
    fn mean_log(&self, a: usize, b: usize, primary: bool) -> f64 {
        let by = self.s.by_request;
        let d: Vec<f64> = self
            .pairs(a, b)
            .iter()
            .map(|(x, y)| {
                if primary {
                    (x.primary(by) / y.primary(by)).ln()
                } else {
                    (x.prompt_tps / y.prompt_tps).ln()
                }
            })
            .collect();
        if d.is_empty() {
            f64::NEG_INFINITY
        } else {
            d.iter().sum::<f64>() / d.len() as f64
        }
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

    /// σ of the probe's `ln tg`, and how many candidates the budget can resolve.
    fn size_from_probe(&mut self) {
        let by = self.s.by_request;
        let logs: Vec<f64> = self.probe.iter().map(|s| s.primary(by).ln()).collect();
        if logs.len() < 2 {
            return;
        }
        let sigma = sd(&logs);
        let sizing = pooled_launch_sigma(&logs, &self.s);
        let pair_sigma = sizing * std::f64::consts::SQRT_2;
        let target = (1.0 + self.s.target_gain_pct / 100.0).ln();
        let band = self.s.band.log_half_width();
        let z80 = super::z_quantile(0.8);
        // Enough rounds for both decisions the race exists for: a gain of the target size
        // (80 % power), and a tie, whose interval must fit inside the band (a config equal
        // in generation and faster in prompt wins only through a tie).
        let mut n = self.s.min_rounds.max(2);
        while n < 1000 {
            let t = super::t_quantile(0.5 + self.s.confidence / 2.0, (n - 1) as f64);
            let half = pair_sigma / (n as f64).sqrt();
            if (t + z80) * half <= target && t * half <= band {
                break;
            }
            n += 1;
        }
        let left = self.budget_left().saturating_sub(
            // the probe launches still queued are spent too
            self.queue.len() as u32,
        );
        let n_candidates = (self.n_arms - self.baselines) as u32;
        let affordable = (left / n)
            .saturating_sub(self.baselines as u32)
            .clamp(1, n_candidates.max(1));
        self.noise = Some(NoiseEstimate {
            launch_sigma_pct: (sigma.exp() - 1.0) * 100.0,
            df: (logs.len() - 1) as u32,
            sizing_sigma_pct: (sizing.exp() - 1.0) * 100.0,
            rounds_to_resolve: n,
            affordable_candidates: affordable,
        });
        // Candidates come best-ranked first: keep the first `affordable` that still race.
        let mut kept = 0;
        for i in self.baselines..self.n_arms {
            if self.status[i] != ArmStatus::Racing {
                continue;
            }
            if kept < affordable {
                kept += 1;
            } else {
                self.status[i] = ArmStatus::NotRaced {
                    reason: format!(
                        "at the noise sized for (σ {:.1} % per launch; the probe read {:.1} %) deciding a {:.0} % gain or a tie within ±{} % takes {n} rounds; {} launches afford {affordable} candidate(s)",
                        (sizing.exp() - 1.0) * 100.0,
                        (sigma.exp() - 1.0) * 100.0,
                        self.s.target_gain_pct,
                        self.s.band.pct,
                        left
                    ),
                };
            }
        }
    }

    /// The level of the "better" claims: the family level split (Bonferroni) over every look
    /// the budget allows and every candidate raced, so that peeking after each ABBA pair of
    /// rounds at several candidates keeps the chance of a false win within `1 − confidence`.
    fn claim_level(&self) -> f64 {
        // Every candidate given may race (one waiting takes the place of one that leaves).
        let m = (self.n_arms - self.baselines).max(1) as u32;
        let racing = self.racing().len().max(1) as u32;
        let left = self.budget_left();
        // The most rounds possible: every other candidate (and the second baseline) dropped
        // after one round.
        let first = racing + self.baselines as u32;
        let max_rounds = if first > 2 {
            1 + left.saturating_sub(first) / 2
        } else {
            left / 2
        };
        let (min, every) = (self.s.min_rounds.max(2), self.s.look_every.max(1));
        let looks = if max_rounds >= min {
            let points = 1 + (max_rounds - min) / every;
            points + u32::from((max_rounds - min) % every != 0)
        } else {
            1
        };
        1.0 - (1.0 - self.s.confidence) / f64::from(looks * m)
    }

    /// The level the race's claims use.
    pub fn claim_confidence(&self) -> f64 {
        self.claim_confidence
    }

    /// Paired samples `(a, b)` over the rounds where both ran.
    fn pairs(&self, a: usize, b: usize) -> Vec<(Sample, Sample)> {
        self.rounds
            .iter()
            .filter_map(|r| Some((r.samples[a]?, r.samples[b]?)))
            .collect()
    }

    /// At the reporting level (used for drops: Worse, Tie).
    fn verdict(&self, a: usize, b: usize) -> Option<PairedVerdict> {
        PairedVerdict::from_pairs_by(
            &self.pairs(a, b),
            self.s.confidence,
            self.s.band,
            self.s.by_request,
        )
    }

    /// At the claim level (used for wins: Better).
    fn claim(&self, a: usize, b: usize) -> Option<PairedVerdict> {
        PairedVerdict::from_pairs_by(
            &self.pairs(a, b),
            self.claim_confidence,
            self.s.band,
            self.s.by_request,
        )
    }

    /// Mean `ln` ratio of an arm's primary metric (generation, or requests per second) to the
    /// reference's (−∞ when unknown).
    fn gen_mean(&self, arm: usize) -> f64 {
        self.mean_log(arm, self.reference(), true)
    }

    /// Pooled σ of a paired `ln` gen ratio, and its degrees of freedom: the probe (σ²·2) and
    /// every survivor's or dropped candidate's paired series against the reference.
    fn pooled_pair_sigma(&self) -> Option<(f64, f64)> {
        let mut ss = 0.0;
        let mut df = 0.0;
        let by = self.s.by_request;
        if self.probe.len() >= 2 {
            let logs: Vec<f64> = self.probe.iter().map(|s| s.primary(by).ln()).collect();
            let m = logs.iter().sum::<f64>() / logs.len() as f64;
            ss += 2.0 * logs.iter().map(|x| (x - m).powi(2)).sum::<f64>();
            df += (logs.len() - 1) as f64;
        }
        for i in 1..self.n_arms {
            let d: Vec<f64> = self
                .pairs(i, REFERENCE)
                .iter()
                .map(|(a, r)| (a.primary(by) / r.primary(by)).ln())
                .collect();
            if d.len() >= 2 {
                let m = d.iter().sum::<f64>() / d.len() as f64;
                ss += d.iter().map(|x| (x - m).powi(2)).sum::<f64>();
                df += (d.len() - 1) as f64;
            }
        }
        (df >= 2.0).then(|| ((ss / df).sqrt(), df))
    }

    /// After a round: drop clear losers, take the claims due, decide whether to stop.
    fn look(&mut self) {
        self.looked = self.rounds.len();
        let r = self.rounds.len() as u32;
        let racing = self.racing();
        let mut drops: Vec<(usize, String)> = Vec::new();
        let by = self.s.by_request;
        let what = if by { "time per request" } else { "generation" };

        // Clear losers, with the pooled noise: candidates against each other and the
        // reference, and the baselines against each other.
        if let Some((sigma, df)) = self.pooled_pair_sigma() {
            let t = super::t_quantile(0.5 + self.s.drop_confidence / 2.0, df);
            let reference = self.reference();
            let mut others = racing.clone();
            others.push(reference);
            let mut tested: Vec<(usize, Vec<usize>)> =
                racing.iter().map(|&i| (i, others.clone())).collect();
            if self.live_baselines().len() == 2 {
                tested.push((0, vec![1]));
                tested.push((1, vec![0]));
            }
            for (i, others) in &tested {
                let i = *i;
                for &j in others.iter().filter(|&&j| j != i) {
                    let d: Vec<f64> = self
                        .pairs(i, j)
                        .iter()
                        .map(|(a, b)| (a.primary(by) / b.primary(by)).ln())
                        .collect();
                    if d.is_empty() {
                        continue;
                    }
                    let mean = d.iter().sum::<f64>() / d.len() as f64;
                    if mean + t * sigma / (d.len() as f64).sqrt() < 0.0 {
                        drops.push((
                            i,
                            format!(
                                "clearly slower in {what} than {} ({:+.1} % over {} rounds, pooled noise σ {:.1} %)",
                                self.arm_name(j),
                                (mean.exp() - 1.0) * 100.0,
                                d.len(),
                                sigma * 100.0
                            ),
                        ));
                        break;
                    }
                }
            }
        }

        // Claims, with each pair's own interval.
        let due = r >= self.s.min_rounds && (r - self.s.min_rounds) % self.s.look_every.max(1) == 0
            || self.budget_left() < 2;
        let reference = self.reference();
        if due {
            for &i in &racing {
                let Some(v) = self.verdict(i, reference) else {
                    continue;
                };
                if v.gen.rounds < self.s.min_rounds as usize {
                    continue;
                }
                match v.decision {
                    Decision::Worse => {
                        drops.push((i, format!("slower than the reference: {}", describe(&v))))
                    }
                    Decision::Tie => drops.push((
                        i,
                        format!(
                            "ties the reference (inside ±{} %): {}",
                            self.s.band.pct,
                            describe(&v)
                        ),
                    )),
                    _ => {}
                }
            }
            for (x, &i) in racing.iter().enumerate() {
                for &j in &racing[x + 1..] {
                    let Some(v) = self.verdict(i, j) else {
                        continue;
                    };
                    if v.gen.rounds < self.s.min_rounds as usize {
                        continue;
                    }
                    let loser = match v.decision {
                        Decision::Worse => Some((i, j)),
                        Decision::Better => Some((j, i)),
                        Decision::Tie if self.gen_mean(i) < self.gen_mean(j) => Some((i, j)),
                        Decision::Tie => Some((j, i)),
                        Decision::Undecided => None,
                    };
                    if let Some((l, w)) = loser {
                        let v = self.verdict(l, w).expect("paired rounds exist");
                        drops.push((
                            l,
                            format!(
                                "{} {}: {}",
                                if v.decision == Decision::Tie {
                                    "ties"
                                } else {
                                    "slower than"
                                },
                                self.arm_name(w),
                                describe(&v)
                            ),
                        ));
                    }
                }
            }
        }
        for (i, reason) in drops {
            // A baseline leaves only while the other is still launched.
            if i < self.baselines && self.live_baselines().len() < 2 {
                continue;
            }
            if self.status[i] == ArmStatus::Racing {
                self.status[i] = ArmStatus::Dropped {
                    after_round: r,
                    reason,
                };
            }
        }

        self.promote();
        let racing = self.racing();
        match racing.as_slice() {
            [] => self.finished = Some(self.nobody_left()),
            [only] if due => {
                let reference = self.reference();
                if let Some(v) = self.claim(*only, reference) {
                    if v.decision == Decision::Better && v.gen.rounds >= self.s.min_rounds as usize
                    {
                        self.finished = Some(format!(
                            "{} beats {}: {}",
                            self.arm_name(*only),
                            self.reference_name(),
                            describe(&v)
                        ));
                    }
                }
            }
            _ => {}
        }
    }

    /// What the race decided so far. The look due after the last complete round (drops, claims)
    /// is taken when the next launch is asked for; a race rebuilt from a journal, or one the
    /// tune's clock stopped, may not have asked: that look is taken here, on a copy, so the
    /// outcome says what the rounds decided (not a candidate "racing" and "the race is not
    /// over" after the round that showed it slower).
    pub fn outcome(&self) -> RaceOutcome {
        let unlooked = self.finished.is_none()
            && self.pending.is_none()
            && self.queue.is_empty()
            && self.looked < self.rounds.len();
        if !unlooked {
            return self.decided();
        }
        let mut settled = self.clone();
        settled.look();
        if settled.finished.is_none() && settled.budget_left() < 2 {
            settled.finished = Some(settled.budget_spent());
        }
        settled.decided()
    }

    fn decided(&self) -> RaceOutcome {
        let reference = self.reference();
        let candidates: Vec<CandidateResult> = (self.baselines..self.n_arms)
            .map(|i| CandidateResult {
                index: i - self.baselines,
                status: self.status[i].clone(),
                vs_reference: self.verdict(i, reference),
                claim: self.claim(i, reference),
            })
            .collect();
        // The winner: a survivor Better than the reference; the fastest in generation, or
        // inside a generation tie with it, the fastest in prompt processing.
        let better: Vec<usize> = self
            .racing()
            .into_iter()
            .filter(|&i| {
                self.claim(i, reference).is_some_and(|v| {
                    v.decision == Decision::Better && v.gen.rounds >= self.s.min_rounds as usize
                })
            })
            .collect();
        let top = better
            .iter()
            .copied()
            .max_by(|a, b| self.gen_mean(*a).total_cmp(&self.gen_mean(*b)));
        let winner = top.map(|t| {
            better
                .iter()
                .copied()
                .filter(|&i| {
                    i == t
                        || self
                            .verdict(i, t)
                            .is_some_and(|v| v.gen_decision == Decision::Tie)
                })
                .max_by(|a, b| self.prompt_mean(*a).total_cmp(&self.prompt_mean(*b)))
                .unwrap_or(t)
        });
        let reason = match winner {
            Some(w) => {
                let v = self
                    .claim(w, reference)
                    .expect("a winner has paired rounds");
                format!(
                    "{} beats {}: {}",
                    self.arm_name(w),
                    self.reference_name(),
                    describe(&v)
                )
            }
            None => self.finished.clone().unwrap_or_else(|| {
                if self.rounds.is_empty() {
                    "no race ran (no round was measured)".into()
                } else {
                    "the race is not over".into()
                }
            }),
        };
        RaceOutcome {
            winner: winner.map(|w| w - self.baselines),
            reason,
            candidates,
            noise: self.noise,
            pair_sigma_pct: self
                .pooled_pair_sigma()
                .map(|(s, _)| (s.exp() - 1.0) * 100.0),
            pair_sigma_df: self.pooled_pair_sigma().map(|(_, df)| df as u32),
            launches: self.used,
            claim_confidence: self.claim_confidence,
            rounds: self.rounds.clone(),
            probe: self.probe.clone(),
            baselines: self.baselines,
            reference_arm: reference,
            second_vs_first: (self.baselines > 1)
                .then(|| self.verdict(1, REFERENCE))
                .flatten(),
            baseline_status: self.status[..self.baselines].to_vec(),
        }
    }

    /// "the reference", or which of two baselines is the reference.
    fn reference_name(&self) -> String {
        match (self.baselines, self.reference()) {
            (1, _) => "the reference".into(),
            (_, REFERENCE) => "the reference (the first baseline)".into(),
            _ => "the reference (the second baseline)".into(),
        }
    }

    fn prompt_mean(&self, arm: usize) -> f64 {
        self.mean_log(arm, self.reference(), false)
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
mod tests {
    use super::*;
    use crate::stats::noise::{NoiseModel, NoisyBox};
    use crate::trial::replay::{ReplayAnswer, ReplayRunner};
    use crate::trial::OutcomeKind;

    #[test]
    fn a_trial_runner_drives_the_race_with_roles_and_failures() {
        let base = LaunchConfig::baseline(4096);
        let fast = LaunchConfig {
            ubatch: Some(1024),
            ..base.clone()
        };
        let broken = LaunchConfig {
            n_cpu_moe: Some(2),
            ..base.clone()
        };
        let (b2, f2, x2) = (base.clone(), fast.clone(), broken.clone());
        let truth = vec![
            Sample {
                gen_tps: 100.0,
                prompt_tps: 1000.0,
                request_rate: None,
            },
            Sample {
                gen_tps: 125.0,
                prompt_tps: 1000.0,
                request_rate: None,
            },
        ];
        let mut bx = NoisyBox::new(NoiseModel::measured_box(), truth, 5);
        let mut n = 0u64;
        let mut runner = ReplayRunner::from_fn(move |c| {
            n += 1;
            if *c == x2 {
                return ReplayAnswer::Fail(OutcomeKind::OomLoad);
            }
            let arm = usize::from(*c == f2);
            assert!(*c == b2 || *c == f2);
            let s = bx.measure(arm, n / 3, n % 3);
            ReplayAnswer::Ok {
                gen_tps: s.gen_tps,
                prompt_tps: s.prompt_tps,
                peak_vram_mib: None,
            }
        });
        let settings = RaceSettings::default();
        let (out, trials) = run_trials(settings, &base, &[broken, fast], &mut runner, vec![]);
        assert_eq!(out.launches as usize, trials.len());
        assert!(trials.len() <= settings.budget_launches as usize);
        let roles: Vec<TrialRole> = trials.iter().map(|t| t.role).collect();
        assert_eq!(
            &roles[..3],
            [TrialRole::Baseline; 3],
            "the probe runs the baseline"
        );
        assert!(roles[3..].iter().all(|r| *r == TrialRole::Confirm));
        assert!(matches!(
            out.candidates[0].status,
            ArmStatus::Failed { round: 0 }
        ));
        assert_eq!(out.winner, Some(1), "{}\n{:#?}", out.reason, out.candidates);
        assert!(out.reason.contains("generation +"), "{}", out.reason);
        assert!(out.pair_sigma_pct.is_some() && out.noise.is_some());
    }

    /// Drive a race of two baselines and one candidate on a box as noisy as the lent GPU
    /// machine (3.5 % per launch, 5 % drift between rounds), whose true generation speeds are
    /// `gen` (default, fit-target, candidate). Returns the reference the finished race names.
    fn reference_of(tie_to: Option<usize>, gen: [f64; 3], seed: u64) -> usize {
        let truth = gen
            .iter()
            .map(|&g| Sample {
                gen_tps: g,
                prompt_tps: 1000.0,
                request_rate: None,
            })
            .collect();
        let mut bx = NoisyBox::new(NoiseModel::measured_box(), truth, seed);
        let mut race = Race::with_baselines(RaceSettings::default(), 2, 1);
        if let Some(t) = tie_to {
            race = race.with_tie_to(t);
        }
        while let Some(l) = race.next_launch() {
            // The probe is round 0 of the box's drift, the race's rounds 1, 2, ...
            let s = bx.measure(l.arm, l.round.map_or(0, |r| r as u64 + 1), 0);
            race.record(l, Some(s));
        }
        race.outcome().reference_arm
    }

    #[test]
    fn the_fuller_baseline_stays_the_reference_until_the_other_is_faster_beyond_the_noise() {
        // The default 1 % faster, within the noise: the fit-target baseline (named as the one
        // that keeps more of the model on the card) stays the reference; without a
        // preference, the default does. A baseline the race drops as clearly slower leaves
        // it, and on this box that rule misfires in one or two of eight seeds.
        let close = [101.0, 100.0, 95.0];
        let seeds = 1..=8u64;
        let fit_kept = seeds
            .clone()
            .filter(|&s| reference_of(Some(1), close, s) == 1);
        assert!(fit_kept.count() >= 6);
        let default_kept = seeds.clone().filter(|&s| reference_of(None, close, s) == 0);
        assert!(default_kept.count() >= 6);
        for seed in seeds {
            // 30 % faster: beyond the noise, whichever was preferred.
            assert_eq!(
                reference_of(Some(1), [130.0, 100.0, 95.0], seed),
                0,
                "seed {seed}"
            );
            assert_eq!(
                reference_of(None, [100.0, 130.0, 95.0], seed),
                1,
                "seed {seed}"
            );
        }
    }
}
