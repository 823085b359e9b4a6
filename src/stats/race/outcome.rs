//! What a race decided: each candidate's status and verdicts, the winner, the noise measured.

use super::{describe, Race, REFERENCE};
use crate::stats::{Decision, PairedVerdict, Sample};
use serde::{Deserialize, Serialize};

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

impl Race {
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

    pub(super) fn decided(&self) -> RaceOutcome {
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
    pub(super) fn reference_name(&self) -> String {
        match (self.baselines, self.reference()) {
            (1, _) => "the reference".into(),
            (_, REFERENCE) => "the reference (the first baseline)".into(),
            _ => "the reference (the second baseline)".into(),
        }
    }
}
