//! The argmin problem: runs trials through the runner, or replays journaled ones after a resume.

use super::SearchContext;
use crate::config::LaunchConfig;
use crate::trial::{TrialOutcome, TrialRole, TrialRunner};
use argmin::core::Error as ArgminError;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

/// The argmin problem: runs trials (or replays journaled ones after a resume).
pub struct TuneProblem {
    pub ctx: SearchContext,
    runner: RefCell<Box<dyn TrialRunner>>,
    /// Journaled outcomes not yet seen by the solver (a resumed tune): used instead of launching.
    replay: RefCell<VecDeque<TrialOutcome>>,
    progress: Option<Arc<dyn crate::search::progress::Watch>>,
}

impl TuneProblem {
    pub fn new(
        ctx: SearchContext,
        runner: Box<dyn TrialRunner>,
        replay: Vec<TrialOutcome>,
        progress: Option<Arc<dyn crate::search::progress::Watch>>,
    ) -> Self {
        TuneProblem {
            ctx,
            runner: RefCell::new(runner),
            replay: RefCell::new(replay.into()),
            progress,
        }
    }

    /// Run (or replay) one trial. Fails with [`Interrupted`] when qtune is being interrupted:
    /// a trial cut short by Ctrl-C is not a result (its runner did not journal it).
    ///
    /// [`Interrupted`]: crate::trial::cleanup::Interrupted
    pub(super) fn evaluate(
        &self,
        config: &LaunchConfig,
        role: TrialRole,
        race: Option<&crate::search::progress::RaceStep>,
    ) -> Result<TrialOutcome, ArgminError> {
        let interrupted = || {
            crate::trial::cleanup::interrupted()
                .map(|signal| ArgminError::new(crate::trial::cleanup::Interrupted { signal }))
        };
        let mut replay = self.replay.borrow_mut();
        if let Some(front) = replay.front() {
            if &front.config == config && front.role == role {
                return Ok(replay.pop_front().expect("front exists"));
            }
            // The journal diverged from the plan (edited by hand?): stop replaying.
            tracing::warn!("journal does not match the search path; running trials afresh");
            replay.clear();
        }
        drop(replay);
        if let Some(e) = interrupted() {
            return Err(e);
        }
        // A model deleted, replaced or truncated mid-tune stops the tune before a launch is
        // charged to it.
        if let Err(why) = self.runner.borrow().check_inputs() {
            return Err(ArgminError::msg(why));
        }
        // Launch feasibility (host RAM): a config predicted to push the box into
        // swap is never launched; it is recorded as skipped, with the reason.
        if let Some(why) = crate::model::memory::launch_refusal(
            &self.ctx.layout,
            config,
            self.ctx.has_gpu,
            self.ctx.ram_available_mib,
        ) {
            return Ok(TrialOutcome::skipped(config, role, why));
        }
        if let Some(p) = &self.progress {
            p.starting(config, role, race);
        }
        let outcome = self.runner.borrow_mut().run(config, role);
        if let Some(why) = self.runner.borrow().fatal() {
            return Err(ArgminError::new(crate::trial::Fatal(why)));
        }
        match interrupted() {
            Some(e) => Err(e),
            None => Ok(outcome),
        }
    }
}
