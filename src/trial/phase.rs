//! What the running launch is doing now (loading the model, measuring a request), shared by
//! the trial runner, which sets it, and the tune's heartbeat, which says it
//! (`still running after 45s: loading the model, 1.2 of 3.4 GB in memory`).

use std::sync::{Arc, Mutex};

/// One step of a launch.
#[derive(Debug, Clone, PartialEq)]
pub enum Doing {
    /// Waiting for `/health`: the server `pid` reads a model file of `model_bytes`.
    Loading { pid: u32, model_bytes: u64 },
    /// A request is in flight; `what` names it in words (`the agent-turn request (...)`).
    Measuring { what: String },
}

/// The box as the next launch starts, when it had got busy since the tune began: set by the
/// tune's check before every launch, taken by the runner into that launch's outcome
/// ([`super::TrialOutcome::busy_box`]), so the journal and results say which launches ran on
/// a busy box. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct BusyNote(Arc<Mutex<Option<String>>>);

impl BusyNote {
    pub fn set(&self, what: Option<String>) {
        if let Ok(mut n) = self.0.lock() {
            *n = what;
        }
    }

    /// The note for the launch starting now (cleared: one launch each).
    pub fn take(&self) -> Option<String> {
        self.0.lock().ok()?.take()
    }
}

/// The runner's current step, readable from another thread. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct PhaseCell(Arc<Mutex<Option<Doing>>>);

impl PhaseCell {
    pub fn set(&self, doing: Option<Doing>) {
        if let Ok(mut d) = self.0.lock() {
            *d = doing;
        }
    }

    /// The step in words, None when none is set.
    pub fn describe(&self) -> Option<String> {
        let doing = self.0.lock().ok()?.clone()?;
        Some(match doing {
            Doing::Loading { pid, model_bytes } => loading_words(resident_bytes(pid), model_bytes),
            Doing::Measuring { what } => format!("measuring {what}"),
        })
    }
}

/// `loading the model, 1.2 of 3.4 GB in memory`: how much of the model the server holds in
/// host memory so far (its resident set, at most the file's size), when it can be read.
pub fn loading_words(resident: Option<u64>, model_bytes: u64) -> String {
    let gb = |b: u64| b as f64 / 1e9;
    match resident {
        Some(r) if model_bytes > 0 => format!(
            "loading the model, {:.1} of {:.1} GB in memory",
            gb(r.min(model_bytes)),
            gb(model_bytes)
        ),
        _ if model_bytes > 0 => format!("loading the model ({:.1} GB)", gb(model_bytes)),
        _ => "loading the model".to_string(),
    }
}

/// The resident set of process `pid` in bytes (`VmRSS` of `/proc/PID/status`), where the
/// system has it.
fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_is_said_in_words() {
        let cell = PhaseCell::default();
        assert_eq!(cell.describe(), None);
        cell.set(Some(Doing::Measuring {
            what: "the agent-turn request".into(),
        }));
        assert_eq!(
            cell.clone().describe().as_deref(),
            Some("measuring the agent-turn request")
        );
        assert_eq!(
            loading_words(Some(1_200_000_000), 3_400_000_000),
            "loading the model, 1.2 of 3.4 GB in memory"
        );
        // More resident than the file (buffers): never past the model's size.
        assert_eq!(
            loading_words(Some(9_000_000_000), 3_400_000_000),
            "loading the model, 3.4 of 3.4 GB in memory"
        );
        assert_eq!(
            loading_words(None, 3_400_000_000),
            "loading the model (3.4 GB)"
        );
        // This process has a resident set.
        cell.set(Some(Doing::Loading {
            pid: std::process::id(),
            model_bytes: 1 << 40,
        }));
        let d = cell.describe().unwrap();
        assert!(
            d.starts_with("loading the model, ") && d.ends_with(" GB in memory"),
            "{d}"
        );
        cell.set(None);
        assert_eq!(cell.describe(), None);
    }
}
