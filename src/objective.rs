//! What a tune optimizes: the [`Metric`] that ranks trials and decides paired comparisons, and
//! the [`Objective`] a search space names (`objective:` in a space file: the metric, the blend's
//! weights, the tie band, the second baseline). One vocabulary for the space, the search's
//! ranking ([`crate::search::rank`]), the race and the report.
//!
//! The objective is scored here and nowhere else (issue 55): the time of one request
//! ([`request_seconds`]), a workload mix's time as the weighted mean of its requests
//! ([`weighted_mean`]), requests per second ([`request_rate`]), the median ([`median`], and
//! [`log_median`] for times over launches), the score a config is ranked by under each metric,
//! blend included ([`Objective::score`]), and what a paired comparison judges each metric on
//! ([`Metric::judged_on`]). Measured, predicted and replayed times all go through them.

use serde::{Deserialize, Serialize};

/// What ranks trials, and what a paired comparison is over. A paired comparison
/// ([`crate::stats::PairedVerdict`]) measures generation, prompt speed and time per request
/// per launch; it judges the metrics it does not measure per launch (generation at depth, the
/// blend) on generation.
///
/// The names written to space files and run directories (`gen`, `prompt`, `gen_at_depth`,
/// `blend`, `request`) are those both former enums (the space's and the statistics') wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Generation tok/s, prompt tok/s as tie-break.
    Gen,
    /// Prompt processing tok/s.
    Prompt,
    /// Generation tok/s with `workload.context_depth` tokens already in context.
    #[serde(rename = "gen_at_depth")]
    GenAtDepth,
    /// `gen_weight * gen/gen_best + prompt_weight * prompt/prompt_best`.
    Blend,
    /// Time per request (time to first token plus generation) over the workload's mix: the
    /// default. Ranked as requests per second, higher is better.
    Request,
}

impl Metric {
    /// The metric's name in what the user reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Gen => "generation",
            Metric::Prompt => "prompt",
            Metric::GenAtDepth => "generation at depth",
            Metric::Blend => "blend",
            Metric::Request => "time per request",
        }
    }
}

/// The objective of a search space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Objective {
    pub metric: Metric,
    #[serde(default = "one")]
    pub gen_weight: f64,
    #[serde(default)]
    pub prompt_weight: f64,
    /// Generation results within this many percent count as a tie, broken by prompt speed.
    #[serde(default = "default_tie")]
    pub tie_pct: f64,
    /// Also launch `--fit on --fit-target <headroom>` as a baseline on a GPU, and judge every
    /// gain against the better of the two baselines (default: true).
    #[serde(default = "yes")]
    pub second_baseline: bool,
}

fn yes() -> bool {
    true
}

fn one() -> f64 {
    1.0
}
fn default_tie() -> f64 {
    3.0
}

impl Default for Objective {
    fn default() -> Self {
        Objective {
            metric: Metric::Gen,
            gen_weight: 1.0,
            prompt_weight: 0.0,
            tie_pct: 3.0,
            second_baseline: true,
        }
    }
}

impl Metric {
    /// The per-launch measure a paired comparison judges this metric on: generation, prompt
    /// speed or time per request. Generation at depth and the blend are not measured per
    /// launch: they are judged on generation.
    pub fn judged_on(self) -> Metric {
        match self {
            Metric::GenAtDepth | Metric::Blend => Metric::Gen,
            m => m,
        }
    }
}

/// What one launch, or one config over its launches, measured or is predicted to do: each
/// higher is better. The input of [`Objective::score`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Generation, tokens per second.
    pub gen_tps: f64,
    /// Prompt processing, tokens per second.
    pub prompt_tps: f64,
    /// Generation with the workload's context depth already in context, when measured.
    pub gen_at_depth_tps: Option<f64>,
    /// Requests per second of the workload ([`request_rate`] of its time per request).
    pub request_rate: Option<f64>,
}

impl Rates {
    /// The value of the measure a paired comparison judges `m` on ([`Metric::judged_on`]);
    /// NaN for time per request where it was not measured.
    pub fn judged(&self, m: Metric) -> f64 {
        match m.judged_on() {
            Metric::Prompt => self.prompt_tps,
            Metric::Request => self.request_rate.unwrap_or(f64::NAN),
            _ => self.gen_tps,
        }
    }
}

impl Objective {
    /// The one number a config is ranked by, higher is better: generation, prompt speed,
    /// generation at depth (generation where not measured), requests per second (generation
    /// where not measured), or the blend `gen_weight * gen/gen_ref + prompt_weight *
    /// prompt/prompt_ref` against `reference` (1 tok/s each without one).
    pub fn score(&self, r: &Rates, reference: Option<&Rates>) -> f64 {
        match self.metric {
            Metric::Gen => r.gen_tps,
            Metric::Prompt => r.prompt_tps,
            Metric::GenAtDepth => r.gen_at_depth_tps.unwrap_or(r.gen_tps),
            Metric::Request => r.request_rate.unwrap_or(r.gen_tps),
            Metric::Blend => {
                let (g, p) = reference.map_or((1.0, 1.0), |x| (x.gen_tps, x.prompt_tps));
                self.gen_weight * r.gen_tps / g.max(1e-9)
                    + self.prompt_weight * r.prompt_tps / p.max(1e-9)
            }
        }
    }

    /// The tie-break of two scores within `tie_pct`: prompt speed, or generation when prompt
    /// speed is the metric.
    pub fn tie_break(&self, r: &Rates) -> f64 {
        match self.metric {
            Metric::Prompt => r.gen_tps,
            _ => r.prompt_tps,
        }
    }

    /// Does the objective weigh prompt speed (`metric: prompt`, or `blend` with a prompt
    /// weight)? Then a winner may be slower in generation than the baseline.
    pub fn weighs_prompt(&self) -> bool {
        match self.metric {
            Metric::Prompt => true,
            Metric::Blend => self.prompt_weight > 0.0,
            Metric::Gen | Metric::GenAtDepth | Metric::Request => false,
        }
    }

    /// The paired score of a prompt-weighing objective from the mean log ratios of generation
    /// and prompt speed against the baseline: the blend's weights, or prompt alone.
    pub fn paired_log_gain(&self, gen_mean_log: f64, prompt_mean_log: f64) -> f64 {
        let (gw, pw) = match self.metric {
            Metric::Blend => (self.gen_weight, self.prompt_weight),
            _ => (0.0, 1.0),
        };
        gw * gen_mean_log + pw * prompt_mean_log
    }

    /// How a prompt-weighing objective reads in a space file ("metric: prompt", "metric:
    /// blend, gen_weight 1, prompt_weight 1").
    pub fn prompt_weighing_spec(&self) -> String {
        match self.metric {
            Metric::Prompt => "metric: prompt".to_string(),
            _ => format!(
                "metric: blend, gen_weight {}, prompt_weight {}",
                self.gen_weight, self.prompt_weight
            ),
        }
    }
}

/// The time of one request, seconds: the time to its first token (its prompt) plus its
/// generated tokens at the generation speed. The one formula for time per request: measured
/// (the server's prompt time), predicted (new tokens at a predicted prompt speed) and
/// replayed times are all this.
pub fn request_seconds(prompt_s: f64, gen_tokens: f64, gen_tps: f64) -> f64 {
    prompt_s + gen_tokens / gen_tps
}

/// [`request_seconds`] from the server's own timings (prompt milliseconds), None for a
/// measurement that cannot be real (non-finite, zero or negative).
pub fn measured_request_seconds(prompt_ms: f64, gen_tokens: f64, gen_tps: f64) -> Option<f64> {
    let ok = |x: f64| x.is_finite() && x > 0.0;
    (ok(prompt_ms) && ok(gen_tps)).then(|| request_seconds(prompt_ms / 1000.0, gen_tokens, gen_tps))
}

/// A workload mix's value from its requests': the mean weighted by each request's weight
/// (`(weight, value)` pairs), None when the weights sum to nothing.
pub fn weighted_mean(parts: impl IntoIterator<Item = (f64, f64)>) -> Option<f64> {
    let (mut sum, mut weights) = (0.0, 0.0);
    for (w, x) in parts {
        sum += w * x;
        weights += w;
    }
    (weights > 0.0).then(|| sum / weights)
}

/// Requests per second from a time per request, None where the time is not finite and positive.
pub fn request_rate(request_s: f64) -> Option<f64> {
    (request_s.is_finite() && request_s > 0.0).then(|| 1.0 / request_s)
}

/// The median (the mean of the middle two for an even count), None for no values.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    median_of_sorted(&s)
}

/// [`median`] of values already sorted.
pub fn median_of_sorted(s: &[f64]) -> Option<f64> {
    let n = s.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(s[n / 2]),
        _ => Some((s[n / 2 - 1] + s[n / 2]) / 2.0),
    }
}

/// The median of `ln` values (NaN for none): a time over launches is taken in logs, so with
/// an even count it is the geometric mean of the middle two.
pub fn log_median(logs: &[f64]) -> f64 {
    median(logs).unwrap_or(f64::NAN)
}

/// Fewer paired rounds than this make no claim: no interval is printed and nothing is decided
/// on them (the statistics' `Comparison::too_noisy`). Spaces reserve at least this many.
pub const MIN_CLAIM_ROUNDS: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    /// Space files and run directories written before the two `Metric` enums became one
    /// still read, and the names written are unchanged.
    #[test]
    fn every_metric_name_written_before_reads_and_is_written_the_same() {
        for (name, m) in [
            ("gen", Metric::Gen),
            ("prompt", Metric::Prompt),
            ("gen_at_depth", Metric::GenAtDepth),
            ("blend", Metric::Blend),
            ("request", Metric::Request),
        ] {
            let json = format!("\"{name}\"");
            assert_eq!(serde_json::from_str::<Metric>(&json).unwrap(), m);
            assert_eq!(serde_json::to_string(&m).unwrap(), json);
            let o: Objective = serde_yaml::from_str(&format!("metric: {name}")).unwrap();
            assert_eq!(o.metric, m);
        }
    }

    #[test]
    fn a_request_is_its_prompt_plus_its_generation_and_a_mix_the_weighted_mean() {
        assert_eq!(request_seconds(0.5, 100.0, 50.0), 2.5);
        assert_eq!(measured_request_seconds(500.0, 100.0, 50.0), Some(2.5));
        assert_eq!(measured_request_seconds(0.0, 100.0, 50.0), None);
        assert_eq!(measured_request_seconds(500.0, 100.0, f64::NAN), None);
        assert_eq!(weighted_mean([(3.0, 1.0), (1.0, 5.0)]), Some(2.0));
        assert_eq!(weighted_mean([]), None);
        assert_eq!(request_rate(4.0), Some(0.25));
        assert_eq!(request_rate(0.0), None);
    }

    #[test]
    fn the_median_takes_the_middle_two_for_an_even_count() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert!(log_median(&[]).is_nan());
    }

    #[test]
    fn each_metric_scores_its_measure_and_the_blend_is_relative_to_the_reference() {
        let r = Rates {
            gen_tps: 20.0,
            prompt_tps: 200.0,
            gen_at_depth_tps: None,
            request_rate: Some(0.5),
        };
        let reference = Rates {
            gen_tps: 10.0,
            prompt_tps: 400.0,
            ..r
        };
        let of = |metric, gw, pw| Objective {
            metric,
            gen_weight: gw,
            prompt_weight: pw,
            ..Objective::default()
        };
        assert_eq!(of(Metric::Gen, 1.0, 0.0).score(&r, None), 20.0);
        assert_eq!(of(Metric::Prompt, 1.0, 0.0).score(&r, None), 200.0);
        assert_eq!(
            of(Metric::GenAtDepth, 1.0, 0.0).score(&r, None),
            20.0,
            "not measured"
        );
        assert_eq!(of(Metric::Request, 1.0, 0.0).score(&r, None), 0.5);
        assert_eq!(
            of(Metric::Blend, 1.0, 2.0).score(&r, Some(&reference)),
            2.0 + 1.0
        );
        assert_eq!(of(Metric::Prompt, 1.0, 0.0).tie_break(&r), 20.0);
        assert_eq!(of(Metric::Gen, 1.0, 0.0).tie_break(&r), 200.0);
        assert_eq!(
            r.judged(Metric::Blend),
            20.0,
            "the blend is judged on generation"
        );
        assert_eq!(r.judged(Metric::Request), 0.5);
        assert!(of(Metric::Blend, 1.0, 1.0).weighs_prompt());
        assert!(!of(Metric::Blend, 1.0, 0.0).weighs_prompt());
        assert_eq!(of(Metric::Blend, 1.0, 3.0).paired_log_gain(0.5, 1.0), 3.5);
        assert_eq!(of(Metric::Prompt, 1.0, 0.0).paired_log_gain(0.5, 1.0), 1.0);
    }
}
