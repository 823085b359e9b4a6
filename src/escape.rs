//! The one place where a value becomes text in a shell script or a systemd unit.
//!
//! Run directories and profiles travel between people, so every string qtune writes into
//! `launch.sh`, its systemd unit or the compose file is untrusted: a line break in a version
//! string must not start a new command, a `$(...)` in a path must not run. Each kind of slot
//! has one function here, and the writers ([`crate::report::script`]) use nothing else:
//!
//! - [`shell_quote`]: one word of a bash command (single-quoted when it needs quoting);
//! - [`shell_line`]: an argv as one bash line;
//! - [`one_line`]: free text for a comment (bash, systemd or YAML): one line, no control
//!   characters, no trailing backslash (systemd joins such a line with the next);
//! - [`systemd_executable`]: the executable of a systemd `ExecStart=` line (or why systemd
//!   would refuse it);
//! - [`systemd_text`]: a free-text systemd value (`Description=`);
//! - [`yaml_string`]: a YAML scalar (double-quoted, escaped);
//! - [`compose_string`]: a string in a docker compose file (`$` doubled too).

/// Quote one word for bash: bare when it holds only characters no shell treats specially,
/// else single-quoted (inside single quotes nothing is special; a `'` is written `'\''`).
/// A line break inside single quotes is part of the word, never the end of a command.
pub fn shell_quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Render an argv as one shell line, every word quoted as needed.
pub fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Free text made safe for one comment line (or a one-line value): every control character
/// (line breaks, carriage returns, escapes, NUL) and Unicode line or paragraph separator
/// becomes a space, and trailing backslashes and spaces are dropped.
pub fn one_line(text: &str) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
                ' '
            } else {
                c
            }
        })
        .collect();
    s.trim_end_matches([' ', '\\']).to_string()
}

/// The executable of a systemd `ExecStart=` line (an absolute path). systemd expands `%`
/// specifiers there (so `%` is doubled) but not `$` variables (a `$` stays as it is: a
/// doubled one would name another file); a path with a space is double-quoted. systemd
/// refuses an executable whose name holds a quote (`'` or `"`), a backslash or a control
/// character ("Executable name contains special characters", checked with
/// `systemd-analyze verify`, systemd 252): such a path is `Err`, saying why.
pub fn systemd_executable(path: &str) -> Result<String, String> {
    if let Some(c) = path
        .chars()
        .find(|c| c.is_control() || matches!(c, '\'' | '"' | '\\'))
    {
        let what = match c {
            '\'' | '"' => "a quote",
            '\\' => "a backslash",
            _ => "a control character",
        };
        return Err(format!(
            "systemd refuses to run an executable whose path holds {what}"
        ));
    }
    let escaped = path.replace('%', "%%");
    if !escaped.is_empty()
        && escaped
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%$".contains(&b))
    {
        return Ok(escaped);
    }
    Ok(format!("\"{escaped}\""))
}

/// A free-text systemd value (`Description=`): one line, `%` doubled (specifiers).
pub fn systemd_text(text: &str) -> String {
    one_line(text).replace('%', "%%")
}

/// A YAML scalar: always double-quoted, with `\\`, `\"` and control characters escaped, so
/// no value can end the line or start a key.
pub fn yaml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A string in a docker compose file: a [`yaml_string`] with `$` doubled (compose would
/// substitute `$VAR` and `${VAR}` from the environment).
pub fn compose_string(text: &str) -> String {
    yaml_string(&text.replace('$', "$$"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Hostile words: line breaks, quotes, command substitutions, backticks, globs, NUL-free
    /// control characters, a trailing backslash, Unicode separators.
    const HOSTILE: &[&str] = &[
        "plain",
        "",
        "a b",
        "x\ntouch PWNED",
        "x\r\ntouch PWNED",
        "it's",
        "'",
        "''",
        "\"",
        "$(touch PWNED)",
        "`touch PWNED`",
        "${IFS}touch${IFS}PWNED",
        "a;touch PWNED",
        "a|touch PWNED",
        "a&&touch PWNED",
        "*",
        "~",
        "-n",
        "x\\",
        "x\\\ntouch PWNED",
        "\u{1b}[31mred",
        "tab\there",
        "sep\u{2028}touch PWNED",
        "%h$HOME",
        "'$(touch PWNED)'\n`touch PWNED`\"$(touch PWNED)\"",
    ];

    /// bash reads every quoted word back as exactly the word, and runs nothing.
    #[test]
    fn bash_reads_every_quoted_word_back_unchanged_and_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut script = String::from("set -eu\n");
        for w in HOSTILE {
            script.push_str(&format!("printf '%s\\0' {}\n", shell_quote(w)));
        }
        script.push_str(&format!("# {}\n", one_line(HOSTILE.join(" ").as_str())));
        let o = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got: Vec<&[u8]> = o.stdout.split(|&b| b == 0).collect();
        for (w, g) in HOSTILE.iter().zip(&got) {
            assert_eq!(w.as_bytes(), *g, "{w:?}");
        }
        assert!(!dir.path().join("PWNED").exists());
        let line = shell_line(&HOSTILE.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let o = Command::new("bash")
            .arg("-c")
            .arg(format!("printf '%s\\0' {line}"))
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert_eq!(o.stdout.split(|&b| b == 0).count(), HOSTILE.len() + 1);
        assert!(!dir.path().join("PWNED").exists());
    }

    #[test]
    fn shell_quote_leaves_plain_words_bare() {
        assert_eq!(shell_quote("plain/path.gguf"), "plain/path.gguf");
        assert_eq!(shell_quote("my model.gguf"), "'my model.gguf'");
        assert_eq!(shell_quote("it's $HOME`x`"), r"'it'\''s $HOME`x`'");
        assert_eq!(shell_quote("$(x)"), "'$(x)'");
        assert_eq!(shell_quote("a\nb"), "'a\nb'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn one_line_never_breaks_a_line_nor_ends_in_a_backslash() {
        for w in HOSTILE {
            let l = one_line(w);
            assert!(!l.chars().any(|c| c.is_control()), "{w:?} -> {l:?}");
            assert!(!l.contains('\u{2028}'));
            assert!(!l.ends_with('\\'), "{w:?} -> {l:?}");
        }
        assert_eq!(one_line("0.1.0\ntouch PWNED"), "0.1.0 touch PWNED");
        assert_eq!(one_line("a\\\\"), "a");
    }

    #[test]
    fn systemd_executables_are_quoted_or_refused() {
        assert_eq!(systemd_executable("/usr/bin/x").unwrap(), "/usr/bin/x");
        // `$` is not expanded in the executable (a doubled one would stay doubled).
        assert_eq!(systemd_executable("/a b/$x%y").unwrap(), "\"/a b/$x%%y\"");
        assert_eq!(systemd_executable("/a$b").unwrap(), "/a$b");
        for bad in ["/a\"b", "/a'b", "/a\\b", "/a\nb", "/a\u{1b}b"] {
            let e = systemd_executable(bad).unwrap_err();
            assert!(e.starts_with("systemd refuses"), "{bad:?}: {e}");
        }
        for w in HOSTILE {
            if let Ok(q) = systemd_executable(w) {
                assert!(!q.chars().any(|c| c.is_control()), "{w:?} -> {q:?}");
            }
        }
        assert_eq!(systemd_text("50% x\ny"), "50%% x y");
    }

    #[test]
    fn yaml_strings_stay_one_scalar() {
        assert_eq!(yaml_string("a"), "\"a\"");
        assert_eq!(yaml_string("a\"b\\"), "\"a\\\"b\\\\\"");
        assert_eq!(yaml_string("x\nimage: evil"), "\"x\\nimage: evil\"");
        for w in HOSTILE {
            let v: serde_yaml::Value =
                serde_yaml::from_str(&format!("k: {}\n", yaml_string(w))).unwrap();
            assert_eq!(v["k"].as_str(), Some(*w), "{w:?}");
        }
    }
}
