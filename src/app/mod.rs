//! The app layer: one function per subcommand. Each wires the stages together and does the
//! printing; the stages only return values. `cli` parses and calls these.

pub mod compare;
pub mod engines;
pub mod info;
pub mod measure;
pub mod outcome;
pub mod plan_box;
pub mod preflight;
pub mod progress;
pub mod quality;
pub mod results;
pub mod rpc;
pub mod traffic;
pub mod tune;

/// How a command prints a structured value.
pub use crate::util::Format;
