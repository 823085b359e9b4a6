//! The trial journal: one JSON line per finished trial, appended and flushed the moment the
//! trial ends, so a killed tune loses nothing and `--resume` can skip what is done.

use super::TrialOutcome;
use anyhow::{Context, Result};
use std::io::{BufRead, Write};
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
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open journal {}", path.display()))?;
        Ok(Journal { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one outcome and fsync: it survives a SIGKILL right after.
    pub fn append(&self, outcome: &TrialOutcome) -> Result<()> {
        let mut line = serde_json::to_string(outcome)?;
        line.push('\n');
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .with_context(|| format!("cannot open journal {}", self.path.display()))?;
        f.write_all(line.as_bytes())
            .and_then(|_| f.sync_data())
            .with_context(|| format!("cannot write journal {}", self.path.display()))?;
        Ok(())
    }

    /// Every complete entry. A torn last line (killed mid-write) is skipped, not an error.
    pub fn read(run_dir: &Path) -> Result<Vec<TrialOutcome>> {
        let path = run_dir.join(FILE_NAME);
        if !path.exists() {
            return Ok(Vec::new());
        }
        let f = std::fs::File::open(&path)
            .with_context(|| format!("cannot read journal {}", path.display()))?;
        let mut out = Vec::new();
        for line in std::io::BufReader::new(f).lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<TrialOutcome>(&line) {
                Ok(o) => out.push(o),
                Err(e) => tracing::warn!("skipping unreadable journal line: {e}"),
            }
        }
        Ok(out)
    }
}
