//! `qtune compare`: prints what [`crate::compare::compare`] measured.

use crate::compare::{command_name, fmt_opt, render_text, CompareOptions, RESULT_FILE};
use anyhow::{bail, Result};

/// `qtune compare`: the comparison as text (or JSON) on stdout; progress on stderr.
pub fn compare(opts: CompareOptions) -> Result<()> {
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
