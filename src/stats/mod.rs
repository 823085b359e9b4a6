//! Paired comparisons of launch configs from interleaved rounds, with honest intervals.
//!
//! On a shared box the requests of one launch agree to about 2 %, while the same config moves
//! ±15 % between launches minutes apart and every config drifts together
//! (`/work/shared/notes/measuring.md`). So:
//! - **the launch is the unit of evidence**: one launch gives one number per metric (the
//!   median of its requests); its requests are never pooled as independent samples;
//! - **comparisons are paired**: a candidate and its reference are launched in the same round,
//!   and the statistic is the per-round ratio taken in logs, `ln(cand / ref)`, which cancels
//!   the drift the round shares;
//! - **every gain carries a Student-t interval** over the rounds:
//!   `+4.1 % [−1.2, +9.6] (95 %, 6 rounds)`;
//! - **a tie is a statement**: the interval lies inside the practical band (±3 % by default).
//!
//! [`race`] spends launches where they decide something; [`noise`] is a seeded model of the
//! box for deterministic tests.

pub mod noise;
pub mod race;

use crate::objective::Metric;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What one launch measured: generation and prompt speed (tokens per second).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub gen_tps: f64,
    pub prompt_tps: f64,
    /// Requests per second of the tune's workload (1 / time per request), when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_rate: Option<f64>,
}

impl Sample {
    /// The launch's medians, when it ended ok with measurements.
    pub fn from_outcome(o: &crate::trial::TrialOutcome) -> Option<Sample> {
        if !o.kind.is_ok() {
            return None;
        }
        Self::measured(o)
    }

    /// The launch's medians whether or not it stayed within the VRAM budget (a baseline is
    /// what the user would type: it is compared even where its peak went past the budget, and
    /// shown as such); None for a failed launch.
    pub fn measured(o: &crate::trial::TrialOutcome) -> Option<Sample> {
        let s = Sample {
            gen_tps: o.gen_tps()?,
            prompt_tps: o.prompt_tps()?,
            request_rate: o.request_s().and_then(crate::objective::request_rate),
        };
        s.is_valid().then_some(s)
    }

    /// The value a race decides on: requests per second when `by_request` and measured, else
    /// generation speed.
    pub fn primary(&self, by_request: bool) -> f64 {
        match self.request_rate {
            Some(r) if by_request => r,
            _ => self.gen_tps,
        }
    }

    /// Both speeds finite and positive (a ratio of them is defined).
    pub fn is_valid(&self) -> bool {
        self.gen_tps.is_finite()
            && self.gen_tps > 0.0
            && self.prompt_tps.is_finite()
            && self.prompt_tps > 0.0
            && self.request_rate.is_none_or(|r| r.is_finite() && r > 0.0)
    }

    /// The launch's value of what a paired comparison judges `m` on
    /// ([`Metric::judged_on`]: generation at depth and the blend on generation).
    pub fn get(&self, m: Metric) -> f64 {
        crate::objective::Rates {
            gen_tps: self.gen_tps,
            prompt_tps: self.prompt_tps,
            gen_at_depth_tps: None,
            request_rate: self.request_rate,
        }
        .judged(m)
    }
}

/// The practical band: differences smaller than this many percent do not matter.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Band {
    pub pct: f64,
}

impl Default for Band {
    fn default() -> Self {
        Band { pct: 3.0 }
    }
}

impl Band {
    /// Half-width in log space, `ln(1 + pct/100)` (the band is symmetric in logs).
    pub fn log_half_width(&self) -> f64 {
        (1.0 + self.pct.max(0.0) / 100.0).ln()
    }
}

/// What a comparison says about a candidate against its reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The whole interval lies above 1.0 (and not inside the band).
    Better,
    /// The whole interval lies below 1.0 (and not inside the band).
    Worse,
    /// The whole interval lies inside the practical band: the difference does not matter.
    Tie,
    /// The interval straddles 1.0 or a band edge: more rounds would tell.
    Undecided,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Better => "better",
            Decision::Worse => "worse",
            Decision::Tie => "tie",
            Decision::Undecided => "undecided",
        }
    }

    pub fn is_decided(self) -> bool {
        self != Decision::Undecided
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A paired comparison of one metric: the mean of the per-round log ratios and its Student-t
/// interval. All values are in log space; [`Comparison::gain_pct`] and
/// [`Comparison::interval_pct`] turn them into percentages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Paired rounds (ratios) behind the numbers.
    pub rounds: usize,
    /// Mean of `ln(cand / ref)` over the rounds.
    pub mean_log: f64,
    /// Sample standard deviation of the log ratios (None with one round).
    pub sd_log: Option<f64>,
    /// Interval bounds in log space (None with one round: no interval).
    pub lo_log: Option<f64>,
    pub hi_log: Option<f64>,
    /// Two-sided confidence level of the interval, e.g. 0.95.
    pub confidence: f64,
}

impl Comparison {
    /// From per-round log ratios; None when there are none (or one is not finite).
    pub fn from_log_ratios(d: &[f64], confidence: f64) -> Option<Comparison> {
        if d.is_empty() || d.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let n = d.len();
        let mean = d.iter().sum::<f64>() / n as f64;
        let (sd, lo, hi) = if n >= 2 {
            let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            let sd = var.sqrt();
            let half = t_quantile(0.5 + confidence / 2.0, (n - 1) as f64) * sd / (n as f64).sqrt();
            (Some(sd), Some(mean - half), Some(mean + half))
        } else {
            (None, None, None)
        };
        Some(Comparison {
            rounds: n,
            mean_log: mean,
            sd_log: sd,
            lo_log: lo,
            hi_log: hi,
            confidence,
        })
    }

    /// From paired values `(candidate, reference)`, one pair per round.
    pub fn from_pairs(pairs: &[(f64, f64)], confidence: f64) -> Option<Comparison> {
        let d: Vec<f64> = pairs.iter().map(|(c, r)| (c / r).ln()).collect();
        Self::from_log_ratios(&d, confidence)
    }

    /// The gain in percent: `exp(mean) − 1` (the geometric mean of the ratios).
    pub fn gain_pct(&self) -> f64 {
        (self.mean_log.exp() - 1.0) * 100.0
    }

    /// The interval in percent, when there is one.
    pub fn interval_pct(&self) -> Option<(f64, f64)> {
        Some((
            (self.lo_log?.exp() - 1.0) * 100.0,
            (self.hi_log?.exp() - 1.0) * 100.0,
        ))
    }

    /// The median per-round ratio is not kept; the geometric mean ratio is `exp(mean_log)`.
    pub fn ratio(&self) -> f64 {
        self.mean_log.exp()
    }

    /// Better / Worse / Tie / Undecided against the practical band. A tie (the interval
    /// inside the band) comes first: a gain too small to matter is not a win. A ratio that is
    /// no measurement ([`Comparison::is_plausible`]) decides nothing: "broken measurement"
    /// is never beside "proven faster".
    pub fn decide(&self, band: Band) -> Decision {
        let (Some(lo), Some(hi)) = (self.lo_log, self.hi_log) else {
            return Decision::Undecided;
        };
        if !self.is_plausible() {
            return Decision::Undecided;
        }
        let b = band.log_half_width();
        if lo >= -b && hi <= b {
            Decision::Tie
        } else if lo > 0.0 {
            Decision::Better
        } else if hi < 0.0 {
            Decision::Worse
        } else {
            Decision::Undecided
        }
    }
}

/// Past this factor either way, a ratio between two launches of one model is no measurement
/// (a broken server's timings): it is never printed as a number.
pub const ABSURD_RATIO: f64 = 1000.0;

/// A finite ratio within [`ABSURD_RATIO`] either way.
pub fn plausible_ratio(x: f64) -> bool {
    x.is_finite() && (1.0 / ABSURD_RATIO..=ABSURD_RATIO).contains(&x)
}

/// A ratio for people: `1.04`, or `implausible` where [`plausible_ratio`] says it is none.
pub fn fmt_ratio(x: f64) -> String {
    if plausible_ratio(x) {
        format!("{x:.2}")
    } else {
        "implausible".to_string()
    }
}

impl Comparison {
    /// Its mean ratio and interval ends are all [`plausible_ratio`]s.
    pub fn is_plausible(&self) -> bool {
        [Some(self.mean_log), self.lo_log, self.hi_log]
            .into_iter()
            .flatten()
            .all(|l| plausible_ratio(l.exp()))
    }
}

/// The fewest paired rounds a claim rests on ([`crate::objective::MIN_CLAIM_ROUNDS`]).
pub use crate::objective::MIN_CLAIM_ROUNDS;

/// An undecided interval reaching further than this either way (±25 % as a ratio) is too wide
/// to say anything: it is not printed ([`Comparison::too_noisy`]).
pub const MAX_SHOWN_HALF_WIDTH_PCT: f64 = 25.0;

impl Comparison {
    /// Why this comparison supports no claim, in plain words, where it does not: fewer than
    /// [`MIN_CLAIM_ROUNDS`] paired rounds (`too few rounds to tell (2 rounds; 3 needed)`), or an
    /// interval that straddles no difference and reaches past ±[`MAX_SHOWN_HALF_WIDTH_PCT`]
    /// (`too noisy to tell (spread 48 %) after 4 rounds`). Where it says so, the interval is
    /// never printed.
    pub fn too_noisy(&self) -> Option<String> {
        let rounds = plural_rounds(self.rounds);
        if self.rounds < MIN_CLAIM_ROUNDS || self.lo_log.is_none() || self.hi_log.is_none() {
            return Some(format!(
                "too few rounds to tell ({rounds}; {MIN_CLAIM_ROUNDS} needed)"
            ));
        }
        let (lo, hi) = (self.lo_log?, self.hi_log?);
        let wide = (1.0 + MAX_SHOWN_HALF_WIDTH_PCT / 100.0).ln();
        let straddles = lo <= 0.0 && hi >= 0.0;
        if straddles && (hi - lo) / 2.0 > wide {
            let spread = (self.sd_log.unwrap_or(0.0).exp() - 1.0) * 100.0;
            return Some(format!(
                "too noisy to tell (spread {spread:.0} %) after {rounds}"
            ));
        }
        None
    }

    /// [`Comparison::decide`], undecided where [`Comparison::too_noisy`] says the rounds
    /// support no claim.
    pub fn claim(&self, band: Band) -> Decision {
        if self.too_noisy().is_some() {
            Decision::Undecided
        } else {
            self.decide(band)
        }
    }
}

/// `1 round`, `4 rounds`.
pub fn plural_rounds(n: usize) -> String {
    if n == 1 {
        "1 round".to_string()
    } else {
        format!("{n} rounds")
    }
}

impl fmt::Display for Comparison {
    /// `+4.1 % [−1.2, +9.6] (95 %, 6 rounds)`; `+4.1 %: undecided, too few rounds to tell
    /// (2 rounds; 3 needed)` where the rounds support no claim (no interval printed).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = fmt_level(self.confidence);
        let rounds = plural_rounds(self.rounds);
        if !self.is_plausible() {
            return write!(
                f,
                "an implausible ratio, past {ABSURD_RATIO}x either way ({rounds}): a broken measurement"
            );
        }
        if let Some(why) = self.too_noisy() {
            return write!(f, "{} %: undecided, {why}", signed(self.gain_pct()));
        }
        match self.interval_pct() {
            Some((lo, hi)) => write!(
                f,
                "{} % [{}, {}] ({level} %, {rounds})",
                signed(self.gain_pct()),
                signed(lo),
                signed(hi)
            ),
            None => write!(f, "{} % (no interval: {rounds})", signed(self.gain_pct())),
        }
    }
}

/// `95`, or `97.5` when the level is not a whole percent.
pub fn fmt_level(c: f64) -> String {
    let p = c * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{}", p.round() as i64)
    } else {
        format!("{p:.1}")
    }
}

/// `+4.1`, `−1.2` (a real minus sign), `0.0`.
pub fn signed(x: f64) -> String {
    let r = (x * 10.0).round() / 10.0;
    if r > 0.0 {
        format!("+{r:.1}")
    } else if r < 0.0 {
        format!("\u{2212}{:.1}", -r)
    } else {
        "0.0".to_string()
    }
}

/// Generation and prompt comparisons of one candidate against one reference, and what the
/// objective makes of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedVerdict {
    pub gen: Comparison,
    pub prompt: Comparison,
    pub gen_decision: Decision,
    pub prompt_decision: Decision,
    /// Requests per second of the workload (the ratio of times per request, reference over
    /// candidate), when both sides measured it in every round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Comparison>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_decision: Option<Decision>,
    /// The objective's decision: time per request's where the race decides on it, else
    /// generation's, or prompt's inside a generation tie.
    pub decision: Decision,
    /// Which metric made the decision.
    pub decided_by: Metric,
}

impl PairedVerdict {
    /// From paired samples `(candidate, reference)`, one per round: generation leads, prompt
    /// speed decides inside a generation tie.
    pub fn from_pairs(pairs: &[(Sample, Sample)], confidence: f64, band: Band) -> Option<Self> {
        Self::from_pairs_by(pairs, confidence, band, false)
    }

    /// The same, deciding on time per request when `by_request` and every round measured it.
    pub fn from_pairs_by(
        pairs: &[(Sample, Sample)],
        confidence: f64,
        band: Band,
        by_request: bool,
    ) -> Option<Self> {
        let gen: Vec<(f64, f64)> = pairs.iter().map(|(c, r)| (c.gen_tps, r.gen_tps)).collect();
        let prompt: Vec<(f64, f64)> = pairs
            .iter()
            .map(|(c, r)| (c.prompt_tps, r.prompt_tps))
            .collect();
        let request: Option<Vec<(f64, f64)>> = pairs
            .iter()
            .map(|(c, r)| Some((c.request_rate?, r.request_rate?)))
            .collect();
        let gen = Comparison::from_pairs(&gen, confidence)?;
        let prompt = Comparison::from_pairs(&prompt, confidence)?;
        let request = request.and_then(|p| Comparison::from_pairs(&p, confidence));
        let (gd, pd) = (gen.decide(band), prompt.decide(band));
        let rd = request.as_ref().map(|c| c.decide(band));
        let (decision, decided_by) = match rd {
            Some(d) if by_request => (d, Metric::Request),
            _ => objective(gd, pd),
        };
        Some(PairedVerdict {
            gen,
            prompt,
            gen_decision: gd,
            prompt_decision: pd,
            request,
            request_decision: rd,
            decision,
            decided_by,
        })
    }

    /// The same verdict with every decision undecided where its rounds support no claim
    /// ([`Comparison::claim`]): what a comparison with a fixed number of rounds reports.
    pub fn claimed(mut self, band: Band) -> Self {
        self.gen_decision = self.gen.claim(band);
        self.prompt_decision = self.prompt.claim(band);
        self.request_decision = self.request.as_ref().map(|c| c.claim(band));
        let by_request = self.decided_by == Metric::Request;
        (self.decision, self.decided_by) = match self.request_decision {
            Some(d) if by_request => (d, Metric::Request),
            _ => objective(self.gen_decision, self.prompt_decision),
        };
        self
    }

    /// The comparison of metric `m` (time per request falls back to generation where it was
    /// not measured; generation at depth and the blend are judged on generation).
    pub fn comparison(&self, m: Metric) -> &Comparison {
        match m.judged_on() {
            Metric::Prompt => &self.prompt,
            Metric::Request => self.request.as_ref().unwrap_or(&self.gen),
            _ => &self.gen,
        }
    }

    /// The comparison that decided (time per request, generation or prompt).
    pub fn deciding(&self) -> &Comparison {
        self.comparison(self.decided_by)
    }
}

/// The objective: generation leads; prompt speed decides only when generation is a
/// statistical tie (its interval inside the band).
pub fn objective(gen: Decision, prompt: Decision) -> (Decision, Metric) {
    match gen {
        Decision::Tie => (prompt, Metric::Prompt),
        d => (d, Metric::Gen),
    }
}

/// The launch order of round `round` (0-based) over `n` configs: forward in even rounds,
/// reversed in odd ones, so two consecutive rounds form A B … B A and a drift that is linear
/// in time cancels out of every pair's ratios.
pub fn abba_order(n: usize, round: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    if round % 2 == 1 {
        v.reverse();
    }
    v
}

// ---------------------------------------------------------------------------------------------
// Student's t distribution, from statrs (issue 55: it replaced a hand-written incomplete beta
// function and bisection; the quantiles agree with the tables to 1e-4, below what is printed).

/// P(T ≤ t) for Student's t with `df` degrees of freedom.
pub fn t_cdf(t: f64, df: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    StudentsT::new(0.0, 1.0, df).map_or(f64::NAN, |d| d.cdf(t))
}

/// The `p` quantile of Student's t with `df` degrees of freedom (e.g. `t_quantile(0.975, 5)`
/// = 2.5706). `p` is clamped to (0, 1); `df` must be positive (NaN otherwise).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    StudentsT::new(0.0, 1.0, df).map_or(f64::NAN, |d| d.inverse_cdf(p))
}

/// The standard normal quantile (Student's t at an infinite df).
pub fn z_quantile(p: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, Normal};
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    Normal::new(0.0, 1.0).map_or(f64::NAN, |d| d.inverse_cdf(p))
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn absurd_ratios_are_never_printed_as_numbers() {
        assert_eq!(fmt_ratio(1.04), "1.04");
        for x in [f64::NAN, f64::INFINITY, 0.0, -1.0, 1e300, 1e-300, 1001.0] {
            assert_eq!(fmt_ratio(x), "implausible", "{x}");
        }
        let c = Comparison::from_pairs(&[(1e300, 1.0), (1e299, 1.0)], 0.95).unwrap();
        let shown = c.to_string();
        assert!(shown.contains("implausible"), "{shown}");
        assert!(shown.len() < 120, "{shown}");
        let per = crate::report::race::ran("B", "A", &c, Band::default());
        assert!(per.contains("implausible") && per.len() < 120, "{per}");
        let fine = Comparison::from_pairs(&[(1.05, 1.0), (1.03, 1.0)], 0.95).unwrap();
        assert!(fine.is_plausible() && fine.to_string().starts_with("+4"));
        // Issue 53: 0.01 s against 20.36 s over three tight rounds decides nothing.
        let broken =
            Comparison::from_pairs(&[(2036.0, 1.0), (2030.0, 1.0), (2040.0, 1.0)], 0.95).unwrap();
        assert!(!broken.is_plausible());
        assert_eq!(broken.claim(Band::default()), Decision::Undecided);
    }

    #[test]
    fn no_interval_and_no_claim_from_fewer_than_three_rounds_or_a_too_wide_interval() {
        let band = Band::default();
        let cmp = |d: &[f64]| Comparison::from_log_ratios(d, 0.95).unwrap();
        // Two rounds far apart in the same direction: decide() would say better; no claim.
        let two = cmp(&[0.30, 0.32]);
        assert_eq!(two.decide(band), Decision::Better);
        assert_eq!(two.claim(band), Decision::Undecided);
        let shown = two.to_string();
        assert_eq!(
            shown,
            "+36.3 %: undecided, too few rounds to tell (2 rounds; 3 needed)"
        );
        let per = crate::report::race::ran("B", "A", &two, band);
        assert!(!per.contains("CI") && per.contains("undecided"), "{per}");
        // An interval of 0.28×-2.92× says nothing: too noisy, with the spread, no interval.
        let wide = cmp(&[-1.2, 1.0, 0.9, -0.5]);
        assert_eq!(wide.claim(band), Decision::Undecided);
        let shown = wide.to_string();
        assert!(
            shown.contains("too noisy to tell (spread") && shown.contains("after 4 rounds"),
            "{shown}"
        );
        assert!(!shown.contains('['), "{shown}");
        // Enough rounds, a narrow interval: hyperfine's words, with the interval.
        let fine = cmp(&[0.10, 0.12, 0.09, 0.11]);
        assert_eq!(fine.claim(band), Decision::Better);
        let per = crate::report::race::ran("'B'", "'A'", &fine, band);
        assert!(
            per.starts_with("'B' ran 1.11× faster than 'A' (95 % CI 1.0")
                && per.ends_with(", 4 rounds: better)"),
            "{per}"
        );
        let slower = cmp(&[-0.10, -0.12, -0.09, -0.11]);
        let per = crate::report::race::ran("B", "A", &slower, band);
        assert!(
            per.starts_with("B ran 1.11× slower than A (95 % CI 1.0"),
            "{per}"
        );
    }

    #[test]
    fn t_quantiles_match_the_tables() {
        for (df, q) in [
            (1.0, 12.7062),
            (2.0, 4.3027),
            (3.0, 3.1824),
            (5.0, 2.5706),
            (10.0, 2.2281),
            (30.0, 2.0423),
        ] {
            let t = t_quantile(0.975, df);
            assert!((t - q).abs() < 1e-3, "df {df}: {t} vs {q}");
        }
        assert!((t_quantile(0.95, 4.0) - 2.1318).abs() < 1e-3);
        assert!((z_quantile(0.975) - 1.95996).abs() < 1e-4);
        assert!((t_quantile(0.025, 5.0) + 2.5706).abs() < 1e-3);
        assert!((t_cdf(0.0, 3.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_paired_comparison_renders_gain_interval_level_and_rounds() {
        // ratios 1.10, 1.00, 1.05, 1.02, 1.08, 1.00
        let pairs: Vec<(f64, f64)> = [110.0, 100.0, 105.0, 102.0, 108.0, 100.0]
            .iter()
            .map(|c| (*c, 100.0))
            .collect();
        let c = Comparison::from_pairs(&pairs, 0.95).unwrap();
        assert_eq!(c.rounds, 6);
        let s = c.to_string();
        assert_eq!(s, "+4.1 % [\u{2212}0.2, +8.6] (95 %, 6 rounds)");
        // The interval touches 1.0 and leaves the band: more rounds would tell.
        assert_eq!(c.decide(Band::default()), Decision::Undecided);
    }

    #[test]
    fn decisions_follow_the_interval_and_the_band() {
        let cmp = |d: &[f64]| Comparison::from_log_ratios(d, 0.95).unwrap();
        let band = Band::default();
        assert_eq!(
            cmp(&[0.001, -0.002, 0.0015, -0.001]).decide(band),
            Decision::Tie
        );
        assert_eq!(cmp(&[-0.10, -0.12, -0.09]).decide(band), Decision::Worse);
        assert_eq!(cmp(&[0.10, 0.12, 0.09]).decide(band), Decision::Better);
        assert_eq!(cmp(&[0.10, -0.12, 0.09]).decide(band), Decision::Undecided);
        // One round has no interval: never a decision.
        let one = cmp(&[0.5]);
        assert_eq!(one.decide(band), Decision::Undecided);
        assert!(one.to_string().contains("too few rounds to tell"), "{one}");
        // Significant but smaller than the band: a tie, not a win.
        assert_eq!(
            cmp(&[0.010, 0.011, 0.012, 0.010]).decide(band),
            Decision::Tie
        );
        assert!(Comparison::from_log_ratios(&[], 0.95).is_none());
        assert!(Comparison::from_log_ratios(&[f64::NAN], 0.95).is_none());
    }

    #[test]
    fn generation_leads_and_prompt_decides_only_inside_a_generation_tie() {
        use Decision::*;
        assert_eq!(objective(Better, Worse), (Better, Metric::Gen));
        assert_eq!(objective(Worse, Better), (Worse, Metric::Gen));
        assert_eq!(objective(Undecided, Better), (Undecided, Metric::Gen));
        assert_eq!(objective(Tie, Better), (Better, Metric::Prompt));
        assert_eq!(objective(Tie, Tie), (Tie, Metric::Prompt));
        let s = |g: f64, p: f64| Sample {
            gen_tps: g,
            prompt_tps: p,
            request_rate: None,
        };
        let pairs = [
            (s(100.0, 160.0), s(100.2, 100.0)),
            (s(120.0, 190.0), s(119.8, 121.0)),
            (s(110.0, 170.0), s(110.1, 108.0)),
        ];
        let v = PairedVerdict::from_pairs(&pairs, 0.95, Band::default()).unwrap();
        assert_eq!(v.gen_decision, Tie);
        assert_eq!((v.decision, v.decided_by), (Better, Metric::Prompt));
    }

    #[test]
    fn abba_order_reverses_every_other_round() {
        assert_eq!(abba_order(2, 0), [0, 1]);
        assert_eq!(abba_order(2, 1), [1, 0]);
        assert_eq!(abba_order(3, 1), [2, 1, 0]);
    }

    #[test]
    fn signed_uses_a_real_minus_sign() {
        assert_eq!(signed(-1.23), "\u{2212}1.2");
        assert_eq!(signed(9.58), "+9.6");
        assert_eq!(signed(0.01), "0.0");
    }
}
