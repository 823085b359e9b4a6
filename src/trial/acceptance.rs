//! Speculative decoding's acceptance, as the server counts it (issue 54): each replayed
//! request's drafted and accepted tokens (llama-server's `timings.draft_n` and
//! `timings.draft_n_accepted`), summed over a launch. A launch whose drafts are accepted at
//! or above [`LOOP_ACCEPTANCE`] is [`OutcomeKind::Degenerate`]: its answers loop (a
//! random-weight model's do), n-gram drafts predict a loop perfectly, and the speed it gains
//! is the model's artifact, so the search never ranks it.

use super::classify::Verdict;
use super::{Metrics, OutcomeKind};
use crate::config::LaunchConfig;
use serde::{Deserialize, Serialize};

/// Acceptance at or above this over a launch means the answers loop. Real text on a real
/// model stays well below: docs/results.md measured about 60 % with ngram-mod on SmolLM2 over
/// the built-in agent session; the synthetic tiny MoE accepts every draft.
pub const LOOP_ACCEPTANCE: f64 = 0.95;

/// Fewer drafted tokens than this over a launch say nothing about loops (a few short drafts
/// can all be accepted on real text).
pub const MIN_DRAFTED: u64 = 32;

/// Drafted and accepted tokens over a launch's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acceptance {
    /// Tokens the server drafted.
    pub drafted: u64,
    /// Of these, the ones it accepted.
    pub accepted: u64,
    /// Requests on which it drafted something.
    pub requests: u32,
}

impl Acceptance {
    /// The sum over requests' (`draft_n`, `draft_n_accepted`); None where the server drafted
    /// nothing.
    pub fn of(
        requests: impl IntoIterator<Item = (Option<u32>, Option<u32>)>,
    ) -> Option<Acceptance> {
        let mut a = Acceptance {
            drafted: 0,
            accepted: 0,
            requests: 0,
        };
        for (drafted, accepted) in requests {
            let n = u64::from(drafted.unwrap_or(0));
            if n > 0 {
                a.drafted += n;
                // A server that claims more accepted than drafted is held to its drafts.
                a.accepted += u64::from(accepted.unwrap_or(0)).min(n);
                a.requests += 1;
            }
        }
        (a.drafted > 0).then_some(a)
    }

    /// The sum of several launches' acceptance; None for none.
    pub fn sum(all: impl IntoIterator<Item = Acceptance>) -> Option<Acceptance> {
        all.into_iter().reduce(|s, a| Acceptance {
            drafted: s.drafted + a.drafted,
            accepted: s.accepted + a.accepted,
            requests: s.requests + a.requests,
        })
    }

    /// Accepted over drafted, 0 to 1.
    pub fn ratio(&self) -> f64 {
        if self.drafted == 0 {
            return 0.0;
        }
        self.accepted as f64 / self.drafted as f64
    }

    /// The answers loop: enough drafts, nearly all accepted.
    pub fn loops(&self) -> bool {
        self.drafted >= MIN_DRAFTED && self.ratio() >= LOOP_ACCEPTANCE
    }

    /// "ngram-mod: 61 % of drafted tokens accepted (1234 of 2020, 8 requests)".
    pub fn line(&self, spec: &str) -> String {
        format!(
            "{spec}: {:.0} % of drafted tokens accepted ({} of {}, {} request{})",
            self.ratio() * 100.0,
            self.accepted,
            self.drafted,
            self.requests,
            if self.requests == 1 { "" } else { "s" }
        )
    }
}

/// The launch's acceptance, where the server drafted: over its replayed requests, else (a
/// request-shape workload, no trace) over its measured shapes, else over the fixed request's
/// repetitions.
pub fn of_metrics(m: &Metrics) -> Option<Acceptance> {
    match &m.replay {
        Some(r) => r.drafted(),
        None if !m.shapes.is_empty() => of_shapes(&m.shapes),
        None => m.drafts,
    }
}

/// Drafted and accepted tokens over a launch's measured request shapes.
pub fn of_shapes(shapes: &[crate::workloads::ShapeTiming]) -> Option<Acceptance> {
    Acceptance::of(shapes.iter().map(|s| (s.draft_n, s.draft_n_accepted)))
}

/// The [`OutcomeKind::Degenerate`] verdict for a speculative launch whose answers loop; None
/// for any other.
pub fn degenerate(config: &LaunchConfig, m: &Metrics) -> Option<Verdict> {
    let spec = config.spec_type?;
    let a = of_metrics(m).filter(Acceptance::loops)?;
    Some(Verdict {
        kind: OutcomeKind::Degenerate,
        message: format!(
            "{}: the answers loop (at or above {:.0} % is a loop, which n-gram drafts predict perfectly), so its speed is not credited; the same config without speculation is ranked instead",
            a.line(spec.as_str()),
            LOOP_ACCEPTANCE * 100.0
        ),
        evidence: Vec::new(),
    })
}

/// The [`OutcomeKind::Degenerate`] verdict for any speculative launch on a random-weight model
/// in a tune (`draft-mtp` listed in the space: the only speculation a tune launches there): its
/// speeds are kept as its cost, never ranked. None for a launch without speculation.
pub fn cost_only(config: &LaunchConfig, m: &Metrics) -> Option<Verdict> {
    let spec = config.spec_type?;
    let drafted = of_metrics(m).map_or_else(
        || format!("{spec}: nothing drafted"),
        |a| a.line(spec.as_str()),
    );
    Some(Verdict {
        kind: OutcomeKind::Degenerate,
        message: format!(
            "{drafted}: measured for its cost only, the model has random weights (qtune synth), so what it drafts means nothing; not ranked"
        ),
        evidence: Vec::new(),
    })
}

/// A measured chat shape (512 new tokens, 128 generated) with these drafts, for tests.
#[cfg(test)]
pub fn shape_drafting(
    draft_n: Option<u32>,
    draft_n_accepted: Option<u32>,
) -> crate::workloads::ShapeTiming {
    crate::workloads::ShapeTiming {
        shape: crate::workloads::Shape {
            name: "chat".into(),
            held: 0,
            new: 512,
            gen: 128,
            weight: 1.0,
        },
        cache_n: 0,
        prompt_n: 512,
        prompt_ms: 100.0,
        gen_tps: 50.0,
        gen_measured: 128,
        draft_n,
        draft_n_accepted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(drafted: Option<u32>, accepted: Option<u32>) -> (Option<u32>, Option<u32>) {
        (drafted, accepted)
    }

    #[test]
    fn acceptance_sums_the_requests_that_drafted() {
        let a = Acceptance::of([
            req(Some(100), Some(61)),
            req(None, None),
            req(Some(100), Some(61)),
        ])
        .unwrap();
        assert_eq!((a.drafted, a.accepted, a.requests), (200, 122, 2));
        assert_eq!(
            a.line("ngram-mod"),
            "ngram-mod: 61 % of drafted tokens accepted (122 of 200, 2 requests)"
        );
        assert!(!a.loops());
        assert_eq!(Acceptance::of([req(None, None)]), None);
        // More accepted than drafted is held to the drafts.
        let a = Acceptance::of([req(Some(10), Some(50))]).unwrap();
        assert_eq!(a.accepted, 10);
        let two = Acceptance::sum([a, a]).unwrap();
        assert_eq!((two.drafted, two.accepted, two.requests), (20, 20, 2));
        assert_eq!(Acceptance::sum([]), None);
    }

    #[test]
    fn the_loop_threshold_is_95_percent_over_enough_drafts() {
        let at = |drafted: u32, accepted: u32| {
            Acceptance::of([req(Some(drafted), Some(accepted))])
                .unwrap()
                .loops()
        };
        assert!(at(1000, 1000), "every draft accepted");
        assert!(at(1000, 950), "95 % is a loop");
        assert!(!at(1000, 949), "just under is not");
        assert!(!at(1000, 610), "real text");
        assert!(
            !at(MIN_DRAFTED as u32 - 1, MIN_DRAFTED as u32 - 1),
            "too few drafts"
        );
        assert!(at(MIN_DRAFTED as u32, MIN_DRAFTED as u32));
    }

    /// A request-shape workload (no trace) counts its shapes' drafts; before issue 54's
    /// follow-up only a replay's were read, so a shape launch said "nothing drafted".
    #[test]
    fn a_shape_workload_counts_the_drafts_of_its_measured_shapes() {
        let shape = shape_drafting;
        let stat = super::super::Stat::from_samples(&[1.0]).unwrap();
        let m = Metrics {
            drafts: None,
            gen_tps: stat.clone(),
            prompt_tps: stat.clone(),
            ttft_ms: stat,
            gen_tps_at_depth: None,
            shapes: vec![
                shape(Some(375), Some(0)),
                shape(None, None),
                shape(Some(25), Some(20)),
            ],
            request_s: Some(1.0),
            replay: None,
        };
        let a = of_metrics(&m).expect("the shapes drafted");
        assert_eq!((a.drafted, a.accepted, a.requests), (400, 20, 2));
        let none = Metrics {
            drafts: None,
            shapes: vec![shape(None, None)],
            ..m
        };
        assert_eq!(of_metrics(&none), None);
    }

    #[test]
    fn on_random_weights_any_speculation_is_cost_only_and_no_speculation_is_not() {
        use crate::config::SpecType;
        let stat = super::super::Stat::from_samples(&[1.0]).unwrap();
        let m = Metrics {
            drafts: None,
            gen_tps: stat.clone(),
            prompt_tps: stat.clone(),
            ttft_ms: stat,
            gen_tps_at_depth: None,
            shapes: Vec::new(),
            request_s: Some(1.0),
            replay: Some(super::super::replay_trace::ReplayTiming {
                workload: "agent-session".into(),
                in_trace: 1,
                requests: Vec::new(),
                mean_s: 1.0,
                p90_s: 1.0,
                wall_s: 1.0,
                aggregate_tps: None,
                acceptance: Acceptance::of([req(Some(183), Some(0))]),
                probes: Vec::new(),
            }),
        };
        let mtp = LaunchConfig {
            spec_type: Some(SpecType::DraftMtp),
            ..LaunchConfig::baseline(4096)
        };
        // Nothing accepted is no loop: only the random weights keep it from the ranking.
        assert!(degenerate(&mtp, &m).is_none());
        let v = cost_only(&mtp, &m).unwrap();
        assert_eq!(v.kind, OutcomeKind::Degenerate);
        assert!(
            v.message
                .starts_with("draft-mtp: 0 % of drafted tokens accepted (0 of 183, 1 request): measured for its cost only"),
            "{}",
            v.message
        );
        assert!(cost_only(&LaunchConfig::baseline(4096), &m).is_none());
    }
}
