//! [`Flag`]: a server setting qtune names in what it tells the user ("raise --n-cpu-moe"),
//! without its spelling. The spelling is the engine's (issue 56): `crate::engine` renders a
//! `Flag` (its `Display` is llama.cpp's spelling, the default where a message is about no
//! particular engine; `Engine::spelling` gives one engine's), so that no stage below or
//! beside the engine spells a server flag.

/// A server setting, named by what it does; `format!("{}", flag)` spells it (see the module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flag {
    /// The context size.
    Ctx,
    /// The slots (requests served at once).
    Parallel,
    /// Layers on the GPU.
    GpuLayers,
    /// How the model is split over GPUs.
    SplitMode,
    /// The share of each GPU.
    TensorSplit,
    /// The first blocks' experts on the CPU.
    NCpuMoe,
    /// Threads.
    Threads,
    /// The logical batch.
    Batch,
    /// The physical batch.
    Ubatch,
    /// Flash attention.
    FlashAttn,
    /// The server's own auto-fit.
    Fit,
    /// The auto-fit's headroom per device.
    FitTarget,
    /// How the weights are loaded.
    LoadMode,
    /// Weights read, not mapped.
    NoMmap,
    /// Tensor placement rules.
    OverrideTensor,
    /// Speculative decoding's drafter.
    SpecType,
    /// The spacing of context checkpoints.
    CheckpointMinStep,
}
