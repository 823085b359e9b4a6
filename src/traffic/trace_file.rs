//! The trace file `qtune record` writes: created user-only and never over another file, one
//! JSON line per write, flushed at once (moved out of [`super::proxy`], which serves HTTP).

use super::trace::{Line, Outcome};
use anyhow::{Context, Result};
use std::io::Write;

/// The trace file: one line per write, flushed at once (a stop or crash loses no finished
/// request).
pub(super) struct TraceWriter {
    pub(super) file: std::fs::File,
    pub(super) path: std::path::PathBuf,
    pub(super) requests: u64,
    pub(super) interrupted: u64,
    pub(super) failed: Option<String>,
}

impl TraceWriter {
    pub(super) fn write(&mut self, line: &Line) {
        if self.failed.is_some() {
            return;
        }
        let mut text = match serde_json::to_string(line) {
            Ok(t) => t,
            Err(e) => {
                self.failed = Some(e.to_string());
                return;
            }
        };
        text.push('\n');
        if let Err(e) = self.file.write_all(text.as_bytes()) {
            eprintln!(
                "qtune: error: cannot write the trace {}: {e}; requests are still forwarded",
                self.path.display()
            );
            self.failed = Some(e.to_string());
            return;
        }
        if let Line::Request(r) = line {
            self.requests += 1;
            if r.outcome == Outcome::Interrupted {
                self.interrupted += 1;
            }
        }
    }
}

/// Create the trace file for writing: user-only (0600), never over an existing file; its
/// folder is made user-only (0700) when qtune creates it.
pub fn create_trace_file(path: &std::path::Path) -> Result<std::fs::File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .with_context(|| {
                    format!(
                        "cannot create the trace's folder {}: choose another --out",
                        dir.display()
                    )
                })?;
        }
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                anyhow::anyhow!(
                    "{} already exists: qtune never writes over a trace; give another --out",
                    path.display()
                )
            } else {
                anyhow::anyhow!("cannot create the trace {}: {e}", path.display())
            }
        })
}
