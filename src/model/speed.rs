//! Speed prediction: generation (tg) and prompt (pp) tok/s for a [`LaunchConfig`] on a box,
//! next to the memory prediction, from the bytes each token moves.
//! (One file over 800 lines: one model and its fitted constants, with its unit tests.)
//!
//! - **Decode, one token.** The GPU reads its resident weights used per token (attention,
//!   shared experts, router and the top-k of n routed experts of its blocks, the output matrix)
//!   and the KV it attends over, at its memory bandwidth. The CPU reads the top-k of n routed
//!   experts of its blocks at an effective share of the host's read bandwidth, which grows with
//!   the thread count. Each block adds a fixed launch/sync overhead (a recurrent block of a
//!   hybrid model its own, larger one), each block whose experts are on the CPU adds a
//!   GPU->CPU->GPU round trip, and a quantized KV cache adds its dequantization per byte
//!   attended over. tg = 1 / the sum.
//! - **Prefill, one micro-batch.** With op offload (micro-batch of 32 tokens or more) the CPU
//!   experts a micro-batch uses are copied to the GPU, from pinned buffers (`--load-mode none`)
//!   or from the page cache of the mapped file (much slower), then the GPU computes every
//!   token: a per-token cost proportional to the bytes of weights a token uses (plus one per
//!   recurrent block), plus a fixed cost per block and micro-batch. Without op offload the CPU
//!   computes its experts. A real model's micro-batch uses all its experts; a synthetic one's
//!   (random routers) only a fitted share, per architecture.
//!
//! The constants are fitted by least squares on relative error to the GPU evidence in
//! docs/evidence/ (its manifest.json names the runs); `cargo run --example refit` refits and
//! prints them, and `tests/it/speed_replay.rs` checks them against held-out runs and trials
//! (`cargo test --test it speed_replay:: -- --nocapture` prints predicted vs measured per config).
//! Intervals are the model's error on those runs, which includes the +-15 % launch-to-launch
//! noise of the shared GPU machine. docs/how-it-works.md describes the model and its fit.

pub mod link;

use super::ModelLayout;
use crate::config::LaunchConfig;
use crate::hardware::HardwareProfile;
use serde::{Deserialize, Serialize};

const GB: f64 = 1e9;

/// The prompt length the plan's pp is predicted for (the default workload's prompt).
pub const DEFAULT_PROMPT_TOKENS: u32 = 2048;

/// Fitted constants of the speed model. See the module doc for where they come from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpeedConstants {
    /// Share of the measured host read bandwidth the CPU expert matmuls reach at all physical
    /// cores.
    pub host_bw_fraction: f64,
    /// Host bandwidth at `t` of `p` physical cores: `(t/p)^thread_exponent` of the full rate.
    pub thread_exponent: f64,
    /// Decode overhead per attention (or dense) block on the GPU (kernel launches,
    /// synchronisation), ms.
    pub block_overhead_ms: f64,
    /// Decode overhead per recurrent block on the GPU (a hybrid model's linear-attention
    /// blocks, e.g. Qwen3.5's gated delta net: more, smaller kernels), ms.
    pub recurrent_block_overhead_ms: f64,
    /// Extra decode time per GB of quantized KV cache (q8_0, q4_0, ...) the GPU attends over:
    /// the attention kernel dequantizes it, which costs more than reading f16. s/GB.
    pub kv_quant_s_per_gb: f64,
    /// Extra decode overhead per block whose experts are on the CPU (activations to the host
    /// and back, CPU thread wake-up), ms.
    pub cpu_block_overhead_ms: f64,
    /// Share of the PCIe link's nominal rate that pinned host-to-device copies reach.
    pub h2d_pinned_fraction: f64,
    /// Share of the PCIe link's nominal rate that copies from pageable (memory-mapped) host
    /// memory reach.
    pub h2d_pageable_fraction: f64,
    /// GPU prefill: seconds per token per GB of weights a token uses (active bytes); compute
    /// bound, one constant for the GPUs seen (H100 and H200 have the same compute).
    pub prefill_s_per_token_gb: f64,
    /// GPU prefill: fixed cost per attention (or dense) block and micro-batch, ms.
    pub prefill_block_ms: f64,
    /// GPU prefill: fixed cost per recurrent block and micro-batch (a hybrid model's
    /// linear-attention blocks: more, smaller kernels, as in decode), ms.
    pub prefill_recurrent_block_ms: f64,
    /// GPU prefill: extra cost per token and recurrent block (the linear-attention scan), us.
    /// Negative when such a block computes faster than its bytes say.
    pub prefill_recurrent_us: f64,
    /// Share of a CPU block's expert bytes a micro-batch copies for a synthetic (random
    /// weights) model of the `qwen3moe` architecture: `[first, last, power]`, the share at the
    /// first block and at the last, linear in depth^power between them (depth 0 at the first
    /// block, 1 at the last), clamped to (0, 1]: random routers send
    /// tokens to few experts, fewer the deeper the block (the token states grow alike), and
    /// llama.cpp copies only the experts a micro-batch uses. Real models route over all
    /// experts at these micro-batch sizes: 1 at every depth.
    pub synthetic_touch_qwen3moe: [f64; 3],
    /// Same for a synthetic `qwen35moe` (Qwen3.5) model, and any other synthetic architecture.
    pub synthetic_touch_qwen35moe: [f64; 3],
    /// Relative error (one side) of tg that the held-out replay showed (about 90 % coverage).
    pub tg_rel_err: f64,
    /// Same for pp.
    pub pp_rel_err: f64,
}

/// The model's constants, fitted by least squares on relative error to every single-GPU run
/// in docs/evidence/ except those planned with these constants (108 config groups, a config
/// measured on several leases pooled: H100 and H200, Qwen3.5-35B-A3B and Qwen3-30B-A3B
/// synthetic Q4_K_M, 16 and 24 GiB cards, 8 and 16 threads, mmap and pinned, `--n-cpu-moe` and
/// `last-split` placements). The thread exponent, the page-cache copy rate and the synthetic
/// models' touch powers are chosen by grid search around the least-squares fit; the pinned
/// copy rate is measured, not fitted. `cargo run --example refit` refits and prints them;
/// `tests/it/speed_replay.rs` checks that they are that refit, and that a refit without a run
/// predicts it within the stated error.
///
/// - host: CPU expert reads run at 0.88x what `qtune hw` measured plus 0.17 ms per CPU block;
///   linear in threads. Only one host (a leased 16-core Xeon) is in the data, and its leases
///   ran the CPU experts 12-19 % apart at the same measured bandwidth (the fraction is their
///   average): on other CPUs this part is the least certain.
/// - GPU-side overhead per token: 0.077 ms per attention block, 0.117 ms per recurrent block
///   (Qwen3.5's gated delta net): both GPUs decode the all-GPU Qwen3.5-35B-A3B (30 recurrent +
///   10 attention blocks) at ~190-220 tok/s although their bandwidths differ by 40 %, and the
///   all-GPU Qwen3-30B-A3B (48 attention blocks) at ~205-245.
/// - a quantized KV cache costs 5.5 ms per GB attended over on top of its read (q8_0 KV
///   decodes the all-GPU Qwen3-30B-A3B at ~205 tok/s, f16 at ~240).
/// - prefill: a fixed 0.27 ms per attention block and micro-batch, 0.62 ms per recurrent block
///   (one cost for both put the attention-only Qwen3-30B-A3B's `-ub 512` prompt ~20 % low),
///   and 0.7 us per token per recurrent block on top of the per-byte compute (4.0e-5 s per
///   token per GB of active weights).
/// - pinned copies reach 47 GB/s, 75 % of the PCIe 5 x16 nominal rate (measured on the box,
///   not fitted: it anchors the copy terms); copies from the page cache 17 % (11 GB/s).
/// - the synthetic models route each micro-batch to few experts, how few depending on the
///   block's depth: a micro-batch copies 65 % of the synthetic Qwen3-30B-A3B's first block's
///   CPU expert bytes, falling linearly to 9 % at the last; the Qwen3.5-35B-A3B copies 7 % at
///   the first block rising to 29 % at the last along depth^8 (the power by grid search over
///   1-8, at its edge): flat over its first blocks, steep over its last.
/// - errors: the 90th percentile of the held-out relative errors (three folds: tg 10.6 %, pp
///   14.6 %), stated as 13 % and 23 %; they include the +-15 % launch-to-launch noise of the
///   shared machine.
pub const FITTED: SpeedConstants = SpeedConstants {
    host_bw_fraction: 0.881,
    thread_exponent: 1.0,
    block_overhead_ms: 0.0767,
    recurrent_block_overhead_ms: 0.117,
    kv_quant_s_per_gb: 5.48e-3,
    cpu_block_overhead_ms: 0.174,
    h2d_pinned_fraction: 47.0 / 63.0,
    h2d_pageable_fraction: 0.170,
    prefill_s_per_token_gb: 4.03e-5,
    prefill_block_ms: 0.269,
    prefill_recurrent_block_ms: 0.617,
    prefill_recurrent_us: 0.720,
    synthetic_touch_qwen3moe: [0.654, 0.0885, 1.0],
    synthetic_touch_qwen35moe: [0.0685, 0.290, 8.0],
    tg_rel_err: 0.13,
    pp_rel_err: 0.23,
};

/// The weight types of the runs [`FITTED`] was fitted on (synthetic Q4_K_M mixes: Q4_K and Q6_K
/// matrices, F32 norms, routers and state). A model whose weights are largely other types is
/// predicted from its bytes alone: no run measured how fast their kernels read them.
pub const FITTED_WEIGHT_TYPES: [&str; 3] = ["Q4_K", "Q6_K", "F32"];

/// A model whose weights are at least this share in types outside [`FITTED_WEIGHT_TYPES`] is
/// an extrapolation of the speed model.
pub const UNFITTED_SHARE: f64 = 0.10;

/// The weight types of `layout` outside [`FITTED_WEIGHT_TYPES`] and their share of its bytes,
/// when that share is at least [`UNFITTED_SHARE`].
pub fn unfitted_types(layout: &ModelLayout) -> Option<(Vec<String>, f64)> {
    let total: u64 = layout.bytes_by_type.values().sum();
    let other: Vec<(&String, &u64)> = layout
        .bytes_by_type
        .iter()
        .filter(|(t, _)| !FITTED_WEIGHT_TYPES.contains(&t.as_str()))
        .collect();
    let share = other.iter().map(|(_, &b)| b).sum::<u64>() as f64 / total.max(1) as f64;
    (share >= UNFITTED_SHARE).then(|| (other.iter().map(|(t, _)| (*t).clone()).collect(), share))
}

/// What the speed model needs to know about a box.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedBox {
    /// GPU memory bandwidth, GB/s; None with no GPU (or an unknown card).
    pub gpu_bw_gbs: Option<f64>,
    /// Nominal PCIe host-to-device rate of the link, GB/s (gen x width).
    pub pcie_gbs: Option<f64>,
    /// Host read bandwidth at all cores, GB/s.
    pub host_bw_gbs: f64,
    /// Physical cores (the server's default thread count).
    pub physical_cores: u32,
    /// Host read bandwidth at fewer threads as a share of `host_bw_gbs`, ascending by
    /// threads (`qtune hw` measures it); empty: the fitted thread exponent is used.
    #[serde(default)]
    pub host_bw_share_by_threads: Vec<(u32, f64)>,
    /// The links to the RPC workers (`tune --rpc`, as measured): a config over them pays
    /// [`link::network`] per token and micro-batch. Empty: no network term.
    #[serde(default)]
    pub rpc_links: Vec<link::RpcLink>,
    /// Where the inputs came from, for the user.
    pub sources: Vec<String>,
}

impl SpeedBox {
    /// The share of the all-threads host bandwidth that `threads` threads read at: measured
    /// (interpolated between `qtune hw`'s thread counts) when there is a measurement, else
    /// `(threads / physical cores)^thread_exponent`.
    pub fn thread_share(&self, threads: u32, k: &SpeedConstants) -> f64 {
        let p = self.physical_cores.max(1);
        let t = threads.max(1);
        if self.host_bw_share_by_threads.is_empty() || t >= p {
            return (t as f64 / p as f64).min(1.0).powf(k.thread_exponent);
        }
        let mut pts = self.host_bw_share_by_threads.clone();
        pts.push((p, 1.0));
        pts.sort_by_key(|x| x.0);
        let mut prev = (0u32, 0.0f64);
        for (pt, share) in pts {
            if t <= pt {
                let f = (t - prev.0) as f64 / (pt - prev.0).max(1) as f64;
                return (prev.1 + f * (share - prev.1)).clamp(0.01, 1.0);
            }
            prev = (pt, share);
        }
        1.0
    }
}

/// Host read bandwidth assumed when `qtune hw` did not measure it (a dual-channel DDR5
/// desktop reads about this much).
pub const DEFAULT_HOST_BW_GBS: f64 = 60.0;

/// GPU memory bandwidth (GB/s) of common cards by name, for boxes whose NVML does not say.
/// First match wins: a longer name before its prefix ("RTX 4070 Ti SUPER" before "RTX 4070 Ti").
const GPU_BW_TABLE: [(&str, f64); 26] = [
    ("H200", 4800.0),
    ("H100 80GB HBM3", 3350.0),
    ("H100 NVL", 3900.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB PCIe", 1935.0),
    ("A100", 1555.0),
    ("L40S", 864.0),
    ("L4", 300.0),
    ("A10", 600.0),
    ("RTX 5090", 1792.0),
    ("RTX 5080", 960.0),
    ("RTX 4090", 1008.0),
    ("RTX 4080", 717.0),
    ("RTX 4070 Ti SUPER", 672.0),
    ("RTX 4070 Ti", 504.0),
    ("RTX 4060 Ti", 288.0),
    ("RTX 5060 Ti", 448.0),
    ("RTX 3060 Ti", 448.0),
    ("RTX 3060", 360.0),
    ("RTX 3090 Ti", 1008.0),
    ("RTX 3090", 936.0),
    ("RTX 3080", 760.0),
    ("RTX A6000", 768.0),
    ("RTX 6000 Ada", 960.0),
];

/// GPU memory bandwidth of a card by its NVML name, GB/s.
pub fn gpu_bandwidth_by_name(name: &str) -> Option<f64> {
    GPU_BW_TABLE
        .iter()
        .find(|(k, _)| name.contains(k))
        .map(|&(_, v)| v)
}

/// Nominal PCIe rate of one direction, GB/s (after line encoding).
pub fn pcie_gbs(gen: u32, width: u32) -> f64 {
    let per_lane = match gen {
        1 => 0.25,
        2 => 0.5,
        3 => 0.985,
        4 => 1.969,
        5 => 3.938,
        _ => 7.877,
    };
    per_lane * width as f64
}

impl SpeedBox {
    /// The inputs from a probed box (the first GPU: the model predicts one GPU).
    pub fn from_hardware(hw: &HardwareProfile) -> SpeedBox {
        let mut sources = Vec::new();
        let g = hw.gpus.first();
        let gpu_bw_gbs =
            g.and_then(
                |g| match (g.mem_bandwidth_gbs, gpu_bandwidth_by_name(&g.name)) {
                    (Some(v), _) if v > 0.0 => {
                        sources.push(format!("GPU {} (NVML)", crate::util::gbs(v)));
                        Some(v)
                    }
                    (_, Some(v)) => {
                        sources.push(format!("GPU {} (by name)", crate::util::gbs(v)));
                        Some(v)
                    }
                    _ => {
                        sources.push(format!(
                            "GPU memory bandwidth of {} unknown: no speed prediction",
                            g.name
                        ));
                        None
                    }
                },
            );
        let pcie_gbs = g.map(|g| {
            let gen = g.pcie.gen_max.or(g.pcie.gen_current).unwrap_or(4);
            let width = g.pcie.width_max.or(g.pcie.width_current).unwrap_or(16);
            let v = pcie_gbs(gen, width);
            sources.push(format!("PCIe {gen}.0 x{width}"));
            v
        });
        let host_bw_gbs = match hw.host.mem_bandwidth_gbs {
            Some(v) if v > 0.0 => {
                sources.push(format!("host {} (measured)", crate::util::gbs(v)));
                v
            }
            _ => {
                sources.push(format!(
                    "host {DEFAULT_HOST_BW_GBS:.0} GB/s (assumed, not measured)"
                ));
                DEFAULT_HOST_BW_GBS
            }
        };
        let host_bw_share_by_threads = match hw.host.mem_bandwidth_gbs {
            Some(all) if all > 0.0 => hw
                .host
                .mem_bandwidth_by_threads
                .iter()
                .filter(|t| t.gbs > 0.0)
                .map(|t| (t.threads, (t.gbs / all).min(1.0)))
                .collect(),
            _ => Vec::new(),
        };
        SpeedBox {
            host_bw_share_by_threads,
            rpc_links: Vec::new(),
            gpu_bw_gbs,
            pcie_gbs,
            host_bw_gbs,
            physical_cores: hw
                .host
                .physical_cores
                .unwrap_or(hw.host.logical_cores)
                .max(1),
            sources,
        }
    }
}

/// A predicted rate with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub tps: f64,
    pub low: f64,
    pub high: f64,
}

impl Estimate {
    fn new(tps: f64, rel_err: f64) -> Estimate {
        Estimate {
            tps,
            low: tps * (1.0 - rel_err),
            high: tps * (1.0 + rel_err),
        }
    }
    /// "95 tok/s [81, 109]".
    pub fn text(&self) -> String {
        format!("{:.0} tok/s [{:.0}, {:.0}]", self.tps, self.low, self.high)
    }
}

/// Where one generated token's time goes, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DecodeSplit {
    /// GPU weight and KV reads.
    pub gpu_ms: f64,
    /// CPU experts: their reads plus the fixed cost of each CPU block (round trip, threads).
    pub cpu_experts_ms: f64,
    /// Per-block launch and synchronisation overhead of the GPU.
    pub overhead_ms: f64,
    /// The links to RPC workers ([`link::network`]).
    #[serde(default)]
    pub network_ms: f64,
}

impl DecodeSplit {
    pub fn total_ms(&self) -> f64 {
        self.gpu_ms + self.cpu_experts_ms + self.overhead_ms + self.network_ms
    }
}

/// Where one micro-batch's prefill time goes, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PrefillSplit {
    /// Copying CPU experts to the GPU (op offload).
    pub copy_ms: f64,
    /// GPU compute.
    pub gpu_ms: f64,
    /// CPU expert compute (no op offload).
    pub cpu_ms: f64,
    /// The links to RPC workers ([`link::network`]).
    #[serde(default)]
    pub network_ms: f64,
    /// Tokens per micro-batch.
    pub ubatch: u32,
}

/// The speed model's answer for one config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedPrediction {
    pub tg: Estimate,
    pub pp: Estimate,
    pub decode: DecodeSplit,
    pub prefill: PrefillSplit,
    /// The prompt length pp is predicted for.
    pub prompt_tokens: u32,
    /// The bound tg would reach without overheads (bytes / bandwidth only): the roofline.
    pub tg_bound_tps: f64,
}

/// Bytes one decoded token reads, by device.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TokenBytes {
    /// Weights a token uses on the GPU (active experts only) plus the KV it attends over.
    pub gpu: f64,
    /// Active routed-expert bytes on the CPU.
    pub cpu: f64,
    /// All routed-expert bytes on the CPU (what op offload may copy per micro-batch).
    pub cpu_experts_all: f64,
    /// Blocks with any routed expert on the CPU.
    pub cpu_blocks: u32,
    /// Blocks whose layers run on the GPU.
    pub gpu_blocks: u32,
    /// Of those, recurrent (linear-attention) blocks.
    pub gpu_recurrent_blocks: u32,
    /// Quantized (q8_0, q4_0, ...) KV bytes the GPU attends over per token.
    pub gpu_kv_quant: f64,
    /// Weight bytes a token uses, all devices (active experts only).
    pub active_total: f64,
}

/// Routed-expert bytes of each block on the host for `cfg` (the memory model's placement).
pub fn host_expert_bytes(layout: &ModelLayout, cfg: &LaunchConfig, has_gpu: bool) -> Vec<u64> {
    let nb = layout.n_blocks;
    let ngl = if has_gpu {
        cfg.n_gpu_layers.unwrap_or(nb + 1).min(nb + 1)
    } else {
        0
    };
    let first_gpu_block = (nb + 1).saturating_sub(ngl);
    let ncmoe = cfg.n_cpu_moe.unwrap_or(0).min(nb);
    layout
        .blocks
        .iter()
        .enumerate()
        .map(|(il, bb)| {
            let il = il as u32;
            if il < first_gpu_block || il < ncmoe {
                bb.routed_experts
            } else {
                cfg.cpu_experts
                    .as_ref()
                    .map_or(0, |c| layout.cpu_expert_bytes(il, c))
            }
        })
        .collect()
}

/// The bytes a decoded token reads at context depth `depth`, by device.
pub fn token_bytes(
    layout: &ModelLayout,
    cfg: &LaunchConfig,
    has_gpu: bool,
    depth: u32,
) -> TokenBytes {
    let nb = layout.n_blocks;
    let ngl = if has_gpu {
        cfg.n_gpu_layers.unwrap_or(nb + 1).min(nb + 1)
    } else {
        0
    };
    let first_gpu_block = (nb + 1).saturating_sub(ngl);
    let active = if layout.n_experts > 0 {
        layout.n_experts_used as f64 / layout.n_experts as f64
    } else {
        1.0
    };
    let host = host_expert_bytes(layout, cfg, has_gpu);
    let (bk, bv) = (
        cfg.cache_type_k.bytes_per_element(),
        cfg.cache_type_v.bytes_per_element(),
    );
    let kv_elems = depth as f64 * layout.n_head_kv as f64;
    let kv_per_block = kv_elems * (layout.head_dim_k as f64 * bk + layout.head_dim_v as f64 * bv);
    // Below 2 bytes an element the cache is block-quantized (f16 and bf16 are 2, f32 4).
    let quant = |b: f64| if b < 2.0 { b } else { 0.0 };
    let kv_quant_per_block =
        kv_elems * (layout.head_dim_k as f64 * quant(bk) + layout.head_dim_v as f64 * quant(bv));
    let mut t = TokenBytes::default();
    for (il, bb) in layout.blocks.iter().enumerate() {
        let on_gpu = il as u32 >= first_gpu_block;
        let dense = (bb.rest + bb.shared_experts) as f64;
        let attends = layout.kv_blocks.get(il).copied().unwrap_or(false);
        let recurrent = layout.recurrent_state_bytes.get(il).copied().unwrap_or(0);
        let kv = if attends {
            kv_per_block
        } else {
            recurrent as f64
        };
        let cpu_exp = host[il] as f64;
        let gpu_exp = (bb.routed_experts as f64 - cpu_exp).max(0.0);
        if on_gpu {
            t.gpu += dense + kv + gpu_exp * active;
            t.gpu_blocks += 1;
            if attends {
                t.gpu_kv_quant += kv_quant_per_block;
            } else if recurrent > 0 {
                t.gpu_recurrent_blocks += 1;
            }
        } else {
            t.cpu += dense + kv;
        }
        t.cpu += cpu_exp * active;
        t.cpu_experts_all += cpu_exp;
        if cpu_exp > 0.0 {
            t.cpu_blocks += 1;
        }
        t.active_total += dense + bb.routed_experts as f64 * active;
    }
    let out = if layout.output_bytes > 0 {
        layout.output_bytes
    } else {
        layout.token_embd_bytes
    } as f64;
    if ngl >= 1 {
        t.gpu += out;
    } else {
        t.cpu += out;
    }
    t.active_total += out;
    t
}

/// Is this a `qtune synth` model (random weights)?
pub fn is_synthetic(layout: &ModelLayout) -> bool {
    layout
        .name
        .as_deref()
        .is_some_and(|n| n.contains("qtune synthetic"))
}

/// Predict tg and pp for `cfg` on `sb`. None when the box has a GPU whose bandwidth is not
/// known, or the config leaves placement to the server (`--fit`: the placement is not known
/// before the launch). A box without a GPU gets a CPU-only prediction.
pub fn predict(
    layout: &ModelLayout,
    cfg: &LaunchConfig,
    sb: &SpeedBox,
    has_gpu: bool,
    prompt_tokens: u32,
    k: &SpeedConstants,
) -> Option<SpeedPrediction> {
    if has_gpu && (sb.gpu_bw_gbs.is_none() || cfg.is_auto_placement()) {
        return None;
    }
    let depth = prompt_tokens.saturating_add(64);
    let tb = token_bytes(layout, cfg, has_gpu, depth);
    let threads = cfg.threads.unwrap_or(sb.physical_cores).max(1);
    let thread_share = sb.thread_share(threads, k);
    let host_bw = sb.host_bw_gbs * k.host_bw_fraction * thread_share * GB;
    let gpu_bw = sb.gpu_bw_gbs.unwrap_or(1.0) * GB;

    let batch = cfg.batch.unwrap_or(2048);
    let ub = cfg
        .ubatch
        .unwrap_or(512)
        .min(batch)
        .min(prompt_tokens)
        .max(1);
    // Over RPC workers, the links' cost (none without --rpc or measured links).
    let net = link::network(layout, cfg, &sb.rpc_links, ub).unwrap_or_default();
    // The fixed cost of a CPU block (activations to the host and back, waking the threads)
    // counts with the CPU experts: it is what moving them to the GPU saves.
    let decode = if has_gpu {
        DecodeSplit {
            gpu_ms: (tb.gpu / gpu_bw + tb.gpu_kv_quant / GB * k.kv_quant_s_per_gb) * 1e3,
            cpu_experts_ms: tb.cpu / host_bw * 1e3 + tb.cpu_blocks as f64 * k.cpu_block_overhead_ms,
            overhead_ms: (layout.n_blocks - tb.gpu_recurrent_blocks) as f64 * k.block_overhead_ms
                + tb.gpu_recurrent_blocks as f64 * k.recurrent_block_overhead_ms,
            network_ms: net.decode_ms,
        }
    } else {
        DecodeSplit {
            gpu_ms: 0.0,
            cpu_experts_ms: tb.cpu / host_bw * 1e3,
            overhead_ms: layout.n_blocks as f64 * k.cpu_block_overhead_ms,
            network_ms: net.decode_ms,
        }
    };
    let tg = 1e3 / decode.total_ms();
    let raw_bw_ms = tb.gpu / (sb.gpu_bw_gbs.unwrap_or(1.0) * GB) * 1e3
        + tb.cpu / (sb.host_bw_gbs * thread_share * GB) * 1e3;
    let tg_bound_tps = 1e3 / raw_bw_ms.max(1e-9);

    let n_ub = prompt_tokens.div_ceil(ub);
    let mut prefill = PrefillSplit {
        ubatch: ub,
        network_ms: net.prefill_ub_ms,
        ..Default::default()
    };
    if has_gpu {
        let gpu_active_gb = (tb.active_total
            - if cfg.op_offload && ub >= 32 {
                0.0
            } else {
                tb.cpu
            })
            / GB;
        prefill.gpu_ms = (ub as f64 * gpu_active_gb * k.prefill_s_per_token_gb
            + ub as f64 * tb.gpu_recurrent_blocks as f64 * k.prefill_recurrent_us / 1e6
            + (tb.gpu_blocks - tb.gpu_recurrent_blocks) as f64 * k.prefill_block_ms / 1e3
            + tb.gpu_recurrent_blocks as f64 * k.prefill_recurrent_block_ms / 1e3)
            * 1e3;
        if cfg.op_offload && ub >= 32 {
            let copied = copied_expert_bytes(layout, &host_expert_bytes(layout, cfg, has_gpu), k);
            let frac = if cfg.load_mode.maps_file() {
                k.h2d_pageable_fraction
            } else {
                k.h2d_pinned_fraction
            };
            let h2d = sb.pcie_gbs.unwrap_or(16.0) * frac * GB;
            prefill.copy_ms = copied / h2d * 1e3;
        } else {
            prefill.cpu_ms = cpu_prefill_ms(ub, tb.cpu / active_share(layout), sb, threads);
        }
    } else {
        prefill.cpu_ms = cpu_prefill_ms(ub, tb.active_total, sb, threads);
    }
    let ub_ms = prefill.copy_ms + prefill.gpu_ms + prefill.cpu_ms + prefill.network_ms;
    let pp = prompt_tokens as f64 / (n_ub as f64 * ub_ms / 1e3);
    Some(SpeedPrediction {
        tg: Estimate::new(tg, k.tg_rel_err),
        pp: Estimate::new(pp, k.pp_rel_err),
        decode,
        prefill,
        prompt_tokens,
        tg_bound_tps,
    })
}

/// Share of block `block`'s CPU expert bytes a prefill micro-batch copies to the GPU: 1 for a
/// real model; for a synthetic one (random routers use few experts) the fitted share at the
/// first block and at the last, linear in the block's depth (to a fitted power) between them,
/// clamped to (0, 1].
pub fn synthetic_touch(layout: &ModelLayout, k: &SpeedConstants, block: u32) -> f64 {
    if !is_synthetic(layout) {
        return 1.0;
    }
    let [first, last, power] = if layout.arch == "qwen3moe" {
        k.synthetic_touch_qwen3moe
    } else {
        k.synthetic_touch_qwen35moe
    };
    let x = depth_share(layout, block).powf(power);
    (first + (last - first) * x).clamp(MIN_TOUCH, 1.0)
}

/// The smallest share of a block's experts a micro-batch is taken to copy (a touch
/// interpolated to zero or below still copies the experts its tokens use).
const MIN_TOUCH: f64 = 0.01;

/// Block `block`'s depth: 0 at the first block, 1 at the last.
pub fn depth_share(layout: &ModelLayout, block: u32) -> f64 {
    if layout.n_blocks <= 1 {
        0.0
    } else {
        (block as f64 / (layout.n_blocks - 1) as f64).min(1.0)
    }
}

/// Expert bytes a prefill micro-batch copies from the host, given each block's CPU expert
/// bytes (`host_expert_bytes`): each block's bytes times its [`synthetic_touch`].
pub fn copied_expert_bytes(layout: &ModelLayout, host: &[u64], k: &SpeedConstants) -> f64 {
    host.iter()
        .enumerate()
        .map(|(il, &b)| b as f64 * synthetic_touch(layout, k, il as u32))
        .sum()
}

fn active_share(layout: &ModelLayout) -> f64 {
    if layout.n_experts > 0 {
        (layout.n_experts_used as f64 / layout.n_experts as f64).max(1e-9)
    } else {
        1.0
    }
}

/// CPU prefill of `ub` tokens over weights whose active bytes per token are `active_bytes`:
/// compute-bound, about 2 flops per weight at roughly 1.7 weights per byte (4.85-bit
/// quantization), at an assumed 40 GFLOP/s per physical core. Not fitted: no committed run
/// measured it.
fn cpu_prefill_ms(ub: u32, active_bytes: f64, sb: &SpeedBox, threads: u32) -> f64 {
    let flops = 2.0 * 1.65 * active_bytes * ub as f64;
    let rate = 40e9 * threads.min(sb.physical_cores).max(1) as f64;
    flops / rate * 1e3
}

/// Predicted speeds within this many percent of the best candidate's are a tie, which the
/// other speed breaks (generation first, prompt among the tied, as the tune's objective). Used
/// by `qtune plan` (`PLAN_TIE_PCT`) and by the tune's first pick ([`pick`]).
/// Narrower than the default space's 5 %, which absorbs the launch-to-launch noise
/// of measurements; a prediction has none. What it has to separate: one more block's experts
/// on the CPU, which the model puts at 3-4 % of generation on the measured shapes (Qwen3-30B-A3B
/// at 16 GiB: `-ub 2048` needs `--n-cpu-moe 14` instead of 13, predicted 98 against 101 tok/s,
/// measured 85.4 against 90.4, 5.5 %), from configs at the same placement that differ only in
/// the micro-batch size (the same predicted generation: a tie, prompt decides). f16 against
/// q8_0 KV falls on either side with the share of KV in a token: 11 % on the all-GPU
/// Qwen3-30B-A3B (48 attention blocks), 2.4 % on the all-GPU Qwen3.5-35B-A3B (10).
pub const PICK_TIE_PCT: f64 = 3.0;

/// One config [`pick`] compares: its predicted primary speed (the objective: generation) and
/// secondary speed (prompt), and whether its placement is a plain `--n-cpu-moe N` (no `-ot`
/// rule to read).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PickInput {
    pub primary: f64,
    pub secondary: f64,
    pub plain: bool,
}

/// What [`pick`] chose: indices into its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// The chosen config.
    pub win: usize,
    /// The fastest in the primary speed (the chosen one when it is that fastest).
    pub fastest: usize,
    /// How many were within [`PICK_TIE_PCT`] of the fastest.
    pub tied: usize,
}

/// The config the speed model rates best, by the tune's objective: the fastest in the primary
/// speed, and among the candidates within `tie_pct` of it the fastest in the secondary (at the
/// same secondary speed the faster in the primary, then the first listed); a plain
/// `--n-cpu-moe N` tied with that winner in both is kept instead (it needs no `-ot` rule).
/// `None` entries (a config that does not fit, or that the model cannot predict) are out.
/// `None` when nothing is left. The one rule behind `qtune plan`'s choice without a profile
/// and the tune's first search launch.
pub fn pick(items: &[Option<PickInput>], tie_pct: f64) -> Option<Pick> {
    let tie = |a: f64, b: f64| {
        let hi = a.max(b);
        hi <= 0.0 || (a - b).abs() / hi * 100.0 <= tie_pct
    };
    let same = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
    let speeds: Vec<(usize, PickInput)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.map(|p| (i, p)))
        .collect();
    let best = speeds.iter().map(|s| s.1.primary).max_by(f64::total_cmp)?;
    let tied: Vec<&(usize, PickInput)> = speeds.iter().filter(|s| tie(s.1.primary, best)).collect();
    let mut win = tied[0];
    for s in &tied[1..] {
        if (s.1.secondary > win.1.secondary && !same(s.1.secondary, win.1.secondary))
            || (same(s.1.secondary, win.1.secondary)
                && s.1.primary > win.1.primary
                && !same(s.1.primary, win.1.primary))
        {
            win = s;
        }
    }
    if !win.1.plain {
        let second = win.1.secondary;
        if let Some(plain) = tied
            .iter()
            .filter(|s| s.1.plain && tie(s.1.secondary, second))
            .max_by(|a, b| a.1.secondary.total_cmp(&b.1.secondary))
        {
            win = plain;
        }
    }
    let fastest = if same(win.1.primary, best) {
        win.0
    } else {
        speeds
            .iter()
            .find(|s| s.1.primary == best)
            .map_or(win.0, |s| s.0)
    };
    Some(Pick {
        win: win.0,
        fastest,
        tied: tied.len(),
    })
}

#[cfg(test)]
pub(crate) mod tests;
