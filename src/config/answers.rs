//! What a config may do to the model's greedy answers (issues 54, 56). Most settings cannot
//! change a token (placement, threads, batch sizes, cache types up to numerics); two kinds
//! can, and a launch with either is checked against the same config without it
//! ([`crate::trial::lossless`]):
//! - speculative decoding must not change a token (the target model verifies every draft),
//!   so a launch whose answers differ past a near-tie is a fault;
//! - smart expert reduction (ik_llama.cpp) computes fewer routed experts per token than the
//!   model was trained with, so its answers are expected to differ: lossy by design.

use super::{LaunchConfig, SpecType};

/// The setting of a config that may change the model's greedy answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerLever {
    /// Speculative decoding (`spec_type`): answer-preserving in principle, checked.
    Speculation(SpecType),
    /// At most this many routed experts per token
    /// ([`super::EngineOpts::expert_reduction`]): lossy by design.
    ExpertReduction(u32),
}

impl AnswerLever {
    /// What the launch is called where its check is reported ("ngram-mod", "smart expert
    /// reduction to 6 experts").
    pub fn name(self) -> String {
        match self {
            AnswerLever::Speculation(t) => t.as_str().to_string(),
            AnswerLever::ExpertReduction(k) => format!(
                "smart expert reduction to {}",
                crate::util::count(u64::from(k), "expert", "experts")
            ),
        }
    }

    /// The setting as a noun ("id 3 without speculation, id 9 with it").
    pub fn noun(self) -> &'static str {
        match self {
            AnswerLever::Speculation(_) => "speculation",
            AnswerLever::ExpertReduction(_) => "expert reduction",
        }
    }

    /// Expected to change the answers: a launch whose answers could not be compared with the
    /// reference's is never ranked (speculation's answers are the model's by construction).
    pub fn lossy_by_design(self) -> bool {
        matches!(self, AnswerLever::ExpertReduction(_))
    }
}

impl LaunchConfig {
    /// The setting of this config that may change the model's greedy answers (expert
    /// reduction before speculation, where a config has both); None for a config whose
    /// answers are the model's own by construction.
    pub fn answer_lever(&self) -> Option<AnswerLever> {
        self.engine_opts
            .expert_reduction
            .map(AnswerLever::ExpertReduction)
            .or(self.spec_type.map(AnswerLever::Speculation))
    }

    /// Whether this config's launch must have its answers checked against
    /// [`LaunchConfig::answer_reference`]'s before it may be ranked.
    pub fn may_change_answers(&self) -> bool {
        self.answer_lever().is_some()
    }

    /// The same config without anything that may change its answers: the reference its
    /// answers are compared with.
    pub fn answer_reference(&self) -> LaunchConfig {
        let mut c = self.clone();
        c.spec_type = None;
        c.engine_opts.expert_reduction = None;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EngineOpts;

    /// Speculation and expert reduction are the settings that may change answers; the
    /// reference drops both and keeps everything else (fused MoE off is not one).
    #[test]
    fn the_reference_drops_what_may_change_answers() {
        let plain = LaunchConfig {
            threads: Some(2),
            engine_opts: EngineOpts {
                no_fused_moe: true,
                ..EngineOpts::default()
            },
            ..LaunchConfig::baseline(2048)
        };
        assert!(!plain.may_change_answers());
        assert_eq!(plain.answer_reference(), plain);
        let ser = LaunchConfig {
            engine_opts: EngineOpts {
                expert_reduction: Some(6),
                ..plain.engine_opts.clone()
            },
            ..plain.clone()
        };
        let lever = ser.answer_lever().unwrap();
        assert_eq!(lever, AnswerLever::ExpertReduction(6));
        assert!(lever.lossy_by_design());
        assert_eq!(lever.name(), "smart expert reduction to 6 experts");
        assert_eq!(ser.answer_reference(), plain);
        let spec = LaunchConfig {
            spec_type: Some(SpecType::NgramMod),
            ..plain.clone()
        };
        assert!(spec.may_change_answers());
        assert!(!spec.answer_lever().unwrap().lossy_by_design());
        assert_eq!(spec.answer_reference(), plain);
    }
}
