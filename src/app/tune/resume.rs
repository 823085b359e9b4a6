//! `qtune tune --resume DIR`: the checks that the model, the server and the space are the
//! ones the run started with, a new budget, and the command that continues a tune.

use super::*;

/// Refuse to resume when the model, the server or the space is not what the run started with.
pub(super) fn verify_resume(
    opts: &TuneOptions,
    dir: &Path,
    inputs: &RunInputs,
    layout: &crate::model::ModelLayout,
) -> Result<()> {
    let shown = dir.display();
    if let Some(want) = &inputs.model_fingerprint {
        if *want != layout.fingerprint {
            anyhow::bail!(
                "cannot resume {shown}: the model file {} changed since the tune started (fingerprint {want}, now {}): restore it, or start a new tune",
                inputs.model_path.display(),
                layout.fingerprint
            );
        }
    }
    if let Some(want) = inputs.model_bytes {
        if want != layout.file_bytes {
            anyhow::bail!(
                "cannot resume {shown}: the model file {} changed since the tune started ({want} bytes, now {}): restore it, or start a new tune",
                inputs.model_path.display(),
                layout.file_bytes
            );
        }
    }
    if let Some(name) = &opts.space {
        let mut asked = crate::space::load(name)?;
        // The budget may differ (the run's own is kept); what is searched may not.
        asked.budget = inputs.space.budget.clone();
        if let Some(c) = opts.ctx {
            asked.fixed.ctx = c;
        }
        // The space as the tune made it when it started: its context fitted to the model's,
        // its workload's mixes resolved for that context (issue 53: the same --space was
        // called another space, its mixes unresolved).
        asked.fixed.ctx =
            crate::app::preflight::check_ctx(asked.fixed.ctx, opts.ctx.is_some(), layout)?.0;
        asked
            .workload
            .resolve(asked.fixed.ctx)
            .with_context(|| format!("cannot resume {shown}"))?;
        // The thread cap is the box's, measured when the tune started.
        asked.fixed.threads_cap = inputs.space.fixed.threads_cap;
        // So are the workers (measured then; --rpc is not needed again), and the engine (the
        // server's, checked below).
        asked.fixed.rpc_workers = inputs.space.fixed.rpc_workers.clone();
        asked.fixed.engine = inputs.space.fixed.engine;
        asked.fixed.also_engines = inputs.space.fixed.also_engines.clone();
        if asked != inputs.space {
            anyhow::bail!(
                "cannot resume {shown}: --space {name} is not the space this tune started with (its space is in {}); drop --space to continue, or start a new tune",
                dir.join(crate::run::RUN_FILE).display()
            );
        }
    }
    if opts.replay.is_none() {
        if let Some(s) = opts.server.as_ref() {
            if absolute(s)? != inputs.server_path {
                anyhow::bail!(
                    "cannot resume {shown}: it was tuned with the server {}, not {}",
                    inputs.server_path.display(),
                    s.display()
                );
            }
        }
        let server =
            crate::engine::binary::check(&inputs.server_path, crate::engine::binary::Source::Flag)
                .with_context(|| format!("cannot resume {shown}"))?;
        // A run.json written before qtune named its own pinned build `b11434` holds the raw
        // version of the same binary.
        let was =
            crate::engine::binary::pinned_version(&inputs.server_version, &inputs.server_path);
        if server.version != was {
            anyhow::bail!(
                "cannot resume {shown}: the server {} changed since the tune started (it was {}, now {}): restore it, or start a new tune",
                inputs.server_path.display(),
                crate::escape::terminal(&crate::engine::binary::short_version(&inputs.server_version)),
                crate::escape::terminal(&crate::engine::binary::short_version(&server.version))
            );
        }
        crate::app::engines::verify(dir, &inputs.engine_servers)?;
        if let (Some(want), Some(now)) = (inputs.server_bytes, file_bytes(&inputs.server_path)) {
            if want != now {
                anyhow::bail!(
                    "cannot resume {shown}: the server binary {} changed since the tune started ({want} bytes, now {now}): restore it, or start a new tune",
                    inputs.server_path.display()
                );
            }
        }
    }
    Ok(())
}

/// `--resume DIR --budget-trials N` / `--budget-minutes N`: the tune's budget becomes N (a
/// new total, not more on top); the notes say what changed. A budget below what the tune
/// already spent is refused: it would stop the tune before its next launch.
pub(super) fn extend_budget(opts: &TuneOptions, inputs: &mut RunInputs) -> Result<Vec<String>> {
    let budget = &mut inputs.space.budget;
    let mut notes = Vec::new();
    renew(
        &mut notes,
        "launch",
        "launches already made",
        &mut budget.trials,
        opts.budget_trials,
    );
    renew(
        &mut notes,
        "minutes",
        "minutes already spent",
        &mut budget.minutes,
        opts.budget_minutes,
    );
    if !notes.is_empty() {
        // The user's new total: no longer the space's grown for other engines.
        budget.before_engines = None;
    }
    crate::space::validate(&inputs.space).map_err(|(_, msg)| anyhow::anyhow!("{msg}"))?;
    Ok(notes)
}

/// One budget of [`extend_budget`]: set to `new` where given and different, with a note.
fn renew<T: PartialEq + Copy + std::fmt::Display>(
    notes: &mut Vec<String>,
    what: &str,
    spent: &str,
    old: &mut T,
    new: Option<T>,
) {
    if let Some(n) = new.filter(|n| n != old) {
        notes.push(format!(
            "{what} budget {old} -> {n} (a new total, {spent} included)"
        ));
        *old = n;
    }
}

/// The exact command that continues this tune.
pub(super) fn resume_command(opts: &TuneOptions, run_dir: &Path) -> String {
    let mut argv: Vec<String> = vec!["qtune".into(), "tune".into()];
    if let Some(r) = &opts.replay {
        argv.push("--replay".into());
        argv.push(r.journal.display().to_string());
    }
    argv.push("--resume".into());
    argv.push(run_dir.display().to_string());
    crate::config::shell_line(&argv)
}
