//! Rendering a [`LaunchConfig`] to a server's flags: one walk over the config, in one stable
//! order, shared by every engine. An engine says what differs in its [`Dialect`]: how it
//! spells auto-fit and the load mode, and its own levers; a setting its [`Caps`] lack has no
//! flag and is left out ([`Caps::unsupported`] names it).

use super::Caps;
use crate::config::{EngineOpts, FlashAttn, KvType, LaunchConfig, LoadMode, SplitMode};

/// A server's flags as they are rendered.
#[derive(Debug, Default)]
pub(crate) struct Argv(Vec<String>);

impl Argv {
    /// A flag without a value (`--mlock`).
    pub(crate) fn flag(&mut self, k: &str) {
        self.0.push(k.to_string());
    }

    /// A flag and its value (`-c 4096`).
    pub(crate) fn pair(&mut self, k: &str, v: impl ToString) {
        self.0.push(k.to_string());
        self.0.push(v.to_string());
    }
}

/// What one engine renders its own way, beside what its [`Caps`] leave out.
pub(crate) struct Dialect {
    /// `fit` and `fit_target_mib`.
    pub(crate) fit: fn(&LaunchConfig, &mut Argv),
    /// `load_mode`.
    pub(crate) load_mode: fn(LoadMode, &mut Argv),
    /// The engine's own levers ([`EngineOpts`]), last.
    pub(crate) own: fn(&EngineOpts, &mut Argv),
}

/// `c`'s flags for an engine with `caps` that speaks `dialect`, in a stable order.
pub(crate) fn render(c: &LaunchConfig, caps: &Caps, dialect: &Dialect) -> Vec<String> {
    let mut a = Argv::default();
    a.pair("-c", c.ctx);
    a.pair("-np", c.parallel);
    if caps.rpc && !c.rpc.is_empty() {
        a.pair("--rpc", c.rpc.join(","));
    }
    if let Some(n) = c.n_gpu_layers {
        a.pair("-ngl", n);
    }
    if let Some(m) = c.split_mode {
        if caps.split_row_tensor || matches!(m, SplitMode::None | SplitMode::Layer) {
            a.pair("-sm", m);
        }
    }
    placement(c, caps, &mut a);
    batch(c, &mut a);
    (dialect.fit)(c, &mut a);
    (dialect.load_mode)(c.load_mode, &mut a);
    if caps.no_op_offload && !c.op_offload {
        a.flag("--no-op-offload");
    }
    if let Some(t) = c.spec_type {
        a.pair("--spec-type", t);
    }
    if caps.checkpoint_min_step {
        if let Some(n) = c.checkpoint_min_step {
            a.pair("--checkpoint-min-step", n);
        }
    }
    if caps.kv_unified {
        if let Some(u) = c.kv_unified {
            a.flag(if u { "-kvu" } else { "-no-kvu" });
        }
    }
    (dialect.own)(&c.engine_opts, &mut a);
    a.0
}

/// The placement flags, in order: `-ts`, `--n-cpu-moe`, and the `-ot` rules that put routed
/// experts on the CPU, on a named GPU, or (with RPC) on a worker's device.
fn placement(c: &LaunchConfig, caps: &Caps, a: &mut Argv) {
    if !c.tensor_split.is_empty() {
        let t: Vec<String> = c.tensor_split.iter().map(|v| v.to_string()).collect();
        a.pair("-ts", t.join(","));
    }
    if let Some(n) = c.n_cpu_moe {
        a.pair("--n-cpu-moe", n);
    }
    if let Some(e) = &c.cpu_experts {
        for rule in e.override_rules() {
            a.pair("-ot", rule);
        }
    }
    let gpu = c.gpu_experts.iter().map(|g| g.override_rule());
    let rpc = c.rpc_experts.iter().filter(|_| caps.rpc);
    for rule in gpu.chain(rpc.map(|r| r.override_rule())).flatten() {
        a.pair("-ot", rule);
    }
}

/// The thread, batch, KV-type and flash-attention flags, in order.
fn batch(c: &LaunchConfig, a: &mut Argv) {
    if let Some(t) = c.threads {
        a.pair("-t", t);
    }
    if let Some(b) = c.batch {
        a.pair("-b", b);
    }
    if let Some(ub) = c.ubatch {
        a.pair("-ub", ub);
    }
    if c.cache_type_k != KvType::F16 {
        a.pair("-ctk", c.cache_type_k);
    }
    if c.cache_type_v != KvType::F16 {
        a.pair("-ctv", c.cache_type_v);
    }
    if c.flash_attn != FlashAttn::Auto {
        a.pair("-fa", c.flash_attn);
    }
}
