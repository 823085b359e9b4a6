//! No orphans: every llama-server qtune starts is registered here and its whole process group
//! is ended on every exit path (normal return, error, Ctrl-C / SIGTERM, panic).
//!
//! Three layers, so that no path leaves a server running:
//! 1. the server handle's `Drop` ends its group and reaps it (normal return, error, unwinding);
//! 2. SIGINT / SIGTERM / SIGHUP (handled through signal-hook, installed by
//!    [`install_handlers`]) only set a flag; the main thread sees it at its next wait, ends its
//!    server through the handle (layer 1) and returns [`Interrupted`]; qtune then says what
//!    was kept and exits 130 / 143 / 129;
//! 3. each server is started with `PR_SET_PDEATHSIG = SIGKILL`, so even a SIGKILLed qtune
//!    takes its server with it (set by the trial runner at spawn time).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Once, OnceLock};

const SLOTS: usize = 64;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicI32 = AtomicI32::new(0);
/// Live server process groups (pgid, which is the server's pid); 0 = free slot.
static GROUPS: [AtomicI32; SLOTS] = [EMPTY; SLOTS];

/// The signal that interrupted qtune, 0 if none (set by signal-hook's handler).
fn which_signal() -> Arc<AtomicUsize> {
    static WHICH: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    WHICH.get_or_init(|| Arc::new(AtomicUsize::new(0))).clone()
}

/// The error a command returns when it was interrupted (Ctrl-C, SIGTERM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("interrupted by {}", crate::trial::classify::signal_name(*.signal))]
pub struct Interrupted {
    pub signal: i32,
}

/// Remember a live server group. Returns false when the registry is full (64 servers at once:
/// never in qtune, which runs one at a time); PDEATHSIG still covers that server.
pub fn register(pgid: i32) -> bool {
    if pgid <= 0 {
        return false;
    }
    for slot in GROUPS.iter() {
        if slot
            .compare_exchange(0, pgid, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return true;
        }
    }
    tracing::warn!("server registry full; relying on PDEATHSIG for process group {pgid}");
    false
}

/// Forget a group once it has been ended and reaped.
pub fn unregister(pgid: i32) {
    if pgid <= 0 {
        return;
    }
    for slot in GROUPS.iter() {
        let _ = slot.compare_exchange(pgid, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// The groups registered now (for tests and diagnostics).
pub fn registered() -> Vec<i32> {
    GROUPS
        .iter()
        .map(|s| s.load(Ordering::SeqCst))
        .filter(|&g| g > 0)
        .collect()
}

/// The signal that interrupted this process, if one did.
pub fn interrupted() -> Option<i32> {
    match which_signal().load(Ordering::SeqCst) {
        0 => None,
        s => Some(s as i32),
    }
}

/// Install the SIGINT / SIGTERM / SIGHUP handlers (signal-hook) and a panic hook.
///
/// A signal only sets a flag ([`interrupted`]); the main thread notices it at its next wait
/// (every trial runner polls it), stops its server through the server handle, journals
/// nothing half-done and returns [`Interrupted`], so the app layer can say what was kept
/// and exit with 128 + the signal. A second signal while that happens exits at once
/// (PR_SET_PDEATHSIG still takes the server down). Idempotent.
pub fn install_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let seen = Arc::new(AtomicBool::new(false));
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // Registered first, so it sees the flag as it was before this signal.
            let second = signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, seen.clone());
            let first = signal_hook::flag::register(sig, seen.clone());
            let which = signal_hook::flag::register_usize(sig, which_signal(), sig as usize);
            if second.is_err() || first.is_err() || which.is_err() {
                tracing::warn!(
                    "cannot install the handler for signal {sig}: servers may outlive an interrupted qtune"
                );
            }
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // Do not reap here: the server handles' Drop still owns their children.
            for slot in GROUPS.iter() {
                let g = slot.load(Ordering::SeqCst);
                if g > 0 {
                    // SAFETY: signalling a group we started.
                    unsafe {
                        libc::kill(-g, libc::SIGKILL);
                    }
                }
            }
            previous(info);
        }));
    });
}

/// The process exit code for an error: 128 + the signal after an interruption (130 after
/// Ctrl-C, 143 after SIGTERM), 1 otherwise.
pub fn exit_code_for(e: &anyhow::Error) -> u8 {
    if let Some(i) = e.chain().find_map(|c| c.downcast_ref::<Interrupted>()) {
        return (128 + i.signal).clamp(1, 255) as u8;
    }
    match interrupted() {
        Some(sig) => (128 + sig).clamp(1, 255) as u8,
        None => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_for_interruption_and_other_errors() {
        let e = anyhow::Error::new(Interrupted {
            signal: libc::SIGINT,
        })
        .context("tune stopped");
        assert_eq!(exit_code_for(&e), 130);
        let e = anyhow::Error::new(Interrupted {
            signal: libc::SIGTERM,
        });
        assert_eq!(exit_code_for(&e), 143);
        assert_eq!(exit_code_for(&anyhow::anyhow!("disk full")), 1);
        assert!(format!("{}", Interrupted { signal: 2 }).contains("SIGINT"));
    }

    #[test]
    fn registry_registers_and_forgets() {
        // Use pids no real process group of this test has.
        assert!(register(999_999_001));
        assert!(registered().contains(&999_999_001));
        unregister(999_999_001);
        assert!(!registered().contains(&999_999_001));
        assert!(!register(0));
    }
}
