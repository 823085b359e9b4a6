//! The GPU evidence under `docs/evidence/` (see its `manifest.json`): one reader for the files
//! the tests cite. Journals, results and compare files are stored gzipped (`journal.jsonl.gz`);
//! callers name them without the `.gz`.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};

/// `docs/evidence/` of this checkout.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/evidence")
}

/// `rel` under [`root`] (an absolute path is kept as it is).
pub fn path(rel: impl AsRef<Path>) -> PathBuf {
    root().join(rel)
}

/// True when `p` (or its `.gz`) exists.
pub fn exists(p: impl AsRef<Path>) -> bool {
    let p = path(p);
    p.is_file() || gz(&p).is_file()
}

fn gz(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".gz");
    PathBuf::from(s)
}

/// The text of an evidence file (`rel` under [`root`], or absolute), from its `.gz` where the
/// plain file is not there. None when neither is.
pub fn try_read(rel: impl AsRef<Path>) -> Option<String> {
    let p = path(rel);
    if let Ok(s) = std::fs::read_to_string(&p) {
        return Some(s);
    }
    let bytes = std::fs::read(gz(&p)).ok()?;
    let mut s = String::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_string(&mut s)
        .unwrap_or_else(|e| panic!("{}.gz: {e}", p.display()));
    Some(s)
}

/// [`try_read`], panicking with the path when the file is missing.
pub fn read(rel: impl AsRef<Path>) -> String {
    let p = path(rel);
    try_read(&p).unwrap_or_else(|| panic!("no evidence file {} (or .gz)", p.display()))
}

/// An evidence file parsed as JSON.
pub fn json(rel: impl AsRef<Path>) -> serde_json::Value {
    let p = path(rel);
    serde_json::from_str(&read(&p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every `journal.jsonl` under `dir` (named without `.gz`), sorted.
pub fn journals(dir: impl AsRef<Path>) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p
                .file_name()
                .is_some_and(|n| n == "journal.jsonl" || n == "journal.jsonl.gz")
            {
                out.push(p.with_file_name("journal.jsonl"));
            }
        }
    }
    let mut out = Vec::new();
    walk(&path(dir), &mut out);
    out.sort();
    out.dedup();
    out
}
