//! What a run directory's values may look like. `results.json` and `run.json` travel between
//! people, so they are input: each value that reaches a script, a unit, a command or a
//! report is checked against its schema (a version string, an RFC 3339 timestamp, a host
//! name, a one-line path or name) right after reading, before anything uses it.

use super::{RunInputs, TuneResult};
use anyhow::{bail, Result};
use std::path::Path;

/// The longest model name a run may hold: the run file's own bound.
const MAX_NAME_BYTES: usize = super::MAX_RUN_FILE_BYTES as usize;

/// A version string as qtune writes its own: `MAJOR.MINOR.PATCH` with an optional
/// pre-release or build suffix of letters, digits, `.`, `-` and `+`; at most 64 characters.
pub fn check_version(field: &str, v: &str) -> Result<()> {
    let core_ok = {
        let core = v.split(['-', '+']).next().unwrap_or("");
        let parts: Vec<&str> = core.split('.').collect();
        parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.len() <= 9 && p.bytes().all(|b| b.is_ascii_digit()))
    };
    if v.len() > 64
        || !core_ok
        || !v
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.+".contains(&b))
    {
        bail!("{field} is {v:?}, not a version (like 0.1.0)");
    }
    Ok(())
}

/// An RFC 3339 timestamp (`2026-11-24T04:16:43+00:00`).
pub fn check_timestamp(field: &str, v: &str) -> Result<()> {
    if v.len() > 64 || chrono::DateTime::parse_from_rfc3339(v).is_err() {
        bail!("{field} is {v:?}, not an RFC 3339 timestamp (like 2026-01-31T12:00:00+00:00)");
    }
    Ok(())
}

/// A host to bind: a name or an IPv4/IPv6 address (letters, digits, `.`, `-`, `_`, `:`,
/// `[`, `]`, `%` for a zone), at most 255 characters.
pub fn check_host(field: &str, v: &str) -> Result<()> {
    if v.is_empty()
        || v.len() > 255
        || !v
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:[]%".contains(&b))
    {
        bail!("{field} is {v:?}, not a host name or address");
    }
    Ok(())
}

/// Text that must stay on one line: no control character (line break, escape, NUL), at most
/// `max` bytes.
pub fn check_one_line(field: &str, v: &str, max: usize) -> Result<()> {
    if let Some(c) = v.chars().find(|c| c.is_control()) {
        bail!("{field} holds the control character {c:?}: one line of text was expected");
    }
    check_len(field, v, max)
}

fn check_len(field: &str, v: &str, max: usize) -> Result<()> {
    if v.len() > max {
        bail!("{field} is {} bytes long, more than {max}", v.len());
    }
    Ok(())
}

/// Free text from outside that qtune stores as it found it (a model's `general.name`, a
/// card's name, a server's version line) and escapes wherever it shows it
/// ([`crate::escape`]): any character, at most `max` bytes. Only a line break is refused
/// where `no_line_break` says qtune never stores one (a version is one line of output).
pub fn check_text(field: &str, v: &str, max: usize, no_line_break: bool) -> Result<()> {
    if no_line_break && v.contains('\n') {
        bail!("{field} holds a line break: qtune stores one line there");
    }
    check_len(field, v, max)
}

/// A path or a word of a command as qtune stores it: any character a file name may hold (a
/// tab, an escape: they are quoted and escaped wherever shown), but no NUL, which no path or
/// argument can hold, and no line break or carriage return, which `qtune tune` refuses in a
/// model or server path up front; at most 4096 bytes.
pub fn check_word(field: &str, v: &str) -> Result<()> {
    if let Some(c) = v.chars().find(|c| matches!(c, '\n' | '\r' | '\0')) {
        bail!(
            "{field} holds {}: no path or argument qtune writes does",
            match c {
                '\0' => "a NUL",
                _ => "a line break",
            }
        );
    }
    check_len(field, v, 4096)
}

/// A path: see [`check_word`].
pub fn check_path(field: &str, p: &Path) -> Result<()> {
    check_word(field, &p.to_string_lossy())
}

impl TuneResult {
    /// Check every value a script, unit, command or report takes from this result.
    pub fn check_schema(&self) -> Result<()> {
        check_version("qtune_version", &self.qtune_version)?;
        self.inputs.check_schema()?;
        check_timestamp("finished_at", &self.finished_at)?;
        // A model's name is whatever its file says (qtune shows it escaped): any length the
        // file's size allows, so only the file bound limits it.
        if let Some(n) = &self.model.name {
            check_text("model.name", n, MAX_NAME_BYTES, false)?;
        }
        if let Some(w) = &self.winner {
            for word in &w.command {
                check_word("winner.command", word)?;
            }
        }
        Ok(())
    }
}

impl RunInputs {
    /// Check every value a resumed tune takes from `run.json`.
    pub fn check_schema(&self) -> Result<()> {
        check_timestamp("started_at", &self.started_at)?;
        check_text("server_version", &self.server_version, 4096, true)?;
        check_path("server_path", &self.server_path)?;
        check_path("model_path", &self.model_path)?;
        check_host("host", &self.host)?;
        for g in &self.gpu_budgets {
            check_text("gpu_budgets[].name", &g.name, 4096, false)?;
        }
        for g in &self.hardware.gpus {
            check_text("hardware.gpus[].name", &g.name, 4096, false)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_timestamps_and_hosts_follow_their_schema() {
        for ok in ["0.1.0", "1.2.3-rc.1", "10.20.30+build.5"] {
            check_version("v", ok).unwrap();
        }
        for bad in [
            "",
            "0.1",
            "0.1.0\ntouch PWNED",
            "0.1.0 $(touch PWNED)",
            "0.1.0-`x`",
            "a.b.c",
        ] {
            assert!(check_version("v", bad).is_err(), "{bad:?}");
        }
        check_timestamp("t", "2026-11-24T04:16:43.123+01:00").unwrap();
        check_timestamp("t", "2023-11-14T22:13:20+00:00").unwrap();
        for bad in ["", "yesterday", "2026-11-24T04:16:43+00:00\ntouch PWNED"] {
            let e = check_timestamp("started_at", bad).unwrap_err().to_string();
            assert!(e.starts_with("started_at is "), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        for ok in ["127.0.0.1", "::", "[::1]", "fe80::1%eth0", "my-box.local"] {
            check_host("host", ok).unwrap();
        }
        for bad in ["", "a b", "x;touch PWNED", "x\ny", "$(x)"] {
            assert!(check_host("host", bad).is_err(), "{bad:?}");
        }
        assert!(check_one_line("n", "a\rb", 10).is_err());
        assert!(check_one_line("n", "abcdef", 3).is_err());
    }

    /// What qtune stores from outside (a hostile model name, a tab or an escape in a path) is
    /// never a reason to refuse its own run; what it never stores (a NUL or a line break in a
    /// path, a line break in a version line) still is, in one line.
    #[test]
    fn text_qtune_stores_passes_and_what_it_never_stores_is_refused() {
        let evil = "\u{1b}]0;TITLE\u{7}\u{1b}[2J\nMODEL=/etc/shadow <script>x</script>\u{202e}\t";
        let mut r =
            crate::run::sample::gpu_result(Path::new("/s/llama-server"), Path::new("/m\tx.gguf"));
        r.model.name = Some(format!("{evil}{}", "n".repeat(2000)));
        r.inputs.hardware.gpus[0].name = evil.into();
        r.inputs.server_version = "version: 1 (\u{1b}[31mabc\r)".into();
        if let Some(w) = &mut r.winner {
            w.command[0] = "/s/llama\tserver \u{1b}x".into();
        }
        r.check_schema().unwrap();
        for bad in ["/m\n.gguf", "/m\r.gguf", "/m\0.gguf"] {
            let mut b = r.clone();
            b.inputs.model_path = bad.into();
            let e = b.check_schema().unwrap_err().to_string();
            assert!(e.starts_with("model_path holds "), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        let mut b = r.clone();
        b.inputs.server_version = "b1\ntouch PWNED".into();
        assert!(b.check_schema().is_err());
    }

    #[test]
    fn the_sample_results_pass() {
        let r = crate::run::sample::gpu_result(Path::new("/s/llama-server"), Path::new("/m.gguf"));
        r.check_schema().unwrap();
    }
}
