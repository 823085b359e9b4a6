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
//!
//! Text from outside (a model's GGUF metadata, file names, workload names, the free-text
//! fields of a `results.json`) is data wherever qtune shows it, with two more functions:
//!
//! - [`terminal`]: text for a terminal line: every control character (ESC, BEL, CR, LF, C1)
//!   and every invisible or reordering character (bidi overrides, line separators) is shown
//!   as an escape (`\x1b`, `\n`, `\u{202e}`), so it can neither move the cursor nor forge
//!   a line; [`terminal_path`] does the same for a path, [`terminal_lines`] for a block;
//! - [`markdown`]: text for a paragraph, a heading or a table cell of `report.md`: the
//!   [`terminal`] escapes, then HTML's `<`, `>` and `&` as entities and Markdown's
//!   punctuation (`[`, `]`, `` ` ``, `|`, `*`, ...) backslash-escaped, so no tag, link,
//!   code span or table cell can start; [`markdown_code`] and [`markdown_code_block`] put
//!   text in code.
//!
//! The stored values stay raw (JSON is data): only what is shown is escaped.
//!
//! Why not the `shlex` crate for [`shell_quote`] (issue 55 asked; measured with shlex 1.3,
//! `shlex::try_quote`): it single-quotes a line break or an ESC as the raw character
//! (`"a\nb"` becomes `'a`, a line break, `b'`; `"x\x1by"` keeps its ESC), so a `launch.sh`
//! command would span two lines and a terminal showing it would act on the escape. Here such
//! a word is written in bash's `$'...'` quoting, one line and nothing raw; plain words and
//! `$(...)` are quoted alike by both.

/// A character a reader cannot see or that changes how the text around it reads: a control
/// character (C0, DEL, C1: line breaks, ESC, BEL, NUL...), a Unicode line or paragraph
/// separator, a bidi mark, embedding, override or isolate, a zero-width character or BOM.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// Quote one word for bash: bare when it holds only characters no shell treats specially,
/// else single-quoted (inside single quotes nothing is special; a `'` is written `'\''`).
/// A word with a [hidden](is_hidden) character (a line break, an escape) is written in
/// bash's `$'...'` quoting instead, the character as `\n`, `\t` or its UTF-8 bytes
/// (`\x1b`): the word stays exact and on one line, and shows nothing raw on a terminal.
pub fn shell_quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if safe {
        word.to_string()
    } else if word.chars().any(is_hidden) {
        let mut out = String::from("$'");
        for c in word.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if is_hidden(c) => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        out.push_str(&format!("\\x{b:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('\'');
        out
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

/// A value the user gave, as an error message quotes it: one line, and at most `max`
/// characters (the rest elided with "..."): a 100,000-character `-ot` rule is named by its
/// first characters, not printed whole (issue 53).
pub fn excerpt(text: &str, max: usize) -> String {
    let line = one_line(text);
    if line.chars().count() <= max {
        return line;
    }
    let head: String = line.chars().take(max).collect();
    format!("{head}... ({} characters)", line.chars().count())
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

/// The systemd unit name qtune gives a model's server: `qtune-STEM.service`, the stem with
/// anything systemd does not take in a unit name, or that a shell or a path would read
/// specially, as `-` (only `[A-Za-z0-9._-]` is kept; runs of `-` collapse), at most 100
/// characters of it, and `model` when nothing is left. The result is safe as it is in a
/// shell line, a file name and `systemctl` (never a leading `-` or `.`).
pub fn systemd_unit_name(model_stem: &str) -> String {
    let mut stem = String::new();
    for c in model_stem.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            c
        } else {
            '-'
        };
        if c == '-' && (stem.is_empty() || stem.ends_with('-')) {
            continue;
        }
        if stem.len() >= 100 {
            break;
        }
        stem.push(c);
    }
    let stem = stem.trim_matches(['-', '.']);
    let stem = if stem.is_empty() { "model" } else { stem };
    format!("qtune-{stem}.service")
}

/// Text from outside made fit for a terminal line: each [hidden](is_hidden) character is
/// shown as an escape (`\n`, `\r`, `\t`, `\x1b` for other C0 controls and DEL,
/// `\u{202e}` for the rest), everything else as it is. The result holds no control
/// character, so it can neither move the cursor, set a title, ring, nor start a line.
pub fn terminal(text: &str) -> String {
    if !text.chars().any(is_hidden) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if is_hidden(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Several lines of text made fit for a terminal: each line with the [`terminal`] escapes,
/// the line breaks between them kept. For a rendered block whose fields are escaped already
/// (no field can add a line), so nothing else from outside reaches the terminal raw.
pub fn terminal_lines(text: &str) -> String {
    if !text.chars().any(|c| c != '\n' && is_hidden(c)) {
        return text.to_string();
    }
    text.split('\n')
        .map(terminal)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A path made fit for a terminal line ([`terminal`] of its lossy UTF-8 form).
pub fn terminal_path(path: &std::path::Path) -> String {
    terminal(&path.to_string_lossy())
}

/// Text from outside made fit for a paragraph, a heading, a list item or a table cell of a
/// Markdown file: the [`terminal`] escapes first (no line break can end the line, the row or
/// the cell), then `&`, `<` and `>` as HTML entities (no tag, comment or autolink can start),
/// then a backslash before each of `\` `` ` `` `*` `[` `]` `|` `~` `#` (no code span, link,
/// image, table cell, heading or bold text can start; `_` and `!` stay as they are, so file
/// names read as they are: an intraword `_` is no emphasis, and `!` without `[` no image).
/// It reads as the text itself.
pub fn markdown(text: &str) -> String {
    let shown = terminal(text);
    let mut out = String::with_capacity(shown.len() + 8);
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '`' | '*' | '[' | ']' | '|' | '~' | '#' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// Text in an inline Markdown code span: the [`terminal`] escapes, `|` as `\|` (a GitHub
/// table would end the cell there even inside code), between enough backticks that none
/// inside can close the span. Inside a code span nothing else is live.
pub fn markdown_code(text: &str) -> String {
    let shown = terminal(text).replace('|', "\\|");
    let fence = "`".repeat(longest_run(&shown, '`') + 1);
    let pad = if shown.starts_with('`') || shown.ends_with('`') || shown.is_empty() {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{shown}{pad}{fence}")
}

/// Text in a fenced Markdown code block (with a trailing line break): each line with the
/// [`terminal`] escapes, the fence longer than any run of backticks inside, so no line of
/// the text can close the block.
pub fn markdown_code_block(lang: &str, text: &str) -> String {
    let body: Vec<String> = text.split('\n').map(terminal).collect();
    let body = body.join("\n");
    let fence = "`".repeat((longest_run(&body, '`') + 1).max(3));
    format!("{fence}{}\n{body}\n{fence}\n", terminal(lang))
}

/// The longest run of `c` in `s`.
fn longest_run(s: &str, c: char) -> usize {
    let (mut best, mut cur) = (0, 0);
    for x in s.chars() {
        cur = if x == c { cur + 1 } else { 0 };
        best = best.max(cur);
    }
    best
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
    use std::path::Path;
    use std::process::Command;

    #[test]
    fn systemd_unit_names_keep_only_safe_characters() {
        assert_eq!(
            systemd_unit_name("Qwen3.5-35B-A3B-Q4_K_M"),
            "qtune-Qwen3.5-35B-A3B-Q4_K_M.service"
        );
        assert_eq!(
            systemd_unit_name("my model (v2)"),
            "qtune-my-model-v2.service"
        );
        assert_eq!(systemd_unit_name(""), "qtune-model.service");
        assert_eq!(systemd_unit_name("..-"), "qtune-model.service");
        assert_eq!(systemd_unit_name("-rf"), "qtune-rf.service");
        let long = systemd_unit_name(&"x".repeat(500));
        assert_eq!(long.len(), "qtune-.service".len() + 100);
        for w in HOSTILE {
            let n = systemd_unit_name(w);
            assert!(n.starts_with("qtune-") && n.ends_with(".service"), "{n}");
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
                "{w:?} -> {n}"
            );
            assert_eq!(shell_quote(&n), n);
        }
    }

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
    fn a_word_with_a_hidden_character_is_one_line_of_ansi_c_quoting() {
        assert_eq!(shell_quote("a\nb"), r"$'a\nb'");
        assert_eq!(shell_quote("it's\t\\"), r"$'it\'s\t\\'");
        assert_eq!(shell_quote("\u{1b}]0;T\u{7}"), r"$'\x1b]0;T\x07'");
        assert_eq!(shell_quote("x\u{202e}y"), r"$'x\xe2\x80\xaey'");
        for w in HOSTILE {
            let q = shell_quote(w);
            assert!(!q.chars().any(is_hidden), "{w:?} -> {q:?}");
        }
    }

    #[test]
    fn terminal_text_shows_every_hidden_character_as_an_escape() {
        assert_eq!(terminal("Qwen3 30B"), "Qwen3 30B");
        assert_eq!(
            terminal("x\u{1b}]0;TITLE\u{7}\u{1b}[2J\nMODEL=/etc/shadow\r"),
            r"x\x1b]0;TITLE\x07\x1b[2J\nMODEL=/etc/shadow\r"
        );
        assert_eq!(
            terminal("a\tb\u{7f}\u{85}\u{202e}\u{2028}"),
            r"a\tb\x7f\u{0085}\u{202e}\u{2028}"
        );
        assert_eq!(terminal_path(Path::new("/m/a\nb.gguf")), r"/m/a\nb.gguf");
        for w in HOSTILE {
            assert!(!terminal(w).chars().any(is_hidden), "{w:?}");
        }
    }

    #[test]
    fn markdown_text_starts_no_tag_link_code_or_cell() {
        assert_eq!(markdown("Qwen3-30B A3B"), "Qwen3-30B A3B");
        assert_eq!(
            markdown("<script>alert(1)</script>"),
            "&lt;script&gt;alert(1)&lt;/script&gt;"
        );
        assert_eq!(
            markdown("[x](javascript:alert(1)) a|b `c` *d* &amp;"),
            r"\[x\](javascript:alert(1)) a\|b \`c\` \*d\* &amp;amp;"
        );
        assert_eq!(markdown("a\n# b"), r"a\\n\# b");
        assert_eq!(markdown_code("a`b|c"), "``a`b\\|c``");
        assert_eq!(markdown_code("`x"), "`` `x ``");
        assert_eq!(
            markdown_code_block("sh", "a\n```\n<b>\u{1b}"),
            "````sh\na\n```\n<b>\\x1b\n````\n"
        );
        for w in HOSTILE {
            let m = markdown(w);
            assert!(!m.chars().any(is_hidden), "{w:?}");
            assert!(!m.contains('<') && !m.contains('>'), "{w:?}");
        }
    }

    #[test]
    fn shell_quote_leaves_plain_words_bare() {
        assert_eq!(shell_quote("plain/path.gguf"), "plain/path.gguf");
        assert_eq!(shell_quote("my model.gguf"), "'my model.gguf'");
        assert_eq!(shell_quote("it's $HOME`x`"), r"'it'\''s $HOME`x`'");
        assert_eq!(shell_quote("$(x)"), "'$(x)'");
        assert_eq!(shell_quote("a\nb"), "$'a\\nb'");
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
