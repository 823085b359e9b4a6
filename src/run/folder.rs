//! The run directory itself: the lock one tune holds, and the checks that a folder is a run's
//! (no planted links, nothing foreign) before anything is written into it. Its files are
//! written by their owners: `run.json` in [`super::inputs`], `results.json` in
//! [`super::result_file`], the journal by the trial stage.

use super::*;

pub const LOCK_FILE: &str = ".qtune.lock";
/// The folder of a run's trial logs (`logs/trial-<id>.log`): the trial stage writes them.
pub use crate::trial::LOGS_DIR;

/// An exclusive OS lock (`flock`) on a run directory, held while a tune, a resume or a
/// measurement writes into it. The OS releases it when the holder dies, however it dies.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

/// Take the run directory's lock (creating the directory), or fail with one line when another
/// qtune holds it.
pub fn lock(dir: &Path) -> Result<RunLock> {
    // Checked before creating (a link at `dir` is named as one, not as "File exists") and
    // after (the folder as it now is).
    check_run_files(dir)?;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create run directory {}", dir.display()))?;
    check_run_files(dir)?;
    let path = dir.join(LOCK_FILE);
    let file = crate::util::open_for_write(&path, false, true)
        .with_context(|| format!("cannot lock run directory {}", dir.display()))?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this function owns; no memory is touched.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(RunLock { _file: file });
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::WouldBlock {
        anyhow::bail!(
            "{} is in use by another qtune (a tune or resume is still running there): wait for it to end, or use another --out",
            dir.display()
        );
    }
    Err(e).with_context(|| format!("cannot lock run directory {}", dir.display()))
}

/// The run folder itself, before qtune writes into it: a real folder (not a symbolic link),
/// owned by this user and not writable by every user (where another user could plant a link
/// while qtune runs). Returns false when it does not exist yet (qtune creates it).
pub fn check_run_folder(dir: &Path) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
        Ok(m) => m,
    };
    if meta.file_type().is_symlink() {
        anyhow::bail!(
            "{} is a symbolic link to a folder: qtune writes a run only into a real folder (give the folder it points to, or another --out)",
            dir.display()
        );
    }
    if !meta.is_dir() {
        anyhow::bail!(
            "{} is not a folder: give a new or existing folder as --out",
            dir.display()
        );
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        anyhow::bail!(
            "{} belongs to another user (uid {}): qtune writes a run only into a folder you own, where nobody else can plant a link (use another --out)",
            dir.display(),
            meta.uid()
        );
    }
    if meta.mode() & 0o002 != 0 {
        anyhow::bail!(
            "{} is writable by every user: qtune writes a run only into a folder nobody else can plant a link in (use a new folder inside it as --out, or chmod o-w it)",
            dir.display()
        );
    }
    Ok(true)
}

/// The files of a run folder qtune is about to write or replace (`report.md`, the plots):
/// none of them may be a symbolic link (it is refused, naming it, not replaced).
pub fn check_not_links<'a>(dir: &Path, names: impl IntoIterator<Item = &'a str>) -> Result<()> {
    for name in names {
        let p = dir.join(name);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            anyhow::bail!("{} {}", p.display(), crate::util::LINK_REFUSED);
        }
    }
    Ok(())
}

/// A folder a new tune or comparison may start in: new, empty, or holding only the lock a
/// run killed before its first file left and a `logs/` folder (a trial log is never
/// overwritten: a taken name gets `trial-<id>.<n>.log`). Anything else is the user's own folder (its
/// `report.md`, `launch.sh` or `results.json` would be overwritten) or another run: refused
/// in one line. `what` names the run (`a new tune`, `a comparison`). A tune's own folder is
/// recognized by its `run.json` and continued with `--resume`, which never calls this.
pub fn check_fresh(dir: &Path, what: &str) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        r => r.with_context(|| format!("cannot read {}", dir.display()))?,
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != LOCK_FILE && n != LOGS_DIR)
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    names.sort();
    let shown = names.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    let more = if names.len() > 3 { ", ..." } else { "" };
    anyhow::bail!(
        "{} is not empty ({shown}{more}): {what} starts only in a new or empty folder, so nothing there is overwritten (use another --out)",
        dir.display()
    )
}

/// A run directory already holds a tune.
pub fn holds_a_tune(dir: &Path) -> bool {
    dir.join(RUN_FILE).exists()
}

/// A run folder checked before a tune, a resume, a measurement or a comparison writes into it:
/// - the folder itself passes [`check_run_folder`];
/// - nothing in it or in its `logs/` is a symbolic link (qtune writes only real files there
///   and never through a link: a planted `journal.jsonl -> ~/.bashrc` is refused, naming it);
/// - each file qtune reads back that is present is a regular file (a named pipe or a device
///   there would block or never end).
///
/// A folder that does not exist yet passes (qtune creates it).
pub fn check_run_files(dir: &Path) -> Result<()> {
    if !check_run_folder(dir)? {
        return Ok(());
    }
    for folder in [dir.to_path_buf(), dir.join(LOGS_DIR)] {
        let entries = match std::fs::read_dir(&folder) {
            Err(_) if folder != dir => continue,
            r => r.with_context(|| format!("cannot read {}", folder.display()))?,
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot read {}", folder.display()))?;
            if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                anyhow::bail!("{} {}", entry.path().display(), crate::util::LINK_REFUSED);
            }
        }
    }
    for name in [
        RUN_FILE,
        RESULTS_FILE,
        crate::trial::journal::FILE_NAME,
        "checkpoint.json",
        LOCK_FILE,
    ] {
        let p = dir.join(name);
        match std::fs::metadata(&p) {
            Ok(m) if !m.is_file() => anyhow::bail!(
                "{} is not a regular file (a pipe, device, socket or directory): not a qtune run directory, or tampered with",
                p.display()
            ),
            _ => {}
        }
    }
    Ok(())
}
