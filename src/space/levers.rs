//! `vary.levers`: the settings past placement a space may name ([`crate::search::levers`]
//! decides where each is tried).

use serde::{Deserialize, Serialize};

/// Settings past placement, tried on the best config found, each only where the workload can
/// show its effect: speculative decoding where the workload's text is real (a replayed trace
/// or the built-in session: drafts come from text the model re-emits), context checkpoints on
/// models with recurrent layers whose sessions diverge from the cached prompt, parallel slots
/// where requests overlap.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Levers {
    /// `--spec-type` values tried beside none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub speculative: Vec<crate::config::SpecType>,
    /// `--checkpoint-min-step` values tried beside the server's default (8192).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoint_min_step: Vec<u32>,
    /// `-np` values tried beside 1 (with unified KV, so each slot may use the whole context).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parallel: Vec<u32>,
}

impl Levers {
    pub fn is_empty(&self) -> bool {
        self.speculative.is_empty()
            && self.checkpoint_min_step.is_empty()
            && self.parallel.is_empty()
    }

    pub(super) fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(n) = self
            .checkpoint_min_step
            .iter()
            .find(|n| !(1..=1_048_576).contains(*n))
        {
            return Err((
                "levers",
                format!("levers.checkpoint_min_step {n} is outside 1..=1048576 tokens"),
            ));
        }
        if let Some(n) = self.parallel.iter().find(|n| !(2..=64).contains(*n)) {
            return Err((
                "levers",
                format!("levers.parallel {n} is outside 2..=64 slots (1 is always measured)"),
            ));
        }
        Ok(())
    }
}
