//! Random-weight GGUFs of real MoE shapes (`qtune synth`).
//!
//! Throughput depends on shapes, tensor types and bytes, not on values: the header and tensor
//! layout match the real model, quantized blocks are random bytes with a small finite fp16
//! scale, F32 tensors are small values (norms near 1, `ssm_a` negative). The tokenizer is
//! copied from llama.cpp's `models/ggml-vocab-*.gguf`, padded with unused tokens to the real
//! vocabulary size.

use super::ggml_type::GgmlType;
use super::gguf::{self, vtype, GgufValue, TensorSpec};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

mod shapes;
pub use shapes::*;

/// Which tensor type mix to write: a quantization whose per-tensor recipe is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthFtype {
    /// llama.cpp's Q4_K_M mix (Q4_K, Q6_K in "more bits" blocks for ffn_down / attn_v, Q6_K output).
    Q4KM,
    /// bartowski's Q4_K_L: the Q4_K_M mix with the token embedding and output matrices in Q8_0
    /// (`--token-embedding-type q8_0 --output-tensor-type q8_0`, as his model cards say).
    Q4KL,
    /// llama.cpp's MXFP4_MOE: routed experts (3-D tensors) in MXFP4, every other matrix Q8_0
    /// (`llama_tensor_get_type` in llama-quant.cpp).
    Mxfp4Moe,
    /// Every matrix Q8_0.
    Q8_0,
}

/// The quantizations [`SynthFtype::parse`] knows, lower case, with where their recipe comes from.
pub const FTYPES: [(&str, SynthFtype, &str); 4] = [
    (
        "q4_k_m",
        SynthFtype::Q4KM,
        "llama.cpp's Q4_K_M mix: Q4_K, Q6_K for ffn_down and attn_v in its more-bits blocks, Q6_K output",
    ),
    (
        "q4_k_l",
        SynthFtype::Q4KL,
        "bartowski's Q4_K_L as his model cards name it: the Q4_K_M mix with Q8_0 token embedding \
         and output (approximate: his files may hold more Q5_K/Q6_K tensors than that)",
    ),
    (
        "mxfp4_moe",
        SynthFtype::Mxfp4Moe,
        "llama.cpp's MXFP4_MOE: routed experts MXFP4, every other matrix Q8_0",
    ),
    ("q8_0", SynthFtype::Q8_0, "every matrix Q8_0"),
];

impl SynthFtype {
    pub fn parse(s: &str) -> Result<SynthFtype> {
        Self::parse_flag(s, "quantization")
    }
    /// [`Self::parse`], its error naming the flag the user gave (`--ftype`, `--quant`).
    pub fn parse_flag(s: &str, flag: &str) -> Result<SynthFtype> {
        let low = s.trim().to_ascii_lowercase();
        match FTYPES.iter().find(|(n, _, _)| *n == low) {
            Some(&(_, f, _)) => Ok(f),
            None => bail!(
                "unknown {flag} '{}' (known: {}; others, Unsloth's UD-* among them, have no \
                 published per-tensor recipe)",
                super::gguf::shown(s, 40),
                FTYPES.iter().map(|f| f.0).collect::<Vec<_>>().join(", ")
            ),
        }
    }
    /// The name users write, upper case: "Q4_K_M".
    pub fn name(self) -> String {
        FTYPES
            .iter()
            .find(|f| f.1 == self)
            .map_or_else(String::new, |f| f.0.to_ascii_uppercase())
    }
    /// Where the per-tensor recipe comes from, one line.
    pub fn recipe(self) -> &'static str {
        FTYPES.iter().find(|f| f.1 == self).map_or("", |f| f.2)
    }
    /// Is the per-tensor recipe exactly known? (Q4_K_L's is only as its maker's cards name it.)
    pub fn recipe_exact(self) -> bool {
        self != SynthFtype::Q4KL
    }
    /// `general.file_type` (llama_ftype). Q4_K_L is not a llama.cpp type: its files say Q4_K_M.
    pub fn file_type(self) -> u32 {
        match self {
            SynthFtype::Q4KM | SynthFtype::Q4KL => 15,
            SynthFtype::Mxfp4Moe => 38,
            SynthFtype::Q8_0 => 7,
        }
    }
}

/// llama.cpp's `use_more_bits` rule of the Q4_K_M mix.
fn use_more_bits(i: u32, n: u32) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i as i64 - (n / 8) as i64) % 3 == 2
}

/// Values of an F32 tensor, by name.
#[derive(Debug, Clone, Copy, PartialEq)]
enum F32Fill {
    /// Around 1 (norms).
    One,
    /// Negative (`ssm_a`).
    Negative,
    /// Small random values.
    Small,
}

struct PlannedTensor {
    spec: TensorSpec,
    fill: F32Fill,
}

/// The tensors of a shape in file order, with their types.
pub fn tensor_specs(shape: &SynthShape, ftype: SynthFtype) -> Vec<TensorSpec> {
    plan(shape, ftype).into_iter().map(|p| p.spec).collect()
}

fn plan(s: &SynthShape, ftype: SynthFtype) -> Vec<PlannedTensor> {
    let e = s.n_embd as u64;
    let v = s.n_vocab as u64;
    let x = s.n_experts as u64;
    let n = s.n_blocks;
    let mut out = Vec::new();
    let q = |base: GgmlType| match ftype {
        SynthFtype::Q4KM | SynthFtype::Q4KL => base,
        SynthFtype::Q8_0 | SynthFtype::Mxfp4Moe => GgmlType::Q8_0,
    };
    // Routed experts: MXFP4 in the MXFP4_MOE mix, else as the other matrices.
    let qx = |base: GgmlType| match ftype {
        SynthFtype::Mxfp4Moe => GgmlType::MXFP4,
        _ => q(base),
    };
    let mut push = |name: String, dims: Vec<u64>, ty: GgmlType| {
        let fill = if name.ends_with("ssm_a") {
            F32Fill::Negative
        } else if name.contains("norm") {
            F32Fill::One
        } else {
            F32Fill::Small
        };
        out.push(PlannedTensor {
            spec: TensorSpec {
                name,
                dims,
                ggml_type: ty,
            },
            fill,
        });
    };
    let embd_ty = match ftype {
        SynthFtype::Q4KM => GgmlType::Q4_K,
        _ => GgmlType::Q8_0,
    };
    push("token_embd.weight".into(), vec![e, v], embd_ty);
    push("output_norm.weight".into(), vec![e], GgmlType::F32);
    push(
        "output.weight".into(),
        vec![e, v],
        match ftype {
            SynthFtype::Q4KM => GgmlType::Q6_K,
            _ => GgmlType::Q8_0,
        },
    );
    let hd = s.head_dim as u64;
    let q_dim = s.n_head as u64 * hd;
    let kv_dim = s.n_head_kv as u64 * hd;
    // The MTP blocks follow the trunk's: full-attention blocks (never recurrent) with the
    // trunk's MoE FFN and their own `nextn.*` tensors. llama.cpp's quantizer counts them in its
    // "more bits" rules (`n_layer_all` blocks of ffn_down, every attn_v), so they shift the mix.
    let n_all = n + s.nextn_layers;
    let is_recurrent = |il: u32| match &s.delta_net {
        Some(d) => il < n && (il + 1) % d.full_attention_interval != 0,
        None => false,
    };
    let n_attn_v = (0..n_all).filter(|&il| !is_recurrent(il)).count() as u32;
    let mut i_attn_v = 0u32;
    for il in 0..n_all {
        let b = |t: &str| format!("blk.{il}.{t}");
        let more = use_more_bits(il, n_all);
        let down_ty = q(if more { GgmlType::Q6_K } else { GgmlType::Q4_K });
        push(b("attn_norm.weight"), vec![e], GgmlType::F32);
        if s.delta_net.is_some() {
            push(b("post_attention_norm.weight"), vec![e], GgmlType::F32);
        } else {
            push(b("ffn_norm.weight"), vec![e], GgmlType::F32);
        }
        if let (true, Some(d)) = (is_recurrent(il), &s.delta_net) {
            let key_dim = (d.state_size * d.group_count) as u64;
            let value_dim = (d.state_size * d.time_step_rank) as u64;
            let conv_dim = 2 * key_dim + value_dim;
            let dt = d.time_step_rank as u64;
            push(b("attn_qkv.weight"), vec![e, conv_dim], q(GgmlType::Q4_K));
            push(b("attn_gate.weight"), vec![e, value_dim], q(GgmlType::Q4_K));
            push(
                b("ssm_conv1d.weight"),
                vec![d.conv_kernel as u64, conv_dim],
                GgmlType::F32,
            );
            push(b("ssm_dt.bias"), vec![dt], GgmlType::F32);
            push(b("ssm_a"), vec![dt], GgmlType::F32);
            push(b("ssm_beta.weight"), vec![e, dt], GgmlType::F32);
            push(b("ssm_alpha.weight"), vec![e, dt], GgmlType::F32);
            push(
                b("ssm_norm.weight"),
                vec![d.state_size as u64],
                GgmlType::F32,
            );
            push(b("ssm_out.weight"), vec![value_dim, e], q(GgmlType::Q4_K));
        } else {
            // Gated attention (qwen35moe) packs q and its gate: twice the query width.
            let q_out = if s.delta_net.is_some() {
                2 * q_dim
            } else {
                q_dim
            };
            let v_ty = q(if use_more_bits(i_attn_v, n_attn_v) {
                GgmlType::Q6_K
            } else {
                GgmlType::Q4_K
            });
            i_attn_v += 1;
            push(b("attn_q.weight"), vec![e, q_out], q(GgmlType::Q4_K));
            push(b("attn_k.weight"), vec![e, kv_dim], q(GgmlType::Q4_K));
            push(b("attn_v.weight"), vec![e, kv_dim], v_ty);
            push(b("attn_output.weight"), vec![q_dim, e], q(GgmlType::Q4_K));
            push(b("attn_q_norm.weight"), vec![hd], GgmlType::F32);
            push(b("attn_k_norm.weight"), vec![hd], GgmlType::F32);
        }
        let f = s.expert_ff as u64;
        push(b("ffn_gate_inp.weight"), vec![e, x], GgmlType::F32);
        push(b("ffn_gate_exps.weight"), vec![e, f, x], qx(GgmlType::Q4_K));
        push(b("ffn_up_exps.weight"), vec![e, f, x], qx(GgmlType::Q4_K));
        let down_exps_ty = match ftype {
            SynthFtype::Mxfp4Moe => GgmlType::MXFP4,
            _ => down_ty,
        };
        push(b("ffn_down_exps.weight"), vec![f, e, x], down_exps_ty);
        if let Some(sf) = s.shared_ff {
            let sf = sf as u64;
            push(b("ffn_gate_inp_shexp.weight"), vec![e], GgmlType::F32);
            push(b("ffn_gate_shexp.weight"), vec![e, sf], q(GgmlType::Q4_K));
            push(b("ffn_up_shexp.weight"), vec![e, sf], q(GgmlType::Q4_K));
            push(b("ffn_down_shexp.weight"), vec![sf, e], down_ty);
        }
        if il >= n {
            // Qwen3.5's MTP head shares the embedding and output matrices: no
            // `nextn.embed_tokens` or `nextn.shared_head_head` (llama.cpp's converter maps
            // `mtp.fc`, `mtp.pre_fc_norm_*` and `mtp.norm` to these).
            push(b("nextn.eh_proj.weight"), vec![2 * e, e], q(GgmlType::Q4_K));
            push(b("nextn.enorm.weight"), vec![e], GgmlType::F32);
            push(b("nextn.hnorm.weight"), vec![e], GgmlType::F32);
            push(b("nextn.shared_head_norm.weight"), vec![e], GgmlType::F32);
        }
    }
    out
}

/// Metadata key `qtune synth` writes (true): the weights are random, outputs are noise.
pub const SYNTHETIC_KEY: &str = "qtune.synthetic";

/// The vocabulary directory: `$QTUNE_VOCAB_DIR`, else `models/` of the pinned llama.cpp tree.
pub fn default_vocab_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("QTUNE_VOCAB_DIR") {
        return PathBuf::from(d);
    }
    crate::engine::binary::llama_cpp_source_dir().join("models")
}

/// The header's key-value pairs. Without a vocabulary folder (`None`: a layout for planning,
/// which no server loads) there is no tokenizer, and `<arch>.vocab_size` says its size.
fn metadata(
    shape: &SynthShape,
    ftype: SynthFtype,
    vocab_dir: Option<&Path>,
) -> Result<Vec<(String, GgufValue)>> {
    let Some(vocab_dir) = vocab_dir else {
        let mut md = hparams(shape, ftype);
        md.push((
            format!("{}.vocab_size", shape.arch),
            GgufValue::U32(shape.n_vocab),
        ));
        return Ok(md);
    };
    let vpath = vocab_dir.join(format!("ggml-vocab-{}.gguf", shape.vocab));
    if !vpath.is_file() {
        bail!(
            "tokenizer file {} not found (run `qtune server build` to fetch the llama.cpp source, or set QTUNE_VOCAB_DIR)",
            vpath.display()
        );
    }
    let vocab =
        gguf::read(&vpath).with_context(|| format!("cannot read tokenizer {}", vpath.display()))?;
    let mut md = hparams(shape, ftype);
    // Tokenizer: every tokenizer.* key, tokens and types padded to the real vocabulary.
    for (key, val) in &vocab.metadata {
        if !key.starts_with("tokenizer.") {
            continue;
        }
        let val = match (key.as_str(), val) {
            ("tokenizer.ggml.tokens", GgufValue::Array(et, items)) => {
                let mut items = items.clone();
                let have = items.len();
                for i in have..shape.n_vocab as usize {
                    items.push(GgufValue::String(format!("<|qtune_unused_{i}|>")));
                }
                items.truncate(shape.n_vocab as usize);
                GgufValue::Array(*et, items)
            }
            ("tokenizer.ggml.token_type", GgufValue::Array(et, items)) => {
                let mut items = items.clone();
                let pad = match *et {
                    vtype::U32 => GgufValue::U32(5),
                    _ => GgufValue::I32(5),
                };
                items.resize(shape.n_vocab as usize, pad);
                GgufValue::Array(*et, items)
            }
            _ => val.clone(),
        };
        md.push((key.clone(), val));
    }
    if !md.iter().any(|(k, _)| k == "tokenizer.ggml.tokens") {
        bail!("{} holds no tokenizer.ggml.tokens", vpath.display());
    }
    Ok(md)
}

/// The general and architecture keys of a shape's header (no tokenizer).
fn hparams(shape: &SynthShape, ftype: SynthFtype) -> Vec<(String, GgufValue)> {
    let a = shape.arch;
    let k = |s: &str| format!("{a}.{s}");
    let u32v = GgufValue::U32;
    let mut md: Vec<(String, GgufValue)> = vec![
        ("general.architecture".into(), GgufValue::String(a.into())),
        ("general.type".into(), GgufValue::String("model".into())),
        (
            "general.name".into(),
            GgufValue::String(shape.model_name.into()),
        ),
        ("general.file_type".into(), u32v(ftype.file_type())),
        ("general.quantization_version".into(), u32v(2)),
        // Marks the weights as random: `qtune quality` refuses such a model.
        (SYNTHETIC_KEY.into(), GgufValue::Bool(true)),
        (k("block_count"), u32v(shape.n_blocks + shape.nextn_layers)),
        (k("context_length"), u32v(shape.ctx_train)),
        (k("embedding_length"), u32v(shape.n_embd)),
        (k("feed_forward_length"), u32v(shape.ff)),
        (k("attention.head_count"), u32v(shape.n_head)),
        (k("attention.head_count_kv"), u32v(shape.n_head_kv)),
        (k("attention.key_length"), u32v(shape.head_dim)),
        (k("attention.value_length"), u32v(shape.head_dim)),
        (k("rope.freq_base"), GgufValue::F32(shape.rope_base)),
        (k("attention.layer_norm_rms_epsilon"), GgufValue::F32(1e-6)),
        (k("expert_count"), u32v(shape.n_experts)),
        (k("expert_used_count"), u32v(shape.n_experts_used)),
        (k("expert_feed_forward_length"), u32v(shape.expert_ff)),
    ];
    if shape.nextn_layers > 0 {
        md.push((k("nextn_predict_layers"), u32v(shape.nextn_layers)));
    }
    if let Some(r) = shape.rope_dims {
        md.push((k("rope.dimension_count"), u32v(r)));
    }
    if let Some(sec) = shape.rope_sections {
        md.push((
            k("rope.dimension_sections"),
            GgufValue::Array(vtype::I32, sec.iter().map(|&x| GgufValue::I32(x)).collect()),
        ));
    }
    if let Some(sf) = shape.shared_ff {
        md.push((k("expert_shared_feed_forward_length"), u32v(sf)));
    }
    if let Some(d) = &shape.delta_net {
        md.push((k("ssm.conv_kernel"), u32v(d.conv_kernel)));
        md.push((k("ssm.state_size"), u32v(d.state_size)));
        md.push((k("ssm.group_count"), u32v(d.group_count)));
        md.push((k("ssm.time_step_rank"), u32v(d.time_step_rank)));
        md.push((k("ssm.inner_size"), u32v(d.inner_size)));
        md.push((
            k("full_attention_interval"),
            u32v(d.full_attention_interval),
        ));
    }
    md
}

/// Small deterministic PRNG (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let r = self.next().to_le_bytes();
            c.copy_from_slice(&r[..c.len()]);
        }
    }
}

/// fp16 bits of 0.002, the block scale of every quantized block.
const SCALE_F16: [u8; 2] = 0x1819u16.to_le_bytes();

/// One random chunk of whole blocks of `ty` with finite small scales.
fn quant_chunk(ty: GgmlType, rng: &mut Rng, target_bytes: usize) -> Vec<u8> {
    let bs = ty.type_size() as usize;
    let n_blocks = (target_bytes / bs).max(1);
    let mut buf = vec![0u8; n_blocks * bs];
    rng.fill(&mut buf);
    // Byte offsets of fp16 scale fields within a block.
    let scales: &[usize] = match ty {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q2_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::Q3_K => &[108],
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::IQ4_NL => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 => &[0, 2],
        _ => &[0],
    };
    for blk in buf.chunks_mut(bs) {
        for &o in scales {
            blk[o..o + 2].copy_from_slice(&SCALE_F16);
        }
    }
    buf
}

/// Writes a random-weight GGUF of `shape` to `path` (atomically: a temp file renamed at the end;
/// nothing is left behind on error). Returns the file size.
pub fn write_synthetic(path: &Path, shape: &SynthShape, ftype: SynthFtype) -> Result<u64> {
    write_synthetic_with_vocab(path, shape, ftype, &default_vocab_dir())
}

/// [`write_synthetic`] with an explicit directory holding `ggml-vocab-*.gguf`.
pub fn write_synthetic_with_vocab(
    path: &Path,
    shape: &SynthShape,
    ftype: SynthFtype,
    vocab_dir: &Path,
) -> Result<u64> {
    write_synthetic_reporting(path, shape, ftype, vocab_dir, &mut |_, _| {})
}

/// [`write_synthetic_with_vocab`], calling `progress(tensor bytes written, tensor bytes in
/// all)` after each tensor (a 21 GB model is written in minutes: `qtune synth` shows it).
pub fn write_synthetic_reporting(
    path: &Path,
    shape: &SynthShape,
    ftype: SynthFtype,
    vocab_dir: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64> {
    let md = metadata(shape, ftype, Some(vocab_dir))?;
    let planned = plan(shape, ftype);
    let specs: Vec<TensorSpec> = planned.iter().map(|p| p.spec.clone()).collect();
    if path.is_dir() {
        bail!(
            "{} is a directory: give a file name such as model.gguf",
            path.display()
        );
    }
    // A temporary file next to `path`, removed on any error, renamed into place at the end.
    let result = (|| -> Result<u64> {
        let tmp = crate::util::temp_file_for(path)?;
        let mut w = std::io::BufWriter::with_capacity(8 << 20, tmp);
        let mut rng = Rng(0x05ee_d0f9_709e);
        let mut chunks: std::collections::HashMap<GgmlType, Vec<u8>> = Default::default();
        let all: u64 = specs.iter().map(|t| t.bytes().unwrap_or(0)).sum();
        let mut written = 0u64;
        let n = gguf::write_gguf(&mut w, &md, &specs, gguf::DEFAULT_ALIGNMENT, |i, t, out| {
            let total = t.bytes().unwrap_or(0) as usize;
            written += total as u64;
            progress(written, all);
            if t.ggml_type == GgmlType::F32 {
                let fill = planned[i].fill;
                let mut buf = Vec::with_capacity(total);
                for _ in 0..total / 4 {
                    let r = rng.unit();
                    let v = match fill {
                        F32Fill::One => 1.0 + 0.01 * r,
                        F32Fill::Negative => -(1.0 + 0.5 * r),
                        F32Fill::Small => 0.02 * r,
                    };
                    buf.extend_from_slice(&v.to_le_bytes());
                }
                return out.write_all(&buf);
            }
            let chunk = chunks
                .entry(t.ggml_type)
                .or_insert_with(|| quant_chunk(t.ggml_type, &mut rng, 4 << 20));
            let mut left = total;
            while left > 0 {
                let k = left.min(chunk.len());
                out.write_all(&chunk[..k])?;
                left -= k;
            }
            Ok(())
        })?;
        let tmp = w.into_inner().map_err(|e| e.into_error())?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(n)
    })();
    match result {
        Ok(n) => Ok(n),
        Err(e) => Err(anyhow::anyhow!(
            "cannot write {}: {}",
            path.display(),
            root_cause(&e)
        )),
    }
}

fn root_cause(e: &anyhow::Error) -> String {
    e.chain().last().map(|c| c.to_string()).unwrap_or_default()
}

/// Size of the file [`write_synthetic`] would write, without writing it.
pub fn synthetic_file_size(shape: &SynthShape, ftype: SynthFtype, vocab_dir: &Path) -> Result<u64> {
    file_size(shape, ftype, Some(vocab_dir))
}

fn file_size(shape: &SynthShape, ftype: SynthFtype, vocab_dir: Option<&Path>) -> Result<u64> {
    let md = metadata(shape, ftype, vocab_dir)?;
    let specs = tensor_specs(shape, ftype);
    let (header, offsets) = gguf::encode_header(&md, &specs, gguf::DEFAULT_ALIGNMENT)?;
    let last = specs.len() - 1;
    let end = offsets[last] + specs[last].bytes().unwrap_or(0);
    Ok(header.len() as u64 + end.div_ceil(gguf::DEFAULT_ALIGNMENT) * gguf::DEFAULT_ALIGNMENT)
}

/// The layout of a synthetic shape as [`crate::model::load`] reads it from the full file, without
/// writing one: a sparse header-only copy in a temporary folder, read back and removed. For
/// tests and predictions that need the real shapes (20 GB models) on a machine without them.
pub fn shape_layout(name: &str, ftype: SynthFtype) -> Result<super::ModelLayout> {
    let shape = shape_by_name(name).with_context(|| format!("unknown shape '{name}'"))?;
    let dir = tempfile::tempdir().context("cannot create a temporary folder")?;
    let path = dir.path().join("shape.gguf");
    write_sparse_header(&path, &shape, ftype, &default_vocab_dir())?;
    super::load(&path)
}

/// The layout of the real model of shape `name` quantized as `ftype`, for planning a model that
/// is not downloaded: its tensors and types as [`shape_layout`]'s, without a tokenizer (no
/// llama.cpp tree needed; the file size is short of the tokenizer's few MB) and named as the
/// real model, not as a synthetic one (a real model's prefill routes over all its experts).
pub fn planned_layout(name: &str, ftype: SynthFtype) -> Result<super::ModelLayout> {
    let shape = shape_by_name(name)?;
    let dir = tempfile::tempdir().context("cannot create a temporary folder")?;
    let path = dir.path().join("shape.gguf");
    write_sparse(&path, &shape, ftype, None)?;
    let mut layout = super::load(&path)?;
    let model = shape
        .model_name
        .split(" (")
        .next()
        .unwrap_or(shape.model_name);
    layout.name = Some(format!("{model} {} (planned from its shape)", ftype.name()));
    Ok(layout)
}

/// Writes only the header of the synthetic file and extends it (sparse, no data written) to
/// the full size: a file [`crate::model::load`] reads like the real one, in milliseconds and
/// without disk space. For tests and quick inspection of full shapes; not loadable by a server.
pub fn write_sparse_header(
    path: &Path,
    shape: &SynthShape,
    ftype: SynthFtype,
    vocab_dir: &Path,
) -> Result<u64> {
    write_sparse(path, shape, ftype, Some(vocab_dir))
}

fn write_sparse(
    path: &Path,
    shape: &SynthShape,
    ftype: SynthFtype,
    vocab_dir: Option<&Path>,
) -> Result<u64> {
    let md = metadata(shape, ftype, vocab_dir)?;
    let specs = tensor_specs(shape, ftype);
    let (header, _) = gguf::encode_header(&md, &specs, gguf::DEFAULT_ALIGNMENT)?;
    let total = file_size(shape, ftype, vocab_dir)?;
    let res = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(path)?;
        std::io::Write::write_all(&mut f, &header)?;
        f.set_len(total)
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(path);
        bail!("cannot write {}: {e}", path.display());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_rule_matches_llama_cpp() {
        let v: Vec<u32> = (0..40).filter(|&i| use_more_bits(i, 40)).collect();
        assert_eq!(
            v,
            [0, 1, 2, 3, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 34, 35, 36, 37, 38, 39]
        );
    }

    #[test]
    fn unknown_shape_and_ftype_are_errors() {
        let e = shape_by_name("qwen9").unwrap_err().to_string();
        assert!(e.contains("tiny-qwen35moe"), "{e}");
        let e = SynthFtype::parse("ud-q4_k_xl").unwrap_err().to_string();
        assert!(
            !e.contains('\n') && e.contains("q4_k_m, q4_k_l, mxfp4_moe, q8_0"),
            "{e}"
        );
        assert_eq!(
            SynthFtype::parse("MXFP4_MOE").unwrap(),
            SynthFtype::Mxfp4Moe
        );
        for s in SHAPES {
            assert_eq!(shape_by_name(s).unwrap().name, s);
        }
    }

    /// Qwen3.5-35B-A3B as llama.cpp's converter writes it (issue 54): 40 trunk blocks and one
    /// MTP block (`block_count` 41, `nextn_predict_layers` 1), a full-attention block with the
    /// trunk's MoE FFN and the `nextn.*` tensors; the quantizer's "more bits" rules count it.
    #[test]
    fn the_qwen35_shapes_carry_one_mtp_block_as_the_converter_writes_it() {
        let shape = shape_by_name("qwen3.5-35b-a3b").unwrap();
        let specs = tensor_specs(&shape, SynthFtype::Q4KM);
        let ty = |n: &str| specs.iter().find(|t| t.name == n).map(|t| t.ggml_type);
        let mtp: Vec<&TensorSpec> = specs
            .iter()
            .filter(|t| t.name.starts_with("blk.40."))
            .collect();
        assert_eq!(
            mtp.len(),
            20,
            "{:?}",
            mtp.iter().map(|t| &t.name).collect::<Vec<_>>()
        );
        assert!(!specs.iter().any(|t| t.name.starts_with("blk.41.")));
        let proj = specs
            .iter()
            .find(|t| t.name == "blk.40.nextn.eh_proj.weight")
            .unwrap();
        assert_eq!(
            (proj.dims.as_slice(), proj.ggml_type),
            (&[4096, 2048][..], GgmlType::Q4_K)
        );
        assert!(ty("blk.40.attn_q.weight").is_some() && ty("blk.40.ssm_a").is_none());
        // ffn_down over 41 blocks: the MTP block is in the last eighth (more bits); attn_v over
        // 11 attention blocks: the 9th (block 35) no longer is, the 11th (MTP) is.
        assert_eq!(ty("blk.40.ffn_down_exps.weight"), Some(GgmlType::Q6_K));
        assert_eq!(ty("blk.35.attn_v.weight"), Some(GgmlType::Q4_K));
        assert_eq!(ty("blk.39.attn_v.weight"), Some(GgmlType::Q6_K));
        assert_eq!(ty("blk.40.attn_v.weight"), Some(GgmlType::Q6_K));
        // 521.4 MiB: the routed experts (256 of them) are nearly all of it.
        let bytes: u64 = mtp.iter().map(|t| t.bytes().unwrap()).sum();
        assert_eq!(bytes, 546_703_360);
        let md = hparams(&shape, SynthFtype::Q4KM);
        let key = |k: &str| md.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(key("qwen35moe.block_count"), Some(GgufValue::U32(41)));
        assert_eq!(
            key("qwen35moe.nextn_predict_layers"),
            Some(GgufValue::U32(1))
        );
        // The qwen3moe shapes have none, and no key saying so.
        let q3 = shape_by_name("tiny-qwen3moe").unwrap();
        assert!(!tensor_specs(&q3, SynthFtype::Q4KM)
            .iter()
            .any(|t| t.name.contains("nextn")));
        assert_eq!(
            hparams(&q3, SynthFtype::Q4KM)
                .iter()
                .filter(|(k, _)| k.contains("nextn"))
                .count(),
            0
        );
    }

    #[test]
    fn every_tensor_fits_its_blocks() {
        for s in SHAPES {
            let shape = shape_by_name(s).unwrap();
            for f in [SynthFtype::Q4KM, SynthFtype::Q8_0] {
                for t in tensor_specs(&shape, f) {
                    assert!(
                        t.bytes().is_some(),
                        "{s}: {} {:?} {}",
                        t.name,
                        t.dims,
                        t.ggml_type
                    );
                }
            }
        }
    }
}
