//! The tune's search space: loaded, overridden from the command line, its workload resolved
//! (a built-in session rendered first).

use super::*;

/// Load a search space: a built-in name or a YAML file; apply command-line overrides. With no
/// `--space`, the one [`crate::app::preflight::default_space`] names, and why when it is `cpu-only`.
pub(super) fn space_for(
    opts: &TuneOptions,
    hw: &crate::hardware::HardwareProfile,
    layout: &crate::model::ModelLayout,
    server_model: Option<(&Path, &Path)>,
) -> Result<(SearchSpace, Option<String>)> {
    let (name, note) = match &opts.space {
        Some(n) => (n.clone(), None),
        None => {
            let (n, note) = crate::app::preflight::default_space(hw, layout);
            (n.to_string(), note)
        }
    };
    let mut space = crate::space::load(&name)?;
    if let Some(c) = opts.ctx {
        space.fixed.ctx = c;
    }
    if let Some(t) = opts.budget_trials {
        space.budget.trials = t;
    }
    if let Some(m) = opts.budget_minutes {
        // Minutes alone: the launch cap follows from them at the space's own pace (its
        // launches per minute), never below the space's cap, so the minutes are what end it.
        if opts.budget_trials.is_none() && space.budget.minutes > 0.0 && m > space.budget.minutes {
            let (trials, minutes) = (space.budget.trials, space.budget.minutes);
            let sized = (f64::from(trials) * m / minutes).round().min(10_000.0) as u32;
            space.budget.trials = sized.max(trials);
            eprintln!(
                "qtune: --budget-minutes {} alone: up to {} (the space's pace, {} in {}; \
                 --budget-trials N sets the cap)",
                crate::util::minutes(m)
                    .trim_end_matches(" minutes")
                    .trim_end_matches(" minute"),
                crate::util::count(u64::from(space.budget.trials), "launch", "launches"),
                trials,
                crate::util::minutes(minutes)
            );
        }
        space.budget.minutes = m;
    }
    if let Some(w) = &opts.workload {
        // A session is rendered at the context the tune will use (the model's trained one at
        // most).
        let ctx = match layout.ctx_train {
            0 => space.fixed.ctx,
            t => space.fixed.ctx.min(t),
        };
        let render =
            server_model.map(|(server, model)| crate::run::setup::Renderer { server, model, ctx });
        crate::run::setup::ask_workload(&mut space.workload, w, render)?;
        space.objective.metric = crate::objective::Metric::Request;
    }
    crate::space::validate(&space).map_err(|(_, msg)| anyhow::anyhow!("{msg}"))?;
    let ctx = space.fixed.ctx;
    crate::run::setup::resolve_workload(&mut space.workload, ctx, layout.n_vocab, &mut |note| {
        let note = crate::escape::terminal_lines(note);
        eprintln!("{}", crate::util::fit(&format!("qtune: {note}")));
    })?;
    Ok((space, note))
}

/// Launches each other engine a tune races (`--engine both`) adds besides its baselines: the
/// search's best config on it and its own levers on that (ik_llama.cpp: fused MoE off, `-amb`,
/// `-rtr`; [`crate::search::engines::variants`]).
const OTHER_ENGINE_VARIANTS: u32 = 3;

/// With no budget asked for (`--budget-trials`, `--budget-minutes`), each other engine raced
/// adds its baselines (its default, and its auto-fit where the space races one on a GPU) and
/// its variants to the space's launches, and the minutes grow at the space's pace: the space's
/// budget is sized for one engine, and on the GPU machine a 30 GiB model's two engines spent 8
/// minutes on their baselines alone (issue 56). The header's budget line says so
/// ([`crate::space::Budget::before_engines`]).
pub(super) fn room_for_engines(opts: &TuneOptions, space: &mut SearchSpace, has_gpu: bool) {
    let others = space.fixed.also_engines.len() as u32;
    if others == 0 || opts.budget_trials.is_some() || opts.budget_minutes.is_some() {
        return;
    }
    let baselines = if has_gpu && space.objective.second_baseline {
        2
    } else {
        1
    };
    let (trials, minutes) = (space.budget.trials, space.budget.minutes);
    if trials == 0 || minutes <= 0.0 {
        return;
    }
    let more = others * (baselines + OTHER_ENGINE_VARIANTS);
    space.budget.trials = trials.saturating_add(more);
    // Never past the longest budget a space may ask for (a week).
    space.budget.minutes = (minutes * f64::from(space.budget.trials) / f64::from(trials))
        .min(crate::space::MAX_BUDGET_MINUTES.max(minutes));
    space.budget.before_engines = Some(crate::space::BudgetBase { trials, minutes });
}
