//! Three sub-agents at once (issue 42's parallel slots): each surveys its own files for a
//! parent agent, a read at a time, and the three send every turn at the same moment (one group
//! per turn), as a parent's fan-out of `task` calls does. No parent turns: the session is the
//! concurrency a server's slots (`-np`) decide, and nothing else.
//!
//! Each sub-agent's deepest request holds about `budget` characters; the last request of the
//! session is the deepest (the renderer sizes a session by its last request).

use super::agent::{tools, SUB_SYSTEM};
use super::text;
use super::{ChatRequest, Script, StdlibFile};
use serde_json::json;

/// Sub-agents sending at once.
pub const AGENTS: usize = 3;
/// Reads per sub-agent (turns: one more, the summary).
const READS: usize = 4;
/// Room kept for the turns' own text (characters).
const ROOM: usize = 1_600;
/// Functions a turn's notes name at most.
const NOTED: usize = 8;
/// The smallest read (characters).
const MIN_PIECE: usize = 200;

/// One read: the file's path, its first line (1-based), the lines, the numbered listing and
/// the public functions that start in it.
type Read = (String, usize, usize, String, Vec<String>);

/// One sub-agent's files, read in order a piece at a time.
struct Reader<'a> {
    files: Vec<&'a StdlibFile>,
    file: usize,
    line: usize,
}

impl<'a> Reader<'a> {
    /// The next turn's reads, `piece` characters in all: from where the last ended, on into
    /// the next file when one ends (one `read_file` call each).
    fn reads(&mut self, piece: usize) -> Vec<Read> {
        let mut out: Vec<Read> = Vec::new();
        let mut left = piece;
        while left >= MIN_PIECE || out.is_empty() {
            let r = self.next(left);
            left = left.saturating_sub(r.3.chars().count());
            out.push(r);
            if out.len() >= self.files.len() {
                break;
            }
        }
        out
    }

    /// The next read of up to `piece` characters (at least one line): the file's path, the
    /// first line (1-based), the numbered listing and the public functions defined in it.
    fn next(&mut self, piece: usize) -> Read {
        let src = self.files[self.file % self.files.len()];
        let lines: Vec<&str> = src.text.lines().collect();
        let first = self.line;
        let mut used = 0;
        let mut end = first;
        while end < lines.len() {
            let n = lines[end].chars().count() + 8;
            if used + n > piece && end > first {
                break;
            }
            used += n;
            end += 1;
        }
        let funcs: Vec<String> = text::public(&text::functions(&src.text))
            .into_iter()
            .filter(|f| f.line >= first && f.line < end)
            .map(|f| {
                format!(
                    "`{}` at {}:{} ({})",
                    f.name,
                    src.path,
                    f.line + 1,
                    f.doc
                        .as_deref()
                        .unwrap_or("no docstring; it checks its arguments inline")
                        .trim_end_matches('.')
                )
            })
            .collect();
        if end >= lines.len() {
            self.file += 1;
            self.line = 0;
        } else {
            self.line = end;
        }
        (
            src.path.clone(),
            first + 1,
            end - first,
            text::numbered(&lines[first..end], first + 1),
            funcs,
        )
    }
}

pub fn build(budget: usize, sources: &[StdlibFile]) -> Vec<ChatRequest> {
    let mut agents: Vec<(Script, Reader, Vec<Vec<String>>)> = (0..AGENTS)
        .map(|i| {
            let files: Vec<&StdlibFile> = sources.iter().skip(i).step_by(AGENTS).collect();
            let mut s = Script::new(SUB_SYSTEM, tools(true));
            s.user(format!(
                "Read {} and list the public functions that validate their arguments, with \
                 path:line and one line on what each checks. If it is short, go on with {}.",
                files[0].path,
                files.get(1).map_or("nothing else", |f| f.path.as_str())
            ));
            (
                s,
                Reader {
                    files,
                    file: 0,
                    line: 0,
                },
                Vec::new(),
            )
        })
        .collect();
    let mut requests = Vec::new();
    for turn in 0..=READS {
        let mut group = Vec::new();
        for (s, reader, seen) in &mut agents {
            s.ask_in(turn as u32);
            // What the last read showed (nothing before the first).
            let notes = match seen.last() {
                None => "I have read nothing yet".to_string(),
                Some(f) if f.is_empty() => {
                    "no public function starts in the part I just read".to_string()
                }
                Some(f) => format!(
                    "the part I just read defines {}",
                    f.iter().take(NOTED).cloned().collect::<Vec<_>>().join(", ")
                ),
            };
            if turn == READS {
                let summary: String = seen
                    .iter()
                    .flatten()
                    .take(12)
                    .map(|f| format!("- {f}; it checks its arguments before use\n"))
                    .collect();
                s.close(
                    format!("{notes}. That is enough reading; the summary, one line each."),
                    &format!("The public functions I read:\n{summary}"),
                );
            } else {
                // What is left to the budget, shared among the reads still to come.
                let left = budget.saturating_sub(s.chars() + ROOM);
                let reads = reader.reads((left / (READS - turn)).max(MIN_PIECE));
                let next: Vec<String> = reads
                    .iter()
                    .map(|(path, first, ..)| format!("{path} from line {first}"))
                    .collect();
                let ids = s.call(
                    format!("So far {notes}. Next I read {}.", next.join(" and ")),
                    "",
                    reads
                        .iter()
                        .map(|(path, first, n, ..)| {
                            (
                                "read_file",
                                json!({"path": path, "offset": first, "limit": n}),
                            )
                        })
                        .collect(),
                );
                let mut funcs = Vec::new();
                for (id, (.., listing, f)) in ids.iter().zip(reads) {
                    s.tool(id, listing);
                    funcs.extend(f);
                }
                seen.push(funcs);
            }
            group.push(s.requests.pop().expect("just asked"));
        }
        // The deepest of the group last (the renderer sizes the session by its last request).
        group.sort_by_key(ChatRequest::chars);
        requests.extend(group);
    }
    requests
}
