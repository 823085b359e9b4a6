//! qtune: tunes `llama-server` launch flags for Mixture-of-Experts GGUF models.
//!
//! Data flows one way through the stages:
//! `hardware` → `model` → `space` → `search` → `trial` → `report` / `profile`.
//! `workloads` (part of the space stage) holds what the user runs as a mix of request shapes.
//! `config` holds [`config::LaunchConfig`], the vocabulary every stage shares; `run` holds the
//! finished run (the one reader and writer of a run directory's results); `clock` is the time a
//! tune reads; `stats` holds paired comparisons and racing (the launch is the unit of evidence);
//! `compare` re-measures launch commands in interleaved rounds; `engine` is what is particular to one inference server (its flags, logs, and finding, checking and building its server); `traffic` records the user's real requests through a proxy (`qtune record`) and reads them back (`qtune trace show`). `app` has one function per
//! subcommand: it wires the stages and prints. `cli` only parses and calls `app`.

// Closed pipes (issue 33: `qtune plan --json | head`, `qtune tune ... 2>&1 | head`): std's
// print macros panic when stdout or stderr is gone, which ended a tune mid-way. Every module
// below prints through these instead (textual scope shadows the prelude's): a closed stream
// is remembered and further output to it dropped, and the command goes on to its normal end
// (a tune finishes and cleans up its servers). Defined before the modules that use them.
macro_rules! println {
    () => { $crate::util::print_to(false, format_args!("\n")) };
    ($($arg:tt)*) => { $crate::util::print_to(false, format_args!("{}\n", format_args!($($arg)*))) };
}
macro_rules! print {
    ($($arg:tt)*) => { $crate::util::print_to(false, format_args!($($arg)*)) };
}
macro_rules! eprintln {
    () => { $crate::util::print_to(true, format_args!("\n")) };
    ($($arg:tt)*) => { $crate::util::print_to(true, format_args!("{}\n", format_args!($($arg)*))) };
}
macro_rules! eprint {
    ($($arg:tt)*) => { $crate::util::print_to(true, format_args!($($arg)*)) };
}

pub mod app;
pub mod cli;
pub mod clock;
pub mod compare;
pub mod config;
pub mod engine;
pub mod escape;
pub mod fixtures;
pub mod hardware;
pub mod model;
pub mod objective;
pub mod placement;
pub mod plan;
pub mod profile;
pub mod quality;
pub mod report;
pub mod rpc;
pub mod run;
pub mod search;
pub mod space;
pub mod stats;
pub mod traffic;
pub mod trial;
pub mod util;
pub mod workloads;
