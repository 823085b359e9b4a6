//! Memory prediction: where llama.cpp puts weights, KV cache, recurrent state and compute
//! buffers for a [`LaunchConfig`], and how big each is.
//! (One file over 800 lines: one prediction whose buffers depend on each other; 400 of them are
//! its unit tests against llama.cpp's own numbers.)
//!
//! Placement (llama.cpp `llama_model::load_tensors`): block `il` is on the GPU when
//! `il >= n_blocks + 1 - ngl` (`-ngl` counts the output layer too; no `-ngl` with a GPU means
//! all layers); the output layer (`output.weight`, `output_norm`) is on the GPU when `ngl >= 1`;
//! `token_embd` always stays on the host; `--n-cpu-moe N` keeps the routed experts
//! (`ffn_*_exps`) of blocks `0..N` on the host. A tied output is a copy of `token_embd` on the
//! output device. KV cache and recurrent state live on the device of their block.
//!
//! Compute buffers are an empirical model of ggml's graph allocator at one micro-batch,
//! calibrated against the CPU `llama-server` of the pinned build (see [`ComputeModel`]).
//!
//! Several GPUs ([`predict_devices`]): the same totals, spread over the cards as llama.cpp's
//! layer split assigns the layers ([`layer_devices`]), one compute buffer per card; not yet
//! calibrated against a two-GPU run.

use super::ModelLayout;
use crate::config::{FlashAttn, KvType, LaunchConfig};
use serde::{Deserialize, Serialize};

const MIB: f64 = 1024.0 * 1024.0;

/// Predicted memory by kind and device, MiB (byte-exact weights in `*_bytes`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryBreakdown {
    pub weights_gpu_bytes: u64,
    pub weights_host_bytes: u64,
    /// Extra host copy of CPU-resident weights repacked by the x86 backend (`CPU_REPACK`).
    pub repack_host_bytes: u64,
    /// GPU-resident tensors that lie inside the mmapped span of the host tensors: llama.cpp
    /// maps (and reports as `CPU_Mapped`) the file from the first to the last host tensor.
    #[serde(default)]
    pub mapped_span_host_bytes: u64,
    pub kv_gpu_mib: f64,
    pub kv_host_mib: f64,
    pub recurrent_gpu_mib: f64,
    pub recurrent_host_mib: f64,
    pub compute_gpu_mib: f64,
    pub compute_host_mib: f64,
    /// Logits / embeddings output buffer (host memory).
    pub output_host_mib: f64,
    /// The host weights are page cache of the memory-mapped model file (load mode auto/mmap),
    /// not loaded buffers: the kernel can drop them and read them again. With `--load-mode
    /// none` and a GPU they are pinned buffers (`CUDA_Host`), which can never be paged out.
    #[serde(default)]
    pub host_weights_file_backed: bool,
}

impl MemoryBreakdown {
    pub fn weights_gpu_mib(&self) -> f64 {
        self.weights_gpu_bytes as f64 / MIB
    }
    pub fn weights_host_mib(&self) -> f64 {
        self.weights_host_bytes as f64 / MIB
    }
    pub fn repack_host_mib(&self) -> f64 {
        self.repack_host_bytes as f64 / MIB
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryPrediction {
    /// Everything on the GPU(s), MiB.
    pub gpu_mib: f64,
    /// Everything in host RAM (weights, repacked copies, host KV, buffers), MiB.
    pub host_mib: f64,
    /// The part of `host_mib` that must stay in RAM: all of it except the page cache of a
    /// memory-mapped (not locked) model file. Over the available RAM, this goes to swap.
    #[serde(default)]
    pub host_required_mib: f64,
    pub breakdown: MemoryBreakdown,
    /// Blocks whose layers are on the GPU.
    pub gpu_blocks: u32,
    /// Blocks whose routed experts are on the host.
    pub host_expert_blocks: u32,
    /// What each GPU holds, in device order, when the config runs on several GPUs
    /// ([`predict_devices`]); empty for one GPU (then `gpu_mib` is that GPU's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_devices: Vec<DeviceMemory>,
}

/// What one GPU of several holds (llama.cpp's layer split), MiB unless named bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceMemory {
    /// The CUDA device index (`CUDAn`).
    pub device: u32,
    /// The first and last block whose layer is on this GPU (None: no block).
    pub blocks: Option<(u32, u32)>,
    /// The output layer is on this GPU.
    pub output_layer: bool,
    /// Weights on this GPU, routed experts included.
    pub weights_bytes: u64,
    /// The routed-expert part of `weights_bytes`.
    pub expert_bytes: u64,
    pub kv_mib: f64,
    pub recurrent_mib: f64,
    pub compute_mib: f64,
    /// Everything on this GPU.
    pub total_mib: f64,
}

/// CUDA memory the reported buffers do not itemize (context, cuBLAS handles' small workspaces),
/// as seen in the totals of the GPU calibration.
const CUDA_UNITEMIZED_MIB: f64 = 8.0;

/// Constants of the compute-buffer model (per micro-batch token, f32 activations).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ComputeModel {
    /// Live activations per token in units of n_embd.
    pub embd_factor: f64,
    /// Live activations per token in units of the widest FFN (dense n_ff, or
    /// n_expert_used * n_ff_exp for MoE).
    pub ffn_factor: f64,
    /// Fixed overhead per token, floats.
    pub per_token_floats: f64,
    /// Fixed overhead per device buffer, MiB.
    pub fixed_mib: f64,
}

/// Calibrated on the CPU server (SmolLM2-135M, tiny qwen3moe / qwen35moe): per token the
/// allocator keeps about 3 FFN widths and 5 embedding widths alive.
pub const CPU_COMPUTE: ComputeModel = ComputeModel {
    embd_factor: 5.0,
    ffn_factor: 3.0,
    per_token_floats: 16.0,
    fixed_mib: 0.0,
};

/// What the host CPU backend does with weights it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCaps {
    /// x86 AVX2: Q4_0/Q4_K/IQ4_NL/MXFP4 weights on the host are repacked into a second buffer.
    pub repack: bool,
}

impl HostCaps {
    /// This machine's CPU.
    pub fn detect() -> HostCaps {
        #[cfg(target_arch = "x86_64")]
        {
            HostCaps {
                repack: std::arch::is_x86_feature_detected!("avx2"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            HostCaps { repack: false }
        }
    }
}

/// Predict memory for `cfg` on this host (`has_gpu`: a GPU backend takes the offloaded layers).
pub fn predict(layout: &ModelLayout, cfg: &LaunchConfig, has_gpu: bool) -> MemoryPrediction {
    predict_with(layout, cfg, has_gpu, HostCaps::detect(), &CPU_COMPUTE)
}

fn kv_row_bytes(t: KvType, n: u64) -> f64 {
    // ggml_row_size: whole blocks.
    let (blk, bytes) = match t {
        KvType::F32 => (1, 4),
        KvType::F16 | KvType::Bf16 => (1, 2),
        KvType::Q8_0 => (32, 34),
        KvType::Q5_1 => (32, 24),
        KvType::Q5_0 => (32, 22),
        KvType::Q4_1 => (32, 20),
        KvType::Q4_0 | KvType::Iq4Nl => (32, 18),
    };
    (n.div_ceil(blk) * bytes) as f64
}

/// Tokens the server drafts per step with `--spec-type draft-mtp` (its `--spec-draft-n-max`
/// default, 3, in the pinned build).
pub const MTP_DRAFT_N_MAX: u64 = 3;

/// KV cells of one stream: the padded context, split between slots without `-kvu`.
fn kv_cells(cfg: &LaunchConfig) -> (u64, u64) {
    let ctx = padded_ctx(cfg.ctx) as u64;
    let streams = if cfg.kv_unified == Some(true) {
        1
    } else {
        cfg.parallel.max(1) as u64
    };
    (ctx / streams, streams)
}

/// What `--spec-type draft-mtp` adds beside the main context (the pinned server, checked on
/// the CPU against tiny-qwen35moe's buffers; `tests/it/spec_mtp.rs`): the MTP blocks' weights,
/// which the server skips otherwise, on the GPU when every layer is (`gpu`); and a second
/// context over them: its own KV of those blocks (f16: the draft's `-ctkd`/`-ctvd`
/// default, whatever `-ctk` says), its logits buffer, and a compute buffer of about the
/// attention mask plus six `n_embd` rows of f32 per micro-batch token (7.0 MiB measured for
/// tiny-qwen35moe at `-c 4096 -ub 512`, an estimate elsewhere, unchecked on a GPU).
fn add_mtp_context(
    b: &mut MemoryBreakdown,
    layout: &ModelLayout,
    cfg: &LaunchConfig,
    gpu: bool,
    repack: bool,
    ubatch: f64,
    (stream_cells, streams): (u64, u64),
) {
    let d = &layout.details;
    let kv_row =
        2.0 * (layout.n_head_kv as u64 * layout.head_dim_k.max(layout.head_dim_v) as u64) as f64;
    let kv_mib = d.mtp_layers as f64 * (stream_cells * streams) as f64 * 2.0 * kv_row / MIB;
    let mask = if flash_attention_enabled(cfg) {
        ubatch * stream_cells as f64 * 2.0
    } else {
        ubatch * stream_cells as f64 * (layout.n_head as f64 + 1.0) * 4.0
    };
    let compute_mib = (mask + ubatch * 4.0 * 6.0 * layout.n_embd as f64) / MIB;
    b.output_host_mib += (layout.n_vocab as u64 * 4 * cfg.parallel.max(1) as u64) as f64 / MIB;
    if gpu {
        b.weights_gpu_bytes += d.mtp_bytes;
        b.kv_gpu_mib += kv_mib;
        b.compute_gpu_mib += compute_mib;
    } else {
        b.weights_host_bytes += d.mtp_bytes;
        if repack {
            b.repack_host_bytes += d.mtp_repack_bytes;
        }
        b.kv_host_mib += kv_mib;
        b.compute_host_mib += compute_mib;
    }
}

/// The context llama.cpp allocates for `-c ctx`: rounded up to a multiple of 256.
pub fn padded_ctx(ctx: u32) -> u32 {
    ctx.max(1).div_ceil(256) * 256
}

/// Does the server use flash attention for this config? `auto` enables it where supported
/// (CPU and CUDA, the backends qtune targets).
pub fn flash_attention_enabled(cfg: &LaunchConfig) -> bool {
    cfg.flash_attn != FlashAttn::Off
}

/// [`predict`] with explicit host capabilities and compute constants (for tests).
pub fn predict_with(
    layout: &ModelLayout,
    cfg: &LaunchConfig,
    has_gpu: bool,
    host: HostCaps,
    cm: &ComputeModel,
) -> MemoryPrediction {
    predict_parts(layout, cfg, has_gpu, host, cm).0
}

/// What [`predict_parts`] worked out on the way that the per-device split needs.
struct Parts {
    /// Layers on the GPUs (`-ngl`, the output layer counting as one).
    ngl: u32,
    /// Routed-expert bytes of each block on the host.
    host_expert_bytes: Vec<u64>,
    /// KV cache of one attention block, MiB.
    kv_block_mib: f64,
    /// Sequences (recurrent state copies).
    n_seq: u64,
    /// A GPU's compute buffer without the MoE staging (what a GPU other than the first
    /// holds), MiB, CUDA's unitemized memory included.
    plain_compute_gpu_mib: f64,
    /// One micro-batch's graph inputs a pipeline copy holds (attention mask, activations), MiB.
    pipeline_input_mib: f64,
    /// What `--spec-type draft-mtp` put on the GPUs ([`add_mtp_context`]): weights (bytes),
    /// KV and compute (MiB). The block is the last before the output layer: on its card.
    mtp_gpu: (u64, f64, f64),
}

fn predict_parts(
    layout: &ModelLayout,
    cfg: &LaunchConfig,
    has_gpu: bool,
    host: HostCaps,
    cm: &ComputeModel,
) -> (MemoryPrediction, Parts) {
    let nb = layout.n_blocks;
    let details = &layout.details;
    // Layers on the GPU (the output layer counts as one).
    let ngl: u32 = if !has_gpu {
        0
    } else {
        cfg.n_gpu_layers.unwrap_or(nb + 1).min(nb + 1)
    };
    let first_gpu_block = (nb + 1).saturating_sub(ngl);
    let block_on_gpu = |il: u32| il >= first_gpu_block;
    let output_on_gpu = ngl >= 1;
    let ncmoe = cfg.n_cpu_moe.unwrap_or(0).min(nb);

    let mut b = MemoryBreakdown::default();
    let mut host_expert_blocks = 0;
    // The x86 backend repacks host weights only when no GPU takes part (seen on the GPU
    // machine: with -ngl and --n-cpu-moe, CPU_Mapped holds the host experts once, no CPU_REPACK).
    let repack = host.repack && ngl == 0;
    let repack_of = |il: usize, experts: bool, rest: bool| -> u64 {
        if !repack {
            return 0;
        }
        details.cpu_repack.get(il).map_or(0, |r| {
            (if experts { r.routed_experts } else { 0 })
                + (if rest { r.shared_experts + r.rest } else { 0 })
        })
    };
    // Routed-expert bytes of each block on the host: every expert of a host block, the first
    // `--n-cpu-moe` blocks' experts, and what the `-ot` rules of `cpu_experts` name (per
    // projection for a partial block).
    let host_expert_bytes: Vec<u64> = layout
        .blocks
        .iter()
        .enumerate()
        .map(|(il, bb)| {
            let il32 = il as u32;
            if !block_on_gpu(il32) || il32 < ncmoe {
                bb.routed_experts
            } else {
                cfg.cpu_experts
                    .as_ref()
                    .map_or(0, |c| layout.cpu_expert_bytes(il32, c))
            }
        })
        .collect();
    // With mmap, llama.cpp maps the file span from the first to the last host tensor: the
    // GPU-resident tensors of the GPU blocks in between lie inside it.
    let host_expert_span = {
        let first = host_expert_bytes.iter().position(|&x| x > 0);
        let last = host_expert_bytes.iter().rposition(|&x| x > 0);
        first.zip(last)
    };
    let maps = cfg.load_mode.maps_file();
    for (il, bb) in layout.blocks.iter().enumerate() {
        let il32 = il as u32;
        let on_gpu = block_on_gpu(il32);
        let host_experts = host_expert_bytes[il];
        if host_experts > 0 {
            host_expert_blocks += 1;
        }
        if on_gpu {
            b.weights_gpu_bytes += bb.shared_experts + bb.rest;
        } else {
            b.weights_host_bytes += bb.shared_experts + bb.rest;
        }
        b.weights_host_bytes += host_experts;
        b.weights_gpu_bytes += bb.routed_experts - host_experts;
        let all_experts_on_host = host_experts == bb.routed_experts;
        b.repack_host_bytes += repack_of(il, all_experts_on_host && host_experts > 0, !on_gpu);
        if maps && on_gpu && host_expert_span.is_some_and(|(f, l)| f <= il && il <= l) {
            b.mapped_span_host_bytes +=
                bb.shared_experts + bb.rest + bb.routed_experts - host_experts;
        }
    }
    // Input embedding: always host.
    b.weights_host_bytes += layout.token_embd_bytes;
    // Output layer (and other non-block tensors such as output_norm).
    let tied = layout.output_bytes == 0;
    if output_on_gpu {
        b.weights_gpu_bytes += layout.output_bytes + layout.other_bytes;
        if tied {
            b.weights_gpu_bytes += layout.token_embd_bytes;
        }
        if maps && host_expert_blocks > 0 && details.output_before_blocks {
            // Inside the mapped span (see above).
            b.mapped_span_host_bytes += layout.output_bytes + layout.other_bytes;
        }
    } else {
        b.weights_host_bytes += layout.output_bytes + layout.other_bytes;
        if repack {
            b.repack_host_bytes += details.cpu_repack_output;
        }
    }

    // KV cache: every KV block holds ctx cells of K and V rows; llama.cpp pads the context
    // to a multiple of 256 cells. Parallel slots without a unified KV (`-np N` without `-kvu`)
    // split it into N streams of ctx / N cells each, and attention runs over one stream.
    let ctx = padded_ctx(cfg.ctx) as u64;
    let n_seq = cfg.parallel.max(1) as u64;
    let streams = if cfg.kv_unified == Some(true) {
        1
    } else {
        n_seq
    };
    let stream_cells = ctx / streams;
    let ctx = stream_cells * streams;
    let k_row = kv_row_bytes(
        cfg.cache_type_k,
        layout.n_head_kv as u64 * layout.head_dim_k as u64,
    );
    let v_row = kv_row_bytes(
        cfg.cache_type_v,
        layout.n_head_kv as u64 * layout.head_dim_v as u64,
    );
    let kv_block_mib = ctx as f64 * (k_row + v_row) / MIB;
    // Drafting with the MTP layer keeps (1 + drafted) copies of the recurrent state per
    // sequence, to roll a rejected draft back (`n_rs_seq`, the server's `--spec-draft-n-max`).
    let mtp = cfg.spec_type.is_some_and(|t| t.is_mtp()) && details.mtp_layers > 0;
    let rs_copies = if mtp { 1 + MTP_DRAFT_N_MAX } else { 1 };
    for il in 0..nb {
        let on_gpu = block_on_gpu(il);
        if layout.kv_blocks.get(il as usize).copied().unwrap_or(false) {
            if on_gpu {
                b.kv_gpu_mib += kv_block_mib;
            } else {
                b.kv_host_mib += kv_block_mib;
            }
        }
        let rs = layout
            .recurrent_state_bytes
            .get(il as usize)
            .copied()
            .unwrap_or(0);
        let rs_mib = (rs * n_seq * rs_copies) as f64 / MIB;
        if on_gpu {
            b.recurrent_gpu_mib += rs_mib;
        } else {
            b.recurrent_host_mib += rs_mib;
        }
    }

    // Output buffer: logits of n_outputs_max (= n_seq) rows, host memory.
    b.output_host_mib = (layout.n_vocab as u64 * 4 * n_seq) as f64 / MIB;

    // Compute buffers at one micro-batch.
    let t = cfg
        .ubatch
        .unwrap_or(512)
        .min(cfg.batch.unwrap_or(2048))
        .min(padded_ctx(cfg.ctx)) as f64;
    let ffn_width = if layout.is_moe() {
        let exp = details.n_ff_exp.max(1) as f64 * layout.n_experts_used.max(1) as f64;
        exp.max(details.n_ff_shexp as f64)
    } else {
        details.n_ff as f64
    };
    let n_kv = stream_cells as f64;
    let has_attention = layout.kv_blocks.iter().any(|&k| k);
    let attn_bytes = if !has_attention {
        0.0
    } else if flash_attention_enabled(cfg) {
        // f16 KQ mask, n_kv x n_tokens.
        t * n_kv * 2.0
    } else {
        // f32 KQ (n_head) and mask.
        t * n_kv * (layout.n_head as f64 + 1.0) * 4.0
    };
    let act_bytes = t
        * 4.0
        * (cm.embd_factor * layout.n_embd as f64 + cm.ffn_factor * ffn_width + cm.per_token_floats);
    let full_compute = (act_bytes + attn_bytes) / MIB + cm.fixed_mib;
    let gpu_blocks = (0..nb).filter(|&il| block_on_gpu(il)).count() as u32;
    let mut plain_compute_gpu_mib = 0.0;
    if ngl == 0 {
        b.compute_host_mib = full_compute;
    } else {
        // Flash attention over a quantized cache converts one K (or V) view to f16 on the GPU.
        let dequant = if has_attention
            && flash_attention_enabled(cfg)
            && (cfg.cache_type_k.is_quantized() || cfg.cache_type_v.is_quantized())
        {
            n_kv * layout.n_head_kv as f64 * layout.head_dim_k.max(layout.head_dim_v) as f64 * 2.0
                / MIB
        } else {
            0.0
        };
        // The CUDA compute buffer, fitted to what llama-server reported on the GPU machine for
        // Qwen3.5-35B-A3B and Qwen3-30B-A3B at ubatch 512, 2048 and 4096 and contexts 8k-64k
        // (docs/evidence/gpu-calibration/ and every trial of docs/evidence/gpu-h200-*): per micro-batch
        // token, the attention mask plus about 27 * n_embd floats of activations.
        let per_token = attn_bytes / t + 216.0 * 1024.0 * layout.n_embd as f64 / 2048.0;
        let normal_gpu = t * per_token / MIB + 12.0 + dequant;
        let host_experts = host_expert_bytes.iter().any(|&x| x > 0);
        plain_compute_gpu_mib = normal_gpu + CUDA_UNITEMIZED_MIB;
        b.compute_gpu_mib = if host_experts {
            // With routed experts on the host, a large micro-batch's MoE ops run on the GPU with
            // expert weights copied in: a staging floor that grows with the expert count
            // (336 MiB measured for 256 experts at n_embd 2048, 133 MiB for 128), and about
            // 80 MiB more whatever the micro-batch.
            let stage =
                1.42 * layout.n_experts as f64 * layout.n_embd as f64 / 2048.0 + attn_bytes / MIB;
            normal_gpu.max(stage) + 80.0
        } else {
            normal_gpu
        } + CUDA_UNITEMIZED_MIB;
        // The host side computes the input embedding rows and any host experts.
        let host_ffn = if host_expert_blocks > 0 {
            cm.ffn_factor * ffn_width
        } else {
            0.0
        };
        // Plus the pinned host copy of the attention mask (CUDA_Host grows with the context).
        b.compute_host_mib = (t * 4.0 * (layout.n_embd as f64 + host_ffn) + attn_bytes) / MIB;
    }

    let mut mtp_gpu = (0, 0.0, 0.0);
    if mtp {
        let before = (b.weights_gpu_bytes, b.kv_gpu_mib, b.compute_gpu_mib);
        add_mtp_context(&mut b, layout, cfg, ngl > nb, repack, t, kv_cells(cfg));
        mtp_gpu = (
            b.weights_gpu_bytes - before.0,
            b.kv_gpu_mib - before.1,
            b.compute_gpu_mib - before.2,
        );
    }

    let gpu_mib = b.weights_gpu_mib() + b.kv_gpu_mib + b.recurrent_gpu_mib + b.compute_gpu_mib;
    let host_mib = b.weights_host_mib()
        + b.mapped_span_host_bytes as f64 / MIB
        + b.repack_host_mib()
        + b.kv_host_mib
        + b.recurrent_host_mib
        + b.compute_host_mib
        + b.output_host_mib;
    b.host_weights_file_backed = maps && !cfg.load_mode.locks();
    let file_backed_mib = if b.host_weights_file_backed {
        b.weights_host_mib() + b.mapped_span_host_bytes as f64 / MIB
    } else {
        0.0
    };
    let prediction = MemoryPrediction {
        gpu_mib,
        host_mib,
        host_required_mib: host_mib - file_backed_mib,
        breakdown: b,
        gpu_blocks,
        host_expert_blocks,
        gpu_devices: Vec::new(),
    };
    let parts = Parts {
        ngl,
        host_expert_bytes,
        kv_block_mib,
        n_seq: n_seq * rs_copies,
        plain_compute_gpu_mib,
        pipeline_input_mib: (attn_bytes + t * 4.0 * layout.n_embd as f64) / MIB,
        mtp_gpu,
    };
    (prediction, parts)
}

/// The device of each layer, as llama.cpp assigns them (`llama_model::load_tensors`): index
/// `n_blocks` is the output layer; `None` is the CPU. The first `n_blocks + 1 - ngl` layers
/// stay on the CPU; the others go by the cumulative shares of `weights` (the `-ts`
/// proportions, or each GPU's free memory when `-ts` is unset): layer `il` goes to the first
/// GPU whose cumulative share is above `(il - first) / n_gpu_layers` (f32, as the server).
pub fn layer_devices(n_blocks: u32, ngl: u32, weights: &[f64]) -> Vec<Option<u32>> {
    let n_all = n_blocks as i64 + 1;
    let ngl = (ngl as i64).min(n_all);
    let first = (n_all - ngl).max(0);
    let total: f64 = weights.iter().map(|w| w.max(0.0)).sum();
    let mut cum: Vec<f32> = Vec::with_capacity(weights.len());
    let mut acc = 0.0f64;
    for w in weights {
        acc += if total > 0.0 { w.max(0.0) } else { 1.0 };
        cum.push(acc as f32);
    }
    let sum = cum.last().copied().unwrap_or(1.0);
    for c in &mut cum {
        *c /= sum;
    }
    (0..n_all)
        .map(|il| {
            if weights.is_empty() || il < first || il - first >= ngl {
                return None;
            }
            let x = (il - first) as f32 / ngl as f32;
            let d = cum.partition_point(|&c| c <= x);
            Some(d.min(weights.len() - 1) as u32)
        })
        .collect()
}

/// Launches with input copies per device under pipeline parallelism (`GGML_SCHED_MAX_COPIES`).
const PIPELINE_COPIES: f64 = 4.0;

/// Predict memory for `cfg` on several GPUs. `free_mib` is each GPU's free VRAM, in device
/// order: llama.cpp splits the layers by it when `cfg` sets no `-ts`. With fewer than two
/// GPUs this is [`predict`] (one GPU: `gpu_mib` is that GPU's, `gpu_devices` empty).
///
/// Each block's layer, KV cache and recurrent state go to the device of its layer
/// ([`layer_devices`]), its routed experts too unless they are on the CPU or placed on a named
/// GPU (`-ot ...=CUDAn`); the output layer goes to the last GPU with a share. Every GPU holding
/// a layer has a compute buffer; the MoE staging of CPU-resident experts (op offload) runs on
/// the first GPU. With every layer on the GPUs, no override and the layer split, llama.cpp
/// enables pipeline parallelism and keeps 4 copies of each device's graph inputs (an estimate:
/// not yet checked against a two-GPU run). `-sm none` puts everything on GPU 0; `-sm row` is
/// predicted as the layer split (its row-split matrices are not modelled). `gpu_mib` is the sum.
pub fn predict_devices(
    layout: &ModelLayout,
    cfg: &LaunchConfig,
    free_mib: &[f64],
) -> MemoryPrediction {
    predict_devices_with(layout, cfg, free_mib, HostCaps::detect(), &CPU_COMPUTE)
}

/// [`predict_devices`] with explicit host capabilities and compute constants (for tests).
pub fn predict_devices_with(
    layout: &ModelLayout,
    cfg: &LaunchConfig,
    free_mib: &[f64],
    host: HostCaps,
    cm: &ComputeModel,
) -> MemoryPrediction {
    let (mut p, parts) = predict_parts(layout, cfg, true, host, cm);
    let n_dev = free_mib.len();
    if n_dev < 2 {
        return p;
    }
    let nb = layout.n_blocks;
    let weights: Vec<f64> = match cfg.split_mode {
        Some(crate::config::SplitMode::None) => (0..n_dev).map(|i| f64::from(i == 0)).collect(),
        _ if !cfg.tensor_split.is_empty() => (0..n_dev)
            .map(|i| f64::from(cfg.tensor_split.get(i).copied().unwrap_or(0)))
            .collect(),
        _ => free_mib.to_vec(),
    };
    let devs = layer_devices(nb, parts.ngl, &weights);
    let mut out: Vec<DeviceMemory> = (0..n_dev)
        .map(|d| DeviceMemory {
            device: d as u32,
            ..Default::default()
        })
        .collect();
    let named = |il: u32| -> Option<usize> {
        cfg.gpu_experts
            .iter()
            .find(|g| g.blocks.contains(il))
            .map(|g| (g.device as usize).min(n_dev - 1))
    };
    for (il, bb) in layout.blocks.iter().enumerate() {
        let Some(d) = devs[il].map(|d| d as usize) else {
            continue;
        };
        let o = &mut out[d];
        o.blocks = Some(
            o.blocks
                .map_or((il as u32, il as u32), |(a, _)| (a, il as u32)),
        );
        o.weights_bytes += bb.shared_experts + bb.rest;
        let gpu_experts = bb.routed_experts - parts.host_expert_bytes[il];
        let e = named(il as u32).unwrap_or(d);
        out[e].weights_bytes += gpu_experts;
        out[e].expert_bytes += gpu_experts;
        let o = &mut out[d];
        if layout.kv_blocks.get(il).copied().unwrap_or(false) {
            o.kv_mib += parts.kv_block_mib;
        }
        let rs = layout.recurrent_state_bytes.get(il).copied().unwrap_or(0);
        o.recurrent_mib += (rs * parts.n_seq) as f64 / MIB;
    }
    if let Some(d) = devs[nb as usize] {
        let o = &mut out[d as usize];
        o.output_layer = true;
        o.weights_bytes += layout.output_bytes + layout.other_bytes;
        if layout.output_bytes == 0 {
            o.weights_bytes += layout.token_embd_bytes;
        }
        // The MTP block and its context's KV (its compute buffer below).
        let (w, kv, _) = parts.mtp_gpu;
        o.weights_bytes += w;
        o.kv_mib += kv;
    }
    let pipeline = parts.ngl > nb
        && cfg
            .split_mode
            .is_none_or(|m| m == crate::config::SplitMode::Layer)
        && cfg.no_experts_on_cpu()
        && cfg.gpu_experts.is_empty()
        && out
            .iter()
            .filter(|o| o.blocks.is_some() || o.output_layer)
            .count()
            > 1;
    for o in &mut out {
        let used = o.blocks.is_some() || o.output_layer || o.weights_bytes > 0;
        // The MTP draft context's compute buffer, on the output layer's card.
        let draft = if o.output_layer { parts.mtp_gpu.2 } else { 0.0 };
        if o.device == 0 && parts.ngl > 0 {
            o.compute_mib = p.breakdown.compute_gpu_mib - parts.mtp_gpu.2 + draft;
        } else if used {
            o.compute_mib = parts.plain_compute_gpu_mib + draft;
        }
        if pipeline && used {
            o.compute_mib += (PIPELINE_COPIES - 1.0) * parts.pipeline_input_mib;
        }
        o.total_mib = o.weights_bytes as f64 / MIB + o.kv_mib + o.recurrent_mib + o.compute_mib;
    }
    p.breakdown.compute_gpu_mib = out.iter().map(|o| o.compute_mib).sum();
    p.gpu_mib = out.iter().map(|o| o.total_mib).sum();
    p.gpu_devices = out;
    p
}

/// Does `pred` fit every GPU's budget (`budgets_mib`, device order)? With one budget (or a
/// prediction for one GPU) the summed `gpu_mib` is judged against the summed budgets.
pub fn fits_devices(pred: &MemoryPrediction, budgets_mib: &[f64]) -> bool {
    if pred.gpu_devices.len() < 2 || budgets_mib.len() < 2 {
        return pred.gpu_mib <= budgets_mib.iter().sum::<f64>();
    }
    pred.gpu_devices
        .iter()
        .all(|d| d.total_mib <= budgets_mib.get(d.device as usize).copied().unwrap_or(0.0))
}

/// Why a config must not be launched on a box with `ram_available_mib` of available host
/// RAM, if it must not: the host memory it needs resident (pinned or loaded weights, KV,
/// buffers; not the page cache of a mapped file) is over what is available, so the box would
/// swap (or the OOM killer would end it) instead of measuring the config.
pub fn host_ram_refusal(pred: &MemoryPrediction, ram_available_mib: f64) -> Option<String> {
    (pred.host_required_mib > ram_available_mib).then(|| {
        format!(
            "predicted host RAM {:.0} MiB (weights loaded or pinned in RAM, KV, buffers) is over \
             the {:.0} MiB available: it would swap; not launched. Use {} mmap, put \
             fewer experts on the CPU, or free RAM",
            pred.host_required_mib,
            ram_available_mib,
            crate::engine::Flag::LoadMode
        )
    })
}

/// Why `cfg` must not be launched on this host, if it must not: flags the server refuses
/// together ([`LaunchConfig::check`]), an expert placement naming blocks the model does not
/// have, or [`host_ram_refusal`].
pub fn launch_refusal(
    layout: &ModelLayout,
    cfg: &LaunchConfig,
    has_gpu: bool,
    ram_available_mib: Option<f64>,
) -> Option<String> {
    if let Err(why) = cfg.check() {
        return Some(format!("not launched: {why}"));
    }
    if let Some(Err(why)) = cfg.cpu_experts.as_ref().map(|e| e.check(layout.n_blocks)) {
        return Some(format!("not launched: expert placement: {why}"));
    }
    let ram = ram_available_mib?;
    host_ram_refusal(&predict(layout, cfg, has_gpu), ram)
}

/// The smallest `--n-cpu-moe` whose predicted GPU memory fits `budget_mib`, `None` when even
/// all experts on the host do not fit (or the model has no experts and does not fit).
pub fn min_n_cpu_moe_that_fits(
    layout: &ModelLayout,
    cfg_template: &LaunchConfig,
    budget_mib: f64,
) -> Option<u32> {
    let max = if layout.is_moe() { layout.n_blocks } else { 0 };
    (0..=max).find(|&n| {
        let cfg = LaunchConfig {
            n_cpu_moe: Some(n),
            ..cfg_template.clone()
        };
        predict(layout, &cfg, true).gpu_mib <= budget_mib
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BlockSet, CpuExperts, ExpertProj, LoadMode, PartialBlock};
    use crate::model::BlockBytes;

    fn moe(n_blocks: u32) -> ModelLayout {
        ModelLayout {
            file_type: None,
            file_bytes: 0,
            n_experts_used: 2,
            n_embd: 1024,
            n_head: 8,
            n_head_kv: 2,
            n_vocab: 1000,
            ctx_train: 4096,
            blocks: vec![
                BlockBytes {
                    routed_experts: 100 << 20,
                    shared_experts: 1 << 20,
                    rest: 10 << 20,
                };
                n_blocks as usize
            ],
            token_embd_bytes: 50 << 20,
            output_bytes: 60 << 20,
            other_bytes: 4096,
            tensor_bytes: n_blocks as u64 * (111 << 20) + (110 << 20) + 4096,
            fingerprint: "test".into(),
            ..ModelLayout::uniform(n_blocks, 8, 0, 0)
        }
    }

    fn caps() -> HostCaps {
        HostCaps { repack: false }
    }

    #[test]
    fn weights_split_exactly() {
        let l = moe(10);
        for (gpu, ncmoe, ngl) in [
            (false, None, None),
            (true, None, None),
            (true, Some(4), None),
            (true, Some(99), None),
            (true, None, Some(5)),
            (true, None, Some(0)),
        ] {
            let cfg = LaunchConfig {
                n_cpu_moe: ncmoe,
                n_gpu_layers: ngl,
                ..LaunchConfig::baseline(4096)
            };
            let p = predict_with(&l, &cfg, gpu, caps(), &CPU_COMPUTE);
            let b = &p.breakdown;
            assert_eq!(b.weights_gpu_bytes + b.weights_host_bytes, l.tensor_bytes);
        }
    }

    /// `--spec-type draft-mtp` (issue 54) loads the MTP block, which the server skips
    /// otherwise, and a second context beside the main one; any other type adds nothing here.
    #[test]
    fn drafting_with_mtp_loads_its_block_and_a_second_context() {
        let mut l = moe(8);
        l.kv_blocks = (0..8).map(|il| il % 4 == 3).collect();
        l.recurrent_state_bytes = (0..8)
            .map(|il| if il % 4 == 3 { 0 } else { 1 << 20 })
            .collect();
        l.details.mtp_layers = 1;
        l.details.mtp_bytes = 111 << 20;
        let cfg = |spec, ncmoe| LaunchConfig {
            spec_type: spec,
            n_cpu_moe: ncmoe,
            ..gpu_cfg()
        };
        let p = |c: &LaunchConfig, gpu| predict_with(&l, c, gpu, caps(), &CPU_COMPUTE).breakdown;
        let mtp = Some(crate::config::SpecType::DraftMtp);
        let ngram = Some(crate::config::SpecType::NgramMod);
        for ncmoe in [None, Some(8)] {
            let (plain, drafting) = (p(&cfg(ngram, ncmoe), true), p(&cfg(mtp, ncmoe), true));
            // The whole MTP block on the GPU, its experts too: --n-cpu-moe 8 names blocks 0-7.
            assert_eq!(
                drafting.weights_gpu_bytes - plain.weights_gpu_bytes,
                111 << 20
            );
            assert_eq!(drafting.weights_host_bytes, plain.weights_host_bytes);
            // One more KV block of 4096 f16 cells (2 heads of 128), on the GPU.
            let kv = 4096.0 * 2.0 * 2.0 * 256.0 / MIB;
            assert!((drafting.kv_gpu_mib - plain.kv_gpu_mib - kv).abs() < 1e-9);
            // Four copies of the recurrent state (1 + 3 drafted) to roll a draft back.
            assert!((drafting.recurrent_gpu_mib - 4.0 * plain.recurrent_gpu_mib).abs() < 1e-9);
            assert!(drafting.compute_gpu_mib > plain.compute_gpu_mib);
            assert!((drafting.output_host_mib - 2.0 * plain.output_host_mib).abs() < 1e-9);
        }
        // Two cards: the block and its context go with the output layer, the state copies with
        // their blocks; weights and KV add up to the one-card prediction.
        let two = |c: &LaunchConfig| predict_devices_with(&l, c, &[1.0, 1.0], caps(), &CPU_COMPUTE);
        let (plain, drafting) = (two(&cfg(None, None)), two(&cfg(mtp, None)));
        let [a, b] = [&drafting.gpu_devices[0], &drafting.gpu_devices[1]];
        assert!(b.output_layer);
        assert_eq!(a.weights_bytes, plain.gpu_devices[0].weights_bytes);
        assert_eq!(
            b.weights_bytes - plain.gpu_devices[1].weights_bytes,
            111 << 20
        );
        let one = p(&cfg(mtp, None), true);
        assert_eq!(a.weights_bytes + b.weights_bytes, one.weights_gpu_bytes);
        assert!((a.kv_mib + b.kv_mib - one.kv_gpu_mib).abs() < 1e-9);
        assert!((a.recurrent_mib + b.recurrent_mib - one.recurrent_gpu_mib).abs() < 1e-9);
        assert!(b.compute_mib > plain.gpu_devices[1].compute_mib);
        assert_eq!(a.compute_mib, plain.gpu_devices[0].compute_mib);
        // On the CPU, all of it is host memory.
        let (plain, drafting) = (p(&cfg(None, None), false), p(&cfg(mtp, None), false));
        assert_eq!(
            drafting.weights_host_bytes - plain.weights_host_bytes,
            111 << 20
        );
        assert_eq!(drafting.weights_gpu_bytes, 0);
        // A GGUF without the layer: nothing to load, nothing added.
        l.details.mtp_layers = 0;
        let p = |c: &LaunchConfig| predict_with(&l, c, true, caps(), &CPU_COMPUTE).gpu_mib;
        assert_eq!(p(&cfg(mtp, None)), p(&cfg(None, None)));
    }

    #[test]
    fn n_cpu_moe_moves_experts_and_kv_stays() {
        let l = moe(10);
        let at = |n| {
            predict_with(
                &l,
                &LaunchConfig {
                    n_cpu_moe: Some(n),
                    ..LaunchConfig::baseline(4096)
                },
                true,
                caps(),
                &CPU_COMPUTE,
            )
        };
        let p0 = at(0);
        let p4 = at(4);
        assert_eq!(p0.breakdown.weights_host_bytes, 50 << 20);
        assert_eq!(
            p0.breakdown.weights_gpu_bytes - p4.breakdown.weights_gpu_bytes,
            4 * (100 << 20)
        );
        assert_eq!(p0.breakdown.kv_gpu_mib, p4.breakdown.kv_gpu_mib);
        // 10 blocks * 4096 cells * 2 heads * 128 * 2 bytes * (K + V)
        assert_eq!(
            p0.breakdown.kv_gpu_mib,
            10.0 * 4096.0 * 256.0 * 2.0 * 2.0 / MIB
        );
        assert!(p4.gpu_mib < p0.gpu_mib);
        assert_eq!(p4.host_expert_blocks, 4);
    }

    #[test]
    fn ngl_counts_the_output_layer() {
        let l = moe(10);
        let p = |ngl| {
            predict_with(
                &l,
                &LaunchConfig {
                    n_gpu_layers: Some(ngl),
                    ..LaunchConfig::baseline(4096)
                },
                true,
                caps(),
                &CPU_COMPUTE,
            )
        };
        assert_eq!(p(1).gpu_blocks, 0);
        assert_eq!(p(1).breakdown.weights_gpu_bytes, (60 << 20) + 4096);
        assert_eq!(p(11).gpu_blocks, 10);
        assert_eq!(p(5).gpu_blocks, 4);
        assert_eq!(p(0).gpu_mib, 0.0);
    }

    #[test]
    fn quantized_kv_is_smaller_and_min_ncmoe_is_monotone() {
        let l = moe(10);
        let f16 = predict_with(
            &l,
            &LaunchConfig::baseline(8192),
            true,
            caps(),
            &CPU_COMPUTE,
        );
        let q8 = predict_with(
            &l,
            &LaunchConfig {
                cache_type_k: KvType::Q8_0,
                cache_type_v: KvType::Q8_0,
                ..LaunchConfig::baseline(8192)
            },
            true,
            caps(),
            &CPU_COMPUTE,
        );
        assert!((q8.breakdown.kv_gpu_mib / f16.breakdown.kv_gpu_mib - 34.0 / 64.0).abs() < 1e-9);
        let t = LaunchConfig::baseline(4096);
        let all = predict_with(&l, &t, true, caps(), &CPU_COMPUTE).gpu_mib;
        assert_eq!(min_n_cpu_moe_that_fits(&l, &t, all + 1.0), Some(0));
        // Three host blocks free 300 MiB of experts, but the first one also brings the MoE
        // op-offload staging into the GPU compute buffer (2/3 of 100 MiB + 48 MiB): four.
        let n = min_n_cpu_moe_that_fits(&l, &t, all - 250.0).unwrap();
        assert_eq!(n, 4);
        assert_eq!(min_n_cpu_moe_that_fits(&l, &t, 10.0), None);
    }

    fn gpu_cfg() -> LaunchConfig {
        LaunchConfig {
            n_gpu_layers: Some(999),
            fit: Some(false),
            ..LaunchConfig::baseline(4096)
        }
    }

    fn with_experts(c: CpuExperts) -> LaunchConfig {
        LaunchConfig {
            cpu_experts: Some(c),
            ..gpu_cfg()
        }
    }

    #[test]
    fn ot_first_n_predicts_exactly_what_n_cpu_moe_does() {
        let l = moe(10);
        for n in [0, 1, 4, 10] {
            let ncmoe = LaunchConfig {
                n_cpu_moe: Some(n),
                ..gpu_cfg()
            };
            let ot = if n == 0 {
                gpu_cfg()
            } else {
                with_experts(CpuExperts::first(n))
            };
            let a = predict_with(&l, &ncmoe, true, caps(), &CPU_COMPUTE);
            let b = predict_with(&l, &ot, true, caps(), &CPU_COMPUTE);
            assert_eq!(a, b, "n={n}");
        }
    }

    #[test]
    fn last_blocks_and_a_partial_block_move_exactly_their_bytes() {
        let mut l = moe(10);
        // Down is the largest projection, as in Q4_K_M files (Q6_K down on some blocks).
        l.details.expert_proj = vec![
            crate::model::ExpertProjBytes {
                up: 30 << 20,
                gate: 30 << 20,
                gate_up: 0,
                down: 40 << 20,
            };
            10
        ];
        let p = |c: &LaunchConfig| predict_with(&l, c, true, caps(), &CPU_COMPUTE);
        let none = p(&gpu_cfg());
        let last3 = p(&with_experts(CpuExperts::last(3, 10)));
        let first3 = p(&with_experts(CpuExperts::first(3)));
        let moved =
            |x: &MemoryPrediction| none.breakdown.weights_gpu_bytes - x.breakdown.weights_gpu_bytes;
        assert_eq!(moved(&last3), 3 * (100 << 20));
        assert_eq!(moved(&first3), moved(&last3));
        assert_eq!(last3.host_expert_blocks, 3);
        // Same weights on the GPU, same compute: the same VRAM whichever end.
        assert_eq!(first3.gpu_mib, last3.gpu_mib);
        for (projs, bytes) in [
            (vec![ExpertProj::Down], 40u64 << 20),
            (vec![ExpertProj::Gate, ExpertProj::Down], 70 << 20),
            (vec![ExpertProj::Up], 30 << 20),
        ] {
            let c = CpuExperts {
                blocks: BlockSet::last(2, 10),
                partial: Some(PartialBlock::new(7, projs)),
            };
            let x = p(&with_experts(c));
            assert_eq!(moved(&x), 2 * (100 << 20) + bytes);
            assert_eq!(
                x.breakdown.weights_gpu_bytes + x.breakdown.weights_host_bytes,
                l.tensor_bytes
            );
            assert_eq!(x.host_expert_blocks, 3);
        }
        // A layout without the per-projection split (saved before it existed) splits evenly.
        let old = moe(10);
        let c = CpuExperts {
            blocks: BlockSet::default(),
            partial: Some(PartialBlock::new(9, [ExpertProj::Down])),
        };
        let x = predict_with(&old, &with_experts(c), true, caps(), &CPU_COMPUTE);
        assert_eq!(
            x.breakdown.weights_host_bytes - (50 << 20),
            (100 << 20) - 2 * ((100 << 20) / 3)
        );
    }

    #[test]
    fn pinned_experts_count_in_host_ram_and_mapped_ones_do_not() {
        let l = moe(10);
        let at = |mode: LoadMode| {
            predict_with(
                &l,
                &LaunchConfig {
                    n_cpu_moe: Some(6),
                    load_mode: mode,
                    ..gpu_cfg()
                },
                true,
                caps(),
                &CPU_COMPUTE,
            )
        };
        let mapped = at(LoadMode::Auto);
        let pinned = at(LoadMode::None);
        let locked = at(LoadMode::MmapMlock);
        let host_weights = (6 * (100u64 << 20) + (50 << 20)) as f64 / MIB;
        assert!(mapped.breakdown.host_weights_file_backed);
        assert!(!pinned.breakdown.host_weights_file_backed);
        // Mapped: the GPU tensors inside the mapped span count in host_mib, not required.
        assert!(mapped.breakdown.mapped_span_host_bytes > 0);
        assert_eq!(pinned.breakdown.mapped_span_host_bytes, 0);
        let others = pinned.host_mib - host_weights;
        assert!((pinned.host_required_mib - pinned.host_mib).abs() < 1e-9);
        assert!((mapped.host_required_mib - others).abs() < 1e-6);
        // Locked mapped pages cannot be dropped either.
        assert!((locked.host_required_mib - locked.host_mib).abs() < 1e-9);
        // Same VRAM whatever the load mode.
        assert_eq!(mapped.gpu_mib, pinned.gpu_mib);

        // The launch rule: pinned experts over the available RAM are refused, mapped are not.
        let ram = others + host_weights / 2.0;
        assert!(host_ram_refusal(&mapped, ram).is_none());
        let why = host_ram_refusal(&pinned, ram).unwrap();
        assert!(
            why.contains("would swap") && why.contains("--load-mode mmap"),
            "{why}"
        );
        assert!(host_ram_refusal(&pinned, pinned.host_required_mib + 1.0).is_none());
    }

    #[test]
    fn configs_the_server_would_refuse_are_never_launched() {
        let l = moe(10);
        let ok = with_experts(CpuExperts::last(3, 10));
        assert_eq!(launch_refusal(&l, &ok, true, None), None);
        let fit_and_ot = LaunchConfig {
            fit: Some(true),
            ..ok.clone()
        };
        assert!(launch_refusal(&l, &fit_and_ot, true, None)
            .unwrap()
            .contains("--fit on cannot be combined"));
        let beyond = with_experts(CpuExperts::last(3, 12));
        assert!(launch_refusal(&l, &beyond, true, None)
            .unwrap()
            .contains("block 10 is out of range"));
        let pinned = LaunchConfig {
            load_mode: LoadMode::None,
            ..ok
        };
        assert!(launch_refusal(&l, &pinned, true, Some(10.0))
            .unwrap()
            .contains("would swap"));
        assert_eq!(launch_refusal(&l, &pinned, true, None), None);
    }

    #[test]
    fn layers_go_to_devices_by_cumulative_share_as_llama_cpp_does() {
        // 10 blocks + output over two equal shares: 0..=5 on GPU 0, 6..=9 and output on GPU 1.
        let d = layer_devices(10, 11, &[1.0, 1.0]);
        assert_eq!(d.iter().filter(|x| **x == Some(0)).count(), 6);
        assert_eq!(d[5], Some(0));
        assert_eq!(d[6], Some(1));
        assert_eq!(d[10], Some(1), "the output layer is on the last GPU");
        // 48 blocks by free memory 24 + 16 GiB: the first 30 layers on GPU 0.
        let d = layer_devices(48, 999, &[24.0 * 1024.0, 16.0 * 1024.0]);
        assert_eq!(d.iter().filter(|x| **x == Some(0)).count(), 30);
        // -ngl 5: the first 6 blocks stay on the CPU; a zero share gets nothing.
        let d = layer_devices(10, 5, &[1.0, 1.0]);
        assert!(d[..6].iter().all(|x| x.is_none()));
        let d = layer_devices(10, 11, &[0.0, 3.0]);
        assert!(d.iter().all(|x| *x == Some(1)));
    }

    #[test]
    fn two_gpus_split_weights_kv_and_compute_and_sum_to_the_single_prediction() {
        let l = moe(10);
        let ts = |ts: Vec<u32>, cpu: Option<CpuExperts>| LaunchConfig {
            tensor_split: ts,
            cpu_experts: cpu,
            ..gpu_cfg()
        };
        let one = predict_with(&l, &gpu_cfg(), true, caps(), &CPU_COMPUTE);
        // One GPU: exactly the single-GPU prediction.
        assert_eq!(
            predict_devices_with(&l, &gpu_cfg(), &[16000.0], caps(), &CPU_COMPUTE),
            one
        );
        let p = predict_devices_with(&l, &ts(vec![1, 1], None), &[1.0, 1.0], caps(), &CPU_COMPUTE);
        let [a, b] = [&p.gpu_devices[0], &p.gpu_devices[1]];
        assert_eq!(a.blocks, Some((0, 5)));
        assert_eq!(b.blocks, Some((6, 9)));
        assert!(b.output_layer && !a.output_layer);
        assert_eq!(a.weights_bytes, 6 * (111 << 20));
        assert_eq!(b.weights_bytes, 4 * (111 << 20) + (60 << 20) + 4096);
        assert_eq!(
            a.weights_bytes + b.weights_bytes,
            one.breakdown.weights_gpu_bytes
        );
        assert!((a.kv_mib + b.kv_mib - one.breakdown.kv_gpu_mib).abs() < 1e-9);
        assert!((a.kv_mib / b.kv_mib - 1.5).abs() < 1e-9);
        // Each GPU has a compute buffer; pipeline parallelism adds its input copies.
        assert!(a.compute_mib > one.breakdown.compute_gpu_mib);
        assert!((p.gpu_mib - (a.total_mib + b.total_mib)).abs() < 1e-9);
        // Experts of GPU 1's blocks on the CPU: only GPU 1 gets lighter, no pipeline copies.
        let q = predict_devices_with(
            &l,
            &ts(vec![1, 1], Some(CpuExperts::last(2, 10))),
            &[1.0, 1.0],
            caps(),
            &CPU_COMPUTE,
        );
        assert_eq!(q.gpu_devices[0].weights_bytes, a.weights_bytes);
        assert_eq!(
            q.gpu_devices[1].weights_bytes,
            b.weights_bytes - 2 * (100 << 20)
        );
        assert_eq!(q.gpu_devices[1].expert_bytes, 2 * (100 << 20));
        // The MoE staging of host experts is on GPU 0.
        assert!(q.gpu_devices[0].compute_mib > q.gpu_devices[1].compute_mib);
        // Experts placed on a named GPU move there; the layer stays.
        let mut r = ts(vec![1, 1], None);
        r.gpu_experts = vec![crate::config::GpuExperts {
            device: 1,
            blocks: BlockSet::new([0, 1]),
        }];
        let r = predict_devices_with(&l, &r, &[1.0, 1.0], caps(), &CPU_COMPUTE);
        assert_eq!(
            r.gpu_devices[0].weights_bytes,
            a.weights_bytes - 2 * (100 << 20)
        );
        assert_eq!(
            r.gpu_devices[1].weights_bytes,
            b.weights_bytes + 2 * (100 << 20)
        );
        assert_eq!(r.gpu_devices[0].blocks, Some((0, 5)));
        // No -ts: split by free memory. -sm none: all on GPU 0.
        let free = predict_devices_with(&l, &gpu_cfg(), &[3000.0, 1000.0], caps(), &CPU_COMPUTE);
        assert_eq!(free.gpu_devices[0].blocks, Some((0, 8)));
        let none = LaunchConfig {
            split_mode: Some(crate::config::SplitMode::None),
            ..gpu_cfg()
        };
        let none = predict_devices_with(&l, &none, &[1.0, 1.0], caps(), &CPU_COMPUTE);
        assert_eq!(none.gpu_devices[1].total_mib, 0.0);
        assert_eq!(
            none.gpu_devices[0].weights_bytes,
            one.breakdown.weights_gpu_bytes
        );
        // Fits is judged per card.
        assert!(fits_devices(
            &q,
            &[q.gpu_devices[0].total_mib, q.gpu_devices[1].total_mib]
        ));
        assert!(!fits_devices(&q, &[q.gpu_devices[0].total_mib - 1.0, 1e9]));
        assert!(fits_devices(&one, &[one.gpu_mib]));
    }
}
