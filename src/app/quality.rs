//! `qtune quality`: measure what each KV cache type costs in accuracy against f16, or what
//! each quantization costs against a reference file (`--against`), and print it.

use crate::escape::{terminal, terminal_lines};
use crate::quality::against::AgainstOptions;
use crate::quality::{measure, table, Origin, QualityOptions};
use anyhow::Result;
use std::time::Instant;

/// A box shared by design (QTUNE_MAX_THREADS, as for a tune's launches): llama-perplexity's
/// default threads are every core.
fn threads(given: Option<u32>) -> Result<Option<u32>> {
    match given {
        Some(t) => Ok(Some(t)),
        None => crate::hardware::busy::max_threads_env().map_err(|e| anyhow::anyhow!(e)),
    }
}

/// A progress line for the user: file names and model names are text from outside.
fn note(line: String) {
    eprintln!("qtune: {}", terminal(&line));
}

pub fn quality(mut opts: QualityOptions, json: bool) -> Result<()> {
    let t0 = Instant::now();
    opts.threads = threads(opts.threads)?;
    let (report, origin) = measure(&opts, &mut note)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print!("{}", terminal_lines(&table(&report)));
    match origin {
        Origin::Cached => eprintln!(
            "qtune: from the cache (measured {} in {:.0} s); logits were {}",
            terminal(&report.measured_at),
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

/// `qtune quality -m A.gguf [-m B.gguf] --against REF.gguf`.
pub fn against(mut opts: AgainstOptions, json: bool) -> Result<()> {
    let t0 = Instant::now();
    opts.threads = threads(opts.threads)?;
    let (report, origin) = crate::quality::against::measure(&opts, &mut note)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print!(
        "{}",
        terminal_lines(&crate::quality::against::table(&report))
    );
    match origin {
        Origin::Cached => eprintln!(
            "qtune: from the cache (measured {}); `qtune plan -m FILE` cites it",
            report
                .quants
                .first()
                .map_or(String::new(), |q| terminal(&q.measured_at))
        ),
        Origin::Measured => eprintln!(
            "qtune: measured in {:.0} s; the reference's logits took {} on disk and are deleted; `qtune plan -m FILE` cites the result",
            t0.elapsed().as_secs_f64(),
            crate::util::fmt_mib(report.logits_bytes as f64 / 1048576.0)
        ),
    }
    Ok(())
}
