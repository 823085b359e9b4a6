//! argmin checkpointing into the run directory: the solver and its state as JSON, written
//! atomically after every trial, so `qtune tune --resume DIR` continues where a killed tune was.
//!
//! Written here rather than with `argmin-checkpointing-file`: that crate writes bincode with a
//! plain `File::create` (a kill mid-write leaves a torn checkpoint) and saves argmin's state,
//! whose infinite costs for failed trials are not worth carrying. This one writes JSON through
//! the atomic writer and keeps only the solver, whose history decides everything.

use super::strategy::QtuneSearch;
use super::TuneState;
use crate::clock::Clock;
use argmin::core::checkpointing::{Checkpoint, CheckpointingFrequency};
use argmin::core::Error as ArgminError;
use argmin::core::State;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const FILE_NAME: &str = "checkpoint.json";

pub struct RunDirCheckpoint {
    path: PathBuf,
    clock: Arc<dyn Clock>,
}

impl RunDirCheckpoint {
    pub fn new(run_dir: &Path, clock: Arc<dyn Clock>) -> Self {
        RunDirCheckpoint {
            path: run_dir.join(FILE_NAME),
            clock,
        }
    }
}

/// The solver holds every decision-relevant fact (the trial history); argmin's own state only
/// holds costs (infinite for failed trials, which JSON cannot carry), so it starts afresh.
#[derive(serde::Serialize, serde::Deserialize)]
struct Saved {
    solver: QtuneSearch,
}

impl Checkpoint<QtuneSearch, TuneState> for RunDirCheckpoint {
    fn save(&self, solver: &QtuneSearch, _state: &TuneState) -> Result<(), ArgminError> {
        let mut solver = solver.clone();
        // Persist the time spent so far; a resumed session adds to it.
        solver.elapsed_before_s = solver.elapsed_s(self.clock.as_ref());
        let json = serde_json::to_vec(&Saved { solver })?;
        crate::util::write_atomic(&self.path, &json).map_err(|e| ArgminError::msg(format!("{e:#}")))
    }

    fn load(&self) -> Result<Option<(QtuneSearch, TuneState)>, ArgminError> {
        let Some(bytes) = crate::util::read_bounded_opt(&self.path, 256 << 20).map_err(|e| {
            ArgminError::msg(format!(
                "cannot read checkpoint {}: {e}; delete it to resume from the journal alone",
                self.path.display()
            ))
        })?
        else {
            return Ok(None);
        };
        let saved: Saved = serde_json::from_slice(&bytes).map_err(|e| {
            ArgminError::msg(format!(
                "checkpoint {} is unreadable ({e}); delete it to resume from the journal alone",
                self.path.display()
            ))
        })?;
        Ok(Some((saved.solver, TuneState::new())))
    }

    fn frequency(&self) -> CheckpointingFrequency {
        CheckpointingFrequency::Always
    }
}

/// A finished tune given a larger budget: its saved search is reopened
/// ([`QtuneSearch::reopen`]) so the resumed session launches again. No checkpoint: nothing to
/// reopen (the journal replay starts the search afresh).
pub fn reopen(run_dir: &Path) -> Result<(), ArgminError> {
    let cp = RunDirCheckpoint::new(run_dir, crate::clock::system());
    if let Some((mut solver, state)) = cp.load()? {
        solver.reopen();
        cp.save(&solver, &state)?;
    }
    Ok(())
}
