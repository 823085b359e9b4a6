//! Judging the rounds: paired verdicts between arms, which baseline is the reference, and the
//! look after each round (clear losers dropped with the pooled noise, claims with each pair's
//! own interval).

use super::{describe, ArmStatus, Race, REFERENCE};
use crate::stats::{Decision, PairedVerdict, Sample};

impl Race {
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
    pub(super) fn primary_metric(&self) -> crate::objective::Metric {
        if self.s.by_request {
            crate::objective::Metric::Request
        } else {
            crate::objective::Metric::Gen
        }
    }

    /// Mean `ln(a / b)` of the primary metric (or prompt speed) over their paired rounds;
    /// −∞ when they share none.
    pub(super) fn mean_log(&self, a: usize, b: usize, primary: bool) -> f64 {
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

    /// Paired samples `(a, b)` over the rounds where both ran.
    pub(super) fn pairs(&self, a: usize, b: usize) -> Vec<(Sample, Sample)> {
        self.rounds
            .iter()
            .filter_map(|r| Some((r.samples[a]?, r.samples[b]?)))
            .collect()
    }

    /// At the reporting level (used for drops: Worse, Tie).
    pub(super) fn verdict(&self, a: usize, b: usize) -> Option<PairedVerdict> {
        PairedVerdict::from_pairs_by(
            &self.pairs(a, b),
            self.s.confidence,
            self.s.band,
            self.s.by_request,
        )
    }

    /// At the claim level (used for wins: Better).
    pub(super) fn claim(&self, a: usize, b: usize) -> Option<PairedVerdict> {
        PairedVerdict::from_pairs_by(
            &self.pairs(a, b),
            self.claim_confidence,
            self.s.band,
            self.s.by_request,
        )
    }

    /// Mean `ln` ratio of an arm's primary metric (generation, or requests per second) to the
    /// reference's (−∞ when unknown).
    pub(super) fn gen_mean(&self, arm: usize) -> f64 {
        self.mean_log(arm, self.reference(), true)
    }

    /// Pooled σ of a paired `ln` gen ratio, and its degrees of freedom: the probe (σ²·2) and
    /// every survivor's or dropped candidate's paired series against the reference.
    pub(super) fn pooled_pair_sigma(&self) -> Option<(f64, f64)> {
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
    pub(super) fn look(&mut self) {
        self.looked = self.rounds.len();
        let r = self.rounds.len() as u32;
        let racing = self.racing();
        let mut drops: Vec<(usize, String)> = Vec::new();
        let by = self.s.by_request;
        let what = if by { "time per request" } else { "generation" };

        // Clear losers, with the pooled noise: candidates against each other and the
        // reference, and the baselines against each other.
        if let Some((sigma, df)) = self.pooled_pair_sigma() {
            let t = crate::stats::t_quantile(0.5 + self.s.drop_confidence / 2.0, df);
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

    pub(super) fn prompt_mean(&self, arm: usize) -> f64 {
        self.mean_log(arm, self.reference(), false)
    }
}
