//! Settings past placement, tried on the best config the search found, each only where the
//! workload can show what it does (issue 42's levers):
//! - **speculative decoding** from the context's n-grams (`--spec-type`), only on real text (a
//!   replayed trace or the built-in session): its drafts are text the model re-emits, and
//!   cycled filler text would fake their acceptance;
//! - **context checkpoints** (`--checkpoint-min-step`), only on a model with recurrent layers
//!   (Qwen3.5) whose workload has prompts that diverge from the cached one: such a model cannot
//!   roll its state back token by token, so it re-reads from the last checkpoint before the
//!   divergence;
//! - **parallel slots** (`-np N -kvu`), only where requests overlap.
//!
//! What was not tried, and why, is said in words for the summary.

use crate::config::LaunchConfig;
use crate::space::Levers;

/// What the tune's workload can show, from its requests (a trace, or the built-in session).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkloadTraits {
    /// The prompts are real text (a recorded trace or the built-in session), not cycled filler.
    pub real_text: bool,
    /// The most requests in flight at once.
    pub max_overlap: u32,
    /// Some request's prompt shares a prefix with an earlier one and then diverges from it
    /// before that one's end (history edited, thinking dropped): the cache cannot be reused
    /// past that point.
    pub diverges: bool,
    /// The model has recurrent layers (its state cannot roll back token by token).
    pub recurrent: bool,
}

/// The configs to measure, and a line for each lever that was not tried.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeverPlan {
    pub configs: Vec<LaunchConfig>,
    pub skipped: Vec<String>,
}

/// `best` with each of the space's levers that this workload can show.
pub fn propose(levers: &Levers, best: &LaunchConfig, traits: &WorkloadTraits) -> LeverPlan {
    let mut plan = LeverPlan::default();
    if !levers.speculative.is_empty() {
        if traits.real_text {
            for &t in &levers.speculative {
                plan.configs.push(LaunchConfig {
                    spec_type: Some(t),
                    ..best.clone()
                });
            }
        } else {
            plan.skipped.push(
                "speculative decoding: not tried, the workload's text is filler (its drafts would be accepted on repetition, not on what you run); tune with --workload agent or a recorded trace"
                    .to_string(),
            );
        }
    }
    if !levers.checkpoint_min_step.is_empty() {
        if !traits.recurrent {
            plan.skipped.push(
                "context checkpoints: not tried, the model has no recurrent layers (its cache is reused up to any divergence)"
                    .to_string(),
            );
        } else if !traits.diverges {
            plan.skipped.push(
                "context checkpoints: not tried, no prompt of the workload diverges from the cached one".to_string(),
            );
        } else {
            for &n in &levers.checkpoint_min_step {
                plan.configs.push(LaunchConfig {
                    checkpoint_min_step: Some(n),
                    ..best.clone()
                });
            }
        }
    }
    if !levers.parallel.is_empty() {
        if traits.max_overlap >= 2 {
            for &n in &levers.parallel {
                plan.configs.push(LaunchConfig {
                    parallel: n,
                    kv_unified: Some(true),
                    ..best.clone()
                });
            }
        } else {
            plan.skipped
                .push("parallel slots: not tried, no requests of the workload overlap".to_string());
        }
    }
    plan.configs.retain(|c| c != best);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SpecType;

    fn levers() -> Levers {
        Levers {
            speculative: vec![SpecType::NgramMod],
            checkpoint_min_step: vec![1024],
            parallel: vec![2, 4],
        }
    }

    #[test]
    fn filler_text_without_overlap_tries_nothing_and_says_why() {
        let best = LaunchConfig::baseline(8192);
        let p = propose(&levers(), &best, &WorkloadTraits::default());
        assert!(p.configs.is_empty());
        assert_eq!(p.skipped.len(), 3, "{:?}", p.skipped);
        assert!(p.skipped[0].starts_with("speculative decoding: not tried"));
        assert!(p.skipped[1].contains("no recurrent layers"));
        assert!(p.skipped[2].contains("overlap"));
    }

    #[test]
    fn a_real_diverging_concurrent_session_on_a_hybrid_model_tries_every_lever() {
        let best = LaunchConfig::baseline(8192);
        let traits = WorkloadTraits {
            real_text: true,
            max_overlap: 3,
            diverges: true,
            recurrent: true,
        };
        let p = propose(&levers(), &best, &traits);
        assert!(p.skipped.is_empty(), "{:?}", p.skipped);
        let args: Vec<String> = p
            .configs
            .iter()
            .map(|c| c.server_args().join(" "))
            .collect();
        assert_eq!(args.len(), 4, "{args:?}");
        assert!(args[0].ends_with("--spec-type ngram-mod"));
        assert!(args[1].ends_with("--checkpoint-min-step 1024"));
        assert!(args[2].contains("-np 2") && args[2].ends_with("-kvu"));
        assert!(args[3].contains("-np 4"));
        // Every variant keeps the rest of the best config.
        assert!(p.configs.iter().all(|c| c.ctx == 8192));
    }

    #[test]
    fn checkpoints_need_a_divergence_on_a_hybrid_model() {
        let best = LaunchConfig::baseline(8192);
        let traits = WorkloadTraits {
            recurrent: true,
            ..Default::default()
        };
        let only = Levers {
            checkpoint_min_step: vec![512],
            ..Default::default()
        };
        let p = propose(&only, &best, &traits);
        assert!(p.configs.is_empty());
        assert!(p.skipped[0].contains("diverges"), "{:?}", p.skipped);
    }
}
