//! `qtune compare`: prints what [`crate::compare::compare`] measured.

use crate::compare::{command_name, fmt_opt, render_text, CompareOptions, RESULT_FILE};
use anyhow::{bail, Result};

/// `qtune compare`: the comparison as text (or JSON) on stdout; progress on stderr.
pub fn compare(opts: CompareOptions) -> Result<()> {
    busy_check()?;
    let (result, dir) = crate::compare::compare(&opts, &mut |r, l| {
        eprintln!(
            "round {r}: {} tg {} pp {} t/s ({})",
            command_name(l.command),
            fmt_opt(l.gen_tps),
            fmt_opt(l.prompt_tps),
            crate::escape::terminal(&l.outcome)
        );
    })?;
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", crate::escape::terminal_lines(&render_text(&result)));
        println!(
            "results: {}",
            crate::escape::terminal_path(&dir.join(RESULT_FILE))
        );
    }
    if result
        .rounds
        .iter()
        .flat_map(|r| &r.launches)
        .all(|l| l.gen_tps.is_none())
    {
        bail!(
            "no launch measured anything; see the logs in {}",
            dir.join("logs").display()
        );
    }
    Ok(())
}

/// A busy box, named before it costs a comparison: stop where even one thread would get
/// under a quarter of a core (unless `QTUNE_ALLOW_BUSY=1`); else warn. The commands run as
/// typed (they are what is compared), so the warning says which `-t` fits.
fn busy_check() -> Result<()> {
    use crate::hardware::busy;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let b = busy::measure(busy::WINDOW, cores, &[]);
    if b.too_busy() && !busy::allow_busy_env() {
        bail!("{}", b.stop_message("set QTUNE_ALLOW_BUSY=1"));
    }
    if b.is_busy() {
        eprintln!(
            "qtune: warning: the box is busy: {}: each command runs as typed, and one with more threads than the {} free cores (llama-server's default is the physical cores) will collapse; add -t {} to compare at the free cores",
            b.describe(),
            b.free_cores(),
            b.free_cores()
        );
    }
    Ok(())
}
