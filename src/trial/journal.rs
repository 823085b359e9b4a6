//! The trial journal: one JSON line per finished trial, appended and flushed the moment the
//! trial ends, so a killed tune loses nothing and `--resume` can skip what is done.

use super::TrialOutcome;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "journal.jsonl";

pub struct Journal {
    path: PathBuf,
}

impl Journal {
    /// Open (creating) the journal in a run directory.
    pub fn open(run_dir: &Path) -> Result<Journal> {
        std::fs::create_dir_all(run_dir)
            .with_context(|| format!("cannot create run directory {}", run_dir.display()))?;
        let path = run_dir.join(FILE_NAME);
        crate::util::open_for_write(&path, true, true)
            .with_context(|| format!("cannot open journal {}", path.display()))?;
        Ok(Journal { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one outcome with one `write` call on an `O_APPEND` handle, then fsync: the
    /// line lands whole or (killed mid-call) as a torn tail that [`Journal::repair`] cuts off.
    pub fn append(&self, outcome: &TrialOutcome) -> Result<()> {
        let mut line = serde_json::to_string(outcome)?;
        line.push('\n');
        let mut f = crate::util::open_for_write(&self.path, true, false)
            .with_context(|| format!("cannot open journal {}", self.path.display()))?;
        let written = f
            .write(line.as_bytes())
            .with_context(|| format!("cannot write journal {}", self.path.display()))?;
        if written != line.len() {
            // A short write (disk full): cut the fragment so the journal stays line-whole.
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = f.set_len(len.saturating_sub(written as u64));
            anyhow::bail!(
                "cannot write journal {}: only {written} of {} bytes written (disk full?)",
                self.path.display(),
                line.len()
            );
        }
        f.sync_data()
            .with_context(|| format!("cannot write journal {}", self.path.display()))?;
        Ok(())
    }

    /// Make the journal of a run directory line-whole before a session appends to it: a torn
    /// last line (a tune killed mid-write) is cut off, so the next entry starts on a line of
    /// its own. Returns a one-line report of what was cut, if anything. An unreadable line
    /// that is not the last one is an error (the journal was edited or is not qtune's).
    pub fn repair(run_dir: &Path) -> Result<Option<String>> {
        let path = run_dir.join(FILE_NAME);
        let Some(bytes) = read_journal(&path)? else {
            return Ok(None);
        };
        let (keep, lines) = whole_prefix(&bytes).map_err(|(n, e)| {
            anyhow::anyhow!(
                "journal {} line {n} is unreadable ({e}): was it edited? Fix or remove that line to resume",
                path.display()
            )
        })?;
        if keep == bytes.len() {
            return Ok(None);
        }
        let f = crate::util::open_for_write(&path, false, false)
            .and_then(|f| f.set_len(keep as u64).and_then(|_| f.sync_all()))
            .with_context(|| format!("cannot repair journal {}", path.display()));
        f?;
        Ok(Some(format!(
            "journal {}: cut off a torn last line ({} bytes, a trial killed while it was being recorded); {lines} whole entries kept",
            path.display(),
            bytes.len() - keep
        )))
    }

    /// Every complete entry. A torn last line (killed mid-write) is left out, not an error;
    /// an unreadable line before it is an error.
    pub fn read(run_dir: &Path) -> Result<Vec<TrialOutcome>> {
        let path = run_dir.join(FILE_NAME);
        let Some(bytes) = read_journal(&path)? else {
            return Ok(Vec::new());
        };
        let (keep, _) = whole_prefix(&bytes).map_err(|(n, e)| {
            anyhow::anyhow!("journal {} line {n} is unreadable ({e})", path.display())
        })?;
        let mut out = Vec::new();
        for line in bytes[..keep].split(|b| *b == b'\n') {
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            out.push(serde_json::from_slice::<TrialOutcome>(line)?);
        }
        Ok(out)
    }
}

/// The largest journal qtune reads: a thousand trials take about 2 MiB.
pub const MAX_JOURNAL_BYTES: u64 = 256 << 20;

/// The journal's bytes (None when there is none yet): a regular file, read without blocking,
/// at most [`MAX_JOURNAL_BYTES`].
fn read_journal(path: &Path) -> Result<Option<Vec<u8>>> {
    crate::util::read_bounded_opt(path, MAX_JOURNAL_BYTES)
        .map_err(|e| anyhow::anyhow!("cannot read journal {}: {e}", path.display()))
}

/// The length of the journal's readable prefix and how many entries it holds. Only the last
/// line may be torn (no newline, or unreadable); an unreadable earlier line is `Err((line, why))`.
fn whole_prefix(bytes: &[u8]) -> std::result::Result<(usize, usize), (usize, String)> {
    let mut start = 0;
    let mut entries = 0;
    let mut n = 0;
    while start < bytes.len() {
        n += 1;
        let end = match bytes[start..].iter().position(|b| *b == b'\n') {
            Some(i) => start + i,
            // No newline: torn, whatever it holds.
            None => return Ok((start, entries)),
        };
        let line = &bytes[start..end];
        if !line.iter().all(|b| b.is_ascii_whitespace()) {
            if let Err(e) = serde_json::from_slice::<TrialOutcome>(line) {
                if end + 1 >= bytes.len() {
                    return Ok((start, entries));
                }
                return Err((n, e.to_string()));
            }
            entries += 1;
        }
        start = end + 1;
    }
    Ok((start, entries))
}
