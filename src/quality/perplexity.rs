//! The pinned `llama-perplexity`: where it is, the command lines qtune gives it, how long its
//! logits file gets, and what its output says.
//!
//! Facts from `tools/perplexity/perplexity.cpp` (llama.cpp b11434) that this file relies on:
//! - It scores the second half of each chunk of `-c` tokens, and refuses (exit 0, no result) a
//!   text with fewer than `2 * ctx` tokens: "you need at least N tokens ... tokenizes to only M".
//! - `--kl-divergence-base FILE` writes `_logits_`, n_ctx, n_vocab, n_chunk (4 bytes each
//!   after the 8-byte magic), the chunk tokens (4 bytes each), then per chunk
//!   `(ctx - 1 - ctx/2) * nv` u16 log-probabilities with `nv = 2*((n_vocab+1)/2) + 4`.
//! - `--kl-divergence` prints its statistics only when at least 100 tokens were scored.
//! - `-b` must be below `-c` or a multiple of it (a GGML_ASSERT otherwise).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Smallest context qtune measures at: 127 scored tokens per chunk, above the tool's 100.
pub const MIN_CTX: u32 = 256;

/// Bytes of the logits file `--kl-divergence-base` writes for `chunks` chunks of `ctx` tokens.
pub fn logits_file_bytes(n_vocab: u32, ctx: u32, chunks: u32) -> u64 {
    let nv = row_len(n_vocab);
    let header = 8 + 4 + 4 + 4 + u64::from(chunks) * u64::from(ctx) * 4;
    header + u64::from(chunks) * logits_chunk_bytes_nv(nv, ctx)
}

/// Bytes of one chunk's log-probabilities in the logits file.
pub fn logits_chunk_bytes(n_vocab: u32, ctx: u32) -> u64 {
    let nv = row_len(n_vocab);
    logits_chunk_bytes_nv(nv, ctx) + u64::from(ctx) * 4
}

/// u16 values per scored token: the vocabulary rounded up to even, plus 4 (scale and minimum,
/// two f32), as `nv = 2*((n_vocab + 1)/2) + 4` in perplexity.cpp.
fn row_len(n_vocab: u32) -> u64 {
    2 * u64::from(n_vocab).div_ceil(2) + 4
}

fn logits_chunk_bytes_nv(nv: u64, ctx: u32) -> u64 {
    let scored = u64::from(ctx) - 1 - u64::from(ctx) / 2;
    scored * nv * 2
}

/// Tokens scored per chunk (the second half, less the last token).
pub fn scored_per_chunk(ctx: u32) -> u64 {
    u64::from(ctx) - 1 - u64::from(ctx) / 2
}

/// Find `llama-perplexity`: `explicit`, else `$QTUNE_LLAMA_PERPLEXITY`, else next to the
/// llama-server qtune would use (`qtune server build` puts both in one `bin/`).
pub fn locate(explicit: Option<&Path>, server: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return check_file(p, "--perplexity");
    }
    if let Some(p) = std::env::var_os("QTUNE_LLAMA_PERPLEXITY").filter(|p| !p.is_empty()) {
        return check_file(Path::new(&p), "QTUNE_LLAMA_PERPLEXITY");
    }
    let (server_path, _) = crate::engine::binary::locate(server).with_context(|| {
        format!(
            "llama-perplexity not found: no llama-server to look beside (looked at --server, QTUNE_LLAMA_SERVER, PATH and {}); run 'qtune server build', or pass --perplexity PATH",
            crate::engine::binary::llama_cpp_dir().display()
        )
    })?;
    let sibling = server_path
        .parent()
        .map(|d| d.join("llama-perplexity"))
        .unwrap_or_else(|| PathBuf::from("llama-perplexity"));
    if sibling.is_file() {
        return Ok(sibling);
    }
    bail!(
        "llama-perplexity not found next to {} ; run 'qtune server build' (it builds both), or pass --perplexity PATH",
        server_path.display()
    )
}

fn check_file(p: &Path, from: &str) -> Result<PathBuf> {
    if p.is_file() {
        Ok(p.to_path_buf())
    } else {
        bail!(
            "llama-perplexity not found at {} (from {from}); run 'qtune server build', or pass --perplexity PATH",
            p.display()
        )
    }
}

/// `-b` for a context: the whole chunk in one batch up to 2048, else 2048 (divides nothing
/// wrongly: below ctx).
pub fn batch_for(ctx: u32) -> u32 {
    ctx.min(2048)
}

/// Arguments shared by the reference and the candidates ([`crate::engine::llama_cpp::perplexity_args`]):
/// same context, batch and attention path, so the KV cache type is the only difference.
fn common_args(
    model: &Path,
    ctx: u32,
    kv: [crate::config::KvType; 2],
    threads: Option<u32>,
) -> Vec<String> {
    crate::engine::llama_cpp::perplexity_args(model, ctx, batch_for(ctx), kv, threads)
}

/// The reference run: f16 KV, saves the log-probabilities to `logits`.
pub fn base_args(
    model: &Path,
    text: &Path,
    ctx: u32,
    chunks: u32,
    logits: &Path,
    threads: Option<u32>,
) -> Vec<String> {
    use crate::config::KvType::F16;
    let mut a = common_args(model, ctx, [F16, F16], threads);
    a.extend([
        "-f".into(),
        text.display().to_string(),
        "--chunks".into(),
        chunks.to_string(),
        "--kl-divergence-base".into(),
        logits.display().to_string(),
    ]);
    a
}

/// A candidate run: scores against the saved reference.
pub fn candidate_args(
    model: &Path,
    ctx: u32,
    kv: [crate::config::KvType; 2],
    logits: &Path,
    threads: Option<u32>,
) -> Vec<String> {
    let mut a = common_args(model, ctx, kv, threads);
    a.extend([
        "--kl-divergence-base".into(),
        logits.display().to_string(),
        "--kl-divergence".into(),
    ]);
    a
}

/// Run `program args`, stdout and stderr into `log`; returns (exit ok, the log's text).
/// Its own process group, killed with qtune (PDEATHSIG) and on Ctrl-C.
pub fn run_logged(program: &Path, args: &[String], log: &Path) -> Result<(bool, String)> {
    let file = crate::util::create_fresh(log)?;
    let mut cmd = crate::trial::process::llama_command(program, args);
    cmd.stdout(file.try_clone()?).stderr(file);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", program.display()))?;
    let pgid = child.id() as i32;
    crate::trial::cleanup::register(pgid);
    let started = std::time::Instant::now();
    let mut said = started;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        // A run takes minutes: every 15 s, how far it is (issue 52: nothing was printed).
        if said.elapsed() >= PROGRESS_EVERY {
            said = std::time::Instant::now();
            let text =
                String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default()).into_owned();
            if let Some(line) = progress_line(&text, started.elapsed().as_secs_f64()) {
                eprintln!("qtune quality: {line}");
            }
        }
        if let Some(signal) = crate::trial::cleanup::interrupted() {
            // SAFETY: signalling the group we created.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
            let _ = child.wait();
            crate::trial::cleanup::unregister(pgid);
            return Err(crate::trial::cleanup::Interrupted { signal }.into());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    crate::trial::cleanup::unregister(pgid);
    let text = String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default()).into_owned();
    Ok((status.success(), text))
}

/// How often a running llama-perplexity's progress is said.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// How far a llama-perplexity run is, from its output so far: "chunk 12 of 40 (30 %), 1m20s so
/// far, about 3m07s left". None before it has said how many chunks it scores.
pub fn progress_line(out: &str, elapsed_s: f64) -> Option<String> {
    let total: u32 = out
        .lines()
        .find_map(|l| {
            l.split_once(" over ")?
                .1
                .split_once(" chunks")?
                .0
                .trim()
                .parse()
                .ok()
        })
        .filter(|n: &u32| *n > 0)?;
    // Perplexity runs print "[k]ppl," per chunk; KL-divergence runs a table row per chunk that
    // starts with its number.
    let mut done = 0u32;
    for l in out.lines() {
        for part in l.split('[').skip(1) {
            if let Some(k) = part
                .split_once(']')
                .and_then(|(k, _)| k.parse::<u32>().ok())
            {
                done = done.max(k);
            }
        }
        let t = l.trim_start();
        let lead: String = t.chars().take_while(char::is_ascii_digit).collect();
        if !lead.is_empty() && t[lead.len()..].starts_with(char::is_whitespace) && l.len() > 20 {
            if let Ok(k) = lead.parse::<u32>() {
                done = done.max(k);
            }
        }
    }
    let done = done.min(total);
    let so_far = crate::util::duration_text(elapsed_s);
    if done == 0 {
        return Some(format!(
            "0 of {total} chunks, {so_far} so far (loading the model)"
        ));
    }
    let left = elapsed_s / f64::from(done) * f64::from(total - done);
    Some(format!(
        "chunk {done} of {total} ({} %), {so_far} so far, about {} left",
        done * 100 / total,
        crate::util::duration_text(left)
    ))
}

/// What the reference run said.
#[derive(Debug, Clone, PartialEq)]
pub struct BaseOutput {
    pub chunks: u32,
    pub ctx: u32,
    pub ppl: Option<f64>,
}

/// A reference run's outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum BaseParse {
    Done(BaseOutput),
    /// The text has fewer than `2 * ctx` tokens: it has `tokens`.
    TooShort {
        tokens: u64,
    },
}

/// Parse the reference run's output.
pub fn parse_base(out: &str) -> Option<BaseParse> {
    if let Some(line) = out.lines().find(|l| l.contains("tokenizes to only")) {
        let tokens = line
            .split("tokenizes to only")
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        return Some(BaseParse::TooShort { tokens });
    }
    let line = out
        .lines()
        .find(|l| l.contains("calculating perplexity over"))?;
    let chunks = line
        .split("over ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let ctx = line
        .split("n_ctx=")
        .nth(1)?
        .split(',')
        .next()?
        .trim()
        .parse()
        .ok()?;
    let ppl = out
        .lines()
        .find_map(|l| l.split("Final estimate: PPL = ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok());
    Some(BaseParse::Done(BaseOutput { chunks, ctx, ppl }))
}

/// What a candidate run said.
#[derive(Debug, Clone, PartialEq)]
pub struct KldOutput {
    pub mean_kld: f64,
    pub kld_p99: f64,
    pub same_top1_pct: f64,
    /// Mean PPL(Q)/PPL(base).
    pub ppl_ratio: Option<f64>,
    /// The scored model's own perplexity on the text ("Mean PPL(Q)").
    pub ppl: Option<f64>,
}

fn value_after(out: &str, label: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .and_then(|r| r.trim_start_matches([':', ' ']).split_whitespace().next())
        .and_then(|v| v.trim_end_matches('%').parse().ok())
}

/// The value on the line `label   : value ...` (the label alone before the colon, so
/// "Mean PPL(Q)" does not read "Mean PPL(Q)/PPL(base)").
fn value_of(out: &str, label: &str) -> Option<f64> {
    out.lines()
        .filter_map(|l| l.trim_start().strip_prefix(label))
        .find_map(|r| r.trim_start().strip_prefix(':'))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Parse a `--kl-divergence` run's closing statistics.
pub fn parse_kld(out: &str) -> Option<KldOutput> {
    let mean_kld = value_after(out, "Mean    KLD")?;
    let kld_p99 = value_after(out, "99.0%   KLD")?;
    let same_top1_pct = value_after(out, "Same top p")?;
    let ppl_ratio = value_after(out, "Mean PPL(Q)/PPL(base)");
    let ppl = value_of(out, "Mean PPL(Q)").filter(|p| p.is_finite());
    [mean_kld, kld_p99, same_top1_pct]
        .iter()
        .all(|v| v.is_finite())
        .then_some(KldOutput {
            mean_kld,
            kld_p99,
            same_top1_pct,
            ppl_ratio,
            ppl,
        })
}

/// The most telling line of a failed run, for a one-line error.
pub fn failure_line(out: &str) -> String {
    let lines: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .rev()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("error")
                || l.contains("failed")
                || l.contains("unable")
                || l.contains("abort")
        })
        .or(lines.last())
        .map(|l| l.to_string())
        .unwrap_or_else(|| "no output".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logits_size_matches_the_tool_layout() {
        // SmolLM2: 49,152 tokens; ctx 512 scores 255 tokens per chunk of 49,156 u16 each.
        assert_eq!(
            logits_file_bytes(49_152, 512, 2),
            20 + 2 * 512 * 4 + 2 * 255 * 49_156 * 2
        );
        // The seeds' 248k vocabulary at 512 x 80 chunks: about 9.4 GiB of log-probs.
        let gib = logits_file_bytes(248_320, 512, 80) as f64 / (1u64 << 30) as f64;
        assert!((9.0..10.0).contains(&gib), "{gib}");
    }

    #[test]
    fn parses_the_reference_run() {
        let out = "perplexity: calculating perplexity over 4 chunks, n_ctx=512, batch_size=512, n_seq=1\n[1]8.1,[2]9.2,\nFinal estimate: PPL = 9.1234 +/- 0.51\n";
        assert_eq!(
            parse_base(out),
            Some(BaseParse::Done(BaseOutput {
                chunks: 4,
                ctx: 512,
                ppl: Some(9.1234)
            }))
        );
        let short = "perplexity: you need at least 1024 tokens to evaluate perplexity with a context of 512\nperplexity: the data file you provided tokenizes to only 301 tokens\n";
        assert_eq!(parse_base(short), Some(BaseParse::TooShort { tokens: 301 }));
    }

    #[test]
    fn parses_the_kl_statistics() {
        let out = "Mean PPL(Q)                   :  12.345678 ±   0.500000\nMean PPL(Q)/PPL(base)         :   1.002301 ±   0.000811\n====== KL divergence statistics ======\nMean    KLD:   0.001234 ±   0.000100\nMaximum KLD:   0.300000\n99.9%   KLD:   0.100000\n99.0%   KLD:   0.012345\nSame top p: 98.765 ± 0.123 %\n";
        let k = parse_kld(out).unwrap();
        assert_eq!(k.mean_kld, 0.001234);
        assert_eq!(k.kld_p99, 0.012345);
        assert_eq!(k.same_top1_pct, 98.765);
        assert_eq!(k.ppl_ratio, Some(1.002301));
        assert_eq!(k.ppl, Some(12.345678));
        assert_eq!(parse_kld("perplexity: failed to decode\n"), None);
    }

    #[test]
    fn progress_is_read_from_the_output_so_far() {
        assert_eq!(progress_line("loading model\n", 20.0), None);
        let ppl = "perplexity: calculating perplexity over 40 chunks, n_ctx=512, batch_size=512, n_seq=1\n\
                   perplexity: 2.10 seconds per pass - ETA 1.40 minutes\n[1]12.5,[2]11.9,[3]11.2,";
        assert_eq!(
            progress_line(ppl, 30.0).unwrap(),
            "chunk 3 of 40 (7 %), 30s so far, about 6m10s left"
        );
        let kld = "kl_divergence: calculating KL divergence over 8 chunks\n\
                   chunk             PPL          ln(PPL(Q)/PPL(base))\n   1       12.3456 ±    1.2345       0.01234 ±    0.00123\n   2       12.1 ±  1.1   0.01 ±  0.001\n";
        assert!(progress_line(kld, 10.0)
            .unwrap()
            .starts_with("chunk 2 of 8 (25 %)"));
        assert!(
            progress_line("kl: computing over 5 chunks, n_ctx=512\n", 3.0)
                .unwrap()
                .starts_with("0 of 5 chunks")
        );
    }

    #[test]
    fn batch_never_trips_the_tool_assert() {
        for ctx in [256, 768, 1000, 2048, 3000, 32768] {
            let b = batch_for(ctx);
            assert!(b < ctx || b % ctx == 0, "ctx {ctx} b {b}");
        }
    }
}
