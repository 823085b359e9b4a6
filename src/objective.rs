//! What a tune optimizes: the [`Metric`] that ranks trials and decides paired comparisons, and
//! the [`Objective`] a search space names (`objective:` in a space file: the metric, the blend's
//! weights, the tie band, the second baseline). One vocabulary for the space, the search's
//! ranking ([`crate::search::rank`]), the race and the report.

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
}
