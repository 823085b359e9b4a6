//! The user's real traffic (issue 41): `qtune record` puts a recording proxy in front of a
//! running llama-server and writes what the client sent as a trace ([`trace`], documented in
//! `docs/trace-format.md`); `qtune trace show` summarises one ([`show`]); `--workload FILE.jsonl`
//! replays one ([`plan`] picks and checks what a launch replays; the trial stage measures it).
//! `qtune trace session` builds a coding agent's session (or a chat) from Python's
//! standard-library sources ([`session`]) and renders it through a running server's own chat
//! template into a trace ([`render`]).
//!
//! A trace holds the user's prompts and code: it is created user-only (0600) and is never
//! copied into a run directory, profile or report.

mod answer;
pub mod answers;
mod convert;
mod intake;
mod ordered;
pub mod plan;
pub mod proxy;
pub mod render;
pub mod session;
pub mod show;
pub mod speculate;
pub mod trace;
pub mod trace_file;
pub mod upstream;
