//! qtune: tunes `llama-server` launch flags for Mixture-of-Experts GGUF models.
//!
//! Data flows one way through the stages:
//! `hardware` → `model` → `space` → `search` → `trial` → `report` / `profile`.
//! `workloads` (part of the space stage) holds what the user runs as a mix of request shapes.
//! `config` holds [`config::LaunchConfig`], the vocabulary every stage shares; `run` holds the
//! finished run (the one reader and writer of a run directory's results); `clock` is the time a
//! tune reads; `stats` holds paired comparisons and racing (the launch is the unit of evidence);
//! `compare` re-measures launch commands in interleaved rounds; `server_binary` finds, checks and builds the `llama-server` binary. `app` has one function per
//! subcommand: it wires the stages and prints. `cli` only parses and calls `app`.

pub mod app;
pub mod cli;
pub mod clock;
pub mod compare;
pub mod config;
pub mod escape;
pub mod fixtures;
pub mod hardware;
pub mod model;
pub mod placement;
pub mod plan;
pub mod profile;
pub mod quality;
pub mod report;
pub mod run;
pub mod search;
pub mod server_binary;
pub mod space;
pub mod stats;
pub mod trial;
pub mod util;
pub mod workloads;
