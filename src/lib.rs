//! qtune: tunes `llama-server` launch flags for Mixture-of-Experts GGUF models.
//!
//! Data flows one way through the stages:
//! `hardware` → `model` → `space` → `search` → `trial` → `report` / `profile`.
//! `config` holds [`config::LaunchConfig`], the vocabulary every stage shares;
//! `stats` holds paired comparisons and racing (the launch is the unit of evidence);
//! `server` finds, checks and builds the `llama-server` binary; `cli` only parses and dispatches.

pub mod cli;
pub mod compare;
pub mod config;
pub mod fixtures;
pub mod hardware;
pub mod model;
pub mod profile;
pub mod report;
pub mod search;
pub mod server;
pub mod space;
pub mod stats;
pub mod trial;
pub mod util;
