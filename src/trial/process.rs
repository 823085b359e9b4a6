//! A `llama-server` process in its own process group: spawned with PR_SET_PDEATHSIG, registered
//! for cleanup, stopped (SIGTERM, grace, SIGKILL) and reaped; and the free loopback port it
//! listens on.

use super::classify::ExitInfo;
use anyhow::{Context, Result};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A command for one of llama.cpp's programs (`llama-server`, `llama-perplexity`), owned by
/// qtune: stdin closed, in a new process group (so its whole group can be ended), killed with
/// the thread that starts it (`PR_SET_PDEATHSIG = SIGKILL`; it exits at once if qtune died
/// before that took effect), without the `LLAMA_ARG_*` variables (they would silently change
/// the config under test) and without gdb's attach on abort (the error lines are the
/// evidence, and aborts stay fast). The caller sets its output and registers its group.
pub fn llama_command(program: impl AsRef<std::ffi::OsStr>, args: &[String]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).process_group(0);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("LLAMA_ARG_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("GGML_NO_BACKTRACE", "1");
    // SAFETY: getpid is async-signal-safe; read before fork.
    let parent = unsafe { libc::getpid() };
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before prctl took effect: do not run as an orphan.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd
}

/// The variable every server qtune starts carries, with a value of its own: the processes a
/// server leaves outside its group (a daemon's `fork` + `setsid`) inherit it, so they can be
/// found and ended with it.
pub const TOKEN_VAR: &str = "QTUNE_SERVER_TOKEN";

/// A running `llama-server` in its own process group. Dropping it ends the group and reaps it.
pub struct ServerProcess {
    child: Child,
    pgid: i32,
    exit: Option<ExitInfo>,
    /// The value of [`TOKEN_VAR`] in its environment.
    token: String,
    /// Processes it left running outside its group, killed when it ended.
    orphans: Vec<u32>,
}

impl ServerProcess {
    /// Spawn `argv` (never through a shell) as a [`llama_command`], stdout and stderr to
    /// `log`, `env` added, and register its group for cleanup.
    pub fn spawn(argv: &[String], log: &std::fs::File, env: &[(String, String)]) -> Result<Self> {
        let (prog, args) = argv.split_first().context("empty server command")?;
        let mut cmd = llama_command(prog, args);
        cmd.stdout(log.try_clone()?).stderr(log.try_clone()?);
        for (k, v) in env {
            cmd.env(k, v);
        }
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let token = format!(
            "{}.{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        cmd.env(TOKEN_VAR, &token);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {prog}: check the server path"))?;
        let pgid = child.id() as i32;
        super::cleanup::register(pgid);
        Ok(ServerProcess {
            child,
            pgid,
            exit: None,
            token,
            orphans: Vec::new(),
        })
    }

    /// Processes the server left running outside its process group (a server that
    /// daemonizes), found by [`TOKEN_VAR`] and killed when it ended.
    pub fn orphans(&self) -> &[u32] {
        &self.orphans
    }

    /// Kill what the server left outside its group; remember the pids.
    fn sweep(&mut self) {
        let found = processes_with_token(&self.token);
        for &pid in &found {
            // SAFETY: signalling a process that carries this server's token.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
        self.orphans.extend(found);
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The value of [`TOKEN_VAR`] in its environment (and its daemons').
    pub fn token(&self) -> &str {
        &self.token
    }

    /// How the process ended, if it has (non-blocking; reaps it).
    pub fn try_exit(&mut self) -> Option<ExitInfo> {
        if self.exit.is_none() {
            match self.child.try_wait() {
                Ok(Some(st)) => {
                    self.exit = Some(ExitInfo::from_status(&st));
                    // The server is gone; end anything it left in its group.
                    // SAFETY: signalling the group we created.
                    unsafe {
                        libc::kill(-self.pgid, libc::SIGKILL);
                    }
                    wait_group_gone(self.pgid, Duration::from_secs(2));
                    self.sweep();
                    super::cleanup::unregister(self.pgid);
                }
                Ok(None) => {}
                Err(_) => {
                    self.exit = Some(ExitInfo {
                        code: None,
                        signal: None,
                    });
                    super::cleanup::unregister(self.pgid);
                }
            }
        }
        self.exit
    }

    /// Wait up to `d` for the process to exit by itself.
    pub fn wait_exit(&mut self, d: Duration) -> Option<ExitInfo> {
        let t0 = Instant::now();
        loop {
            if let Some(e) = self.try_exit() {
                return Some(e);
            }
            if t0.elapsed() >= d {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// End the group: SIGTERM, up to `grace`, then SIGKILL; reap. Returns how it ended.
    pub fn stop(&mut self, grace: Duration) -> ExitInfo {
        if let Some(e) = self.try_exit() {
            return e;
        }
        // SAFETY: signalling the group we created (still unreaped, so the id is ours).
        unsafe {
            libc::kill(-self.pgid, libc::SIGTERM);
        }
        if let Some(e) = self.wait_exit(grace) {
            return e;
        }
        unsafe {
            libc::kill(-self.pgid, libc::SIGKILL);
        }
        wait_group_gone(self.pgid, Duration::from_secs(2));
        let e = match self.child.wait() {
            Ok(st) => ExitInfo::from_status(&st),
            Err(_) => ExitInfo {
                code: None,
                signal: Some(libc::SIGKILL),
            },
        };
        self.exit = Some(e);
        self.sweep();
        super::cleanup::unregister(self.pgid);
        e
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.exit.is_none() {
            self.stop(Duration::from_secs(2));
        }
    }
}

/// After a SIGKILL to a group: wait (bounded) until no live member is left, so a caller that
/// returns afterwards leaves nothing running. Zombies waiting for their reaper count as gone.
fn wait_group_gone(pgid: i32, limit: Duration) {
    let t0 = Instant::now();
    while t0.elapsed() < limit && group_has_live_member(pgid) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn group_has_live_member(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        // Fields after the command name: state, ppid, pgrp, ...
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("?");
        let pgrp = f.nth(1).and_then(|p| p.parse::<i32>().ok());
        pgrp == Some(pgid) && state != "Z" && state != "X"
    })
}

/// Live processes (not zombies) other than qtune whose environment holds `TOKEN_VAR=token`
/// (only those of this user can be read, which are the only ones a server can start).
pub(crate) fn processes_with_token(token: &str) -> Vec<u32> {
    let needle = format!("{TOKEN_VAR}={token}");
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next())
                .unwrap_or("Z");
            state != "Z" && state != "X"
        })
        .collect()
}

/// Find a free loopback port (bind port 0, read it, release it).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))
        .context("cannot bind a loopback port to find a free one")?;
    Ok(l.local_addr()?.port())
}
