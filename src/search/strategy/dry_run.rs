//! `qtune tune --dry-run`: the launches a tune starts with, predicted from the box and the
//! model alone. After these the search follows what they measure, so only the start is listed.

use super::{QtuneSearch, SearchContext};
use crate::config::LaunchConfig;
use crate::trial::TrialRole;

/// One launch the tune would make, and why.
#[derive(Debug, Clone)]
pub struct PlannedLaunch {
    pub role: TrialRole,
    pub config: LaunchConfig,
    pub why: String,
}

/// The baselines (launched twice when the budget races), the speed model's pick (on one GPU
/// with a MoE model) and the search's starting config at its predicted `--n-cpu-moe`.
pub fn first_launches(ctx: &SearchContext) -> Vec<PlannedLaunch> {
    let mut out = Vec::new();
    let baseline = ctx.baseline();
    let probes = QtuneSearch::probe_launches(ctx);
    for i in 0..probes {
        out.push(PlannedLaunch {
            role: TrialRole::Baseline,
            config: baseline.clone(),
            why: if i == 0 {
                "what llama-server does without qtune's flags: the reference".to_string()
            } else {
                "the same again, back to back: the box's launch-to-launch noise".to_string()
            },
        });
    }
    if let Some(second) = ctx.second_baseline() {
        out.push(PlannedLaunch {
            role: TrialRole::SecondBaseline,
            config: second,
            why: format!(
                "the best command you could type without qtune ({} <headroom>): the better of \
                 the two baselines is the reference",
                crate::engine::Flag::FitTarget
            ),
        });
    }
    // `--engine both`: every other engine's baselines, once each, as the tune launches them.
    for config in super::super::engines::other_baselines(ctx) {
        let what = if config.fit == Some(true) {
            "its own auto-fit at the headroom"
        } else {
            "its server's default"
        };
        out.push(PlannedLaunch {
            role: TrialRole::SecondBaseline,
            why: format!(
                "{what} (both engines tuned: the engine whose baselines measure better \
                 gives the reference)"
            ),
            config,
        });
    }
    if let Some(pick) = super::super::pick::model_pick(ctx, 0.0) {
        out.push(PlannedLaunch {
            role: TrialRole::Search,
            config: pick,
            why: "the speed model's pick (what 'qtune plan' proposes here)".to_string(),
        });
    }
    let base = ctx.start_base();
    let config = if ctx.gpu_moe {
        let (_, hi) = ctx.ncmoe_bounds();
        let n = ctx.predicted_fit(&base, 0.0).unwrap_or(hi);
        ctx.config(&base, n)
    } else {
        ctx.config(&base, 0)
    };
    if !out.iter().any(|l| l.config == config) {
        out.push(PlannedLaunch {
            role: TrialRole::Search,
            config,
            why: if ctx.gpu_moe {
                "the search's starting point, at the fewest CPU experts predicted to fit"
                    .to_string()
            } else {
                "the search's starting point".to_string()
            },
        });
    }
    out
}
