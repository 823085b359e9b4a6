//! The quality guard: what a KV cache type costs in accuracy, measured the way the community
//! does it (llama.cpp's `llama-perplexity`): the model's token distributions with an f16 KV cache
//! are the reference; each candidate KV type is scored against them by mean KL divergence, its
//! 99th percentile, and how often the most likely next token stays the same (same top-1 %).
//!
//! [`measure`] runs (or reuses from qtune's cache) one such comparison; [`floor`] turns a
//! search space's `quality:` floor into KV types the tune does not search. `cmd_quality` is
//! `qtune quality`.

use crate::config::KvType;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub mod against;
pub mod floor;
pub mod perplexity;
pub mod text;

pub use floor::QualityFloor;

/// Default bound on the logits file (the f16 reference's saved log-probabilities), MiB.
pub const DEFAULT_MAX_DISK_MIB: u64 = 4096;
/// Default tokens evaluated per run when `--chunks` is not given: chunks = this / ctx (at least 2).
pub const DEFAULT_TOKENS: u32 = 16_384;

/// One KV cache type's cost against the f16 reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvQuality {
    /// `[K, V]` cache types.
    pub kv: [KvType; 2],
    /// Mean KL divergence from the reference distribution, nats per token.
    pub mean_kld: f64,
    /// 99th percentile of the per-token KL divergence.
    pub kld_p99: f64,
    /// Tokens whose most likely next token is the reference's, percent.
    pub same_top1_pct: f64,
    /// PPL(candidate) / PPL(reference).
    #[serde(default)]
    pub ppl_ratio: Option<f64>,
}

impl KvQuality {
    /// `q8_0`, or `q8_0/f16` when K and V differ.
    pub fn label(&self) -> String {
        kv_label(self.kv)
    }
}

/// `q8_0`, or `q8_0/f16` when K and V differ.
pub fn kv_label(kv: [KvType; 2]) -> String {
    if kv[0] == kv[1] {
        kv[0].as_str().to_string()
    } else {
        format!("{}/{}", kv[0].as_str(), kv[1].as_str())
    }
}

/// A finished comparison: written to qtune's cache and carried into reports and profiles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualityReport {
    /// Identifies the model's weights: layout fingerprint, file size and a hash of sampled bytes.
    pub model_key: String,
    pub model_name: String,
    pub text: text::TextInfo,
    /// Context asked for.
    pub requested_ctx: u32,
    /// Context the chunks ran at (lower only when the text is too short for the one asked).
    pub ctx: u32,
    pub chunks: u32,
    /// Tokens scored per run (the second half of each chunk).
    pub tokens_scored: u64,
    /// Size of the reference's logits file (deleted after the run), bytes.
    pub logits_bytes: u64,
    /// Perplexity of the f16 reference on the text.
    pub reference_ppl: Option<f64>,
    pub candidates: Vec<KvQuality>,
    /// Wall time of the runs that produced these numbers, seconds.
    pub seconds: f64,
    pub measured_at: String,
}

impl QualityReport {
    pub fn get(&self, kv: [KvType; 2]) -> Option<&KvQuality> {
        self.candidates.iter().find(|c| c.kv == kv)
    }
}

/// What `qtune quality` (or a tune with a floor) asks for, free of clap.
#[derive(Debug, Clone)]
pub struct QualityOptions {
    pub model: PathBuf,
    /// None: the default text ([`text::default_text`]).
    pub text: Option<PathBuf>,
    /// Candidate `[K, V]` pairs; `[f16, f16]` is allowed (it measures the tool's own noise).
    pub kv: Vec<[KvType; 2]>,
    pub ctx: u32,
    /// None: [`DEFAULT_TOKENS`] / ctx, at least 2.
    pub chunks: Option<u32>,
    pub max_disk_mib: u64,
    pub perplexity: Option<PathBuf>,
    pub server: Option<PathBuf>,
    pub threads: Option<u32>,
}

impl QualityOptions {
    pub fn new(model: &Path, kv: Vec<[KvType; 2]>, ctx: u32) -> Self {
        QualityOptions {
            model: model.to_path_buf(),
            text: None,
            kv,
            ctx,
            chunks: None,
            max_disk_mib: DEFAULT_MAX_DISK_MIB,
            perplexity: None,
            server: None,
            threads: None,
        }
    }
}

/// Where a measurement came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Measured,
    Cached,
}

/// A synthetic random-weight model (written by `qtune synth`): its outputs are noise.
pub fn is_synthetic(g: &crate::model::gguf::GgufFile) -> bool {
    let flagged = matches!(
        g.get(crate::model::synth::SYNTHETIC_KEY),
        Some(crate::model::gguf::GgufValue::Bool(true))
    );
    flagged
        || g.get_str("general.name")
            .is_some_and(|n| n.contains("qtune synthetic"))
}

/// Identify the weights, not just the shape: the layout fingerprint, the file size, and a
/// SHA-256 of 1 MiB read at 16 evenly spaced offsets (a finetune of the same shape differs).
pub(crate) fn model_key(path: &Path, fingerprint: &str, file_bytes: u64) -> Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let (mut f, _) = crate::util::open_regular(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    for i in 0..16u64 {
        let at = file_bytes.saturating_sub(buf.len() as u64) * i / 15;
        f.seek(SeekFrom::Start(at))?;
        let n = f.read(&mut buf)?;
        h.update(&buf[..n]);
    }
    let sample: String = h
        .finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(format!("{fingerprint}-{file_bytes}-{sample}"))
}

fn cache_path(model_key: &str, text_sha: &str, ctx: u32, chunks: u32) -> PathBuf {
    crate::util::cache_dir()
        .join("quality")
        .join(format!("{model_key}-{text_sha}-c{ctx}-n{chunks}.json")) // not a server flag: a name
}

/// A cache entry is reused only when its numbers are ones a measurement gives ([`plausible`]):
/// one tampered or damaged is measured again, never shown nor carried into a tune.
fn load_cached(path: &Path) -> Option<QualityReport> {
    let r: QualityReport =
        serde_json::from_slice(&crate::util::read_bounded(path, 16 << 20).ok()?).ok()?;
    let ok = r.tokens_scored > 0
        && plausible_ppl(r.reference_ppl)
        && r.candidates.iter().all(|c| {
            plausible(c.mean_kld, c.kld_p99, c.same_top1_pct) && plausible_ratio(c.ppl_ratio)
        });
    ok.then_some(r)
}

/// Numbers a measurement gives: a KL divergence (mean and 99th percentile) finite and not
/// negative (past the rounding of a zero divergence, as f16 against f16 gives), a top-1 share
/// within 0-100 %.
pub(crate) fn plausible(mean_kld: f64, kld_p99: f64, same_top1_pct: f64) -> bool {
    let divergence = |d: f64| d.is_finite() && d >= -1e-4;
    divergence(mean_kld) && divergence(kld_p99) && (0.0..=100.0).contains(&same_top1_pct)
}

/// A perplexity, when there is one, is finite and at least 1.
pub(crate) fn plausible_ppl(p: Option<f64>) -> bool {
    p.is_none_or(|p| p.is_finite() && p >= 1.0)
}

/// A perplexity ratio, when there is one, is finite and positive.
pub(crate) fn plausible_ratio(p: Option<f64>) -> bool {
    p.is_none_or(|p| p.is_finite() && p > 0.0)
}

/// `--ctx` within the model's trained context and `--chunks` one llama-perplexity takes (a
/// 32-bit count, at least 1): refused in one line before anything runs.
pub(crate) fn check_ctx_chunks(ctx: u32, chunks: Option<u32>, ctx_train: u32) -> Result<()> {
    if ctx_train > 0 && ctx > ctx_train {
        bail!(
            "--ctx {ctx} is past the model's trained context of {ctx_train} tokens: give --ctx {ctx_train} or less"
        );
    }
    match chunks {
        Some(0) => bail!("--chunks 0 scores nothing: give 1 or more (or leave it out)"),
        Some(n) if n > i32::MAX as u32 => bail!(
            "--chunks {n} is more than llama-perplexity counts ({}): give fewer",
            i32::MAX
        ),
        _ => Ok(()),
    }
}

/// Chunks to ask for: the request (or the default), bounded by the disk the logits may take.
/// Errors when not even one chunk fits the bound.
pub fn plan_chunks(
    n_vocab: u32,
    ctx: u32,
    requested: Option<u32>,
    max_disk_mib: u64,
) -> Result<u32> {
    let want = requested
        .unwrap_or_else(|| (DEFAULT_TOKENS / ctx.max(1)).max(2))
        .max(1);
    let bound = max_disk_mib.saturating_mul(1 << 20);
    let one = perplexity::logits_file_bytes(n_vocab, ctx, 1);
    if one > bound {
        bail!(
            "one chunk of {ctx} tokens needs {} of logits for a {n_vocab}-token vocabulary, above the {} bound: raise --max-disk-mib or lower --ctx",
            crate::util::fmt_mib(one as f64 / 1048576.0),
            crate::util::fmt_mib(max_disk_mib as f64)
        );
    }
    let per_chunk = perplexity::logits_chunk_bytes(n_vocab, ctx);
    let fit = 1 + (bound - one) / per_chunk;
    Ok(want.min(fit.min(u64::from(u32::MAX)) as u32))
}

/// Remove the working directories of runs whose qtune is gone. Ctrl-C ends qtune in its signal
/// handler (see `trial::cleanup`), before any destructor runs, so a killed run's logits file is
/// deleted by the next run instead.
pub(crate) fn sweep_stale_work_dirs(quality_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(quality_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("work-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let alive = pid > 0 && unsafe { libc::kill(pid, 0) } == 0;
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Removes the working directory (logits file, logs) however the run ends.
pub(crate) struct WorkDir(pub PathBuf);

impl WorkDir {
    /// A new, empty, user-only folder at `path` (its name holds this process's id): whatever
    /// is already there is removed first (a folder left by an earlier process of the same id,
    /// or a link planted at the name: the link itself, never what it points to), and the
    /// folder is made with `mkdir`, which never follows a link. Its parent, in qtune's cache,
    /// may be a link the user made.
    pub(crate) fn create(path: PathBuf) -> Result<WorkDir> {
        use std::os::unix::fs::DirBuilderExt;
        let cannot = || format!("cannot create {}", path.display());
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(cannot)?;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path).with_context(cannot)?,
            Ok(_) => std::fs::remove_file(&path).with_context(cannot)?,
            Err(_) => {}
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(cannot)?;
        Ok(WorkDir(path))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One f16-KV reference run: the model whose token distributions the candidates are scored
/// against, and where its logits go.
pub(crate) struct Reference<'a> {
    pub binary: &'a Path,
    pub model: &'a Path,
    /// How the progress line and errors name it ("reference", "reference Q8_0.gguf").
    pub label: &'a str,
    pub text: &'a Path,
    pub n_vocab: u32,
    pub ctx: u32,
    /// Chunks planned for `ctx` ([`plan_chunks`]).
    pub chunks: u32,
    /// What the user asked for (`--chunks`), for a re-plan at a lower ctx.
    pub requested_chunks: Option<u32>,
    pub max_disk_mib: u64,
    pub threads: Option<u32>,
    pub work: &'a Path,
    pub logits: &'a Path,
}

/// Run the reference with f16 KV and save its logits; returns what the run said and the size
/// of the logits file (checked against the layout qtune expects). A text shorter than two
/// chunks at the asked ctx runs at the largest ctx it allows.
pub(crate) fn run_reference(
    r: &Reference,
    note: &mut dyn FnMut(String),
) -> Result<(perplexity::BaseOutput, u64)> {
    let mut ctx = r.ctx;
    let mut chunks_now = r.chunks;
    let base = loop {
        let bound = perplexity::logits_file_bytes(r.n_vocab, ctx, chunks_now);
        note(format!(
            "{}: f16 KV, ctx {ctx}, up to {chunks_now} chunks; its logits take at most {} on disk ({}), deleted after the run",
            r.label,
            crate::util::fmt_mib(bound as f64 / 1048576.0),
            r.logits.display()
        ));
        let args = perplexity::base_args(r.model, r.text, ctx, chunks_now, r.logits, r.threads);
        let (ok, out) = perplexity::run_logged(r.binary, &args, &r.work.join("reference.log"))?;
        match perplexity::parse_base(&out) {
            Some(perplexity::BaseParse::TooShort { tokens }) => {
                let fit = (tokens / 2) as u32 / 64 * 64;
                if fit < perplexity::MIN_CTX || fit >= ctx {
                    bail!(
                        "text {} is shorter than two chunks: it is {tokens} tokens, and llama-perplexity needs 2 x {} at least; give a longer text",
                        r.text.display(),
                        perplexity::MIN_CTX
                    );
                }
                note(format!(
                    "the text is {tokens} tokens: too short for two chunks of {ctx}; running at ctx {fit}, as close as it allows"
                ));
                ctx = fit;
                chunks_now = plan_chunks(r.n_vocab, ctx, r.requested_chunks, r.max_disk_mib)?;
            }
            Some(perplexity::BaseParse::Done(b)) if ok => break b,
            _ => bail!(
                "llama-perplexity failed on the f16 {}: {}",
                r.label,
                perplexity::failure_line(&out)
            ),
        }
    };
    let logits_bytes = std::fs::metadata(r.logits).map(|m| m.len()).unwrap_or(0);
    let expected = perplexity::logits_file_bytes(r.n_vocab, base.ctx, base.chunks);
    if logits_bytes != expected {
        bail!(
            "llama-perplexity wrote {logits_bytes} bytes of logits, not the {expected} qtune expects for {} chunks of {}: a different llama-perplexity build?",
            base.chunks,
            base.ctx
        );
    }
    Ok((base, logits_bytes))
}

/// Measure (or reuse) the candidates' quality. `note` receives progress lines for the user.
pub fn measure(
    opts: &QualityOptions,
    note: &mut dyn FnMut(String),
) -> Result<(QualityReport, Origin)> {
    if opts.kv.is_empty() {
        bail!("no KV cache type to measure: give --kv, e.g. --kv q8_0,q4_0");
    }
    if opts.ctx < perplexity::MIN_CTX {
        bail!(
            "--ctx {} is below {}: llama-perplexity scores the second half of each chunk and needs 100 tokens at least",
            opts.ctx,
            perplexity::MIN_CTX
        );
    }
    let g = crate::model::split::read_model(&opts.model)
        .with_context(|| format!("cannot read model {}", opts.model.display()))?;
    if is_synthetic(&g) {
        bail!(
            "{} is a synthetic random-weight model (written by qtune synth): its predictions are noise, so KV quality cannot be measured on it; use a real model",
            opts.model.display()
        );
    }
    let layout = crate::model::layout::from_gguf(&g)?;
    drop(g);
    check_ctx_chunks(opts.ctx, opts.chunks, layout.ctx_train)?;
    let text_path = match &opts.text {
        Some(p) => p.clone(),
        None => text::default_text()?,
    };
    let text = text::check(&text_path, opts.text.is_none().then_some(text::KJV_NAME))?;
    let key = model_key(&opts.model, &layout.fingerprint, layout.file_bytes)?;
    let chunks = plan_chunks(layout.n_vocab, opts.ctx, opts.chunks, opts.max_disk_mib)?;

    let cache_file = cache_path(&key, &text.sha256, opts.ctx, chunks);
    let cached = load_cached(&cache_file);
    let missing: Vec<[KvType; 2]> = {
        let mut m: Vec<[KvType; 2]> = Vec::new();
        for kv in &opts.kv {
            if cached.as_ref().and_then(|c| c.get(*kv)).is_none() && !m.contains(kv) {
                m.push(*kv);
            }
        }
        m
    };
    if let (Some(c), true) = (&cached, missing.is_empty()) {
        let mut c = c.clone();
        c.candidates.retain(|q| opts.kv.contains(&q.kv));
        return Ok((c, Origin::Cached));
    }

    let binary = perplexity::locate(opts.perplexity.as_deref(), opts.server.as_deref())?;
    sweep_stale_work_dirs(&crate::util::cache_dir().join("quality"));
    let work = WorkDir::create(crate::util::cache_dir().join("quality").join(format!(
        "work-{}-{}",
        std::process::id(),
        key
    )))?;
    let logits = work.0.join("reference.logits");
    let started = Instant::now();

    let (base, logits_bytes) = run_reference(
        &Reference {
            binary: &binary,
            model: &opts.model,
            label: "reference",
            text: &text.path,
            n_vocab: layout.n_vocab,
            ctx: opts.ctx,
            chunks,
            requested_chunks: opts.chunks,
            max_disk_mib: opts.max_disk_mib,
            threads: opts.threads,
            work: &work.0,
            logits: &logits,
        },
        note,
    )?;
    // Keep what an earlier run with the same inputs measured for other KV types.
    let mut report = cached.unwrap_or(QualityReport {
        model_key: key.clone(),
        model_name: layout
            .name
            .clone()
            .unwrap_or_else(|| opts.model.display().to_string()),
        text: text.clone(),
        requested_ctx: opts.ctx,
        ctx: base.ctx,
        chunks: base.chunks,
        tokens_scored: u64::from(base.chunks) * perplexity::scored_per_chunk(base.ctx),
        logits_bytes,
        reference_ppl: base.ppl,
        candidates: Vec::new(),
        seconds: 0.0,
        measured_at: String::new(),
    });
    if report.ctx != base.ctx || report.chunks != base.chunks {
        report.candidates.clear();
        report.ctx = base.ctx;
        report.chunks = base.chunks;
        report.tokens_scored = u64::from(base.chunks) * perplexity::scored_per_chunk(base.ctx);
    }
    report.logits_bytes = logits_bytes;
    report.reference_ppl = base.ppl;
    for kv in &missing {
        note(format!(
            "candidate {}: scoring {} chunks against the reference",
            kv_label(*kv),
            base.chunks
        ));
        let args = perplexity::candidate_args(&opts.model, base.ctx, *kv, &logits, opts.threads);
        let log = work
            .0
            .join(format!("{}.log", kv_label(*kv).replace('/', "-")));
        let (ok, out) = perplexity::run_logged(&binary, &args, &log)?;
        let k = match perplexity::parse_kld(&out) {
            Some(k) if ok => k,
            _ => bail!(
                "llama-perplexity failed on KV {}: {}",
                kv_label(*kv),
                perplexity::failure_line(&out)
            ),
        };
        report.candidates.retain(|c| c.kv != *kv);
        report.candidates.push(KvQuality {
            kv: *kv,
            mean_kld: k.mean_kld,
            kld_p99: k.kld_p99,
            same_top1_pct: k.same_top1_pct,
            ppl_ratio: k.ppl_ratio,
        });
    }
    report.seconds = started.elapsed().as_secs_f64();
    report.measured_at = chrono::Local::now().to_rfc3339();
    crate::util::write_atomic(
        &cache_file,
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    let mut shown = report.clone();
    shown.candidates.retain(|q| opts.kv.contains(&q.kv));
    shown
        .candidates
        .sort_by_key(|q| opts.kv.iter().position(|k| *k == q.kv));
    Ok((shown, Origin::Measured))
}

/// What a measurement scored, for the first line of its table: the text, the context (and
/// what was asked, where the text allows less), the chunks and tokens scored.
pub(crate) fn scored(
    t: &text::TextInfo,
    ctx: u32,
    requested_ctx: u32,
    chunks: u32,
    tokens: u64,
) -> String {
    format!(
        "text {} ({} bytes, sha256 {}) · ctx {ctx}{} · {chunks} chunks, {tokens} tokens scored",
        t.name,
        t.bytes,
        t.sha256,
        if ctx != requested_ctx {
            format!(" (asked {requested_ctx}: the text allows no more)")
        } else {
            String::new()
        },
    )
}

/// A perplexity for a table: 4 decimals, or `?` where llama-perplexity printed none.
pub(crate) fn ppl(p: Option<f64>) -> String {
    p.map(|p| format!("{p:.4}")).unwrap_or_else(|| "?".into())
}

/// The table `qtune quality` prints.
pub fn table(r: &QualityReport) -> String {
    let mut s = format!(
        "{} · {} · f16 reference PPL {}\n",
        r.model_name,
        scored(&r.text, r.ctx, r.requested_ctx, r.chunks, r.tokens_scored),
        ppl(r.reference_ppl)
    );
    s.push_str(&format!(
        "{:<12} {:>12} {:>12} {:>12} {:>10}\n",
        "KV (K/V)", "mean KLD", "KLD p99", "same top-1", "PPL ratio"
    ));
    for c in &r.candidates {
        s.push_str(&format!(
            "{:<12} {:>12.6} {:>12.6} {:>11.3}% {:>10}\n",
            c.label(),
            c.mean_kld,
            c.kld_p99,
            c.same_top1_pct,
            c.ppl_ratio
                .map(|p| format!("{p:.5}"))
                .unwrap_or_else(|| "?".into())
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_bounded_by_disk() {
        // SmolLM2 at ctx 512: 25 MB a chunk; a 100 MiB bound allows 4.
        assert_eq!(plan_chunks(49_152, 512, Some(64), 100).unwrap(), 4);
        assert_eq!(plan_chunks(49_152, 512, None, 4096).unwrap(), 32);
        assert_eq!(plan_chunks(49_152, 16_384, None, 4096).unwrap(), 2);
        // A 248k vocabulary at 32k context: one chunk is 7.6 GiB, above a 4 GiB bound.
        let e = plan_chunks(248_320, 32_768, None, 4096)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--max-disk-mib"), "{e}");
    }

    #[test]
    fn stale_work_dirs_are_swept_live_ones_kept() {
        let d = tempfile::tempdir().unwrap();
        let dead = d.path().join("work-999999999-abc");
        let live = d.path().join(format!("work-{}-abc", std::process::id()));
        let result = d.path().join("abc-c512-n8.json");
        std::fs::create_dir_all(&dead).unwrap();
        std::fs::create_dir_all(&live).unwrap();
        std::fs::write(dead.join("reference.logits"), b"x").unwrap();
        std::fs::write(&result, b"{}").unwrap();
        sweep_stale_work_dirs(d.path());
        assert!(!dead.exists() && live.exists() && result.exists());
    }

    /// The working folder holds the reference's logits (gigabytes) and the runs' logs: a link
    /// planted at its name in the cache (`work-<pid>-<key> -> ~/somewhere`) is not followed;
    /// a real folder of its own takes the name, and the link's folder is left as it was.
    #[test]
    fn the_work_folder_is_created_fresh_never_through_a_planted_link() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("mine"), b"keep").unwrap();
        let path = d.path().join(format!("work-{}-abc", std::process::id()));
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let work = WorkDir::create(path.clone()).unwrap();
        assert!(std::fs::symlink_metadata(&path).unwrap().is_dir());
        std::fs::write(path.join("reference.logits"), b"x").unwrap();
        drop(work);
        assert!(!path.exists());
        let left: Vec<_> = std::fs::read_dir(&elsewhere)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["mine"]);
    }

    /// A cache entry whose numbers no measurement gives was not written by qtune: it is
    /// measured again, never shown nor carried into a tune's floor.
    #[test]
    fn an_impossible_cache_entry_is_never_reused() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("entry.json");
        let good = QualityReport {
            model_key: "k".into(),
            model_name: "m".into(),
            text: text::TextInfo {
                name: "t".into(),
                path: "/t".into(),
                bytes: 1000,
                sha256: "00".into(),
            },
            requested_ctx: 512,
            ctx: 512,
            chunks: 2,
            tokens_scored: 512,
            logits_bytes: 1,
            reference_ppl: Some(12.0),
            candidates: vec![KvQuality {
                kv: [KvType::Q8_0, KvType::Q8_0],
                mean_kld: 0.001,
                kld_p99: 0.01,
                same_top1_pct: 99.0,
                ppl_ratio: Some(1.001),
            }],
            seconds: 1.0,
            measured_at: "now".into(),
        };
        let reused = |r: &QualityReport| {
            std::fs::write(&path, serde_json::to_vec(r).unwrap()).unwrap();
            load_cached(&path).is_some()
        };
        assert!(reused(&good));
        let tampered: [fn(&mut QualityReport); 6] = [
            |r| r.candidates[0].mean_kld = -0.5,
            |r| r.candidates[0].kld_p99 = f64::NAN,
            |r| r.candidates[0].same_top1_pct = 150.0,
            |r| r.candidates[0].ppl_ratio = Some(0.0),
            |r| r.reference_ppl = Some(0.5),
            |r| r.tokens_scored = 0,
        ];
        for (i, t) in tampered.iter().enumerate() {
            let mut r = good.clone();
            t(&mut r);
            assert!(!reused(&r), "tampering {i} was reused");
        }
    }

    #[test]
    fn labels() {
        assert_eq!(kv_label([KvType::Q8_0, KvType::Q8_0]), "q8_0");
        assert_eq!(kv_label([KvType::Q8_0, KvType::F16]), "q8_0/f16");
    }
}
