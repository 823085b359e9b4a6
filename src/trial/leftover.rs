//! What a killed tune left running. While a trial's server runs, the run directory records
//! it (`logs/server.live`: its process group, port and [`super::process::TOKEN_VAR`] token);
//! the record goes when the server is ended. A SIGKILLed qtune cannot end anything: the
//! server itself dies with it (`PR_SET_PDEATHSIG`), but a server that daemonizes leaves
//! processes outside its group. `qtune tune --resume` reads the record ([`sweep`]) and stops
//! every process that carries the token, and names a port that still answers.

use std::path::{Path, PathBuf};

/// The record's file, under the run directory.
pub const RECORD: &str = "logs/server.live";

/// One running server, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Live {
    pub pgid: i32,
    pub port: u16,
    /// `<qtune pid>.<n>`: the value of [`super::process::TOKEN_VAR`] in its environment.
    pub token: String,
}

impl Live {
    fn text(&self) -> String {
        format!("{} {} {}\n", self.pgid, self.port, self.token)
    }

    /// A record as written; None for anything else (a run directory is input).
    fn parse(text: &str) -> Option<Live> {
        let mut f = text.split_whitespace();
        let pgid = f.next()?.parse::<i32>().ok().filter(|&p| p > 1)?;
        let port = f.next()?.parse::<u16>().ok().filter(|&p| p > 0)?;
        let token = f.next()?.to_string();
        let (pid, n) = token.split_once('.')?;
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
        (f.next().is_none() && digits(pid) && digits(n)).then_some(Live { pgid, port, token })
    }
}

fn path(run_dir: &Path) -> PathBuf {
    run_dir.join(RECORD)
}

/// Record the server now running (best effort: a run directory that cannot take it only
/// loses the check on `--resume`).
pub fn record(run_dir: &Path, live: &Live) {
    if let Err(e) = crate::util::write_atomic(&path(run_dir), live.text().as_bytes()) {
        tracing::debug!("cannot record the running server: {e:#}");
    }
}

/// The server is ended: forget it.
pub fn clear(run_dir: &Path) {
    let _ = std::fs::remove_file(path(run_dir));
}

/// On `--resume`: stop what the run's last server left running, if the run recorded one
/// (every process carrying its token, its own group included), and forget the record. One
/// line for the user saying what was found, None when nothing was.
pub fn sweep(run_dir: &Path) -> Option<String> {
    let text = crate::util::read_bounded(&path(run_dir), 4096).ok()?;
    clear(run_dir);
    let live = Live::parse(&String::from_utf8_lossy(&text))?;
    // The token's qtune still running (another run's, whatever the record says): not ours.
    let owner: u32 = live.token.split_once('.')?.0.parse().ok()?;
    if owner == std::process::id() || std::path::Path::new(&format!("/proc/{owner}")).exists() {
        return None;
    }
    let found = super::process::processes_with_token(&live.token);
    for &pid in &found {
        // SAFETY: signalling a process whose environment holds the recorded token: one the
        // recorded server started.
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    }
    let port_held = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], live.port)),
        std::time::Duration::from_millis(300),
    )
    .is_ok();
    let port = if port_held {
        format!(
            "; port {} still answers (a program outside qtune's reach holds it)",
            live.port
        )
    } else {
        String::new()
    };
    if found.is_empty() && !port_held {
        return None;
    }
    let pids: Vec<String> = found.iter().map(u32::to_string).collect();
    Some(format!(
        "the run's last server (process group {}, port {}) outlived the qtune that started it: \
         stopped {} process(es) it left running{}{port}",
        live.pgid,
        live.port,
        found.len(),
        if pids.is_empty() {
            String::new()
        } else {
            format!(" (pid {})", pids.join(", "))
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_anything_else_is_none() {
        let l = Live {
            pgid: 4242,
            port: 8080,
            token: "17.3".into(),
        };
        assert_eq!(Live::parse(&l.text()), Some(l));
        for bad in [
            "",
            "1 8080 17.3",
            "4242 0 17.3",
            "4242 8080 x.3",
            "4242 8080 17.3 more",
        ] {
            assert_eq!(Live::parse(bad), None, "{bad}");
        }
    }
}
