//! The coding agent's session: a system prompt with tools; a task; sub-agents exploring in
//! parallel; then work cycles on one file each (read, grep, edit, run the tests, a failure,
//! a fix, the tests again), a new task from the user at each cycle (earlier thinking dropped),
//! old tool results cleared once the context is over half full (a history edit), and a last
//! partial read that brings the deepest request to the budget.

use super::text::{self, Func};
use super::{ChatRequest, Script, StdlibFile};
use serde_json::{json, Value};

const SYSTEM: &str = "You are an interactive coding agent working in a checkout of CPython's \
standard library. You help the user with software engineering tasks: fixing bugs, adding \
checks, refactoring and explaining code. Use the tools below to read files, search, edit and \
run tests; never guess the contents of a file you have not read.

# Doing tasks
- Read the relevant code before changing it, and search for callers of anything you change.
- Keep changes small and in the style of the surrounding code; do not reformat lines you do \
not otherwise touch.
- After every edit, run the module's tests. If a test fails, read the traceback, find the \
cause, fix it and run the tests again until they pass.
- When a task needs a survey of several files, delegate it to sub-agents with the task tool; \
they run in parallel and report back a short summary.

# Tone
Be concise. Report what you changed and how you checked it, in a few lines. Quote file paths \
as path:line so the user can open them.

# Environment
Working directory: /work/cpython
Platform: linux
The test runner is pytest; tests live in Lib/test/.";

pub(super) const SUB_SYSTEM: &str =
    "You are a sub-agent of a coding agent, exploring a CPython checkout \
for it. Read what you need with the tools, then answer with a short, factual summary: the \
functions that matter, one line each, with path:line. Do not edit files.";

pub(super) const CLEARED: &str = "[Old tool result content cleared]";

/// What a work cycle holds besides its read (characters): the turns' text, a grep, two diffs
/// and two test logs.
const OVERHEAD: usize = 5500;
/// A work cycle needs at least this much room (characters), else the session ends.
const MIN_CYCLE: usize = OVERHEAD + 800;
/// The longest file written back whole (characters; about 2,500 tokens of answer).
const MAX_REWRITE: usize = 8_000;
/// Room kept for the last question and its read.
const FINAL: usize = 1500;

fn tool(name: &str, description: &str, props: Value, required: &[&str]) -> Value {
    json!({"type": "function", "function": {"name": name, "description": description,
        "parameters": {"type": "object", "properties": props, "required": required}}})
}

pub(super) fn tools(sub: bool) -> Vec<Value> {
    let mut t = vec![
        tool(
            "read_file",
            "Read a file. Returns its lines numbered as cat -n prints them. Use offset and limit \
             to read part of a long file.",
            json!({"path": {"type": "string", "description": "Path from the repository root"},
                   "offset": {"type": "integer", "description": "First line to read (1-based)"},
                   "limit": {"type": "integer", "description": "How many lines to read"}}),
            &["path"],
        ),
        tool(
            "grep",
            "Search files for a pattern (a regular expression). Returns path:line:text for \
             each match.",
            json!({"pattern": {"type": "string"}, "path": {"type": "string", "description": "A folder or file"}}),
            &["pattern"],
        ),
    ];
    if sub {
        return t;
    }
    t.extend([
        tool(
            "edit_file",
            "Apply a unified diff to one file. The diff's context lines must match the file.",
            json!({"path": {"type": "string"}, "diff": {"type": "string", "description": "A unified diff (--- a/PATH, +++ b/PATH, @@ hunks)"}}),
            &["path", "diff"],
        ),
        tool(
            "write_file",
            "Write a whole file, replacing its contents.",
            json!({"path": {"type": "string"}, "content": {"type": "string"}}),
            &["path", "content"],
        ),
        tool(
            "run_tests",
            "Run tests with pytest and return its output.",
            json!({"path": {"type": "string", "description": "A test file or folder"}}),
            &["path"],
        ),
        tool(
            "task",
            "Start a sub-agent for a self-contained task (a survey, a search). Several task \
             calls in one turn run in parallel; each returns the sub-agent's final answer.",
            json!({"description": {"type": "string", "description": "Three to five words"},
                   "prompt": {"type": "string", "description": "The task, in full"}}),
            &["description", "prompt"],
        ),
    ]);
    t
}

/// What of a file a read shows: the numbered listing, its first line (0-based), its lines.
struct View<'a> {
    lines: Vec<&'a str>,
    first: usize,
    shown: usize,
    listing: String,
    args: Value,
}

/// Read `src` within `share` characters: the whole file when it fits, else lines from just
/// before its first function.
fn view<'a>(src: &'a StdlibFile, share: usize) -> View<'a> {
    let lines: Vec<&str> = src.text.lines().collect();
    let whole = text::numbered(&lines, 1);
    if whole.chars().count() <= share {
        return View {
            shown: lines.len(),
            lines,
            first: 0,
            listing: whole,
            args: json!({"path": src.path}),
        };
    }
    let funcs = text::functions(&src.text);
    let start = text::public(&funcs).first().map(|f| f.line);
    let first = start.map_or(0, |l| l.saturating_sub(2));
    let mut used = 0;
    let mut shown = 0;
    for l in &lines[first..] {
        let n = l.chars().count() + 8;
        if used + n > share && shown >= 4 {
            break;
        }
        used += n;
        shown += 1;
    }
    View {
        listing: text::numbered(&lines[first..first + shown], first + 1),
        args: json!({"path": src.path, "offset": first + 1, "limit": shown}),
        lines,
        first,
        shown,
    }
}

impl View<'_> {
    /// The functions the read showed (public first).
    fn funcs(&self, src: &StdlibFile) -> Vec<Func> {
        let all = text::functions(&src.text);
        let seen: Vec<Func> = all
            .into_iter()
            .filter(|f| f.line >= self.first && f.head_end + 2 < self.first + self.shown)
            .collect();
        let mut p: Vec<Func> = text::public(&seen).into_iter().cloned().collect();
        if p.is_empty() {
            // A view with no function: pretend the first shown line is one, for the names.
            p.push(Func {
                name: "module".into(),
                line: self.first,
                indent: 0,
                doc: None,
                head_end: self.first,
            });
        }
        p
    }
}

const TASKS: &[&str] = &[
    "In {path}, `{f}` should reject bad input early with a clear error instead of failing deep inside. Add the check, keep its behaviour otherwise the same, and make sure the tests pass.",
    "The comments in `{f}` ({path}) no longer say what it does. Bring them up to date and run the tests.",
    "I think `{f}` in {path} mishandles an empty argument. Look into it, fix it if so, and run the tests.",
    "Please tidy up `{f}` in {path}: make the control flow easier to follow without changing what it does, and run the tests.",
];

pub fn build(budget: usize, sources: &[StdlibFile]) -> Vec<ChatRequest> {
    let mut s = Script::new(SYSTEM, tools(false));
    let mut next = 0usize;
    let mut take = |n: usize| -> &StdlibFile {
        let src = &sources[next % sources.len()];
        next += n;
        src
    };

    // The task, and sub-agents exploring in parallel first.
    let first = take(1);
    let f0 = text::public(&text::functions(&first.text))
        .first()
        .map_or("main".to_string(), |f| f.name.clone());
    s.user(
        TASKS[0].replace("{path}", &first.path).replace("{f}", &f0)
            + " Before you start, have a look at how the modules around it check their arguments.",
    );
    s.ask();
    let n_subs = if budget > 12 * MIN_CYCLE { 3 } else { 2 };
    let subs: Vec<&StdlibFile> = (0..n_subs).map(|_| take(1)).collect();
    let share = (budget / 16).max(600);
    let prompts: Vec<String> = subs
        .iter()
        .map(|src| {
            format!(
                "Read {} and list the public functions that validate their arguments, with \
                 path:line and one line on what each checks.",
                src.path
            )
        })
        .collect();
    let ids = s.call(
        format!(
            "Before changing {} I want to know how its neighbours check their arguments. That \
             is a survey of {} files; sub-agents can read them in parallel while I wait.",
            first.path, n_subs
        ),
        "I'll survey the neighbouring modules first.",
        prompts
            .iter()
            .zip(&subs)
            .map(|(p, src)| {
                (
                    "task",
                    json!({"description": format!("Survey {}", src.path), "prompt": p}),
                )
            })
            .collect(),
    );
    let (g1, g2) = (s.next_group, s.next_group + 1);
    s.next_group += 2;
    let mut second = Vec::new();
    for ((src, p), id) in subs.iter().zip(&prompts).zip(&ids) {
        let mut sub = Script::new(SUB_SYSTEM, tools(true));
        sub.user(p.clone());
        sub.ask_in(g1);
        let v = view(src, share);
        let funcs = v.funcs(src);
        let cid = sub.call(
            format!("I need the file itself; {} is where to start.", src.path),
            "",
            vec![("read_file", v.args.clone())],
        );
        sub.tool(&cid[0], v.listing.clone());
        sub.ask_in(g2);
        let summary: String = funcs
            .iter()
            .take(10)
            .map(|f| {
                format!(
                    "- {}:{} `{}`: {}\n",
                    src.path,
                    f.line + 1,
                    f.name,
                    f.doc
                        .as_deref()
                        .unwrap_or("no docstring; checks its arguments inline")
                )
            })
            .collect();
        let summary = format!("{} defines these functions:\n{summary}", src.path);
        sub.close(
            format!("I have read {}; now the summary.", src.path),
            &summary,
        );
        s.requests.push(sub.requests.remove(0));
        second.push(sub.requests.remove(0));
        s.tool(id, summary);
    }
    s.requests.extend(second);
    s.ask();

    // Work cycles, one file each, while there is room for one.
    let mut cycle = 0usize;
    let mut cleared = false;
    let mut rewrote = false;
    let mut src = first;
    loop {
        let room = budget.saturating_sub(s.chars() + FINAL);
        if room < MIN_CYCLE {
            break;
        }
        let share = room.saturating_sub(OVERHEAD).min(room / 2).min(24_000);
        let v = view(src, share);
        if v.listing.chars().count() + OVERHEAD > room {
            break;
        }
        if cycle > 0 {
            if !cleared && s.chars() > budget / 2 {
                clear_old_results(&mut s);
                cleared = true;
                continue;
            }
            let f = v.funcs(src)[0].name.clone();
            s.user(
                TASKS[cycle % TASKS.len()]
                    .replace("{path}", &src.path)
                    .replace("{f}", &f),
            );
            s.ask();
        }
        rewrote |= work(&mut s, src, &v, sources, !rewrote);
        cycle += 1;
        src = take(1);
    }

    // The last request: a new question and a read sized to bring it to the budget.
    let g = text::public(&text::functions(&src.text))
        .first()
        .map_or("main".to_string(), |f| f.name.clone());
    s.user(format!(
        "Thanks. One more: where does {} handle `{g}`'s edge cases? Just tell me, no edits.",
        src.path
    ));
    s.ask();
    let room = budget.saturating_sub(s.chars() + 400);
    let v = view(src, room);
    let id = s.call(
        format!(
            "I need to read {} to answer; only as much as it takes.",
            src.path
        ),
        "",
        vec![("read_file", v.args.clone())],
    );
    s.tool(&id[0], v.listing.clone());
    s.ask();
    s.close(
        format!("The answer is in the listing above, around `{g}`."),
        &format!(
            "`{g}` is in {}: its edge cases are handled at the top of the function, before \
             the main loop.",
            src.path
        ),
    );
    s.requests
}

/// One work cycle on `src`: read, grep, edit, test (a failure), fix, test (passing), report.
/// With `may_rewrite`, a short file read whole is written back whole (the longest answer of a
/// session; once, since agents mostly edit by diff); returns whether it was.
fn work(
    s: &mut Script,
    src: &StdlibFile,
    v: &View,
    sources: &[StdlibFile],
    may_rewrite: bool,
) -> bool {
    let funcs = v.funcs(src);
    let f1 = &funcs[0];
    let f2 = funcs.get(1).unwrap_or(f1);
    let path = &src.path;
    let id = s.call(
        format!(
            "The task is about {path}. I have not seen the file yet, so I read it first and \
             look at how `{}` is written before changing anything.",
            f1.name
        ),
        "",
        vec![("read_file", v.args.clone())],
    );
    s.tool(&id[0], v.listing.clone());
    s.ask();

    let id = s.call(
        format!(
            "`{}` is defined at {path}:{}. Before editing it I check its callers elsewhere in \
             the library, so that a change of behaviour does not break them.",
            f1.name,
            f1.line + 1
        ),
        "",
        vec![(
            "grep",
            json!({"pattern": format!("{}\\(", f1.name), "path": "Lib/"}),
        )],
    );
    let hits = text::grep(sources, &format!("{}(", f1.name), 8);
    let hits: String = hits
        .lines()
        .map(|l| l.chars().take(160).collect::<String>() + "\n")
        .collect();
    s.tool(&id[0], hits);
    s.ask();

    let ins = text::comment_in(
        f1,
        &format!("{}: arguments are checked by the caller", f1.name),
    );
    let whole =
        may_rewrite && v.first == 0 && v.shown == v.lines.len() && src.text.len() <= MAX_REWRITE;
    let id = if whole {
        let edited = text::apply(&v.lines, std::slice::from_ref(&ins)).join("\n") + "\n";
        s.call(
            format!(
                "The file is short, so I write it back whole with the change inside `{}`: one \
                 line after its docstring, nothing else touched.",
                f1.name
            ),
            &format!("Editing `{}`.", f1.name),
            vec![("write_file", json!({"path": path, "content": edited}))],
        )
    } else {
        s.call(
            format!(
                "A one-line change inside `{}`, where its body starts; a diff is enough.",
                f1.name
            ),
            &format!("Editing `{}`.", f1.name),
            vec![(
                "edit_file",
                json!({"path": path, "diff": text::diff(path, &v.lines, &ins)}),
            )],
        )
    };
    s.tool(&id[0], format!("{path}: 1 line added."));
    s.ask();

    let shown: Vec<&Func> = funcs.iter().take(8).collect();
    let tp = text::test_path(path);
    let id = s.call(
        "Now the module's tests, to see whether the edit broke anything.".into(),
        "",
        vec![("run_tests", json!({"path": tp}))],
    );
    s.tool(&id[0], text::pytest_log(path, &v.lines, &shown, Some(f1)));
    s.ask();

    let fix = text::comment_in(f2, &format!("{}: an empty argument returns early", f2.name));
    let id = s.call(
        format!(
            "test_{} fails: the traceback points into `{}` at {path}:{}. The assertion got \
             None, so the case it tests now returns too early. The check belongs in `{}`; I \
             move it there.",
            f1.name.trim_start_matches('_'),
            f1.name,
            f1.line + 1,
            f2.name
        ),
        "The test shows the check is in the wrong place; moving it.",
        vec![(
            "edit_file",
            json!({"path": path, "diff": text::diff(path, &v.lines, &fix)}),
        )],
    );
    s.tool(&id[0], format!("{path}: 1 line added."));
    s.ask();

    let id = s.call(
        "Run the tests again.".into(),
        "",
        vec![("run_tests", json!({"path": tp}))],
    );
    s.tool(&id[0], text::pytest_log(path, &v.lines, &shown, None));
    s.ask();

    s.close(
        format!("All {} tests pass; time to report.", shown.len()),
        &format!(
            "Done. `{}` ({path}:{}) and `{}` now carry the check, and all {} tests in {tp} pass.",
            f1.name,
            f1.line + 1,
            f2.name,
            shown.len()
        ),
    );
    whole
}

/// Clear the contents of old tool results (all but the last few messages), as agents do to
/// make room: the prompt then differs from the cached one early, at the first cleared result.
fn clear_old_results(s: &mut Script) {
    let keep_from = s.msgs.len().saturating_sub(6);
    for m in &mut s.msgs[..keep_from] {
        if m.role == "tool" && m.content.len() > 200 {
            m.content = CLEARED.into();
        }
    }
}
