//! `LaunchConfig`: one way to launch `llama-server`, the unit every stage talks about.
//!
//! The model path, host and port are not part of a config: they belong to where it runs
//! (a trial, a launch script). The engine renders a config to flags
//! ([`crate::engine::LaunchArgs::server_args`], the one place flags are rendered).

use serde::{Deserialize, Serialize};
use std::fmt;

/// KV cache element type (`-ctk` / `-ctv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum KvType {
    #[serde(rename = "f32")]
    F32,
    #[serde(rename = "f16")]
    F16,
    #[serde(rename = "bf16")]
    Bf16,
    #[serde(rename = "q8_0")]
    Q8_0,
    #[serde(rename = "q5_1")]
    Q5_1,
    #[serde(rename = "q5_0")]
    Q5_0,
    #[serde(rename = "q4_1")]
    Q4_1,
    #[serde(rename = "q4_0")]
    Q4_0,
    #[serde(rename = "iq4_nl")]
    Iq4Nl,
}

impl KvType {
    pub const ALL: [KvType; 9] = [
        KvType::F32,
        KvType::F16,
        KvType::Bf16,
        KvType::Q8_0,
        KvType::Q5_1,
        KvType::Q5_0,
        KvType::Q4_1,
        KvType::Q4_0,
        KvType::Iq4Nl,
    ];

    /// The name llama-server takes on its command line.
    pub fn as_str(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Bf16 => "bf16",
            KvType::Q8_0 => "q8_0",
            KvType::Q5_1 => "q5_1",
            KvType::Q5_0 => "q5_0",
            KvType::Q4_1 => "q4_1",
            KvType::Q4_0 => "q4_0",
            KvType::Iq4Nl => "iq4_nl",
        }
    }

    /// Bytes per element, averaged over the quantization block.
    pub fn bytes_per_element(self) -> f64 {
        match self {
            KvType::F32 => 4.0,
            KvType::F16 | KvType::Bf16 => 2.0,
            KvType::Q8_0 => 34.0 / 32.0,
            KvType::Q5_1 => 24.0 / 32.0,
            KvType::Q5_0 => 22.0 / 32.0,
            KvType::Q4_1 => 20.0 / 32.0,
            KvType::Q4_0 | KvType::Iq4Nl => 18.0 / 32.0,
        }
    }

    /// Quantized V cache needs flash attention in llama.cpp.
    pub fn is_quantized(self) -> bool {
        !matches!(self, KvType::F32 | KvType::F16 | KvType::Bf16)
    }
}

impl fmt::Display for KvType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KvType::ALL
            .into_iter()
            .find(|k| k.as_str() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                format!(
                    "unknown KV cache type '{s}' (expected one of: {})",
                    KvType::ALL.map(|k| k.as_str()).join(", ")
                )
            })
    }
}

/// Flash attention (`-fa on|off|auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlashAttn {
    On,
    Off,
    Auto,
}

impl FlashAttn {
    pub fn as_str(self) -> &'static str {
        match self {
            FlashAttn::On => "on",
            FlashAttn::Off => "off",
            FlashAttn::Auto => "auto",
        }
    }
}

impl fmt::Display for FlashAttn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything of a [`LaunchConfig`] except placement and the fixed parts: one point of the
/// search's coordinate steps, and what a profile's winner hands to the next tune.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Base {
    pub threads: Option<u32>,
    pub batch: Option<[u32; 2]>,
    pub kv: [KvType; 2],
    pub flash_attn: FlashAttn,
}

/// How llama-server loads the model file (`--load-mode`, llama.cpp's `llama_load_mode`).
///
/// With routed experts on the CPU and a GPU, `none` loads them into pinned host buffers
/// (`CUDA_Host`): the per-ubatch copies of op offload run several times faster than from the
/// pageable, memory-mapped file (3.2x prompt speed measured on Qwen3-30B-A3B at 16 GiB). Those
/// experts then live in RAM, not in the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum LoadMode {
    /// The server's default: mmap, unless a device cannot. No flag is passed.
    #[serde(rename = "auto")]
    Auto,
    /// Read the file into (pinned, with a GPU) host buffers.
    #[serde(rename = "none")]
    None,
    #[serde(rename = "mmap")]
    Mmap,
    /// Read into buffers and lock them in RAM.
    #[serde(rename = "mlock")]
    Mlock,
    /// Map the file and lock the mapped pages in RAM.
    #[serde(rename = "mmap+mlock")]
    MmapMlock,
    /// Direct I/O where available (read, not mapped).
    #[serde(rename = "dio")]
    Dio,
}

impl LoadMode {
    pub const ALL: [LoadMode; 6] = [
        LoadMode::Auto,
        LoadMode::None,
        LoadMode::Mmap,
        LoadMode::Mlock,
        LoadMode::MmapMlock,
        LoadMode::Dio,
    ];

    /// The value `--load-mode` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadMode::Auto => "auto",
            LoadMode::None => "none",
            LoadMode::Mmap => "mmap",
            LoadMode::Mlock => "mlock",
            LoadMode::MmapMlock => "mmap+mlock",
            LoadMode::Dio => "dio",
        }
    }

    /// Is the model file memory-mapped (host weights are page cache of the file)? `auto` maps
    /// on the backends qtune targets (CPU, CUDA).
    pub fn maps_file(self) -> bool {
        matches!(self, LoadMode::Auto | LoadMode::Mmap | LoadMode::MmapMlock)
    }

    /// Are the host weights locked in RAM?
    pub fn locks(self) -> bool {
        matches!(self, LoadMode::Mlock | LoadMode::MmapMlock)
    }
}

impl fmt::Display for LoadMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for LoadMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LoadMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                format!(
                    "unknown load mode '{s}' (expected one of: {})",
                    LoadMode::ALL.map(|m| m.as_str()).join(", ")
                )
            })
    }
}

impl<'de> Deserialize<'de> for LoadMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LoadModeVisitor)
    }
}

/// Reads a load mode name, or the boolean of the old `mmap` field (results written before
/// `--load-mode` existed): `true` was the server's default (`auto`); `false` rendered
/// `--no-mmap`, which the pinned build no longer has; what it asked for is `none`.
struct LoadModeVisitor;

impl serde::de::Visitor<'_> for LoadModeVisitor {
    type Value = LoadMode;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(
            "a load mode (auto, none, mmap, mlock, mmap+mlock, dio) or a boolean (old mmap)",
        )
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<LoadMode, E> {
        Ok(if v { LoadMode::Auto } else { LoadMode::None })
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<LoadMode, E> {
        v.parse().map_err(E::custom)
    }
}

/// How llama.cpp spreads the model over several GPUs (`-sm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SplitMode {
    /// One GPU only (`-mg` picks it).
    None,
    /// Whole layers per GPU, KV with its layer (the server's default).
    Layer,
    /// Every weight split by rows over the GPUs; KV and small tensors on the main GPU.
    Row,
    /// Tensor parallelism (llama.cpp's experimental mode): weights and KV split over the GPUs,
    /// reduced across them in every layer. Needs flash attention and an unquantized KV cache;
    /// fit refuses it. Not in the memory prediction (it is predicted as a layer split).
    Tensor,
}

impl SplitMode {
    pub const ALL: [SplitMode; 4] = [
        SplitMode::None,
        SplitMode::Layer,
        SplitMode::Row,
        SplitMode::Tensor,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SplitMode::None => "none",
            SplitMode::Layer => "layer",
            SplitMode::Row => "row",
            SplitMode::Tensor => "tensor",
        }
    }
}

impl fmt::Display for SplitMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SplitMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SplitMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                format!("unknown split mode '{s}' (expected one of: none, layer, row, tensor)")
            })
    }
}

/// Speculative decoding that needs no separate draft model (`--spec-type`): drafts are taken
/// from n-grams of the request's own context (text the model re-emits: code it edits, files it
/// quotes), or from the model's own multi-token-prediction layer (`draft-mtp`, where the GGUF
/// carries one), and verified in one batch. Each type keeps the server's own draft lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpecType {
    /// Rolling n-gram hash over the context (drafts 48-64 tokens when a long match is found).
    NgramMod,
    /// The last matching n-gram's continuation (12-token lookup, up to 48 drafted).
    NgramSimple,
    /// A map of n-grams with their continuations (12-token lookup, up to 48 drafted).
    NgramMapK,
    /// The model's own MTP ("NextN") layer drafts the next tokens (Qwen3.5 carries one); the
    /// server loads that layer and a second context for it.
    DraftMtp,
}

impl SpecType {
    pub const ALL: [SpecType; 4] = [
        SpecType::NgramMod,
        SpecType::NgramSimple,
        SpecType::NgramMapK,
        SpecType::DraftMtp,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SpecType::NgramMod => "ngram-mod",
            SpecType::NgramSimple => "ngram-simple",
            SpecType::NgramMapK => "ngram-map-k",
            SpecType::DraftMtp => "draft-mtp",
        }
    }

    /// Drafts with the model's MTP layer (not from the context's n-grams).
    pub fn is_mtp(self) -> bool {
        self == SpecType::DraftMtp
    }
}

impl fmt::Display for SpecType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SpecType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SpecType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "{}: qtune tunes ngram-mod, ngram-simple, ngram-map-k or draft-mtp (no separate draft model), not '{s}'",
                    Flag::SpecType
                )
            })
    }
}

mod answers;
mod engine_kind;
mod flag;
mod parse;
mod placement;
pub mod rpc;
pub use answers::AnswerLever;
pub use engine_kind::EngineKind;
pub use flag::Flag;
pub use parse::*;
pub use placement::*;

/// One way to launch `llama-server` (without model path, host and port).
///
/// `None` means "do not pass the flag": the server's own default applies. The baseline
/// (what a user gets without qtune) is a config with no placement flags at all.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchConfig {
    /// Context size in tokens (`-c`).
    pub ctx: u32,
    /// Parallel slots (`-np`); 1 for single-user tuning.
    pub parallel: u32,
    /// Layers on the GPU (`-ngl`); `None` leaves placement to the server.
    #[serde(default)]
    pub n_gpu_layers: Option<u32>,
    /// Blocks whose routed experts stay on the CPU (`--n-cpu-moe`).
    #[serde(default)]
    pub n_cpu_moe: Option<u32>,
    /// Generation threads (`-t`).
    #[serde(default)]
    pub threads: Option<u32>,
    /// Logical batch size (`-b`).
    #[serde(default)]
    pub batch: Option<u32>,
    /// Physical micro-batch size (`-ub`).
    #[serde(default)]
    pub ubatch: Option<u32>,
    /// KV cache type for K (`-ctk`).
    pub cache_type_k: KvType,
    /// KV cache type for V (`-ctv`).
    pub cache_type_v: KvType,
    /// Flash attention (`-fa`).
    pub flash_attn: FlashAttn,
    /// How the model file is loaded (`--load-mode`; `auto` passes no flag). Results written
    /// before this field existed carry `mmap: true|false` instead, read as `auto` / `none`.
    #[serde(default = "load_mode_auto", alias = "mmap")]
    pub load_mode: LoadMode,
    /// `--fit on|off`; `None` leaves the server's default (on in the pinned build).
    #[serde(default)]
    pub fit: Option<bool>,
    /// `--fit-target`: MiB `--fit` leaves free per device (one value: every device). Only
    /// with `fit: on` and no placement flags (fit refuses to run with overrides).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fit_target_mib: Vec<u32>,
    /// Routed experts on the CPU beyond `--n-cpu-moe`: `-ot REGEX=CPU` rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_experts: Option<CpuExperts>,
    /// Offload host tensor ops to the GPU (`--no-op-offload` when false). Op offload copies
    /// CPU-resident experts to the GPU for every micro-batch of 32 tokens or more.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub op_offload: bool,
    /// How the layers are spread over several GPUs (`-sm`); `None`: the server's default
    /// (`layer`). Absent in results written before qtune tuned two GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_mode: Option<SplitMode>,
    /// Proportions of the layers per GPU in device order (`-ts a,b`); empty: the server splits
    /// by free memory. llama.cpp gives GPU `i` the layers whose index falls in its share of
    /// `n_blocks + 1` (the output layer counts as the last one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tensor_split: Vec<u32>,
    /// Routed experts placed on a named GPU whatever their layer's device
    /// (`-ot REGEX=CUDAn` rules, one per device).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_experts: Vec<GpuExperts>,
    /// The head's RPC workers (`--rpc host:port,...`, before any `-ot`: llama.cpp registers
    /// their devices when it reads the flag). Empty: no workers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rpc: Vec<String>,
    /// Routed experts placed on a worker's device whatever their layer's device
    /// (`-ot REGEX=RPCn[host:port]` rules, one per device).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rpc_experts: Vec<rpc::RpcExperts>,
    /// Speculative decoding from the context's n-grams (`--spec-type`); `None`: off, the
    /// server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_type: Option<SpecType>,
    /// Least tokens between two context checkpoints (`--checkpoint-min-step`; the server's
    /// default 8192). A model with recurrent layers (Qwen3.5) cannot roll its state back token
    /// by token: when a prompt diverges from the cached one, the server restarts from the last
    /// checkpoint before the divergence, so closer checkpoints re-read less of a changed history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_min_step: Option<u32>,
    /// One KV pool shared by every slot (`-kvu`, `-no-kvu`); `None`: the server's default,
    /// which an explicit `-np` turns off (each slot then gets `ctx / parallel` tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_unified: Option<bool>,
    /// The server this config is for, whose dialect renders it
    /// ([`crate::engine::LaunchArgs`]); absent: llama.cpp (every file written before qtune
    /// knew a second engine).
    #[serde(default, skip_serializing_if = "EngineKind::is_default")]
    pub engine: EngineKind,
    /// An engine's own levers (ik_llama.cpp's fused MoE, attention batch cap, run-time
    /// repack, expert reduction); absent: none, the engine's defaults.
    #[serde(default, skip_serializing_if = "EngineOpts::is_default")]
    pub engine_opts: EngineOpts,
}

/// Settings only some engines have a flag for ([`crate::engine::Caps::own_levers`]); each
/// engine renders those it has.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineOpts {
    /// Fused MoE turned off (ik_llama.cpp fuses the expert matmuls by default).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_fused_moe: bool,
    /// Fused up-gate matmuls turned off (ik_llama.cpp's `-no-fug`; on by default).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_fused_up_gate: bool,
    /// Fused mul-multiadd turned off (ik_llama.cpp's `-no-mmad`; on by default).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_fused_mmad: bool,
    /// Every expert copied to the GPU when a batch's expert matmuls are offloaded, not only
    /// the batch's active ones (ik_llama.cpp's `-no-ooae`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_only_active_experts: bool,
    /// The most tokens attention computes at once (ik_llama.cpp's attention max batch, MiB
    /// of compute buffer traded for speed); None: the engine's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attn_max_batch: Option<u32>,
    /// Repack the weights at load into the engine's interleaved layouts (no mmap).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub run_time_repack: bool,
    /// Smart expert reduction: at most this many routed experts per token, fewer than the
    /// model's own (ik_llama.cpp). It changes the model's answers ([`AnswerLever`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_reduction: Option<u32>,
    /// The CUDA back end's run-time parameters, as ik_llama.cpp's `-cuda` takes them
    /// (`mmq-id-size=0`: each routed expert through the plain quantized matmul, not the
    /// grouped one that faulted on Q4_K_M on the GPU machine; `fusion=0`; `graphs=0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_params: Option<String>,
}

impl EngineOpts {
    pub fn is_default(&self) -> bool {
        *self == EngineOpts::default()
    }
}

fn load_mode_auto() -> LoadMode {
    LoadMode::Auto
}
fn yes() -> bool {
    true
}
fn is_true(b: &bool) -> bool {
    *b
}

impl LaunchConfig {
    /// What a user gets without qtune: same context, single slot, no placement flags.
    pub fn baseline(ctx: u32) -> Self {
        LaunchConfig {
            ctx,
            parallel: 1,
            n_gpu_layers: None,
            n_cpu_moe: None,
            threads: None,
            batch: None,
            ubatch: None,
            cache_type_k: KvType::F16,
            cache_type_v: KvType::F16,
            flash_attn: FlashAttn::Auto,
            load_mode: LoadMode::Auto,
            fit: None,
            fit_target_mib: Vec::new(),
            cpu_experts: None,
            op_offload: true,
            split_mode: None,
            tensor_split: Vec::new(),
            gpu_experts: Vec::new(),
            rpc: Vec::new(),
            rpc_experts: Vec::new(),
            spec_type: None,
            checkpoint_min_step: None,
            kv_unified: None,
            engine: EngineKind::LlamaCpp,
            engine_opts: EngineOpts::default(),
        }
    }

    /// Does this config name how the model is spread over several GPUs (`-sm`, `-ts`, or
    /// experts placed on a named GPU)?
    pub fn has_gpu_split(&self) -> bool {
        self.split_mode.is_some()
            || !self.tensor_split.is_empty()
            || !self.gpu_experts.is_empty()
            || !self.rpc_experts.is_empty()
    }

    /// Place the model explicitly on several GPUs: every layer on a GPU (`-ngl 999`), the
    /// layers split by `tensor_split`, the routed experts of `cpu_blocks` on the CPU (`-ot`
    /// rules, so they can come from any GPU's share, unlike `--n-cpu-moe`), auto-fit off.
    pub fn place_on_gpus(&mut self, tensor_split: Vec<u32>, cpu_blocks: BlockSet) {
        self.n_gpu_layers = Some(999);
        self.n_cpu_moe = None;
        self.cpu_experts = (!cpu_blocks.is_empty()).then_some(CpuExperts {
            blocks: cpu_blocks,
            partial: None,
        });
        self.tensor_split = tensor_split;
        self.fit = Some(false);
        self.fit_target_mib = Vec::new();
    }

    /// Place the model explicitly: every layer on the GPU (`-ngl 999`), the routed experts of
    /// `n_cpu_moe` blocks on the CPU, and the build's auto-fit off (it would move them again).
    /// The one place the placement flags are chosen.
    pub fn place_experts(&mut self, n_cpu_moe: u32) {
        self.n_gpu_layers = Some(999);
        self.n_cpu_moe = Some(n_cpu_moe);
        self.fit = Some(false);
    }

    /// This config with the experts of `n_cpu_moe` blocks on the CPU ([`Self::place_experts`]).
    pub fn with_experts_on_cpu(mut self, n_cpu_moe: u32) -> Self {
        self.place_experts(n_cpu_moe);
        self
    }

    /// Everything except placement ([`Base`]).
    pub fn base(&self) -> Base {
        Base {
            threads: self.threads,
            batch: match (self.batch, self.ubatch) {
                (Some(b), Some(u)) => Some([b, u]),
                _ => None,
            },
            kv: [self.cache_type_k, self.cache_type_v],
            flash_attn: self.flash_attn,
        }
    }

    /// `--fit`'s own placement as a candidate: `--fit on --fit-target target_mib` and no
    /// placement flags, with this config's other choices (ubatch, KV, threads, load mode).
    pub fn with_fit_placement(&self, target_mib: u32) -> Self {
        self.with_fit_targets(vec![target_mib])
    }

    /// `--fit`'s own placement with one `--fit-target` per device (several GPUs): no `-ts`,
    /// no `-sm`, no overrides, which fit refuses.
    pub fn with_fit_targets(&self, targets_mib: Vec<u32>) -> Self {
        LaunchConfig {
            n_gpu_layers: None,
            n_cpu_moe: None,
            cpu_experts: None,
            fit: Some(true),
            fit_target_mib: targets_mib,
            split_mode: None,
            tensor_split: Vec::new(),
            gpu_experts: Vec::new(),
            rpc_experts: Vec::new(),
            ..self.clone()
        }
    }

    /// Is this `--fit`'s placement (fit on, no placement flags of qtune's)?
    pub fn is_fit_placement(&self) -> bool {
        self.fit == Some(true)
            && self.n_gpu_layers.is_none()
            && self.n_cpu_moe.is_none()
            && self.cpu_experts.is_none()
            && !self.has_gpu_split()
    }

    /// Why the server would refuse or ignore this combination, if it would: `--fit` gives up
    /// when any tensor override or `-ngl` is set, and `--fit-target` means nothing without fit.
    pub fn check(&self) -> Result<(), String> {
        if self.fit == Some(true)
            && (self.n_gpu_layers.is_some()
                || self.n_cpu_moe.is_some()
                || self.cpu_experts.is_some())
        {
            return Err(format!(
                "{} on cannot be combined with {}, {} or {} rules: fit refuses to run with placement set",
                Flag::Fit, Flag::GpuLayers, Flag::NCpuMoe, Flag::OverrideTensor
            ));
        }
        if self.fit == Some(true)
            && (!self.tensor_split.is_empty()
                || !self.gpu_experts.is_empty()
                || matches!(self.split_mode, Some(SplitMode::Row | SplitMode::Tensor)))
        {
            return Err(format!(
                "{} on cannot be combined with {}, {} row|tensor or {} rules naming a GPU: fit refuses to run with a split set",
                Flag::Fit, Flag::TensorSplit, Flag::SplitMode, Flag::OverrideTensor
            ));
        }
        if self.split_mode == Some(SplitMode::Tensor)
            && (self.cache_type_k.is_quantized() || self.cache_type_v.is_quantized())
        {
            return Err(format!(
                "{} tensor needs an unquantized KV cache (f16, bf16 or f32): llama-server refuses a quantized one with it",
                Flag::SplitMode
            ));
        }
        if !self.tensor_split.is_empty() && self.tensor_split.iter().all(|&p| p == 0) {
            return Err(format!(
                "{} gives every GPU a share of 0",
                Flag::TensorSplit
            ));
        }
        let mut seen = BlockSet::default();
        for g in &self.gpu_experts {
            if let Some(b) = g.blocks.iter().find(|&b| {
                seen.contains(b)
                    || self
                        .cpu_experts
                        .as_ref()
                        .is_some_and(|c| c.blocks.contains(b))
            }) {
                return Err(format!("block {b}'s experts are placed on two devices"));
            }
            seen = BlockSet::new(seen.iter().chain(g.blocks.iter()));
        }
        if !self.fit_target_mib.is_empty() && self.fit == Some(false) {
            return Err(format!("{} needs {} on", Flag::FitTarget, Flag::Fit));
        }
        Ok(())
    }

    /// True when no flag of this config puts routed experts on the CPU (no `--n-cpu-moe` above
    /// 0, no `-ot ...=CPU` rule). Auto-fit (`--fit on`) may still place some there at launch.
    pub fn no_experts_on_cpu(&self) -> bool {
        self.n_cpu_moe.unwrap_or(0) == 0 && self.cpu_experts.is_none()
    }

    /// True when this config leaves placement to the server (the baseline).
    pub fn is_auto_placement(&self) -> bool {
        self.n_gpu_layers.is_none()
            && self.n_cpu_moe.is_none()
            && self.cpu_experts.is_none()
            && self.fit != Some(false)
            && !self.has_gpu_split()
    }
}

/// Shell quoting lives in [`crate::escape`], the one place values become script text.
pub use crate::escape::{shell_line, shell_quote};

#[cfg(test)]
mod tests;
