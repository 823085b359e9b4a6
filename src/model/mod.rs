//! The model: GGUF reading (and writing, for synthetic models), the tensor layout that matters
//! for placement ([`ModelLayout`]), and memory prediction for a [`crate::config::LaunchConfig`].

pub mod cards;
pub mod ggml_type;
pub mod gguf;
pub mod header;
pub mod inspect;
pub mod layout;
pub mod memory;
pub mod speed;
pub mod split;
pub mod synth;

pub use layout::load;

use crate::config::{CpuExperts, ExpertProj};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Bytes of one block (layer), split the way placement flags split them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BlockBytes {
    /// Routed experts (`ffn_*_exps`): what `--n-cpu-moe` moves to the CPU.
    pub routed_experts: u64,
    /// Shared experts and router (`*_shexp`, `ffn_gate_inp`).
    pub shared_experts: u64,
    /// Attention / delta-net / dense FFN / norms: everything else in the block.
    pub rest: u64,
}

impl BlockBytes {
    pub fn total(&self) -> u64 {
        self.routed_experts + self.shared_experts + self.rest
    }
}

/// What memory prediction needs beyond the placement summary: what the CPU backend repacks,
/// FFN widths, tensor order in the file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Details {
    /// Per block, bytes of tensors the x86 (AVX2) CPU backend repacks into a second host buffer
    /// (`CPU_REPACK`) when they live on the host: Q4_0/Q4_K/IQ4_NL/MXFP4 matrices with a
    /// multiple of 8 rows.
    pub cpu_repack: Vec<BlockBytes>,
    /// Same for the output matrix.
    pub cpu_repack_output: u64,
    /// Dense FFN width (`feed_forward_length`, 0 if absent).
    pub n_ff: u32,
    /// Routed expert FFN width (0 if absent).
    pub n_ff_exp: u32,
    /// Shared expert FFN width (0 if none).
    pub n_ff_shexp: u32,
    /// The output tensors are stored before the blocks in the file, so a mapped span that
    /// reaches a host expert tensor also covers them (llama.cpp maps first..last host tensor).
    pub output_before_blocks: bool,
    /// Per block, routed-expert bytes by projection (they add up to
    /// [`BlockBytes::routed_experts`]). Empty in layouts saved before it existed: a partial
    /// block is then split evenly over up, gate and down.
    #[serde(default)]
    pub expert_proj: Vec<ExpertProjBytes>,
    /// Multi-token-prediction blocks after the trunk (`<arch>.nextn_predict_layers`): the
    /// server loads them only to draft with them (`--spec-type draft-mtp`).
    #[serde(default)]
    pub mtp_layers: u32,
    /// Tensor bytes of those blocks (not in [`ModelLayout::other_bytes`]).
    #[serde(default)]
    pub mtp_bytes: u64,
    /// Of these, the bytes the x86 CPU backend repacks when they live on the host.
    #[serde(default)]
    pub mtp_repack_bytes: u64,
}

/// Routed-expert bytes of one block by projection (weights, biases and scales alike).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExpertProjBytes {
    pub up: u64,
    pub gate: u64,
    pub gate_up: u64,
    pub down: u64,
}

impl ExpertProjBytes {
    pub fn get(&self, p: ExpertProj) -> u64 {
        match p {
            ExpertProj::Up => self.up,
            ExpertProj::Gate => self.gate,
            ExpertProj::GateUp => self.gate_up,
            ExpertProj::Down => self.down,
        }
    }

    pub fn add(&mut self, p: ExpertProj, bytes: u64) {
        match p {
            ExpertProj::Up => self.up += bytes,
            ExpertProj::Gate => self.gate += bytes,
            ExpertProj::GateUp => self.gate_up += bytes,
            ExpertProj::Down => self.down += bytes,
        }
    }

    pub fn total(&self) -> u64 {
        self.up + self.gate + self.gate_up + self.down
    }
}

/// What qtune needs to know about a model to place it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelLayout {
    /// `general.architecture`, e.g. `qwen35moe`, `qwen3moe`, `llama`.
    pub arch: String,
    pub name: Option<String>,
    /// `general.file_type` as llama.cpp names it (e.g. `Q4_K_M`), when known.
    pub file_type: Option<String>,
    pub file_bytes: u64,
    pub n_blocks: u32,
    /// 0 for dense models: nothing to tune with `--n-cpu-moe`.
    pub n_experts: u32,
    pub n_experts_used: u32,
    pub n_embd: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim_k: u32,
    pub head_dim_v: u32,
    pub n_vocab: u32,
    pub ctx_train: u32,
    /// Per block: does it hold a KV cache (full attention)? Hybrid models hold KV in few blocks.
    pub kv_blocks: Vec<bool>,
    /// Per block: recurrent (delta-net / SSM) state bytes per sequence, 0 for attention blocks.
    pub recurrent_state_bytes: Vec<u64>,
    pub blocks: Vec<BlockBytes>,
    pub token_embd_bytes: u64,
    pub output_bytes: u64,
    /// Tensors outside blocks other than embedding and output (output_norm, ...).
    pub other_bytes: u64,
    /// Bytes per ggml tensor type name (e.g. "Q4_K" -> bytes).
    pub bytes_by_type: BTreeMap<String, u64>,
    /// Sum of all tensor bytes (equals the file's tensor data).
    pub tensor_bytes: u64,
    /// Stable short hash of architecture, shape and tensor types (not the path).
    pub fingerprint: String,
    /// Inputs of the memory prediction beyond the fields above.
    #[serde(default)]
    pub details: Details,
}

impl ModelLayout {
    /// A uniform all-attention layout, for tests and samples: `n_blocks` blocks of
    /// `expert_bytes` routed experts and `rest_bytes` of everything else, qwen3moe-like
    /// hyperparameters. Callers override what matters to them with struct update syntax.
    #[doc(hidden)]
    pub fn uniform(n_blocks: u32, n_experts: u32, expert_bytes: u64, rest_bytes: u64) -> Self {
        let nb = n_blocks as usize;
        ModelLayout {
            arch: "qwen3moe".into(),
            name: None,
            file_type: Some("Q4_K_M".into()),
            file_bytes: n_blocks as u64 * (expert_bytes + rest_bytes),
            n_blocks,
            n_experts,
            n_experts_used: n_experts.min(8),
            n_embd: 2048,
            n_head: 32,
            n_head_kv: 4,
            head_dim_k: 128,
            head_dim_v: 128,
            n_vocab: 151_936,
            ctx_train: 40_960,
            kv_blocks: vec![true; nb],
            recurrent_state_bytes: vec![0; nb],
            blocks: vec![
                BlockBytes {
                    routed_experts: expert_bytes,
                    shared_experts: 0,
                    rest: rest_bytes,
                };
                nb
            ],
            token_embd_bytes: 0,
            output_bytes: 0,
            other_bytes: 0,
            bytes_by_type: BTreeMap::new(),
            tensor_bytes: n_blocks as u64 * (expert_bytes + rest_bytes),
            fingerprint: "0123456789abcdef".into(),
            details: Details::default(),
        }
    }

    pub fn is_moe(&self) -> bool {
        self.n_experts > 0
    }

    /// Routed-expert bytes of `block` by projection. Layouts without the per-projection split
    /// (saved before it existed, or built in tests) split the block evenly over up, gate and
    /// down, the remainder to down.
    pub fn expert_proj_bytes(&self, block: u32) -> ExpertProjBytes {
        let total = self
            .blocks
            .get(block as usize)
            .map_or(0, |b| b.routed_experts);
        match self.details.expert_proj.get(block as usize) {
            Some(p) if p.total() == total => p.clone(),
            _ => ExpertProjBytes {
                up: total / 3,
                gate: total / 3,
                gate_up: 0,
                down: total - 2 * (total / 3),
            },
        }
    }

    /// Routed-expert bytes of `block` that `placement` puts on the CPU.
    pub fn cpu_expert_bytes(&self, block: u32, placement: &CpuExperts) -> u64 {
        if placement.blocks.contains(block) {
            return self
                .blocks
                .get(block as usize)
                .map_or(0, |b| b.routed_experts);
        }
        let p = self.expert_proj_bytes(block);
        ExpertProj::ALL
            .into_iter()
            .filter(|&x| placement.on_cpu(block, x))
            .map(|x| p.get(x))
            .sum()
    }
}
