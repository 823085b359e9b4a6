//! `qtune quality`: measure what each KV cache type costs in accuracy against f16, and print it.

use crate::quality::{measure, table, Origin, QualityOptions};
use anyhow::Result;
use std::time::Instant;

pub fn quality(mut opts: QualityOptions, json: bool) -> Result<()> {
    let t0 = Instant::now();
    // A box shared by design (QTUNE_MAX_THREADS, as for a tune's launches): llama-perplexity's
    // default threads are every core.
    if opts.threads.is_none() {
        opts.threads = crate::hardware::busy::max_threads_env().map_err(|e| anyhow::anyhow!(e))?;
    }
    let (report, origin) = measure(&opts, &mut |line| eprintln!("qtune: {line}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print!("{}", table(&report));
    match origin {
        Origin::Cached => eprintln!(
            "qtune: from the cache (measured {} in {:.0} s); logits were {}",
            report.measured_at,
            report.seconds,
            crate::util::fmt_mib(report.logits_bytes as f64 / 1048576.0)
        ),
        Origin::Measured => eprintln!(
            "qtune: measured in {:.0} s; the reference's logits took {} on disk and are deleted",
            t0.elapsed().as_secs_f64(),
            crate::util::fmt_mib(report.logits_bytes as f64 / 1048576.0)
        ),
    }
    Ok(())
}
