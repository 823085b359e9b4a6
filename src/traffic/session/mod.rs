//! The built-in session (issue 41): what a coding agent (or a chat) sends a server, made at run
//! time from real text every machine with Python has, its standard-library sources. A
//! [`Session`] is an ordered list of OpenAI-style chat requests; requests of one `group` are
//! sent at once (the sub-agents' fan-out). [`super::render`] renders it through a server's own
//! chat template into a trace, so a replay measures it like a recorded session.
//!
//! Deterministic: the same sources and budget give the same session (no clock, no randomness,
//! no hash order).
//!
//! Thinking: each assistant turn thinks first, as `<think>...</think>` at the head of its
//! content. A turn keeps its thinking while its task runs (the turns after the last user
//! message), and loses it once the user speaks again: that is what Qwen3's and Qwen3.5's chat
//! templates do with earlier turns' reasoning, and what a client that does not send reasoning
//! back does. The session drops it itself, because many templates render whatever they are
//! given: the pinned server's ChatML (SmolLM2's, and qtune's tiny synthetic models') renders
//! `<think>` in content verbatim and never renders `reasoning_content`.

mod agent;
mod chat;
mod subagents;

pub use subagents::AGENTS as SUBAGENTS;
pub mod text;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Characters per token the script assumes for generation lengths (code and English in the
/// tokenizers qtune meets: 3 to 4). Depths are measured after rendering, not assumed.
pub const CHARS_PER_TOKEN: f64 = 3.2;

/// The standard-library files a session is made of, in the order it uses them; a Python
/// without some of them uses the others, and one without enough uses its top-level modules by
/// name ([`load_sources`]).
pub const PREFERRED: &[&str] = &[
    "textwrap.py",
    "bisect.py",
    "colorsys.py",
    "fnmatch.py",
    "shlex.py",
    "sched.py",
    "glob.py",
    "queue.py",
    "graphlib.py",
    "csv.py",
    "heapq.py",
    "pprint.py",
    "calendar.py",
    "fractions.py",
    "json/decoder.py",
    "json/encoder.py",
    "statistics.py",
    "difflib.py",
    "configparser.py",
    "dataclasses.py",
    "argparse.py",
];

/// The fewest files a session needs.
const MIN_SOURCES: usize = 8;
/// The largest source file read (bytes).
const MAX_SOURCE: u64 = 1 << 20;

/// What the session imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A coding agent: tools, file reads, edits, test logs, thinking, sub-agents.
    Agent,
    /// A multi-turn conversation about code: no tools, shorter turns.
    Chat,
    /// Three sub-agents sending every turn at once (parallel slots decide it).
    Subagents,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Agent => "agent",
            Kind::Chat => "chat",
            Kind::Subagents => "subagents",
        }
    }

    /// The share of a context one conversation of the session may fill: a quarter for the
    /// sub-agents, so that they fit one slot each at `-np` 1, 2 and 4 of the same `-c`.
    pub fn share(self) -> u64 {
        match self {
            Kind::Agent | Kind::Chat => 1,
            Kind::Subagents => 4,
        }
    }
}

/// One standard-library file.
#[derive(Debug, Clone)]
pub struct StdlibFile {
    /// As a CPython checkout names it, e.g. `Lib/json/decoder.py`.
    pub path: String,
    pub text: String,
}

/// One chat request of the session.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// OpenAI chat messages.
    pub messages: Vec<Value>,
    /// OpenAI tool definitions (empty for a chat).
    pub tools: Vec<Value>,
    /// The length of the answer the script gives it (tokens, estimated from its text).
    pub max_tokens: u32,
    /// Requests of one group are sent at once; groups go in order.
    pub group: u32,
}

impl ChatRequest {
    /// The request's body for `/v1/chat/completions` (and `/apply-template`).
    pub fn body(&self) -> Value {
        let mut b = json!({"messages": self.messages, "max_tokens": self.max_tokens});
        if !self.tools.is_empty() {
            b["tools"] = Value::Array(self.tools.clone());
        }
        b
    }

    /// The characters of text it holds (contents, tool arguments, tool definitions).
    pub fn chars(&self) -> usize {
        self.messages
            .iter()
            .chain(&self.tools)
            .map(text_chars)
            .sum()
    }
}

/// A built session.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub kind: Kind,
    pub requests: Vec<ChatRequest>,
}

/// Build a session whose deepest request holds about `budget_chars` characters of text.
pub fn build(kind: Kind, budget_chars: usize, sources: &[StdlibFile]) -> Session {
    let requests = match kind {
        Kind::Agent => agent::build(budget_chars, sources),
        Kind::Chat => chat::build(budget_chars, sources),
        Kind::Subagents => subagents::build(budget_chars, sources),
    };
    Session { kind, requests }
}

/// The characters of text in a JSON value (its strings, keys excluded).
fn text_chars(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(a) => a.iter().map(text_chars).sum(),
        Value::Object(o) => o.values().map(text_chars).sum(),
        _ => 0,
    }
}

/// Tokens for `chars` characters of text, at [`CHARS_PER_TOKEN`].
fn tokens_for(chars: usize) -> u32 {
    (chars as f64 / CHARS_PER_TOKEN).ceil() as u32
}

/// Python's standard-library folder, asked of `python3` (`$QTUNE_PYTHON` names another).
pub fn stdlib_dir() -> Result<PathBuf> {
    let py = std::env::var_os("QTUNE_PYTHON").unwrap_or_else(|| "python3".into());
    stdlib_dir_with(&py)
}

/// [`stdlib_dir`] of the Python `py`.
fn stdlib_dir_with(py: &std::ffi::OsStr) -> Result<PathBuf> {
    let shown = PathBuf::from(&py).display().to_string();
    let o = std::process::Command::new(py)
        .args([
            "-c", // not a server flag: Python's
            "import sysconfig; print(sysconfig.get_paths()['stdlib'])",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            anyhow::anyhow!(
                "the built-in session is made of Python's standard-library sources, and \
                 '{shown}' cannot run ({e}): install Python 3 (e.g. apt install python3), or \
                 name one with QTUNE_PYTHON=/path/to/python3"
            )
        })?;
    if !o.status.success() {
        bail!(
            "'{shown}' could not say where its standard library is ({}): the built-in session \
             needs Python 3's standard-library sources (install python3, or set QTUNE_PYTHON)",
            o.status
        );
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    if !dir.is_dir() {
        bail!(
            "'{shown}' says its standard library is {}, which is not a folder: the built-in \
             session needs Python 3's standard-library sources (install python3, or set QTUNE_PYTHON)",
            dir.display()
        );
    }
    Ok(dir)
}

/// The session's source files from the standard-library folder: [`PREFERRED`] in order, then,
/// when fewer than [`MIN_SOURCES`] of them are there, the folder's other top-level `.py`
/// files by name.
pub fn load_sources(dir: &Path) -> Result<Vec<StdlibFile>> {
    let read = |rel: &str| -> Option<StdlibFile> {
        let bytes = crate::util::read_bounded(&dir.join(rel), MAX_SOURCE).ok()?;
        let text = String::from_utf8(bytes).ok()?;
        (text.lines().count() >= 20 && !text.contains('\0')).then(|| StdlibFile {
            path: format!("Lib/{rel}"),
            text: text.replace("\r\n", "\n").replace('\t', "    "),
        })
    };
    let mut out: Vec<StdlibFile> = PREFERRED.iter().filter_map(|r| read(r)).collect();
    if out.len() < MIN_SOURCES {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list Python's standard library {}", dir.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.ends_with(".py") && !n.starts_with('_') && !PREFERRED.contains(&n.as_str())
            })
            .collect();
        names.sort();
        for n in names {
            if out.len() >= PREFERRED.len() {
                break;
            }
            out.extend(read(&n));
        }
    }
    if out.len() < MIN_SOURCES {
        bail!(
            "Python's standard library {} has only {} readable source files (the built-in \
             session needs {MIN_SOURCES}): is it a full Python 3 install? (some distributions \
             ship only compiled files; install the python3 package with its sources)",
            dir.display(),
            out.len()
        );
    }
    Ok(out)
}

/// One message of a script, before the thinking rule is applied.
#[derive(Debug, Clone)]
struct Msg {
    role: &'static str,
    content: String,
    thinking: Option<String>,
    calls: Vec<Call>,
    call_id: Option<String>,
}

#[derive(Debug, Clone)]
struct Call {
    id: String,
    name: &'static str,
    args: Value,
}

impl Msg {
    fn new(role: &'static str, content: impl Into<String>) -> Msg {
        Msg {
            role,
            content: content.into(),
            thinking: None,
            calls: Vec::new(),
            call_id: None,
        }
    }

    fn chars(&self) -> usize {
        self.content.chars().count()
            + self.thinking.as_ref().map_or(0, |t| t.chars().count() + 20)
            + self
                .calls
                .iter()
                .map(|c| text_chars(&c.args) + 16)
                .sum::<usize>()
    }
}

/// A conversation being written, and the requests it has sent.
struct Script {
    tools: Vec<Value>,
    msgs: Vec<Msg>,
    requests: Vec<ChatRequest>,
    next_call: u32,
    next_group: u32,
}

impl Script {
    fn new(system: &str, tools: Vec<Value>) -> Script {
        Script {
            tools,
            msgs: vec![Msg::new("system", system)],
            requests: Vec::new(),
            next_call: 0,
            next_group: 0,
        }
    }

    /// The messages as sent: thinking kept only on turns after the last user message.
    fn messages(&self) -> Vec<Value> {
        let last_user = self
            .msgs
            .iter()
            .rposition(|m| m.role == "user")
            .unwrap_or(0);
        self.msgs
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut content = m.content.clone();
                if let (Some(t), true) = (&m.thinking, i > last_user) {
                    content = format!("<think>\n{t}\n</think>\n\n{content}");
                }
                let mut v = json!({"role": m.role, "content": content});
                if !m.calls.is_empty() {
                    v["tool_calls"] = m
                        .calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function", "function": {
                                "name": c.name, "arguments": c.args.to_string()}})
                        })
                        .collect();
                }
                if let Some(id) = &m.call_id {
                    v["tool_call_id"] = json!(id);
                }
                v
            })
            .collect()
    }

    /// The characters the next request would hold.
    fn chars(&self) -> usize {
        self.msgs.iter().map(Msg::chars).sum::<usize>()
            + self.tools.iter().map(text_chars).sum::<usize>()
    }

    fn user(&mut self, text: impl Into<String>) {
        self.msgs.push(Msg::new("user", text));
    }

    /// Send the conversation so far as a request of its own group.
    fn ask(&mut self) {
        let group = self.next_group;
        self.next_group += 1;
        self.ask_in(group);
    }

    fn ask_in(&mut self, group: u32) {
        self.requests.push(ChatRequest {
            messages: self.messages(),
            tools: self.tools.clone(),
            max_tokens: 0,
            group,
        });
    }

    /// The assistant's answer to the requests just sent: sets their generation length.
    fn answer(&mut self, m: Msg) {
        let n = tokens_for(m.chars()).clamp(16, 4096);
        for r in self
            .requests
            .iter_mut()
            .rev()
            .take_while(|r| r.max_tokens == 0)
        {
            r.max_tokens = n;
        }
        self.msgs.push(m);
    }

    /// An assistant turn that thinks and calls tools; returns the calls' ids.
    fn call(
        &mut self,
        thinking: String,
        said: &str,
        calls: Vec<(&'static str, Value)>,
    ) -> Vec<String> {
        let mut ids = Vec::new();
        let calls = calls
            .into_iter()
            .map(|(name, args)| {
                self.next_call += 1;
                let id = format!("call_{:04}", self.next_call);
                ids.push(id.clone());
                Call { id, name, args }
            })
            .collect();
        let mut m = Msg::new("assistant", said);
        m.thinking = Some(thinking);
        m.calls = calls;
        self.answer(m);
        ids
    }

    fn tool(&mut self, id: &str, result: impl Into<String>) {
        let mut m = Msg::new("tool", result);
        m.call_id = Some(id.to_string());
        self.msgs.push(m);
    }

    /// The final answer to the last request (not sent again).
    fn close(&mut self, thinking: String, said: &str) {
        let mut m = Msg::new("assistant", said);
        m.thinking = Some(thinking);
        self.answer(m);
    }
}

#[cfg(test)]
mod tests;
