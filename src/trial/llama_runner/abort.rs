//! A server that printed its abort and hangs in it (ik_llama.cpp's CUDA build on the GPU
//! machine: `CUDA error: an illegal memory access was encountered`, then nothing, for minutes)
//! is as gone as one that exited: the trial log is read as it grows, and once an abort line
//! ([`crate::engine::log::is_abort_line`]) is [`ABORT_GRACE`] old with the process still
//! running, the trial ends there instead of at its load or request timeout.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a server that printed an abort line may take to exit by itself (ggml prints a
/// backtrace first, through gdb where one is installed) before qtune calls it hung.
pub const ABORT_GRACE: Duration = Duration::from_secs(5);

/// The most of the log one look reads (a verbose server writes fast; the rest waits for the
/// next look).
const MAX_READ: u64 = 4 << 20;

/// Reads a trial log from where it stood when the watch began, for the first abort line.
pub struct AbortWatch {
    path: PathBuf,
    read: u64,
    seen: Option<(String, Instant)>,
    grace: Duration,
}

impl AbortWatch {
    /// A watch of `path` from byte `from` on, calling a server hung `grace` after its abort line.
    pub fn new(path: &Path, from: u64, grace: Duration) -> AbortWatch {
        AbortWatch {
            path: path.to_path_buf(),
            read: from,
            seen: None,
            grace,
        }
    }

    /// The abort line, once the server printed one at least `grace` ago (the caller knows the
    /// process still runs).
    pub fn hung(&mut self) -> Option<String> {
        if self.seen.is_none() {
            self.look();
        }
        match &self.seen {
            Some((line, at)) if at.elapsed() >= self.grace => Some(line.clone()),
            _ => None,
        }
    }

    /// Read the complete lines written since the last look.
    fn look(&mut self) {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.read)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        if f.take(MAX_READ).read_to_end(&mut buf).is_err() {
            return;
        }
        // A line still being written is read whole at the next look.
        let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        self.read += end as u64 + 1;
        let text = String::from_utf8_lossy(&buf[..end]);
        if let Some(line) = text.lines().find(|l| crate::engine::log::is_abort_line(l)) {
            self.seen = Some((line.trim().to_string(), Instant::now()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_abort_line_counts_once_whole_and_grace_old_and_only_after_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trial.log");
        let mut f = std::fs::File::create(&path).unwrap();
        // Before the watch began: not this phase's.
        writeln!(f, "/src/ggml-cuda.cu:132: CUDA error").unwrap();
        let start = std::fs::metadata(&path).unwrap().len();
        let mut w = AbortWatch::new(&path, start, Duration::from_millis(200));
        assert_eq!(w.hung(), None);
        writeln!(f, "INFO [ init] new slot | id_slot=0 n_ctx_slot=16384").unwrap();
        // Half a line: not read yet.
        write!(f, "CUDA error: an illegal memory acc").unwrap();
        f.flush().unwrap();
        assert_eq!(w.hung(), None);
        writeln!(f, "ess was encountered").unwrap();
        f.flush().unwrap();
        // Seen, but not yet grace old.
        assert_eq!(w.hung(), None);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(
            w.hung().as_deref(),
            Some("CUDA error: an illegal memory access was encountered")
        );
    }

    #[test]
    fn a_log_without_an_abort_line_never_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trial.log");
        std::fs::write(
            &path,
            "E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 17034.56 MiB on device 0: \
             cudaMalloc failed: out of memory\nI srv  update_slots: all slots are idle\n",
        )
        .unwrap();
        let mut w = AbortWatch::new(&path, 0, Duration::ZERO);
        assert_eq!(w.hung(), None);
        // A missing log is not an abort either.
        let mut gone = AbortWatch::new(&dir.path().join("none.log"), 0, Duration::ZERO);
        assert_eq!(gone.hung(), None);
    }
}
