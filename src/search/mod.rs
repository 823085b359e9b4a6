//! The search: prune with the memory prediction, bisect the fitting `--n-cpu-moe` boundary,
//! improve threads / batch / KV type by coordinate steps, then confirm the top candidates
//! against the baseline by interleaved re-measurement. Driven by argmin's `Executor`.
//!
//! [`tune`] takes its trial runner and its clock as parameters and returns the finished run
//! ([`crate::run::TuneResult`]); it never prints and never writes the report.

use crate::clock::Clock;
use crate::model::ModelLayout;
use crate::run::{RunInputs, TuneResult};
use crate::trial::{TrialOutcome, TrialRunner};
use std::path::Path;
use std::sync::Arc;

pub mod candidates;
pub mod card_experts;
mod checkpoint;
pub mod context;
pub mod engines;
pub mod levers;
pub mod pick;
pub mod progress;
pub mod rank;
pub mod strategy;
pub mod verdict;

pub use progress::Watch;
pub use strategy::{first_launches, PlannedLaunch};

/// The argmin state: the parameter is a launch config, the cost is minus the objective.
pub type TuneState = argmin::core::IterState<crate::config::LaunchConfig, (), (), (), (), f64>;

/// Where a run directory stands before the search starts: what its journal holds.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    /// Trials journaled by earlier sessions.
    pub done: Vec<TrialOutcome>,
    /// Journaled trials the checkpoint has not seen yet: replayed instead of run again.
    pub replay: Vec<TrialOutcome>,
    /// The id the next new trial gets.
    pub next_id: u32,
    /// Seconds of the minutes budget earlier sessions spent (from the checkpoint).
    pub elapsed_s: f64,
}

/// Read a run directory's journal and checkpoint.
/// A run directory's finished search, reopened for a larger budget.
pub fn reopen(run_dir: &Path) -> anyhow::Result<()> {
    checkpoint::reopen(run_dir)
        .map_err(|e| anyhow::anyhow!("cannot extend the budget of {}: {e}", run_dir.display()))
}

pub fn resume_point(run_dir: &Path) -> anyhow::Result<Resume> {
    use argmin::core::checkpointing::Checkpoint;
    let done = crate::trial::journal::Journal::read(run_dir)?;
    let saved = checkpoint::RunDirCheckpoint::new(run_dir, crate::clock::system()).load()?;
    let seen = saved
        .as_ref()
        .map(|(s, _)| s.history.iter().map(|o| o.id).max().unwrap_or(0))
        .unwrap_or(0);
    let elapsed_s = saved.as_ref().map_or(0.0, |(s, _)| s.elapsed_before_s);
    let replay = done.iter().filter(|o| o.id > seen).cloned().collect();
    // Ids continue after the highest id recorded anywhere: the journal, or the checkpoint
    // (which may know a trial whose journal line was torn off).
    let next_id = done.iter().map(|o| o.id).max().unwrap_or(0).max(seen) + 1;
    Ok(Resume {
        done,
        replay,
        next_id,
        elapsed_s,
    })
}

/// What the search needs to know about the box and the model, from a run's inputs.
pub fn context(
    inputs: &RunInputs,
    layout: &ModelLayout,
    clock: Arc<dyn Clock>,
) -> strategy::SearchContext {
    let hw = &inputs.hardware;
    strategy::SearchContext {
        space: inputs.space.clone(),
        layout: layout.clone(),
        gpu_moe: hw.has_gpu() && layout.is_moe() && inputs.space.vary.n_cpu_moe.is_some(),
        has_gpu: hw.has_gpu(),
        budget_mib: inputs.vram_budget_mib.map(|b| b as f64),
        physical_cores: hw.host.physical_cores.unwrap_or(hw.host.logical_cores),
        logical_cores: hw.host.logical_cores,
        start: inputs.start.clone(),
        clock,
        ram_available_mib: Some(hw.host.ram_available_mib as f64),
        fit_target_mib: inputs.headroom_mib.min(u64::from(u32::MAX)) as u32,
        gpus: inputs.gpu_budgets.clone(),
        speed: Some(
            crate::model::speed::SpeedBox::from_hardware(hw)
                .with_links(&inputs.space.fixed.rpc_workers),
        ),
        workload_traits: {
            let recurrent = layout.recurrent_state_bytes.iter().any(|b| *b > 0);
            let mut traits = match inputs
                .space
                .workload
                .replay
                .as_ref()
                .and_then(|r| r.trace.as_ref())
            {
                Some(t) => crate::search::levers::WorkloadTraits::of_trace(t, recurrent),
                None => crate::search::levers::WorkloadTraits {
                    recurrent,
                    ..Default::default()
                },
            };
            traits.synthetic = crate::model::speed::is_synthetic(layout);
            // The server is asked only where the space lists draft-mtp.
            if inputs
                .space
                .vary
                .levers
                .speculative
                .iter()
                .any(|t| t.is_mtp())
            {
                let offers = crate::engine::mtp::server_offers_mtp(&inputs.server_path);
                traits.mtp_unavailable = crate::engine::mtp::unavailable(
                    &layout.arch,
                    layout.details.mtp_layers,
                    offers,
                );
            }
            traits
        },
        server_versions: std::iter::once((
            inputs.space.fixed.engine,
            inputs.server_version.clone(),
        ))
        .chain(
            inputs
                .engine_servers
                .iter()
                .map(|s| (s.engine, s.version.clone())),
        )
        .collect(),
    }
}

/// Run a whole tune in a prepared run directory: the search (continuing from `resume`), the
/// verdict, and the finished run. `runner` launches (or replays) trials; `clock` is what the
/// minutes budget reads. Fails with [`crate::trial::cleanup::Interrupted`] in its chain when
/// qtune was interrupted (every finished trial is in the journal).
pub fn tune(
    run_dir: &Path,
    inputs: &RunInputs,
    layout: ModelLayout,
    runner: Box<dyn TrialRunner>,
    resume: Resume,
    clock: Arc<dyn Clock>,
    watch: Option<Arc<dyn Watch>>,
) -> anyhow::Result<TuneResult> {
    let ctx = context(inputs, &layout, clock.clone());
    let journal_path = run_dir.join(crate::trial::journal::FILE_NAME);
    let solver = run_search_with(ctx.clone(), runner, resume.replay, Some(run_dir), watch)
        .map_err(|e| {
            if e.downcast_ref::<crate::trial::cleanup::Interrupted>()
                .is_some()
                || e.downcast_ref::<crate::trial::Fatal>().is_some()
            {
                // Interrupted: the caller says how to go on. Fatal: nothing can.
                return e;
            }
            // Failed mid-tune: the journal keeps every finished trial.
            e.context(format!(
                "the search stopped (finished trials are in {}; continue with --resume {})",
                journal_path.display(),
                run_dir.display()
            ))
        })?;
    let history = solver.history.clone();
    let mut warnings = solver.warnings.clone();
    let command = |c: &crate::config::LaunchConfig| inputs.command(c);
    let race = solver
        .race_outcome(&ctx)
        .map(|outcome| crate::run::RaceReport {
            candidates: solver.race_candidates.clone(),
            outcome,
        });
    let (confirmation, winner) = verdict::decide(
        &ctx,
        &history,
        inputs.vram_budget_mib,
        &command,
        &mut warnings,
        race.as_ref(),
    );
    // With a recommendation, its verdict says how each other engine compared, one that never
    // measured included (`report::engines`): the note and the warnings leave those out.
    let verdict_says = winner.is_some();
    warnings.extend(engines::baseline_note(&ctx, &history, verdict_says));
    if !verdict_says {
        // The engines not tried past their baselines, each with how its baselines failed.
        warnings.extend(engines::dropped(&ctx, &history).iter().map(|d| d.line()));
    }
    if !engines::others(&ctx).is_empty()
        || crate::engine::of(ctx.space.fixed.engine).caps().own_levers
    {
        // The engines' own levers skipped, each with its reason.
        let best = (solver.race_candidates.first().cloned()).unwrap_or_else(|| ctx.baseline());
        warnings.extend(engines::variants(&ctx, &history, &best).1);
    }
    warnings.extend(trial_warnings(&history));
    warnings.extend(levers::acceptance_lines(&history));
    warnings.extend(engines::lossy_lever_lines(&history));
    // A trace whose clients sampled is replayed greedily: one line says so, and why.
    warnings.extend(
        ctx.space
            .workload
            .replay
            .as_ref()
            .and_then(|r| r.trace.as_ref())
            .and_then(|t| crate::traffic::trace::greedy_replay_note(t)),
    );
    // The levers past placement the workload could not show, and why: one line for request
    // shapes of filler text (none of them can show there), else one per lever.
    if !ctx.space.vary.levers.is_empty() {
        if ctx.workload_traits.real_text {
            let probe = crate::config::LaunchConfig {
                engine: ctx.space.fixed.engine,
                ..crate::config::LaunchConfig::baseline(ctx.space.fixed.ctx)
            };
            let plan = levers::propose(&ctx.space.vary.levers, &probe, &ctx.workload_traits);
            warnings.extend(plan.skipped);
            // The levers the engine has no flag for (ik_llama.cpp: context checkpoints and
            // one KV pool for every slot).
            let mut lacking: Vec<&str> = plan
                .configs
                .iter()
                .flat_map(|c| crate::engine::of(c.engine).caps().unsupported(c))
                .collect();
            lacking.dedup();
            if !lacking.is_empty() {
                warnings.push(format!(
                    "{}: not tried, {} has no such flag",
                    lacking.join(", "),
                    ctx.space.fixed.engine
                ));
            }
        } else {
            warnings.push(
                "speculative decoding from n-grams, context checkpoints and parallel slots were not tried: this workload is request shapes of filler text, which cannot show them (--workload agent, the agent session, or a trace of yours from qtune record, can)"
                    .to_string(),
            );
            // But MTP, whose drafts are the model's own predictions: tried, or why not.
            let probe = crate::config::LaunchConfig::baseline(ctx.space.fixed.ctx);
            let plan = levers::propose(&ctx.space.vary.levers, &probe, &ctx.workload_traits);
            warnings.extend(plan.skipped.into_iter().filter(|l| l.starts_with("MTP")));
        }
    }
    let measured = history.iter().any(|o| o.kind.is_ok());
    if let (Some(t), true) = (inputs.space.fixed.threads_cap, measured) {
        warnings.push(format!(
            "every launch ran with at most {tf} {t}, the baseline included (the free cores of a busy box, or {}): on this box fewer threads than the server's default is what keeps generation from collapsing (llama.cpp's threads spin on cores other work holds), a finding, not noise; keep {tf} {t} while the box is this busy, or tune again on a quiet box",
            crate::hardware::busy::MAX_THREADS_ENV,
            tf = crate::engine::Flag::Threads
        ));
    }
    let mut result = TuneResult {
        qtune_version: env!("CARGO_PKG_VERSION").to_string(),
        inputs: inputs.clone(),
        finished_at: clock.timestamp(),
        model: layout,
        trials: history,
        confirmation,
        winner,
        race,
        warnings,
        minutes_used: solver.elapsed_s(clock.as_ref()) / 60.0,
        model_pick: solver.model_pick.clone(),
        workload_picks: Vec::new(),
        budget_stop: None,
    };
    result.budget_stop = budget_stop(&solver, &ctx, result.race.as_ref(), clock.as_ref());
    result.workload_picks = result.workload_picks();
    for p in &mut result.workload_picks {
        p.command = command(&p.config);
    }
    Ok(result)
}

/// The budget that ended the tune, when one did before the race decided: the launches are
/// all used, or the minutes left are fewer than a mean launch takes.
fn budget_stop(
    solver: &strategy::QtuneSearch,
    ctx: &strategy::SearchContext,
    race: Option<&crate::run::RaceReport>,
    clock: &dyn Clock,
) -> Option<crate::run::BudgetStop> {
    // Undecided: not over, never run, or its launches spent before a claim (a budget's doing,
    // whatever the race calls it).
    let spent = |reason: &str| reason.starts_with("the budget of ");
    let undecided = |reason: &str| {
        reason == "the race is not over" || reason.starts_with("no race ran") || spent(reason)
    };
    if race.is_some_and(|r| r.outcome.winner.is_some() || !undecided(&r.outcome.reason)) {
        return None;
    }
    let b = &ctx.space.budget;
    let launches = solver.launches();
    let elapsed = solver.elapsed_s(clock);
    let ran: Vec<f64> = solver
        .history
        .iter()
        .filter(|o| o.kind != crate::trial::OutcomeKind::Skipped)
        .map(|o| o.duration_s)
        .collect();
    let mean = ran.iter().sum::<f64>() / ran.len().max(1) as f64;
    // A race left undecided was stopped by a budget: the minutes where they ran out, else the
    // launches (all made, or too few left for its next round: a budget that reserved the race
    // none leaves it "no race ran"). Without a race (nothing to race), only a budget used up.
    let by = if elapsed + mean > b.minutes * 60.0 && launches < b.trials {
        "minutes"
    } else if launches >= b.trials || race.is_some() {
        "launches"
    } else {
        return None;
    };
    let race_rounds = race.map_or(0, |r| paired_rounds(&r.outcome));
    Some(crate::run::BudgetStop {
        by: by.into(),
        launches,
        budget_launches: b.trials,
        minutes: elapsed / 60.0,
        budget_minutes: b.minutes,
        race_rounds,
        decide_launches: race.map(|r| launches + decide_rounds(&r.outcome, race_rounds)),
        mean_launch_s: (mean > 0.0).then_some(mean),
        race: race.map_or_else(
            || "no race ran: the search had not finished".to_string(),
            |r| r.outcome.reason.clone(),
        ),
    })
}

/// Paired rounds: those that measured every arm they launched (a round the budget cut after
/// the reference's launch pairs nothing).
fn paired_rounds(o: &crate::stats::race::RaceOutcome) -> u32 {
    o.rounds
        .iter()
        .filter(|round| {
            round
                .order
                .iter()
                .all(|&a| round.samples.get(a).is_some_and(Option::is_some))
        })
        .count() as u32
}

/// Launches an undecided race still needs: the rounds it sized itself for (at least the 3 a
/// claim needs, ending on a look: claims are looked at every 2 rounds from the 3rd), or the
/// next look past the rounds it has, times every arm that may still race (candidates not
/// failed or dropped, and the baselines still launched).
fn decide_rounds(o: &crate::stats::race::RaceOutcome, paired: u32) -> u32 {
    use crate::stats::race::ArmStatus;
    let (min, every) = (3u32, 2u32);
    let on_look = |n: u32| {
        if n <= min {
            min
        } else {
            n + (n - min) % every
        }
    };
    let sized = o
        .noise
        .as_ref()
        .map_or(min, |n| n.rounds_to_resolve.max(min));
    let target = on_look(sized).max(on_look(paired + 1));
    let open = |s: &ArmStatus| matches!(s, ArmStatus::Racing | ArmStatus::NotRaced { .. });
    let candidates = o
        .candidates
        .iter()
        .filter(|c| open(&c.status))
        .count()
        .max(1);
    let baselines = o
        .baseline_status
        .iter()
        .filter(|s| **s == ArmStatus::Racing)
        .count()
        .max(1);
    (target - paired) * (candidates + baselines) as u32
}

/// The trials' own warnings, with one summary line for the noisy ones.
fn trial_warnings(history: &[TrialOutcome]) -> Vec<String> {
    let mut warnings = Vec::new();
    let noisy: Vec<String> = history
        .iter()
        .filter(|o| o.warnings.iter().any(|w| w.contains("spread")))
        .map(|o| o.id.to_string())
        .collect();
    warnings.extend(crate::trial::grouped_warnings(history, |w| {
        w.contains("spread")
    }));
    let busy: Vec<&TrialOutcome> = history.iter().filter(|o| o.busy_box.is_some()).collect();
    if let Some(first) = busy.first() {
        warnings.push(format!(
            "{} of {} ran on a box that got busy after the tune started ({} {}; the first saw {}): their timings are the busy box's, not this box's own, and a comparison with a quiet launch is not like for like; close what is running and tune again for this box's own speed",
            busy.len(),
            crate::util::count(history.len() as u64, "launch", "launches"),
            if busy.len() == 1 { "trial" } else { "trials" },
            busy.iter().map(|o| o.id.to_string()).collect::<Vec<_>>().join(", "),
            first.busy_box.as_deref().unwrap_or_default()
        ));
    }
    if !noisy.is_empty() {
        warnings.push(format!(
            "{} of {} had a spread wider than 10 % ({} {}): the box was busy or noisy; the confirmation pooled repeated rounds, but consider more repetitions in the space",
            noisy.len(),
            crate::util::count(history.len() as u64, "trial", "trials"),
            if noisy.len() == 1 { "trial" } else { "trials" },
            noisy.join(", ")
        ));
    }
    warnings
}

/// Run the whole search (baseline, exploration, confirmation) through argmin's executor.
/// `replay` holds journaled outcomes of an earlier session; `run_dir` enables checkpointing.
pub fn run_search(
    ctx: strategy::SearchContext,
    runner: Box<dyn TrialRunner>,
    replay: Vec<TrialOutcome>,
    run_dir: Option<&std::path::Path>,
) -> anyhow::Result<strategy::QtuneSearch> {
    run_search_with(ctx, runner, replay, run_dir, None)
}

fn run_search_with(
    ctx: strategy::SearchContext,
    runner: Box<dyn TrialRunner>,
    replay: Vec<TrialOutcome>,
    run_dir: Option<&std::path::Path>,
    progress: Option<Arc<dyn Watch>>,
) -> anyhow::Result<strategy::QtuneSearch> {
    use argmin::core::observers::ObserverMode;
    use argmin::core::Executor;
    let clock = ctx.clock.clone();
    let problem = strategy::TuneProblem::new(ctx, runner, replay, progress.clone());
    let mut exec = Executor::new(problem, strategy::QtuneSearch::new());
    if let Some(dir) = run_dir {
        exec = exec.checkpointing(checkpoint::RunDirCheckpoint::new(dir, clock));
    }
    if let Some(p) = progress {
        exec = exec.add_observer(progress::Observer(p), ObserverMode::Always);
    }
    let res = exec.run()?;
    Ok(res.solver().clone())
}
