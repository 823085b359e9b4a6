//! What a session's text is made of, derived from a real source file: its functions, a read
//! tool's numbered listing, a small edit and its unified diff, a plausible pytest log.

/// A function (or method) of a Python source: its name and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Func {
    pub name: String,
    /// The `def` line (0-based).
    pub line: usize,
    /// Its indentation (spaces).
    pub indent: usize,
    /// The first line of its docstring, when it has one.
    pub doc: Option<String>,
    /// The last line of its signature, or of its docstring when it has one: its body's code
    /// starts after it.
    pub head_end: usize,
}

/// The functions of a Python source, in order (top-level and methods).
pub fn functions(text: &str) -> Vec<Func> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let Some(rest) = t.strip_prefix("def ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The signature ends at the first line ending with ':' (a comment aside).
        let sig_end = (i..lines.len().min(i + 30))
            .find(|&j| {
                let code = lines[j].split(" #").next().unwrap_or("");
                code.trim_end().ends_with(':')
            })
            .unwrap_or(i);
        let (doc, head_end) = docstring(&lines, sig_end + 1).unwrap_or((None, sig_end));
        out.push(Func {
            name,
            line: i,
            indent: l.len() - t.len(),
            doc,
            head_end,
        });
    }
    out
}

/// A docstring that starts at line `at`: its first line's text (when not empty) and its last
/// line.
fn docstring(lines: &[&str], at: usize) -> Option<(Option<String>, usize)> {
    let d = lines.get(at)?.trim();
    let d = d.strip_prefix('r').unwrap_or(d);
    let q = ["\"\"\"", "'''"].into_iter().find(|q| d.starts_with(q))?;
    let body = &d[3..];
    let first = body.split(q).next().unwrap_or("").trim();
    let first = (!first.is_empty()).then(|| first.to_string());
    if body.contains(q) {
        return Some((first, at));
    }
    let end = (at + 1..lines.len()).find(|&j| lines[j].contains(q))?;
    Some((first, end))
}

/// The public functions (no leading underscore), else all of them.
pub fn public(funcs: &[Func]) -> Vec<&Func> {
    let p: Vec<&Func> = funcs.iter().filter(|f| !f.name.starts_with('_')).collect();
    if p.is_empty() {
        funcs.iter().collect()
    } else {
        p
    }
}

/// Lines as a read tool shows them (`cat -n`): the line number, a tab, the line.
pub fn numbered(lines: &[&str], first: usize) -> String {
    let mut s = String::new();
    for (i, l) in lines.iter().enumerate() {
        s.push_str(&format!("{:>6}\t{l}\n", first + i));
    }
    s
}

/// An edit: one line inserted after line `after` (0-based) of `lines`.
#[derive(Debug, Clone)]
pub struct Insert {
    pub after: usize,
    pub line: String,
}

/// The lines with the inserts made (inserts in any order).
pub fn apply(lines: &[&str], inserts: &[Insert]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(lines.len() + inserts.len());
    for (i, l) in lines.iter().enumerate() {
        out.push((*l).to_string());
        for ins in inserts.iter().filter(|x| x.after == i) {
            out.push(ins.line.clone());
        }
    }
    out
}

/// A unified diff of one insert, with three lines of context, as `git diff` writes it.
pub fn diff(path: &str, lines: &[&str], ins: &Insert) -> String {
    let from = ins.after.saturating_sub(2);
    let to = (ins.after + 4).min(lines.len());
    let mut s = format!(
        "--- a/{path}\n+++ b/{path}\n@@ -{},{} +{},{} @@\n",
        from + 1,
        to - from,
        from + 1,
        to - from + 1
    );
    for (i, l) in lines.iter().enumerate().take(to).skip(from) {
        s.push_str(&format!(" {l}\n"));
        if i == ins.after {
            s.push_str(&format!("+{}\n", ins.line));
        }
    }
    s
}

/// A comment line inserted into a function's body, at its indentation: after its signature
/// and docstring.
pub fn comment_in(f: &Func, text: &str) -> Insert {
    Insert {
        after: f.head_end,
        line: format!("{}# {text}", " ".repeat(f.indent + 4)),
    }
}

/// The module's test file, as a repository would name it.
pub fn test_path(path: &str) -> String {
    let stem = path
        .rsplit('/')
        .next()
        .unwrap_or(path)
        .trim_end_matches(".py");
    format!("Lib/test/test_{}.py", stem.trim_start_matches('_'))
}

/// A pytest run of tests named after the module's functions; with `fail`, that function's test
/// fails with a traceback quoting the real source lines around it.
pub fn pytest_log(path: &str, lines: &[&str], funcs: &[&Func], fail: Option<&Func>) -> String {
    let tp = test_path(path);
    let n = funcs.len().clamp(1, 40);
    let mut s = format!(
        "============================= test session starts ==============================\n\
         platform linux -- Python 3, pytest-8.3.4, pluggy-1.5.0\n\
         rootdir: /work/cpython\n\
         collected {n} items\n\n"
    );
    for (i, f) in funcs.iter().take(n).enumerate() {
        let verdict = if fail.is_some_and(|x| x.name == f.name) {
            "FAILED"
        } else {
            "PASSED"
        };
        s.push_str(&format!(
            "{tp}::test_{} {verdict} [{:>3}%]\n",
            f.name.trim_start_matches('_'),
            (i + 1) * 100 / n
        ));
    }
    match fail {
        Some(f) => {
            let t = f.name.trim_start_matches('_');
            s.push_str(&format!(
                "\n=================================== FAILURES ===================================\n\
                 {:_^80}\n\n    def test_{t}():\n>       assert {}.{}(*CASE) == EXPECTED\n\n{path}:{}: in {}\n",
                format!(" test_{t} "),
                module_name(path),
                f.name,
                f.line + 1,
                f.name
            ));
            for l in lines.iter().skip(f.line).take(6) {
                s.push_str(&format!("    {l}\n"));
            }
            s.push_str(&format!(
                "E       AssertionError: assert None == EXPECTED\n\n{tp}:{}: AssertionError\n\
                 =========================== short test summary info ============================\n\
                 FAILED {tp}::test_{t} - AssertionError: assert None == EXPECTED\n\
                 ========================= 1 failed, {} passed in 0.84s =========================\n",
                f.line + 12,
                n - 1
            ));
        }
        None => s.push_str(&format!(
            "\n============================== {n} passed in 0.79s ===============================\n"
        )),
    }
    s
}

/// `Lib/json/decoder.py` -> `json.decoder`.
pub fn module_name(path: &str) -> String {
    path.trim_start_matches("Lib/")
        .trim_end_matches(".py")
        .trim_end_matches("/__init__")
        .replace('/', ".")
}

/// Lines of every source holding `word`, as `grep -n` prints them over several files (at
/// most `max` lines).
pub fn grep(sources: &[super::StdlibFile], word: &str, max: usize) -> String {
    let mut s = String::new();
    let mut n = 0;
    for src in sources {
        for (i, l) in src.text.lines().enumerate() {
            if n >= max {
                return s;
            }
            if l.contains(word) {
                s.push_str(&format!("{}:{}:{}\n", src.path, i + 1, l));
                n += 1;
            }
        }
    }
    if s.is_empty() {
        s.push_str("(no matches)\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "import os\n\ndef alpha(x):\n    \"\"\"Return x.\"\"\"\n    return x\n\nclass C:\n    def _beta(self,\n              y):  # two lines\n        \"\"\"Beta.\n\n        More.\n        \"\"\"\n        pass\n";

    #[test]
    fn functions_and_their_docstrings_are_found() {
        let f = functions(SRC);
        assert_eq!(f.len(), 2);
        assert_eq!(
            (f[0].name.as_str(), f[0].line, f[0].indent),
            ("alpha", 2, 0)
        );
        assert_eq!(f[0].doc.as_deref(), Some("Return x."));
        assert_eq!((f[1].name.as_str(), f[1].indent), ("_beta", 4));
        assert_eq!(f[1].doc.as_deref(), Some("Beta."));
        // The body starts after the two-line signature and the four-line docstring.
        assert_eq!((f[0].head_end, f[1].head_end), (3, 12));
        assert_eq!(public(&f).len(), 1);
    }

    #[test]
    fn an_insert_and_its_diff_agree() {
        let lines: Vec<&str> = SRC.lines().collect();
        let f = &functions(SRC)[0];
        let ins = comment_in(f, "checked");
        let edited = apply(&lines, std::slice::from_ref(&ins));
        assert_eq!(edited.len(), lines.len() + 1);
        assert_eq!(edited[4], "    # checked");
        let d = diff("Lib/m.py", &lines, &ins);
        assert!(d.contains("@@ -2,6 +2,7 @@"), "{d}");
        assert!(d.contains("+    # checked\n"), "{d}");
        assert_eq!(d.lines().filter(|l| l.starts_with(' ')).count(), 6);
    }

    #[test]
    fn a_failing_test_log_quotes_the_source() {
        let lines: Vec<&str> = SRC.lines().collect();
        let f = functions(SRC);
        let all: Vec<&Func> = f.iter().collect();
        let log = pytest_log("Lib/m.py", &lines, &all, Some(&f[0]));
        assert!(
            log.contains("Lib/test/test_m.py::test_alpha FAILED"),
            "{log}"
        );
        assert!(log.contains("    def alpha(x):"), "{log}");
        assert!(log.contains("1 failed, 1 passed"), "{log}");
        assert!(pytest_log("Lib/m.py", &lines, &all, None).contains("2 passed"));
    }
}
