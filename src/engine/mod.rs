//! The engine seam (issue 44): what is particular to one inference server, in one place per
//! engine, so that the rest of qtune works over engine-neutral [`LaunchConfig`]s.
//!
//! Two engines: llama.cpp's `llama-server` ([`LlamaCpp`], the default) and ik_llama.cpp's
//! ([`IkLlama`]). Each owns rendering a config to argv, the flags it cannot express, and the
//! two baselines (the server's default, and its own auto-fit with the user's headroom). A
//! config names its engine ([`LaunchConfig::engine`], llama.cpp when absent, so older results
//! read as before); `server_binary` tells which engine a server binary is from its `--help`.
//! Still outside the seam, for the next steps: checking and building the server
//! (`server_binary`, which builds both), parsing a command line back (`config::parse`), the
//! log dialect (`trial::logparse`, `trial::classify`'s pattern tables: ik's load and memory
//! lines are llama.cpp's own), the container image (`report::script`) and `placement`'s fit
//! prediction.

use crate::config::LaunchConfig;
use crate::space::SearchSpace;
use std::path::Path;

pub mod ik_llama;
pub mod llama_cpp;
pub mod mtp;

pub use ik_llama::IkLlama;
pub use llama_cpp::LlamaCpp;

pub use crate::config::EngineKind;

/// The dialect of `kind`.
pub fn of(kind: EngineKind) -> &'static dyn Engine {
    match kind {
        EngineKind::LlamaCpp => &LlamaCpp,
        EngineKind::IkLlama => &IkLlama,
    }
}

/// The placement flags both engines spell alike, in order: `-ts`, `--n-cpu-moe`, and the
/// `-ot` rules that put routed experts on the CPU or on a named GPU.
fn placement_flags(c: &crate::config::LaunchConfig, push: &mut dyn FnMut(&str, String)) {
    if !c.tensor_split.is_empty() {
        let t: Vec<String> = c.tensor_split.iter().map(|v| v.to_string()).collect();
        push("-ts", t.join(","));
    }
    if let Some(n) = c.n_cpu_moe {
        push("--n-cpu-moe", n.to_string());
    }
    if let Some(c) = &c.cpu_experts {
        for rule in c.override_rules() {
            push("-ot", rule);
        }
    }
    for g in &c.gpu_experts {
        if let Some(rule) = g.override_rule() {
            push("-ot", rule);
        }
    }
}

/// The thread, batch, KV-type and flash-attention flags both engines spell alike, in order.
fn batch_flags(c: &crate::config::LaunchConfig, push: &mut dyn FnMut(&str, String)) {
    use crate::config::{FlashAttn, KvType};
    if let Some(t) = c.threads {
        push("-t", t.to_string());
    }
    if let Some(b) = c.batch {
        push("-b", b.to_string());
    }
    if let Some(ub) = c.ubatch {
        push("-ub", ub.to_string());
    }
    if c.cache_type_k != KvType::F16 {
        push("-ctk", c.cache_type_k.to_string());
    }
    if c.cache_type_v != KvType::F16 {
        push("-ctv", c.cache_type_v.to_string());
    }
    if c.flash_attn != FlashAttn::Auto {
        push("-fa", c.flash_attn.to_string());
    }
}

/// What qtune needs of an inference server's dialect.
pub trait Engine {
    /// The engine's name, as the user reads it (`llama.cpp`).
    fn name(&self) -> &'static str;

    /// The server's flags for `config`, in a stable order: the one place flags are rendered.
    fn server_args(&self, config: &LaunchConfig) -> Vec<String>;

    /// The full argv of a server for `config`: binary, model, flags, host and port.
    fn command(
        &self,
        config: &LaunchConfig,
        server: &Path,
        model: &Path,
        host: &str,
        port: u16,
    ) -> Vec<String> {
        let mut argv = vec![
            server.display().to_string(),
            "-m".to_string(),
            model.display().to_string(),
        ];
        argv.extend(self.server_args(config));
        argv.extend([
            "--host".to_string(),
            host.to_string(),
            "--port".to_string(),
            port.to_string(),
        ]);
        argv
    }

    /// What a user gets without qtune in this space: the first baseline.
    fn default_baseline(&self, space: &SearchSpace) -> LaunchConfig;

    /// The engine's own auto-fit keeping `headroom_mib` free on each of `cards` cards: the
    /// second baseline, the best command a user who asks for that headroom could type.
    fn fit_baseline(&self, space: &SearchSpace, headroom_mib: u32, cards: usize) -> LaunchConfig;

    /// The flags that make the server log what qtune reads (buffer sizes, the memory
    /// breakdown): llama.cpp's `-lv 4`.
    fn log_args(&self) -> Vec<String> {
        vec!["-lv".to_string(), "4".to_string()]
    }

    /// The settings of `config` this engine cannot express (its flags, as llama.cpp names
    /// them): empty when it can launch `config` as meant. [`Engine::server_args`] leaves them
    /// out; the search does not propose such a config.
    fn unsupported(&self, _config: &LaunchConfig) -> Vec<&'static str> {
        Vec::new()
    }
}

/// A config's flags and command as its engine ([`LaunchConfig::engine`]) renders them, as
/// methods of the config (`config.server_args()`, `config.command(...)`): bring the trait
/// into scope to call them.
pub trait LaunchArgs {
    /// [`Engine::server_args`] of the config's engine.
    fn server_args(&self) -> Vec<String>;
    /// [`Engine::command`] of the config's engine.
    fn command(&self, server: &Path, model: &Path, host: &str, port: u16) -> Vec<String>;

    /// The flags a user would paste after `llama-server -m MODEL`: [`Self::server_args`],
    /// shell-quoted, without the model path, host and port.
    fn flags(&self) -> String {
        crate::escape::shell_line(&self.server_args())
    }

    /// The flags for narrow places (a table cell, a plot legend, a one-line verdict):
    /// [`Self::flags`] without `-c` and `-np`, which every config of one tune shares (but the
    /// slots lever's `-np N -kvu`, which keeps both). Nothing is renamed, only dropped; a
    /// config with no other flag reads `server defaults`.
    fn label(&self) -> String {
        let parts = self.label_parts();
        if parts.is_empty() {
            return "server defaults".to_string();
        }
        parts.join(" ")
    }

    /// [`Self::label`]'s flags one by one, each with its value (`-t 1`, `--no-op-offload`),
    /// shell-quoted: what a plot keeps of a label when it drops the flags every config shares.
    fn label_parts(&self) -> Vec<String> {
        let args = self.server_args();
        // The slots lever (`-np N -kvu`) varies `-np`: it stays in that config's label.
        let slots = args.iter().any(|a| a == "-kvu" || a == "-no-kvu");
        let mut parts = Vec::new();
        let mut i = 0;
        while i < args.len() {
            // A flag's value never starts with '-'; value-less flags (`--no-op-offload`,
            // `-kvu`, `-no-kvu`) are followed by the next flag or nothing.
            let n = if i + 1 < args.len() && !args[i + 1].starts_with('-') {
                2
            } else {
                1
            };
            if args[i] != "-c" && (args[i] != "-np" || slots) {
                parts.push(crate::escape::shell_line(&args[i..i + n]));
            }
            i += n;
        }
        parts
    }
}

impl LaunchArgs for LaunchConfig {
    fn server_args(&self) -> Vec<String> {
        of(self.engine).server_args(self)
    }

    fn command(&self, server: &Path, model: &Path, host: &str, port: u16) -> Vec<String> {
        of(self.engine).command(self, server, model, host, port)
    }
}
