//! Small helpers shared by every stage: atomic file writes and qtune's cache directory.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A temporary file next to `path` (same filesystem, so it can be renamed into place), mode
/// 644 like a plainly created file. Removed on drop unless persisted.
pub fn temp_file_for(path: &Path) -> Result<tempfile::NamedTempFile> {
    temp_file_with_mode(path, 0o644)
}

/// [`temp_file_for`] with the file's mode (e.g. 755 for a script): set on the new file
/// itself, so nothing is ever `chmod`ed through a path after the rename.
fn temp_file_with_mode(path: &Path, mode: u32) -> Result<tempfile::NamedTempFile> {
    use std::os::unix::fs::PermissionsExt;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).with_context(|| {
        format!(
            "cannot write {}: cannot create its folder {}",
            path.display(),
            dir.display()
        )
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".qtune-tmp")
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(&dir)
        .with_context(|| format!("cannot write {}", path.display()))
}

fn write_temp(path: &Path, bytes: &[u8], mode: u32) -> Result<tempfile::NamedTempFile> {
    let mut tmp = temp_file_with_mode(path, mode)?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(tmp)
}

/// Why a user-supplied file cannot be read: not there, not a regular file, or too large.
#[derive(Debug, thiserror::Error)]
pub enum BoundedReadError {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("is a directory, not a file")]
    Directory,
    #[error("is not a regular file (a pipe, device or socket)")]
    NotRegular,
    #[error("is {size} bytes; at most {max} bytes are accepted")]
    TooLarge { size: u64, max: u64 },
}

/// Open a user-supplied file that must be a regular file: checked before opening (a named
/// pipe would block `open`) and again on the open handle (opened non-blocking, so a path
/// swapped for a pipe in between cannot hang). Returns the file and its size.
pub fn open_regular(path: &Path) -> std::result::Result<(std::fs::File, u64), BoundedReadError> {
    use std::os::unix::fs::OpenOptionsExt;
    let meta = std::fs::metadata(path).map_err(BoundedReadError::Io)?;
    if meta.is_dir() {
        return Err(BoundedReadError::Directory);
    }
    if !meta.is_file() {
        return Err(BoundedReadError::NotRegular);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(BoundedReadError::Io)?;
    let meta = file.metadata().map_err(BoundedReadError::Io)?;
    if !meta.is_file() {
        return Err(BoundedReadError::NotRegular);
    }
    Ok((file, meta.len()))
}

/// Read a whole user-supplied file (a space, a profile, a model header): a regular file of
/// at most `max` bytes; never reads more than `max + 1` bytes whatever the file claims.
pub fn read_bounded(path: &Path, max: u64) -> std::result::Result<Vec<u8>, BoundedReadError> {
    use std::io::Read;
    let (file, size) = open_regular(path)?;
    if size > max {
        return Err(BoundedReadError::TooLarge { size, max });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(BoundedReadError::Io)?;
    if bytes.len() as u64 > max {
        return Err(BoundedReadError::TooLarge {
            size: bytes.len() as u64,
            max,
        });
    }
    Ok(bytes)
}

/// [`read_bounded`] for a file that may be absent: `Ok(None)` when there is nothing at
/// `path`.
pub fn read_bounded_opt(
    path: &Path,
    max: u64,
) -> std::result::Result<Option<Vec<u8>>, BoundedReadError> {
    match read_bounded(path, max) {
        Ok(b) => Ok(Some(b)),
        Err(BoundedReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// What qtune says of a symbolic link where it was about to write a file or a folder.
pub const LINK_REFUSED: &str =
    "is a symbolic link, not a regular file: qtune never writes through a link (remove the link, or use another --out)";

/// The error of an `O_NOFOLLOW` open: a link at `path` reads [`LINK_REFUSED`] instead of
/// "Too many levels of symbolic links".
fn nofollow_error(path: &Path, e: std::io::Error) -> std::io::Error {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if e.raw_os_error() == Some(libc::ELOOP) && is_link {
        std::io::Error::other(LINK_REFUSED)
    } else {
        e
    }
}

/// Open a file qtune writes into a run directory (a journal to append to, a lock), creating
/// it when `create`: never through a symbolic link (`O_NOFOLLOW`: a link planted there is
/// refused with [`LINK_REFUSED`]), never blocking (`O_NONBLOCK`: a named pipe put there fails
/// instead of waiting for a reader) and only a regular file (checked on the open handle).
pub fn open_for_write(path: &Path, append: bool, create: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = std::fs::OpenOptions::new();
    o.write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    if append {
        o.append(true);
    }
    if create {
        o.create(true);
    }
    let f = o.open(path).map_err(|e| nofollow_error(path, e))?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other(
            "is not a regular file (a pipe, device or socket)",
        ));
    }
    Ok(f)
}

/// Create a file afresh (a log): a regular file already at `path` is removed first, and the
/// new one is created with `O_CREAT | O_EXCL | O_NOFOLLOW`, so nothing is ever written
/// through a link or into a file someone else holds open. A symbolic link, a folder or a
/// device at `path` is refused, naming it.
pub fn create_fresh(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            anyhow::bail!("cannot write {}: it {LINK_REFUSED}", path.display())
        }
        Ok(m) if m.is_file() => std::fs::remove_file(path)
            .with_context(|| format!("cannot replace {}", path.display()))?,
        Ok(_) => anyhow::bail!(
            "cannot write {}: it is not a regular file (a folder, pipe, device or socket)",
            path.display()
        ),
        Err(_) => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| nofollow_error(path, e))
        .with_context(|| format!("cannot create {}", path.display()))
}

/// Make sure `dir` is a real folder qtune may write into (creating it when absent): a
/// symbolic link there (even one to a folder) is refused, naming it, as is anything that is
/// not a folder.
pub fn real_dir(dir: &Path) -> Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(e).with_context(|| format!("cannot create {}", dir.display()));
        }
    }
    let m = std::fs::symlink_metadata(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    if m.file_type().is_symlink() {
        anyhow::bail!(
            "{} is a symbolic link, not a folder: qtune never writes through a link (remove the link, or use another --out)",
            dir.display()
        );
    }
    if !m.is_dir() {
        anyhow::bail!("{} is not a folder", dir.display());
    }
    Ok(())
}

/// Check the `--out` of a command that writes one file (`script`, `profile export`): a new
/// path, or a regular file to replace. A symbolic link (`/dev/stdout` is one), a device, a
/// named pipe or a folder is refused in one line: replacing it would replace the link or the
/// device node itself, not write to it.
pub fn check_out_file(path: &Path) -> Result<()> {
    check_out_path("--out", path)
}

/// [`check_out_file`] for an output given otherwise than as `--out` (`qtune synth OUT`):
/// `arg` names it in the error.
pub fn check_out_path(arg: &str, path: &Path) -> Result<()> {
    let what = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot write {}", path.display())),
        Ok(m) if m.file_type().is_symlink() => "a symbolic link",
        Ok(m) if m.is_dir() => "a folder",
        Ok(m) if m.is_file() => return Ok(()),
        Ok(_) => "a device, named pipe or socket",
    };
    anyhow::bail!(
        "{arg} {} is {what}, not a regular file: qtune writes a new file or replaces a regular one, never a link or a device (give a new path, or the file a link points to)",
        path.display()
    )
}

/// The deepest nesting a space or profile may have (theirs is at most 5 or 6).
pub const MAX_YAML_DEPTH: usize = 64;
/// The most YAML aliases (`*name`) a space or profile may hold (theirs hold none).
pub const MAX_YAML_ALIASES: usize = 64;
/// The most list items (block `- ` entries and flow `,`-separated values) a space or profile
/// may hold: a profile of a hundred measured configs holds a few thousand.
pub const MAX_YAML_ITEMS: usize = 20_000;

/// Check the shape of YAML text before a parser allocates for it: flow nesting (`[`, `{`),
/// block nesting (indentation and `- ` prefixes) at most `max_depth`, and at most
/// [`MAX_YAML_ALIASES`] aliases (an alias bomb) and [`MAX_YAML_ITEMS`] list items. A lexical scan, linear in the text: a file
/// nested 100,000 levels deep fails at once instead of taking the parser a minute.
/// Errors say what and on which line.
pub fn check_yaml_shape(text: &str, max_depth: usize) -> std::result::Result<(), String> {
    let mut flow = 0usize;
    let mut aliases = 0usize;
    let mut items = 0usize;
    let too_many = |n: usize| format!("line {n}: more than {MAX_YAML_ITEMS} list items");
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        // Block nesting: the indentation plus the `- ` / `? ` prefixes that open a level each.
        let rest = line.trim_start_matches(' ');
        let indent = line.len() - rest.len();
        let mut prefixes = 0usize;
        let mut r = rest;
        while let Some(t) = r
            .strip_prefix("- ")
            .or_else(|| r.strip_prefix("? "))
            .or_else(|| (r == "-").then_some(""))
        {
            prefixes += 1;
            r = t.trim_start_matches(' ');
        }
        items += prefixes;
        if items > MAX_YAML_ITEMS {
            return Err(too_many(n));
        }
        if indent > 4 * max_depth || prefixes > max_depth {
            return Err(format!(
                "line {n} is nested deeper than {max_depth} levels (indentation {indent})"
            ));
        }
        let (mut single, mut double, mut prev) = (false, false, ' ');
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if double => {
                    chars.next();
                }
                '"' if !single => double = !double,
                '\'' if !double => single = !single,
                '#' if !single && !double && (prev == ' ' || prev == '\t') => break,
                '[' | '{' if !single && !double => {
                    flow += 1;
                    if flow > max_depth {
                        return Err(format!("line {n} is nested deeper than {max_depth} levels"));
                    }
                }
                ']' | '}' if !single && !double => flow = flow.saturating_sub(1),
                ',' if !single && !double && flow > 0 => {
                    items += 1;
                    if items > MAX_YAML_ITEMS {
                        return Err(too_many(n));
                    }
                }
                '*' if !single && !double && matches!(prev, ' ' | '[' | '{' | ',' | ':') => {
                    aliases += 1;
                    if aliases > MAX_YAML_ALIASES {
                        return Err(format!(
                            "line {n}: more than {MAX_YAML_ALIASES} aliases (*name)"
                        ));
                    }
                }
                _ => {}
            }
            prev = c;
        }
    }
    Ok(())
}

/// An error's context that carries a command to continue with: the error line says what
/// happened, and the command is printed on a line of its own after it (never glued to the
/// cause, as in "...--resume DIR: interrupted by signal 15").
#[derive(Debug)]
pub struct ResumeHint {
    pub message: String,
    pub command: String,
}

impl std::fmt::Display for ResumeHint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static STDERR_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Write to stdout (or stderr) without ever panicking: once a write fails (a closed pipe, as
/// in `qtune plan --json | head`), later output to that stream is dropped. What the crate's
/// `println!`/`eprintln!` call (see lib.rs).
pub fn print_to(stderr: bool, args: std::fmt::Arguments<'_>) {
    use std::sync::atomic::Ordering;
    let closed = if stderr {
        &STDERR_CLOSED
    } else {
        &STDOUT_CLOSED
    };
    if closed.load(Ordering::Relaxed) {
        return;
    }
    let r = if stderr {
        let mut e = std::io::stderr().lock();
        e.write_fmt(args).and_then(|_| e.flush())
    } else {
        let mut o = std::io::stdout().lock();
        o.write_fmt(args).and_then(|_| o.flush())
    };
    if r.is_err() {
        closed.store(true, Ordering::Relaxed);
    }
}

/// True once a write to stdout failed (its reader went away).
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// An error and its causes on one line, each cause once: a cause whose text the line already
/// holds (e.g. an OS error that a wrapper also prints, "... (os error 13) at path ...: ...
/// (os error 13)") is left out.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Write `bytes` to `path` atomically: a temporary file in the same directory, fsync, rename
/// (tempfile's `persist`). A failure (disk full, permission) leaves no half-written file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_mode(path, bytes, 0o644)
}

/// [`write_atomic`] with the file's mode (e.g. 755 for a script), set before the rename.
pub fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    write_temp(path, bytes, mode)?
        .persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Like [`write_atomic`], but never replaces an existing file (`persist_noclobber`): fails
/// with an `AlreadyExists` I/O error in its chain instead.
pub fn write_new_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_temp(path, bytes, 0o644)?
        .persist_noclobber(path)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// A timeout a user sets in seconds with environment variable `name`: `default` when unset or
/// empty; a one-line error for a value that is not a whole number from 1 to `max`. The cap
/// holds: a bound the user can raise without limit is no bound (issue 53).
pub fn env_seconds(name: &str, default: u64, max: u64) -> Result<std::time::Duration> {
    let Some(v) = std::env::var_os(name).filter(|v| !v.is_empty()) else {
        return Ok(std::time::Duration::from_secs(default));
    };
    let text = v.to_string_lossy();
    match text.trim().parse::<u64>() {
        Ok(s) if (1..=max).contains(&s) => Ok(std::time::Duration::from_secs(s)),
        _ => anyhow::bail!(
            "{name}={} is not a timeout qtune takes: give whole seconds from 1 to {max}",
            text.chars()
                .filter(|c| !c.is_control())
                .take(40)
                .collect::<String>()
        ),
    }
}

/// qtune's cache: `$QTUNE_CACHE_DIR`, else `$XDG_CACHE_HOME/qtune`, else `~/.cache/qtune`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("QTUNE_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("qtune");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("qtune")
}

/// Colour only when stderr is a terminal and `NO_COLOR` is unset or empty (no-color.org).
pub fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

/// Where qtune keeps what it makes for the user (run directories, imported profiles):
/// `QTUNE_DATA_DIR`, else `$XDG_DATA_HOME/qtune`, else `~/.local/share/qtune` (the XDG base
/// directory rule: data the user keeps, unlike the cache, which can be rebuilt). An empty or
/// relative `XDG_DATA_HOME` is ignored, as the XDG spec says.
pub fn data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("QTUNE_DATA_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
    {
        return d.join("qtune");
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".local").join("share").join("qtune")
}

/// Where run directories go by default: `<data dir>/runs/` ([`data_dir`]).
pub fn runs_dir() -> PathBuf {
    data_dir().join("runs")
}

/// Where `qtune profile import` puts profiles and `list`, `show` and `plan` look first:
/// `<data dir>/profiles/` ([`data_dir`]).
pub fn profiles_dir() -> PathBuf {
    data_dir().join("profiles")
}

/// A number rounded to an integer with a thousands separator, e.g. `14,874`, `-1,024`.
pub fn fmt_thousands(v: f64) -> String {
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{}{out}", if n < 0 { "-" } else { "" })
}

/// `n` and its noun, singular for one: `1 launch`, `3 launches`, `0 launches`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The order of every table of configs (the summary, report.md, `profile show`, `compare`): the lowest time per request first; rows without one after, the fastest
/// in generation first (a tune whose launches measured no time per request); none last.
pub fn by_time(a: Option<f64>, a_gen: f64, b: Option<f64>, b_gen: f64) -> std::cmp::Ordering {
    match (a, b) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => b_gen.total_cmp(&a_gen),
    }
}

/// Every line qtune prints fits this many columns.
pub const COLUMNS: usize = 100;

/// `text` wrapped at spaces to `width` columns (characters), each line after the first indented
/// by `indent`; a word longer than a line (a path, a command) stays whole on a line of its own.
/// Line breaks in `text` are kept (each line wrapped on its own, indented the same).
pub fn wrap(text: &str, width: usize, indent: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for (n, para) in text.split('\n').enumerate() {
        let mut line = if n == 0 {
            String::new()
        } else {
            indent.to_string()
        };
        let mut empty = true;
        for word in para.split(' ').filter(|w| !w.is_empty()) {
            let len = line.chars().count();
            if !empty && len + 1 + word.chars().count() > width {
                out.push(std::mem::replace(&mut line, indent.to_string()));
                empty = true;
            }
            if !empty {
                line.push(' ');
            }
            line.push_str(word);
            empty = false;
        }
        out.push(line);
    }
    out.join("\n")
}

/// `text` with each line longer than [`COLUMNS`] wrapped ([`wrap`]), its continuation lines
/// indented two spaces past the line's own indent: what a command prints on a terminal.
pub fn fit(text: &str) -> String {
    text.split('\n')
        .map(|l| {
            if l.chars().count() <= COLUMNS {
                return l.to_string();
            }
            let lead = &l[..l.len() - l.trim_start().len()];
            wrap(
                l.trim_start(),
                COLUMNS.saturating_sub(lead.len()).max(20),
                "  ",
            )
            .split('\n')
            .map(|w| format!("{lead}{w}"))
            .collect::<Vec<_>>()
            .join("\n")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A shell command to copy, indented by `indent`, broken before its options (` --x`) with a
/// `\` at each line's end where it is wider than [`COLUMNS`]: the shell reads it as typed on one
/// line. An option with its value stays whole, however long.
pub fn shell_fit(command: &str, indent: &str) -> String {
    let width = COLUMNS.saturating_sub(indent.len() + 2);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for (i, part) in command.split(" --").enumerate() {
        let part = if i == 0 {
            part.to_string()
        } else {
            format!("--{part}")
        };
        if !line.is_empty() && line.chars().count() + 1 + part.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&part);
    }
    lines.push(line);
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{indent}{}{l}", if i == 0 { "" } else { "  " }))
        .collect::<Vec<_>>()
        .join(" \\\n")
}

/// A memory bandwidth as every command prints it: one decimal below 100 GB/s (a host's RAM:
/// `0.2 GB/s` from a debug build is not `0 GB/s`), none above (a card's `717 GB/s`).
pub fn gbs(v: f64) -> String {
    if v < 100.0 {
        format!("{v:.1} GB/s")
    } else {
        format!("{v:.0} GB/s")
    }
}

/// A number of minutes in words: `1 minute`, `2 minutes`, `0.5 minutes`.
pub fn minutes(m: f64) -> String {
    let t = if m.fract() == 0.0 && m.abs() < 1e15 {
        format!("{m:.0}")
    } else {
        let s = format!("{m:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    if t == "1" {
        "1 minute".to_string()
    } else {
        format!("{t} minutes")
    }
}

/// Format MiB with a thousands separator, e.g. `14,874 MiB`.
pub fn fmt_mib(mib: f64) -> String {
    format!("{} MiB", fmt_thousands(mib))
}

pub const MIB: u64 = 1024 * 1024;

/// `95 s` -> `1m35s`; `3725 s` -> `1h02m`.
pub fn duration_text(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_of_one_is_singular() {
        assert_eq!(count(1, "launch", "launches"), "1 launch");
        assert_eq!(count(0, "launch", "launches"), "0 launches");
        assert_eq!(count(3, "GPU", "GPUs"), "3 GPUs");
    }

    #[test]
    fn a_bandwidth_prints_alike_everywhere() {
        assert_eq!(gbs(0.2), "0.2 GB/s");
        assert_eq!(gbs(22.34), "22.3 GB/s");
        assert_eq!(gbs(717.4), "717 GB/s");
    }

    #[test]
    fn one_minute_is_singular() {
        // The banner of `tune --budget-minutes 1` said "1 minutes".
        assert_eq!(minutes(1.0), "1 minute");
        assert_eq!(minutes(8.0), "8 minutes");
        assert_eq!(minutes(0.5), "0.5 minutes");
        assert_eq!(minutes(2.25), "2.25 minutes");
    }

    /// Like tempfile's path error: prints the OS error and also returns it as its source.
    #[derive(Debug)]
    struct AtPath(std::io::Error);
    impl std::fmt::Display for AtPath {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{} at path \"/ro/.x.tmp\"", self.0)
        }
    }
    impl std::error::Error for AtPath {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_os_error_is_printed_once() {
        let os = std::io::Error::from_raw_os_error(13);
        let e = anyhow::Error::new(AtPath(os)).context("cannot write /ro/x");
        let before = format!("{e:#}");
        assert_eq!(before.matches("os error 13").count(), 2, "{before}");
        let line = error_line(&e);
        assert_eq!(
            line.matches("Permission denied (os error 13)").count(),
            1,
            "{line}"
        );
        assert!(
            line.starts_with("cannot write /ro/x: Permission denied"),
            "{line}"
        );
    }

    #[test]
    fn a_fifo_or_device_is_refused_at_once_and_large_files_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let t0 = std::time::Instant::now();
        assert!(matches!(
            read_bounded(&fifo, 1024),
            Err(BoundedReadError::NotRegular)
        ));
        assert!(matches!(
            read_bounded(Path::new("/dev/zero"), 1024),
            Err(BoundedReadError::NotRegular)
        ));
        assert!(t0.elapsed() < std::time::Duration::from_secs(2));
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 2048]).unwrap();
        assert!(matches!(
            read_bounded(&big, 1024),
            Err(BoundedReadError::TooLarge { size: 2048, .. })
        ));
        assert_eq!(read_bounded(&big, 4096).unwrap().len(), 2048);
        assert!(matches!(
            read_bounded(dir.path(), 1024),
            Err(BoundedReadError::Directory)
        ));
    }

    #[test]
    fn writes_never_follow_a_planted_link() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, "keep me").unwrap();
        let link = dir.path().join("journal.jsonl");
        symlink(&target, &link).unwrap();
        // Appending (a resumed journal), creating (a lock): refused, naming the link.
        for (append, create) in [(true, false), (true, true), (false, true)] {
            let e = open_for_write(&link, append, create).unwrap_err();
            assert!(e.to_string().contains("is a symbolic link"), "{e}");
        }
        // A dangling link is not created through either.
        let dangling = dir.path().join(".qtune.lock");
        symlink(dir.path().join("made-by-the-link"), &dangling).unwrap();
        assert!(open_for_write(&dangling, false, true).is_err());
        assert!(!dir.path().join("made-by-the-link").exists());
        // A log created afresh: a link is refused, a regular file replaced by a new one.
        let e = create_fresh(&link).unwrap_err();
        assert!(format!("{e:#}").contains("is a symbolic link"), "{e:#}");
        let log = dir.path().join("build.log");
        std::fs::write(&log, "old").unwrap();
        use std::io::Write;
        create_fresh(&log).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
        // A folder qtune writes into: a link to a folder is refused, a real one made.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        symlink(&elsewhere, dir.path().join("logs")).unwrap();
        let e = real_dir(&dir.path().join("logs")).unwrap_err();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        real_dir(&dir.path().join("new-logs")).unwrap();
        real_dir(&dir.path().join("new-logs")).unwrap();
        assert!(dir.path().join("new-logs").is_dir());
    }

    #[test]
    fn a_single_file_out_is_new_or_regular() {
        let dir = tempfile::tempdir().unwrap();
        check_out_file(&dir.path().join("new.sh")).unwrap();
        let file = dir.path().join("old.sh");
        std::fs::write(&file, "x").unwrap();
        check_out_file(&file).unwrap();
        let link = dir.path().join("link.sh");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        for (p, what) in [
            (link.as_path(), "a symbolic link"),
            (Path::new("/dev/stdout"), "a symbolic link"),
            (Path::new("/dev/null"), "a device"),
            (dir.path(), "a folder"),
        ] {
            let e = check_out_file(p).unwrap_err().to_string();
            assert!(e.contains(what), "{}: {e}", p.display());
            assert!(e.starts_with("--out "), "{e}");
        }
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn atomic_write_to_unwritable_place_fails_cleanly() {
        let err = write_atomic(Path::new("/proc/qtune-nope/x"), b"x").unwrap_err();
        assert!(format!("{err:#}").contains("/proc/qtune-nope"));
    }

    #[test]
    fn text_table_aligns_columns_without_borders() {
        let t = text_table(
            &["NAME", "TG"],
            &[
                vec!["a".into(), "1.0".into()],
                vec!["longer".into(), "12.5".into()],
            ],
            &[1],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines, ["NAME      TG", "a        1.0", "longer  12.5"]);
    }

    #[test]
    fn mib_formatting() {
        assert_eq!(fmt_mib(14874.4), "14,874 MiB");
        assert_eq!(fmt_mib(512.0), "512 MiB");
        assert_eq!(fmt_mib(-1536.0), "-1,536 MiB");
        assert_eq!(fmt_thousands(10_512.4), "10,512");
        assert_eq!(fmt_thousands(999.6), "1,000");
    }
    #[test]
    fn yaml_shape_bounds_depth_aliases_and_items() {
        for ok in [
            "name: x\nvary:\n  threads: [auto, 1]\n  kv: [[f16, f16], [q8_0, q8_0]]\n",
            "a:\n  - - 1\n    - 2\n# [[[[ in a comment\nb: '[[[[' # and in quotes\nc: \"{{{\"\n",
            "description: it's [fine]\n",
        ] {
            check_yaml_shape(ok, MAX_YAML_DEPTH).unwrap();
        }
        let deep = format!("v: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let t0 = std::time::Instant::now();
        let e = check_yaml_shape(&deep, MAX_YAML_DEPTH).unwrap_err();
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
        assert!(e.contains("nested deeper than 64 levels"), "{e}");
        let blocks = format!("v:\n{}1\n", "- ".repeat(1000));
        assert!(check_yaml_shape(&blocks, MAX_YAML_DEPTH).is_err());
        let indented = format!("v:\n{}x: 1\n", " ".repeat(1000));
        assert!(check_yaml_shape(&indented, MAX_YAML_DEPTH).is_err());
        let bomb = format!("a: &a [1]\nb: [{}]\n", vec!["*a"; 100].join(", "));
        assert!(check_yaml_shape(&bomb, MAX_YAML_DEPTH)
            .unwrap_err()
            .contains("aliases"));
        let long = format!("v: [{}]\n", vec!["1"; 30_000].join(","));
        assert!(check_yaml_shape(&long, MAX_YAML_DEPTH)
            .unwrap_err()
            .contains("list items"));
    }
}

/// A plain aligned text table (comfy-table, no borders): a header row, then `rows`; the
/// columns listed in `right` are right-aligned. Lines carry no trailing spaces.
pub fn text_table(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    use comfy_table::{presets::NOTHING, CellAlignment, ContentArrangement, Table};
    let mut t = Table::new();
    t.load_style(NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.to_vec());
    for r in rows {
        t.add_row(r.clone());
    }
    for (i, col) in t.column_iter_mut().enumerate() {
        col.set_padding((0, 2));
        if right.contains(&i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = String::new();
    for line in t.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Yaml,
}

/// The text of a GPU evidence file under `docs/evidence/` (`rel` names it without `.gz`; the
/// large ones are stored gzipped). For unit tests that replay committed runs.
#[cfg(test)]
pub(crate) fn read_evidence(rel: &str) -> String {
    use std::io::Read;
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/evidence")
        .join(rel);
    if let Ok(s) = std::fs::read_to_string(&p) {
        return s;
    }
    let gz = format!("{}.gz", p.display());
    let bytes = std::fs::read(&gz).unwrap_or_else(|e| panic!("{gz}: {e}"));
    let mut s = String::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_string(&mut s)
        .unwrap_or_else(|e| panic!("{gz}: {e}"));
    s
}
