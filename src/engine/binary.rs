//! The server binaries, as the later stages use them: the engine-neutral check
//! ([`super::server`]), llama.cpp's places, build and pinned release (the default engine's,
//! re-exported here under their old `server_binary` names), and ik_llama.cpp's as [`ik`]. An
//! engine's own code lives in its folder; this module only names it.

pub use super::ik_llama::server as ik;
pub use super::llama_cpp::auto::{self, resolve_or_build};
pub use super::llama_cpp::server::*;
pub use super::server::*;
