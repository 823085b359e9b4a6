//! From a GGUF header to a [`ModelLayout`]: tensors classified the way placement flags split
//! them, hyperparameters from the `<arch>.*` keys, KV / recurrent-state blocks.

use super::gguf::{GgufFile, GgufValue};
use super::{BlockBytes, Details, ModelLayout};
use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// Architectures qtune knows how to place and predict.
pub const SUPPORTED_ARCHS: &[&str] = &[
    "llama",
    "qwen2",
    "qwen2moe",
    "qwen3",
    "qwen3moe",
    "qwen35",
    "qwen35moe",
    "qwen3next",
    "gpt-oss",
    "deepseek2",
];

/// Hybrid architectures with gated-delta-net blocks and full attention every
/// `full_attention_interval` blocks.
pub const HYBRID_DELTA_NET_ARCHS: &[&str] = &["qwen35", "qwen35moe", "qwen3next"];

/// Where a tensor belongs, for placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorClass {
    /// `blk.N.ffn_{up,down,gate,gate_up}_{,ch}exps*`: moved to the host by `--n-cpu-moe`.
    RoutedExperts(u32),
    /// `blk.N.*_shexp*`, `blk.N.ffn_gate_inp*`, `blk.N.exp_probs_b*`.
    SharedExperts(u32),
    /// Any other `blk.N.*`.
    BlockRest(u32),
    TokenEmbd,
    Output,
    Other,
}

/// Is this a routed-expert tensor name (llama.cpp's `LLM_FFN_EXPS_REGEX`,
/// `\.ffn_(up|down|gate|gate_up)_(ch|)exps`)?
pub fn is_routed_expert(name: &str) -> bool {
    ["up", "down", "gate", "gate_up"].iter().any(|p| {
        name.contains(&format!(".ffn_{p}_exps")) || name.contains(&format!(".ffn_{p}_chexps"))
    })
}

/// The class of a tensor, by name.
pub fn classify(name: &str) -> TensorClass {
    if let Some(rest) = name.strip_prefix("blk.") {
        if let Some((n, tail)) = rest.split_once('.') {
            if let Ok(il) = n.parse::<u32>() {
                let tail_dot = format!(".{tail}");
                if is_routed_expert(&tail_dot) {
                    return TensorClass::RoutedExperts(il);
                }
                if tail.contains("_shexp")
                    || tail.starts_with("ffn_gate_inp")
                    || tail.starts_with("exp_probs_b")
                {
                    return TensorClass::SharedExperts(il);
                }
                return TensorClass::BlockRest(il);
            }
        }
    }
    if name.starts_with("token_embd.") {
        return TensorClass::TokenEmbd;
    }
    if name == "output.weight" || name.starts_with("output.") && !name.starts_with("output_norm") {
        return TensorClass::Output;
    }
    TensorClass::Other
}

/// Read a model file (a split model's every part) and build its layout.
pub fn load(path: &Path) -> Result<ModelLayout> {
    let g = super::split::read_model(path)?;
    from_gguf(&g).with_context(|| format!("cannot use {}", path.display()))
}

/// A per-layer hyperparameter that may be a scalar or an array; `None` when absent.
fn per_layer(g: &GgufFile, key: &str, n: usize) -> Option<Vec<u64>> {
    match g.get(key)? {
        GgufValue::Array(_, items) => {
            let v: Vec<u64> = items.iter().filter_map(|x| x.as_u64()).collect();
            if v.len() == items.len() && !v.is_empty() {
                let mut v = v;
                v.resize(n.max(v.len()), *v.last().unwrap());
                Some(v)
            } else {
                None
            }
        }
        v => v.as_u64().map(|x| vec![x; n]),
    }
}

/// The largest value a header's hyperparameter may hold (keys without the architecture
/// prefix): far above any released model, low enough that nothing sized by them can run away.
pub fn hparam_limit(key: &str) -> u64 {
    match key {
        "block_count" | "nextn_predict_layers" => 4096,
        "embedding_length" => 1 << 20,
        "attention.head_count" | "attention.head_count_kv" => 1 << 16,
        "attention.key_length" | "attention.value_length" => 1 << 16,
        "expert_count" | "expert_used_count" => 4096,
        "context_length" => 1 << 26,
        "vocab_size" => 1 << 24,
        "ssm.conv_kernel" => 1 << 10,
        "ssm.inner_size" => 1 << 20,
        "ssm.state_size" | "ssm.group_count" => 1 << 16,
        _ => u32::MAX as u64,
    }
}

/// Build the layout from a parsed header.
pub fn from_gguf(g: &GgufFile) -> Result<ModelLayout> {
    let arch = g
        .get_str("general.architecture")
        .context("no general.architecture key: not a llama.cpp model file")?
        .to_string();
    if !SUPPORTED_ARCHS.contains(&arch.as_str()) {
        bail!(
            "unsupported architecture '{}' (qtune supports: {})",
            super::gguf::shown(&arch, 60),
            SUPPORTED_ARCHS.join(", ")
        );
    }
    let key = |k: &str| format!("{arch}.{k}");
    // Every count is checked against a sane limit before anything is sized by it (issue 33: a
    // block_count of 2^31 allocated 16 GiB; an expert_count of 2^31 predicted 381,178,482 MiB).
    let limited = |k: &str, v: u64| -> Result<u64> {
        let max = hparam_limit(k);
        if v > max {
            bail!(
                "{} is {v}, more than {max}: the header is corrupt or not a model qtune knows",
                key(k)
            );
        }
        Ok(v)
    };
    let req = |k: &str| -> Result<u64> {
        let v = g
            .get_u64(&key(k))
            .with_context(|| format!("missing hyperparameter {}", key(k)))?;
        limited(k, v)
    };
    let opt =
        |k: &str| -> Result<Option<u64>> { g.get_u64(&key(k)).map(|v| limited(k, v)).transpose() };
    for k in [
        "attention.head_count",
        "attention.head_count_kv",
        "attention.key_length",
        "attention.value_length",
        "expert_count",
        "expert_used_count",
        "context_length",
        "vocab_size",
        "nextn_predict_layers",
        "ssm.conv_kernel",
        "ssm.inner_size",
        "ssm.state_size",
        "ssm.group_count",
        "full_attention_interval",
    ] {
        match g.get(&key(k)) {
            Some(GgufValue::Array(_, items)) => {
                for v in items.iter().filter_map(|v| v.as_u64()) {
                    limited(k, v)?;
                }
            }
            Some(_) => {
                opt(k)?;
            }
            None => {}
        }
    }
    let n_layer_all = req("block_count")? as u32;
    // MTP / next-token-prediction layers are counted in block_count but not run by the server.
    let n_nextn = g.get_u64(&key("nextn_predict_layers")).unwrap_or(0) as u32;
    let n_blocks = n_layer_all.saturating_sub(n_nextn);
    if n_blocks == 0 {
        bail!("{} is 0", key("block_count"));
    }
    let nb = n_blocks as usize;
    let n_embd = req("embedding_length")? as u32;
    if g.get_u64(&key("expert_used_count")).unwrap_or(0)
        > g.get_u64(&key("expert_count")).unwrap_or(0)
    {
        bail!(
            "{} is larger than {}: the header is corrupt",
            key("expert_used_count"),
            key("expert_count")
        );
    }
    let heads = per_layer(g, &key("attention.head_count"), nb)
        .with_context(|| format!("missing hyperparameter {}", key("attention.head_count")))?;
    let n_head = heads.iter().copied().max().unwrap_or(0) as u32;
    let heads_kv =
        per_layer(g, &key("attention.head_count_kv"), nb).unwrap_or_else(|| heads.clone());
    let n_head_kv = heads_kv.iter().copied().max().unwrap_or(0) as u32;
    let default_head_dim = n_embd.checked_div(n_head).unwrap_or(0);
    let head_dim_k = g
        .get_u64(&key("attention.key_length"))
        .map_or(default_head_dim, |v| v as u32);
    let head_dim_v = g
        .get_u64(&key("attention.value_length"))
        .map_or(default_head_dim, |v| v as u32);
    let n_experts = g.get_u64(&key("expert_count")).unwrap_or(0) as u32;
    let n_experts_used = g.get_u64(&key("expert_used_count")).unwrap_or(0) as u32;
    let ctx_train = g.get_u64(&key("context_length")).unwrap_or(0) as u32;
    let n_vocab = g
        .array_len("tokenizer.ggml.tokens")
        .map(|n| n as u32)
        .or_else(|| g.get_u64(&key("vocab_size")).map(|v| v as u32))
        .or_else(|| {
            g.tensor("token_embd.weight")
                .and_then(|t| t.dims.get(1).map(|&d| d as u32))
        })
        .unwrap_or(0);

    // KV and recurrent blocks.
    let mut kv_blocks: Vec<bool> = heads_kv.iter().take(nb).map(|&h| h > 0).collect();
    let mut recurrent_state_bytes = vec![0u64; nb];
    if HYBRID_DELTA_NET_ARCHS.contains(&arch.as_str()) {
        let interval = g
            .get_u64(&key("full_attention_interval"))
            .unwrap_or(4)
            .max(1);
        let d_conv = g.get_u64(&key("ssm.conv_kernel")).unwrap_or(0);
        let d_inner = g.get_u64(&key("ssm.inner_size")).unwrap_or(0);
        let d_state = g.get_u64(&key("ssm.state_size")).unwrap_or(0);
        let n_group = g.get_u64(&key("ssm.group_count")).unwrap_or(0);
        // llama_hparams::n_embd_r() and n_embd_s(), f32 state (llama-memory-recurrent.cpp).
        let n_embd_r = d_conv.saturating_sub(1) * (d_inner + 2 * n_group * d_state);
        let n_embd_s = d_state * d_inner;
        let per_block = (n_embd_r + n_embd_s) * 4;
        // An explicit per-layer recurrent flag array wins over the interval rule.
        let explicit = match g.get(&key("attention.recurrent_layers")) {
            Some(GgufValue::Array(_, items)) if items.len() >= nb => Some(
                items
                    .iter()
                    .map(|v| v.as_u64().unwrap_or(0) != 0)
                    .collect::<Vec<bool>>(),
            ),
            _ => None,
        };
        for il in 0..nb {
            let recurrent = match &explicit {
                Some(v) => v[il],
                None => (il as u64 + 1) % interval != 0,
            };
            kv_blocks[il] = !recurrent;
            recurrent_state_bytes[il] = if recurrent { per_block } else { 0 };
        }
    }

    // Tensor bytes by class.
    let mut blocks = vec![BlockBytes::default(); nb];
    let mut token_embd_bytes = 0;
    let mut output_bytes = 0;
    let mut other_bytes = 0;
    let mut mtp_bytes = 0;
    let mut bytes_by_type: BTreeMap<String, u64> = BTreeMap::new();
    let mut expert_proj = vec![super::ExpertProjBytes::default(); nb];
    let mut cpu_repack = vec![BlockBytes::default(); nb];
    let mut cpu_repack_output = 0;
    let mut mtp_repack_bytes = 0;
    for t in &g.tensors {
        let repack = if cpu_repacks(t) { t.n_bytes } else { 0 };
        match classify(&t.name) {
            TensorClass::RoutedExperts(il) if (il as usize) < nb => {
                cpu_repack[il as usize].routed_experts += repack
            }
            TensorClass::SharedExperts(il) if (il as usize) < nb => {
                cpu_repack[il as usize].shared_experts += repack
            }
            TensorClass::BlockRest(il) if (il as usize) < nb => {
                cpu_repack[il as usize].rest += repack
            }
            TensorClass::Output => cpu_repack_output += repack,
            TensorClass::RoutedExperts(il)
            | TensorClass::SharedExperts(il)
            | TensorClass::BlockRest(il)
                if il < n_layer_all =>
            {
                mtp_repack_bytes += repack
            }
            _ => {}
        }
    }
    for t in &g.tensors {
        *bytes_by_type
            .entry(t.ggml_type.name().to_string())
            .or_default() += t.n_bytes;
        let class = classify(&t.name);
        let block = |il: u32| (il as usize) < nb;
        match class {
            TensorClass::RoutedExperts(il) if block(il) => {
                blocks[il as usize].routed_experts += t.n_bytes;
                // Every routed-expert name has a projection (same patterns as classify).
                if let Some(p) = crate::config::ExpertProj::of_tensor(&t.name) {
                    expert_proj[il as usize].add(p, t.n_bytes);
                }
            }
            TensorClass::SharedExperts(il) if block(il) => {
                blocks[il as usize].shared_experts += t.n_bytes
            }
            TensorClass::BlockRest(il) if block(il) => blocks[il as usize].rest += t.n_bytes,
            TensorClass::TokenEmbd => token_embd_bytes += t.n_bytes,
            TensorClass::Output => output_bytes += t.n_bytes,
            // Tensors of MTP blocks beyond n_blocks: loaded only to draft with them.
            TensorClass::RoutedExperts(il)
            | TensorClass::SharedExperts(il)
            | TensorClass::BlockRest(il)
                if il < n_layer_all =>
            {
                mtp_bytes += t.n_bytes
            }
            _ => other_bytes += t.n_bytes,
        }
    }
    let tensor_bytes = g.tensor_bytes();

    let file_type = g
        .get_u64("general.file_type")
        .map(|n| ftype_name(n as u32).map_or_else(|| format!("ftype {n}"), |s| s.to_string()));

    let mut h = Sha256::new();
    h.update(arch.as_bytes());
    for n in [
        n_blocks,
        n_experts,
        n_experts_used,
        n_embd,
        n_head,
        n_head_kv,
        head_dim_k,
        head_dim_v,
        n_vocab,
    ] {
        h.update(n.to_le_bytes());
    }
    for t in &g.tensors {
        h.update(t.name.as_bytes());
        h.update(t.ggml_type.id().to_le_bytes());
        for d in &t.dims {
            h.update(d.to_le_bytes());
        }
    }
    let fingerprint: String = h
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();

    let details = Details {
        expert_proj,
        cpu_repack,
        cpu_repack_output,
        n_ff: per_layer(g, &key("feed_forward_length"), nb)
            .and_then(|v| v.into_iter().max())
            .unwrap_or(0) as u32,
        n_ff_exp: g.get_u64(&key("expert_feed_forward_length")).unwrap_or(0) as u32,
        n_ff_shexp: g
            .get_u64(&key("expert_shared_feed_forward_length"))
            .unwrap_or(0) as u32,
        output_before_blocks: {
            let first_block = g
                .tensors
                .iter()
                .filter(|t| t.name.starts_with("blk."))
                .map(|t| t.offset)
                .min();
            matches!((g.tensor("output.weight").map(|t| t.offset), first_block), (Some(o), Some(b)) if o < b)
        },
        mtp_layers: n_nextn,
        mtp_bytes,
        mtp_repack_bytes,
    };

    Ok(ModelLayout {
        details,
        arch,
        name: g.get_str("general.name").map(|s| s.to_string()),
        file_type,
        file_bytes: g.file_len,
        n_blocks,
        n_experts,
        n_experts_used,
        n_embd,
        n_head,
        n_head_kv,
        head_dim_k,
        head_dim_v,
        n_vocab,
        ctx_train,
        kv_blocks,
        recurrent_state_bytes,
        blocks,
        token_embd_bytes,
        output_bytes,
        other_bytes,
        bytes_by_type,
        tensor_bytes,
        fingerprint,
    })
}

/// Would llama.cpp's x86 CPU backend (AVX2) repack this weight (ggml-cpu/repack.cpp)?
fn cpu_repacks(t: &super::gguf::TensorInfo) -> bool {
    use super::ggml_type::GgmlType as T;
    matches!(t.ggml_type, T::Q4_0 | T::Q4_K | T::IQ4_NL | T::MXFP4)
        && t.dims.len() >= 2
        && t.dims[1] % 8 == 0
        && !t.name.starts_with("token_embd.")
}

/// llama.cpp's `llama_ftype` names (`general.file_type`).
pub fn ftype_name(n: u32) -> Option<&'static str> {
    Some(match n {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        39 => "NVFP4",
        40 => "Q1_0",
        41 => "Q2_0",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_follows_llama_cpp_regex() {
        assert_eq!(
            classify("blk.3.ffn_gate_exps.weight"),
            TensorClass::RoutedExperts(3)
        );
        assert_eq!(
            classify("blk.12.ffn_gate_up_exps.weight"),
            TensorClass::RoutedExperts(12)
        );
        assert_eq!(
            classify("blk.0.ffn_down_exps.bias"),
            TensorClass::RoutedExperts(0)
        );
        assert_eq!(
            classify("blk.1.ffn_up_chexps.weight"),
            TensorClass::RoutedExperts(1)
        );
        assert_eq!(
            classify("blk.1.ffn_gate_inp.weight"),
            TensorClass::SharedExperts(1)
        );
        assert_eq!(
            classify("blk.1.ffn_gate_inp_shexp.weight"),
            TensorClass::SharedExperts(1)
        );
        assert_eq!(
            classify("blk.1.ffn_down_shexp.weight"),
            TensorClass::SharedExperts(1)
        );
        assert_eq!(
            classify("blk.1.exp_probs_b.bias"),
            TensorClass::SharedExperts(1)
        );
        assert_eq!(classify("blk.1.ffn_down.weight"), TensorClass::BlockRest(1));
        assert_eq!(classify("blk.1.attn_q.weight"), TensorClass::BlockRest(1));
        assert_eq!(classify("token_embd.weight"), TensorClass::TokenEmbd);
        assert_eq!(classify("output.weight"), TensorClass::Output);
        assert_eq!(classify("output_norm.weight"), TensorClass::Other);
        assert_eq!(classify("rope_freqs.weight"), TensorClass::Other);
    }

    #[test]
    fn ftype_names() {
        assert_eq!(ftype_name(15), Some("Q4_K_M"));
        assert_eq!(ftype_name(7), Some("Q8_0"));
        assert_eq!(ftype_name(3), Some("Q4_1"));
        assert_eq!(ftype_name(4), None);
    }
}
