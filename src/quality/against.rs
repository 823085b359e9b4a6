//! What a quantization costs against a reference file of the same model (`qtune quality -m
//! Q4_K_M.gguf --against Q8_0.gguf`), the way the community measures it: the reference's token
//! distributions with an f16 KV cache are saved once (`--kl-divergence-base`), then each quant
//! is scored against them (`--kl-divergence`, f16 KV too, so the weights are the only
//! difference): mean KL divergence, its 99th percentile, same top-1 %, and each file's
//! perplexity on the text.
//!
//! Each quant's result is cached on its own, keyed by both files, the text, ctx and chunks
//! (`<cache>/quality/against/<quant key>/<reference key>-<text>-c<ctx>-n<chunks>.json`), so
//! `qtune plan -m Q4_K_M.gguf` can cite it without running anything ([`measured_for`]).

use super::{perplexity, plan_chunks, text, Origin};
use crate::config::KvType;
use crate::model::gguf::GgufFile;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What `qtune quality -m A.gguf [-m B.gguf] --against REF.gguf` asks for, free of clap.
#[derive(Debug, Clone)]
pub struct AgainstOptions {
    /// The quantizations to score.
    pub models: Vec<PathBuf>,
    /// The file they are scored against (usually Q8_0 or BF16 of the same model).
    pub reference: PathBuf,
    pub text: Option<PathBuf>,
    pub ctx: u32,
    pub chunks: Option<u32>,
    pub max_disk_mib: u64,
    pub perplexity: Option<PathBuf>,
    pub server: Option<PathBuf>,
    pub threads: Option<u32>,
}

/// One quantization scored against the reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantScore {
    /// Identifies its weights (see [`super::model_key`]).
    pub model_key: String,
    /// The file's name, as given.
    pub file: String,
    /// `general.file_type` as llama.cpp names it ("Q4_K_M"), when the header says.
    pub file_type: Option<String>,
    /// Mean KL divergence from the reference's token distributions, nats per token.
    pub mean_kld: f64,
    /// 99th percentile of the per-token KL divergence.
    pub kld_p99: f64,
    /// Tokens whose most likely next token is the reference's, percent.
    pub same_top1_pct: f64,
    /// Its perplexity on the text.
    pub ppl: Option<f64>,
    /// PPL(quant) / PPL(reference).
    pub ppl_ratio: Option<f64>,
    pub measured_at: String,
}

impl QuantScore {
    /// "Q4_0 (copy-q4_0.gguf)", or the file name alone.
    pub fn label(&self) -> String {
        match &self.file_type {
            Some(t) => format!("{t} ({})", self.file),
            None => self.file.clone(),
        }
    }
}

/// A comparison of one or more quantizations with one reference file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgainstReport {
    pub reference_key: String,
    /// The reference file's name, as given.
    pub reference_file: String,
    pub reference_file_type: Option<String>,
    pub model_name: String,
    pub text: text::TextInfo,
    /// KV cache type of every run: f16, so the weights are the only difference.
    pub kv: [KvType; 2],
    pub requested_ctx: u32,
    /// Context the chunks ran at (lower only when the text is too short for the one asked).
    pub ctx: u32,
    pub chunks: u32,
    /// Tokens scored per run (the second half of each chunk).
    pub tokens_scored: u64,
    /// Size of the reference's logits file (deleted after the run), bytes.
    pub logits_bytes: u64,
    /// Perplexity of the reference on the text.
    pub reference_ppl: Option<f64>,
    pub quants: Vec<QuantScore>,
    /// Wall time of the runs that produced these numbers, seconds.
    pub seconds: f64,
}

impl AgainstReport {
    /// "Q8_0 (SmolLM2-Q8_0.gguf)", or the file name alone.
    pub fn reference_label(&self) -> String {
        match &self.reference_file_type {
            Some(t) => format!("{t} ({})", self.reference_file),
            None => self.reference_file.clone(),
        }
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
}

/// The tokenizer facts two files must share for their token distributions to be compared.
#[derive(Debug, PartialEq)]
struct Vocab {
    n_vocab: u32,
    model: Option<String>,
}

fn vocab(g: &GgufFile, layout: &crate::model::ModelLayout) -> Vocab {
    Vocab {
        n_vocab: layout.n_vocab,
        model: g.get_str("tokenizer.ggml.model").map(str::to_string),
    }
}

impl Vocab {
    fn text(&self) -> String {
        format!(
            "{} tokens, tokenizer {}",
            self.n_vocab,
            self.model.as_deref().unwrap_or("unnamed")
        )
    }
}

/// One file to compare: its header facts and the key of its weights.
struct Side {
    path: PathBuf,
    layout: crate::model::ModelLayout,
    vocab: Vocab,
    synthetic: bool,
}

fn side(path: &Path) -> Result<Side> {
    let g = crate::model::split::read_model(path)
        .with_context(|| format!("cannot read model {}", path.display()))?;
    let layout = crate::model::layout::from_gguf(&g)?;
    Ok(Side {
        path: path.to_path_buf(),
        vocab: vocab(&g, &layout),
        synthetic: super::is_synthetic(&g),
        layout,
    })
}

fn key_of(s: &Side) -> Result<String> {
    super::model_key(&s.path, &s.layout.fingerprint, s.layout.file_bytes)
}

fn cache_file(
    quant_key: &str,
    reference_key: &str,
    text_sha: &str,
    ctx: u32,
    chunks: u32,
) -> PathBuf {
    crate::util::cache_dir()
        .join("quality")
        .join("against")
        .join(quant_key)
        .join(format!("{reference_key}-{text_sha}-c{ctx}-n{chunks}.json")) // not a server flag: a name
}

fn load(path: &Path) -> Option<AgainstReport> {
    let r: AgainstReport =
        serde_json::from_slice(&crate::util::read_bounded(path, 16 << 20).ok()?).ok()?;
    (r.quants.len() == 1 && plausible(&r)).then_some(r)
}

/// A cache entry whose numbers no measurement gives (a negative KL divergence, a top-1 share
/// past 100 %, a perplexity below 1, no token scored) was not written by qtune: it is ignored,
/// never shown nor cited.
fn plausible(r: &AgainstReport) -> bool {
    r.tokens_scored > 0
        && super::plausible_ppl(r.reference_ppl)
        && r.quants.iter().all(|q| {
            super::plausible(q.mean_kld, q.kld_p99, q.same_top1_pct)
                && super::plausible_ppl(q.ppl)
                && super::plausible_ratio(q.ppl_ratio)
        })
}

/// Every check that needs no llama-perplexity: the files are readable GGUFs, not the same file
/// nor the same weights, of one vocabulary, and real models. Returns the reference and quants.
fn check(opts: &AgainstOptions) -> Result<(Side, Vec<Side>)> {
    if opts.models.is_empty() {
        bail!("no quantization to score: give -m Q4_K_M.gguf with --against Q8_0.gguf");
    }
    if opts.ctx < perplexity::MIN_CTX {
        bail!(
            "--ctx {} is below {}: llama-perplexity scores the second half of each chunk and needs 100 tokens at least",
            opts.ctx,
            perplexity::MIN_CTX
        );
    }
    let reference = side(&opts.reference)?;
    super::check_ctx_chunks(opts.ctx, opts.chunks, reference.layout.ctx_train)?;
    let same_file = |a: &Path, b: &Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b))
    {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    let mut quants: Vec<Side> = Vec::new();
    for m in &opts.models {
        if same_file(m, &opts.reference) {
            bail!(
                "{} is the --against file itself: score a different quantization of the same model against it (e.g. -m Q4_K_M.gguf --against Q8_0.gguf)",
                m.display()
            );
        }
        if quants.iter().any(|q| same_file(&q.path, m)) {
            continue;
        }
        let q = side(m)?;
        if q.vocab != reference.vocab {
            bail!(
                "{} ({}) and --against {} ({}) have different vocabularies: KL divergence compares token distributions, so both must be quantizations of the same model",
                m.display(),
                q.vocab.text(),
                opts.reference.display(),
                reference.vocab.text()
            );
        }
        quants.push(q);
    }
    for s in std::iter::once(&reference).chain(&quants) {
        if s.synthetic {
            bail!(
                "{} is a synthetic random-weight model (written by qtune synth): its predictions are noise, so quality cannot be measured on it; use a real model",
                s.path.display()
            );
        }
    }
    Ok((reference, quants))
}

/// Score each quant against the reference (or reuse what qtune's cache holds for the same
/// files, text, ctx and chunks). `note` receives progress lines for the user.
pub fn measure(
    opts: &AgainstOptions,
    note: &mut dyn FnMut(String),
) -> Result<(AgainstReport, Origin)> {
    let (reference, quants) = check(opts)?;
    let ref_key = key_of(&reference)?;
    let mut keys = Vec::new();
    for q in &quants {
        let k = key_of(q)?;
        if k == ref_key {
            bail!(
                "{} holds the same weights as --against {} (a copy): score a different quantization against it",
                q.path.display(),
                opts.reference.display()
            );
        }
        keys.push(k);
    }
    let text_path = match &opts.text {
        Some(p) => p.clone(),
        None => text::default_text()?,
    };
    let text = text::check(&text_path, opts.text.is_none().then_some(text::KJV_NAME))?;
    let n_vocab = reference.layout.n_vocab;
    let chunks = plan_chunks(n_vocab, opts.ctx, opts.chunks, opts.max_disk_mib)?;
    let files: Vec<PathBuf> = keys
        .iter()
        .map(|k| cache_file(k, &ref_key, &text.sha256, opts.ctx, chunks))
        .collect();
    let cached: Vec<Option<AgainstReport>> = files.iter().map(|f| load(f)).collect();

    let mut report = AgainstReport {
        reference_key: ref_key.clone(),
        reference_file: file_name(&opts.reference),
        reference_file_type: reference.layout.file_type.clone(),
        model_name: reference
            .layout
            .name
            .clone()
            .unwrap_or_else(|| file_name(&opts.reference)),
        text: text.clone(),
        kv: [KvType::F16, KvType::F16],
        requested_ctx: opts.ctx,
        ctx: opts.ctx,
        chunks,
        tokens_scored: 0,
        logits_bytes: 0,
        reference_ppl: None,
        quants: Vec::new(),
        seconds: 0.0,
    };
    if let Some(Some(first)) = cached
        .first()
        .filter(|_| cached.iter().all(Option::is_some))
    {
        report.ctx = first.ctx;
        report.chunks = first.chunks;
        report.tokens_scored = first.tokens_scored;
        report.logits_bytes = first.logits_bytes;
        report.reference_ppl = first.reference_ppl;
        report.seconds = first.seconds;
        for (c, q) in cached.iter().flatten().zip(&quants) {
            let mut s = c.quants[0].clone();
            s.file = file_name(&q.path);
            report.quants.push(s);
        }
        return Ok((report, Origin::Cached));
    }

    let binary = perplexity::locate(opts.perplexity.as_deref(), opts.server.as_deref())?;
    let quality_dir = crate::util::cache_dir().join("quality");
    super::sweep_stale_work_dirs(&quality_dir);
    let work = super::WorkDir::create(quality_dir.join(format!(
        "work-{}-{}",
        std::process::id(),
        ref_key
    )))?;
    let logits = work.0.join("reference.logits");
    let started = Instant::now();
    let label = format!("reference {}", report.reference_file);
    let (base, logits_bytes) = super::run_reference(
        &super::Reference {
            binary: &binary,
            model: &opts.reference,
            label: &label,
            text: &text.path,
            n_vocab,
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
    report.ctx = base.ctx;
    report.chunks = base.chunks;
    report.tokens_scored = u64::from(base.chunks) * perplexity::scored_per_chunk(base.ctx);
    report.logits_bytes = logits_bytes;
    report.reference_ppl = base.ppl;
    for (i, q) in quants.iter().enumerate() {
        let name = file_name(&q.path);
        note(format!(
            "{name}: scoring {} chunks against the reference (f16 KV)",
            base.chunks
        ));
        let args = perplexity::candidate_args(&q.path, base.ctx, report.kv, &logits, opts.threads);
        let (ok, out) =
            perplexity::run_logged(&binary, &args, &work.0.join(format!("quant-{i}.log")))?;
        let k = match perplexity::parse_kld(&out) {
            Some(k) if ok => k,
            _ => bail!(
                "llama-perplexity failed on {}: {}",
                q.path.display(),
                perplexity::failure_line(&out)
            ),
        };
        report.quants.push(QuantScore {
            model_key: keys[i].clone(),
            file: name,
            file_type: q.layout.file_type.clone(),
            mean_kld: k.mean_kld,
            kld_p99: k.kld_p99,
            same_top1_pct: k.same_top1_pct,
            ppl: k.ppl,
            ppl_ratio: k.ppl_ratio,
            measured_at: chrono::Local::now().to_rfc3339(),
        });
    }
    report.seconds = started.elapsed().as_secs_f64();
    for (score, file) in report.quants.iter().zip(&files) {
        let mut one = report.clone();
        one.quants = vec![score.clone()];
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        crate::util::write_atomic(file, serde_json::to_string_pretty(&one)?.as_bytes())?;
    }
    Ok((report, Origin::Measured))
}

/// The table `qtune quality --against` prints.
pub fn table(r: &AgainstReport) -> String {
    let mut s = format!(
        "{} · against {} · {} · f16 KV · reference PPL {}\n",
        r.model_name,
        r.reference_label(),
        super::scored(&r.text, r.ctx, r.requested_ctx, r.chunks, r.tokens_scored),
        super::ppl(r.reference_ppl)
    );
    let rows: Vec<Vec<String>> = r
        .quants
        .iter()
        .map(|q| {
            vec![
                q.label(),
                format!("{:.6}", q.mean_kld),
                format!("{:.6}", q.kld_p99),
                format!("{:.3}%", q.same_top1_pct),
                q.ppl.map_or("?".into(), |p| format!("{p:.4}")),
                q.ppl_ratio.map_or("?".into(), |p| format!("{p:.5}")),
            ]
        })
        .collect();
    s.push_str(&crate::util::text_table(
        &[
            "quant",
            "mean KLD",
            "KLD p99",
            "same top-1",
            "PPL",
            "PPL ratio",
        ],
        &rows,
        &[1, 2, 3, 4, 5],
    ));
    s
}

/// The cached `--against` measurement of the file at `path` (whose layout is `layout`) with the
/// most tokens scored (then the newest), if qtune measured one on this box. Reads the cache
/// only; runs nothing.
pub fn measured_for(path: &Path, layout: &crate::model::ModelLayout) -> Option<AgainstReport> {
    let key = super::model_key(path, &layout.fingerprint, layout.file_bytes).ok()?;
    let dir = crate::util::cache_dir()
        .join("quality")
        .join("against")
        .join(&key);
    let mut found: Vec<AgainstReport> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| load(&e.path()))
        .filter(|r| r.quants[0].model_key == key)
        .collect();
    found.sort_by(|a, b| {
        (a.tokens_scored, &a.quants[0].measured_at)
            .cmp(&(b.tokens_scored, &b.quants[0].measured_at))
    });
    found.pop()
}
