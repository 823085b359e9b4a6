//! How a race spends its launches: its settings, the noise probe's sizing (how many candidates
//! the budget can resolve) and the level of its claims (see the parent module's documentation).

use super::{sd, ArmStatus, NoiseEstimate, Race};
use crate::stats::Band;
use serde::{Deserialize, Serialize};

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

impl Race {
    /// σ of the probe's `ln tg`, and how many candidates the budget can resolve.
    pub(super) fn size_from_probe(&mut self) {
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
        let z80 = crate::stats::z_quantile(0.8);
        // Enough rounds for both decisions the race exists for: a gain of the target size
        // (80 % power), and a tie, whose interval must fit inside the band (a config equal
        // in generation and faster in prompt wins only through a tie).
        let mut n = self.s.min_rounds.max(2);
        while n < 1000 {
            let t = crate::stats::t_quantile(0.5 + self.s.confidence / 2.0, (n - 1) as f64);
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
    pub(super) fn claim_level(&self) -> f64 {
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
}
