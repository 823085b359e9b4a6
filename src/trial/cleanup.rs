//! No orphans: every llama-server qtune starts is registered here and its whole process group
//! is ended on every exit path (normal return, error, Ctrl-C / SIGTERM, panic).
//!
//! Three layers, so that no path leaves a server running:
//! 1. the server handle's `Drop` ends its group and reaps it (normal return, error, unwinding);
//! 2. SIGINT / SIGTERM / SIGHUP handlers (installed by [`install_handlers`]) end every
//!    registered group — SIGTERM, a short grace, then SIGKILL — and exit 130 / 143 / 129;
//!    the handler only uses async-signal-safe calls (`kill`, `waitpid`, `nanosleep`, `_exit`)
//!    over a lock-free registry;
//! 3. each server is started with `PR_SET_PDEATHSIG = SIGKILL`, so even a SIGKILLed qtune
//!    takes its server with it (set by the trial runner at spawn time).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;
use std::time::Duration;

const SLOTS: usize = 64;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicI32 = AtomicI32::new(0);
/// Live server process groups (pgid, which is the server's pid); 0 = free slot.
static GROUPS: [AtomicI32; SLOTS] = [EMPTY; SLOTS];

/// The signal that interrupted qtune, 0 if none.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

/// Grace between SIGTERM and SIGKILL when qtune is interrupted.
const SIGNAL_GRACE: Duration = Duration::from_millis(2000);

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
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

fn sleep_signal_safe(d: Duration) {
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    // SAFETY: nanosleep is async-signal-safe; a null remainder is allowed.
    unsafe {
        libc::nanosleep(&ts, std::ptr::null_mut());
    }
}

/// End every registered group: SIGTERM, up to `grace` for them to exit (reaping them), then
/// SIGKILL. Only async-signal-safe calls: usable from a signal handler.
fn kill_all_signal_safe(grace: Duration) {
    let mut live = [0i32; SLOTS];
    let mut any = false;
    for (i, slot) in GROUPS.iter().enumerate() {
        let g = slot.load(Ordering::SeqCst);
        if g > 0 {
            live[i] = g;
            any = true;
            // SAFETY: kill is async-signal-safe; a negative pid addresses the group.
            unsafe {
                libc::kill(-g, libc::SIGTERM);
            }
        }
    }
    if !any {
        return;
    }
    let step = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    while waited < grace {
        let mut remaining = false;
        for g in live.iter_mut() {
            if *g > 0 {
                let mut status = 0;
                // SAFETY: waitpid is async-signal-safe. The server is our child: reaping it
                // here is what tells a dead server from a live one.
                let r = unsafe { libc::waitpid(*g, &mut status, libc::WNOHANG) };
                if r == *g || r < 0 {
                    // Exited (reaped) or not our child any more; end stragglers in its group.
                    unsafe {
                        libc::kill(-*g, libc::SIGKILL);
                    }
                    *g = 0;
                } else {
                    remaining = true;
                }
            }
        }
        if !remaining {
            return;
        }
        sleep_signal_safe(step);
        waited += step;
    }
    for g in live.iter() {
        if *g > 0 {
            // SAFETY: as above.
            unsafe {
                libc::kill(-*g, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(*g, &mut status, 0);
            }
        }
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    INTERRUPTED.store(sig, Ordering::SeqCst);
    kill_all_signal_safe(SIGNAL_GRACE);
    // SAFETY: _exit is async-signal-safe. The journal is fsynced line by line, so nothing
    // finished is lost; `--resume` continues from it.
    unsafe { libc::_exit(128 + sig) }
}

/// Install SIGINT/SIGTERM/SIGHUP and panic handlers that end every registered server.
/// Idempotent. On a signal qtune exits with 128 + the signal (130 for Ctrl-C, 143 for SIGTERM).
pub fn install_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: a zeroed sigaction with a plain handler, every signal blocked while it
            // runs so a second Ctrl-C cannot interrupt the cleanup halfway.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                libc::sigfillset(&mut sa.sa_mask);
                sa.sa_flags = 0;
                if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                    tracing::warn!(
                        "cannot install the handler for signal {sig}: servers may outlive an interrupted qtune"
                    );
                }
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

    #[test]
    fn kill_all_ends_a_real_group() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(register(pid));
        kill_all_signal_safe(Duration::from_millis(500));
        unregister(pid);
        // Reaped by kill_all: waiting again reports no child, or the status if it raced.
        let _ = child.try_wait();
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        assert!(!alive, "sleep {pid} survived kill_all");
    }
}
