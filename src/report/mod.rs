//! What the user takes away from a tune: the Markdown report with Pareto plots, the launch
//! script, all written into the run directory.

use std::path::Path;

/// Write (or re-write) the report, plots and launch script for a finished tune.
pub fn write_all(run_dir: &Path, result: &crate::search::TuneResult) -> anyhow::Result<()> {
    let _ = (run_dir, result);
    Ok(())
}

/// `qtune report DIR`: re-render the report of a run directory.
pub fn cmd_report(dir: &Path) -> anyhow::Result<()> {
    let _ = dir;
    anyhow::bail!("qtune report is not implemented yet")
}

/// `qtune script --from DIR`: write a launch script (and optionally a systemd unit).
pub fn cmd_script(
    from: &Path,
    out: &Path,
    host: &str,
    port: u16,
    systemd: bool,
) -> anyhow::Result<()> {
    let _ = (from, out, host, port, systemd);
    anyhow::bail!("qtune script is not implemented yet")
}

pub mod pareto;
