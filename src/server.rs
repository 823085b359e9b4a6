//! The `llama-server` binary: find it, check it has the flags qtune passes, build it from the
//! pinned llama.cpp source into qtune's cache.

use std::path::PathBuf;

pub fn cmd_path(explicit: Option<PathBuf>) -> anyhow::Result<()> {
    let _ = explicit;
    anyhow::bail!("not implemented yet")
}
pub fn cmd_check(explicit: Option<PathBuf>) -> anyhow::Result<()> {
    let _ = explicit;
    anyhow::bail!("not implemented yet")
}
pub fn cmd_build(cuda: bool) -> anyhow::Result<()> {
    let _ = cuda;
    anyhow::bail!("not implemented yet")
}
