//! Shareable profiles (`profiles/*.yaml`): what a tune found on one box, for another box to
//! start from. A profile is data from strangers: only known keys and valid values pass.

use std::path::Path;

/// `qtune profile export DIR --out FILE`.
pub fn cmd_export(run_dir: &Path, out: &Path) -> anyhow::Result<()> {
    let _ = (run_dir, out);
    anyhow::bail!("qtune profile export is not implemented yet")
}

/// `qtune profile import FILE`: validate and copy into `profiles/`.
pub fn cmd_import(file: &Path) -> anyhow::Result<()> {
    let _ = file;
    anyhow::bail!("qtune profile import is not implemented yet")
}

/// `qtune profile list`.
pub fn cmd_list() -> anyhow::Result<()> {
    anyhow::bail!("qtune profile list is not implemented yet")
}

/// `qtune profile show NAME|FILE`.
pub fn cmd_show(name: &str) -> anyhow::Result<()> {
    let _ = name;
    anyhow::bail!("qtune profile show is not implemented yet")
}

/// `qtune plan --model M [--profile P]`: propose a config for this box without trials.
pub fn cmd_plan(
    model: &Path,
    profile: Option<&Path>,
    ctx: u32,
    headroom_mib: u64,
) -> anyhow::Result<()> {
    let _ = (model, profile, ctx, headroom_mib);
    anyhow::bail!("qtune plan is not implemented yet")
}
