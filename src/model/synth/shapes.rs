//! The model shapes `qtune synth` writes: hyperparameters of real MoE models and tiny variants
//! of them for CPU tests.

use anyhow::{bail, Result};

/// Gated-delta-net (linear attention) hyperparameters of hybrid shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaNet {
    pub conv_kernel: u32,
    pub state_size: u32,
    /// Key heads.
    pub group_count: u32,
    /// Value heads.
    pub time_step_rank: u32,
    pub inner_size: u32,
    pub full_attention_interval: u32,
}

/// A model shape that `qtune synth` can write.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthShape {
    pub name: &'static str,
    pub arch: &'static str,
    /// `general.name` written into the file.
    pub model_name: &'static str,
    pub n_blocks: u32,
    pub n_embd: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    pub n_experts: u32,
    pub n_experts_used: u32,
    pub expert_ff: u32,
    /// Shared expert FFN size (`None`: no shared expert).
    pub shared_ff: Option<u32>,
    /// `feed_forward_length` key.
    pub ff: u32,
    pub n_vocab: u32,
    pub ctx_train: u32,
    pub rope_base: f32,
    /// Rope dimensions (`rope.dimension_count`) and multi-rope sections, when used.
    pub rope_dims: Option<u32>,
    pub rope_sections: Option<[i32; 4]>,
    /// Tokenizer source: `models/ggml-vocab-<vocab>.gguf` in the llama.cpp tree.
    pub vocab: &'static str,
    pub delta_net: Option<DeltaNet>,
    /// Multi-token-prediction (MTP, "NextN") blocks after the trunk's `n_blocks`: Qwen3.5's
    /// checkpoints carry one, which llama.cpp's converter keeps (`block_count` counts it,
    /// `<arch>.nextn_predict_layers` says how many) and `--spec-type draft-mtp` drafts with.
    pub nextn_layers: u32,
}

/// Names accepted by [`shape_by_name`].
pub const SHAPES: [&str; 4] = [
    "qwen3.5-35b-a3b",
    "qwen3-30b-a3b",
    "tiny-qwen35moe",
    "tiny-qwen3moe",
];

/// The shape called `name` (one of [`SHAPES`]).
pub fn shape_by_name(name: &str) -> Result<SynthShape> {
    let qwen35 = SynthShape {
        name: "qwen3.5-35b-a3b",
        arch: "qwen35moe",
        model_name: "Qwen3.5-35B-A3B (qtune synthetic, random weights)",
        n_blocks: 40,
        n_embd: 2048,
        n_head: 16,
        n_head_kv: 2,
        head_dim: 256,
        n_experts: 256,
        n_experts_used: 8,
        expert_ff: 512,
        shared_ff: Some(512),
        ff: 512,
        n_vocab: 248_320,
        ctx_train: 262_144,
        rope_base: 1.0e7,
        rope_dims: Some(64),
        rope_sections: Some([11, 11, 10, 0]),
        vocab: "qwen35",
        delta_net: Some(DeltaNet {
            conv_kernel: 4,
            state_size: 128,
            group_count: 16,
            time_step_rank: 32,
            inner_size: 4096,
            full_attention_interval: 4,
        }),
        nextn_layers: 1,
    };
    let qwen3 = SynthShape {
        name: "qwen3-30b-a3b",
        arch: "qwen3moe",
        model_name: "Qwen3-30B-A3B (qtune synthetic, random weights)",
        n_blocks: 48,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 4,
        head_dim: 128,
        n_experts: 128,
        n_experts_used: 8,
        expert_ff: 768,
        shared_ff: None,
        ff: 6144,
        n_vocab: 151_936,
        ctx_train: 40_960,
        rope_base: 1.0e6,
        rope_dims: None,
        rope_sections: None,
        vocab: "qwen2",
        delta_net: None,
        nextn_layers: 0,
    };
    Ok(match name {
        "qwen3.5-35b-a3b" => qwen35,
        "qwen3-30b-a3b" => qwen3,
        "tiny-qwen35moe" => SynthShape {
            name: "tiny-qwen35moe",
            model_name: "tiny qwen35moe (qtune synthetic, random weights)",
            n_blocks: 4,
            n_embd: 256,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
            n_experts: 8,
            n_experts_used: 2,
            expert_ff: 256,
            shared_ff: Some(256),
            ff: 256,
            n_vocab: 151_936,
            ctx_train: 32_768,
            rope_dims: Some(16),
            rope_sections: Some([3, 3, 2, 0]),
            delta_net: Some(DeltaNet {
                conv_kernel: 4,
                state_size: 64,
                group_count: 2,
                time_step_rank: 4,
                inner_size: 256,
                full_attention_interval: 4,
            }),
            ..qwen35
        },
        "tiny-qwen3moe" => SynthShape {
            name: "tiny-qwen3moe",
            model_name: "tiny qwen3moe (qtune synthetic, random weights)",
            n_blocks: 4,
            n_embd: 256,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
            n_experts: 8,
            n_experts_used: 2,
            expert_ff: 256,
            ff: 768,
            ctx_train: 32_768,
            ..qwen3
        },
        other => bail!(
            "unknown shape '{other}' (known shapes: {})",
            SHAPES.join(", ")
        ),
    })
}
