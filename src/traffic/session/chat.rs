//! The chat: a multi-turn conversation about real code, no tools. The user pastes a function
//! and asks about it; the assistant thinks, then explains (and now and then re-emits the
//! function with a small change). The last turn pastes as much of a file as brings the
//! deepest request to the budget.

use super::text::{self, Func};
use super::{ChatRequest, Msg, Script, StdlibFile};

const SYSTEM: &str = "You are a helpful assistant who knows Python well. Answer questions about \
code clearly and briefly; quote the lines you talk about.";

const ASKS: &[&str] = &[
    "What does this function from {path} do, and when would I call it?",
    "Here is `{f}` from {path}. Is there anything in it that could surprise a caller?",
    "Can you explain the control flow of `{f}` ({path}) step by step?",
    "How would you write `{f}` from {path} more simply, keeping what it does?",
];

/// The lines a user pastes: a function, from its def to the next def at its level (at most 40
/// lines), and the code after it up to `chars` characters (a deeper chat pastes more a turn,
/// so that its number of turns stays about the same).
/// Also returns how many of the lines are the function's.
fn paste<'a>(lines: &[&'a str], funcs: &[Func], i: usize, chars: usize) -> (Vec<&'a str>, usize) {
    let f = &funcs[i];
    let end = funcs[i + 1..]
        .iter()
        .find(|g| g.indent <= f.indent)
        .map_or(lines.len(), |g| g.line);
    let mut end = end.min(f.line + 40);
    let own = end - f.line;
    let mut n: usize = lines[f.line..end].iter().map(|l| l.len() + 1).sum();
    while n < chars && end < lines.len() {
        n += lines[end].len() + 1;
        end += 1;
    }
    (lines[f.line..end].to_vec(), own)
}

/// The turns a chat has, about, whatever its depth.
const TURNS: usize = 20;

pub fn build(budget: usize, sources: &[StdlibFile]) -> Vec<ChatRequest> {
    let mut s = Script::new(SYSTEM, Vec::new());
    let mut turn = 0usize;
    'files: for src in sources.iter().cycle().take(sources.len() * 4) {
        let lines: Vec<&str> = src.text.lines().collect();
        let funcs = text::functions(&src.text);
        let public: Vec<usize> = (0..funcs.len())
            .filter(|&i| !funcs[i].name.starts_with('_'))
            .take(3)
            .collect();
        for i in public {
            let f = &funcs[i];
            let (pasted, own) = paste(&lines, &funcs, i, budget / TURNS / 2);
            let code = pasted.join("\n");
            let ask = ASKS[turn % ASKS.len()]
                .replace("{path}", &src.path)
                .replace("{f}", &f.name);
            let question = format!("{ask}\n\n```python\n{code}\n```");
            let rewrite = turn % ASKS.len() == 3;
            let answer = if rewrite {
                // The function alone, re-emitted: not the code pasted after it.
                let fl = &pasted[..own];
                let mut ins = text::comment_in(f, "the simple case first");
                ins.after = (ins.after - f.line).min(fl.len().saturating_sub(1));
                let edited = text::apply(fl, &[ins]).join("\n");
                format!(
                    "It can stay almost as it is; the one change that helps is saying up front \
                     which case is handled first:\n\n```python\n{edited}\n```\n\nEverything \
                     else in `{}` reads clearly already.",
                    f.name
                )
            } else {
                format!(
                    "`{}` ({}:{}) {}\n\nIt starts with:\n\n```python\n{}\n```\n\nSo a caller \
                     gets its result directly; the lines after that handle the remaining cases \
                     one by one.",
                    f.name,
                    src.path,
                    f.line + 1,
                    f.doc.as_deref().map_or(
                        "has no docstring; its name says what it does.".into(),
                        |d| { format!("is documented as: \"{d}\"") }
                    ),
                    code.lines().take(4).collect::<Vec<_>>().join("\n")
                )
            };
            let cost = question.chars().count() + answer.chars().count() + 400;
            if s.chars() + cost + 1200 > budget {
                break 'files;
            }
            s.user(question);
            s.ask();
            let mut m = Msg::new("assistant", answer);
            m.thinking = Some(format!(
                "The user asks about `{}` from {}. Read the code they pasted and answer from \
                 it, quoting the lines that matter.",
                f.name, src.path
            ));
            s.answer(m);
            turn += 1;
        }
    }
    // The last turn: a paste that fills the budget.
    let src = &sources[turn % sources.len()];
    let lines: Vec<&str> = src.text.lines().collect();
    let room = budget.saturating_sub(s.chars() + 200);
    let mut paste = String::new();
    for l in &lines {
        if paste.chars().count() + l.chars().count() + 1 > room {
            break;
        }
        paste.push_str(l);
        paste.push('\n');
    }
    s.user(format!(
        "Last one: here is the start of {}. What is it for?\n\n```python\n{paste}```",
        src.path
    ));
    s.ask();
    s.close(
        format!(
            "A module overview of {}, from its docstring and definitions.",
            src.path
        ),
        &format!(
            "{} is a small module of the standard library; the part you pasted defines its \
             public functions and the helpers they share.",
            src.path
        ),
    );
    s.requests
}
