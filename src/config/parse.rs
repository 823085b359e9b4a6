//! Shell words split (and quoted, by `escape`): a command line as `qtune compare` reads it.
//! Reading the words back into a config is the engine's ([`crate::engine::parse_command`]).

/// Split one shell line into words: single quotes, bash's `$'...'` quotes (with `\n`, `\t`,
/// `\r`, `\\`, `\'`, `\xHH` escapes), double quotes (with `\"`, `\\`, `\$`, `` \` ``
/// escapes) and backslash escapes, as [`shell_line`] writes them. No expansion.
pub fn split_shell_line(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' if chars.peek() == Some(&'\'') => {
                chars.next();
                in_word = true;
                let mut bytes = Vec::new();
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some('\\') => match chars.next() {
                            Some('n') => bytes.push(b'\n'),
                            Some('t') => bytes.push(b'\t'),
                            Some('r') => bytes.push(b'\r'),
                            Some('e' | 'E') => bytes.push(0x1b),
                            Some(c @ ('\\' | '\'' | '"' | '?')) => bytes.push(c as u8),
                            Some('x') => {
                                let mut v = 0u8;
                                let mut n = 0;
                                while n < 2 {
                                    match chars.peek().and_then(|c| c.to_digit(16)) {
                                        Some(d) => {
                                            v = v * 16 + d as u8;
                                            chars.next();
                                            n += 1;
                                        }
                                        None => break,
                                    }
                                }
                                if n == 0 {
                                    return Err("\\x without hex digits in $'...'".into());
                                }
                                bytes.push(v);
                            }
                            Some(c) => {
                                return Err(format!(
                                    "the escape \\{} in $'...' is not supported",
                                    crate::escape::terminal(&c.to_string())
                                ))
                            }
                            None => return Err("unterminated $'...' quote".into()),
                        },
                        Some(c) => {
                            let mut buf = [0u8; 4];
                            bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                        None => return Err("unterminated $'...' quote".into()),
                    }
                }
                match String::from_utf8(bytes) {
                    Ok(s) => cur.push_str(&s),
                    Err(_) => return Err("a $'...' quote that is not UTF-8".into()),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => cur.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(c) => {
                    in_word = true;
                    cur.push(c);
                }
                None => return Err("a trailing backslash".into()),
            },
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}
