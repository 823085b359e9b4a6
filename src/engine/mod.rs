//! The engine seam (issues 44, 56): what is particular to one inference server, in one place
//! per engine, so that the rest of qtune works over engine-neutral [`LaunchConfig`]s and asks
//! an engine what it can do ([`Caps`]), never which one it is.
//!
//! Two engines: llama.cpp's `llama-server` ([`LlamaCpp`], the default) and ik_llama.cpp's
//! ([`IkLlama`]), one folder each (`llama_cpp/`, `ik_llama/`). Each owns how it spells what
//! engines spell apart (a config is rendered to argv by one shared walk, `argv`), what it can
//! express, the two baselines (the server's default, and its own auto-fit with the user's
//! headroom), its container image, and finding and building its server (`<engine>/server.rs`). What every engine's server shares: checking a binary and telling
//! its engine from its `--help` ([`server`]), building from a PyPI sdist ([`build`]), reading
//! a log in every engine's dialect ([`log`]: buffer sizes, OOM, bad flag, port taken) and a
//! `/completion` answer ([`answer`]: timings and cached tokens).
//! [`binary`] names them for the later stages. A config names its engine
//! ([`LaunchConfig::engine`], llama.cpp when absent, so older results read as before).
//! A third engine is a new folder, one [`EngineKind`] variant and one arm of [`of`].

use crate::config::LaunchConfig;
use anyhow::Result;
use std::path::{Path, PathBuf};

pub mod answer;
mod argv;
pub mod binary;
pub mod build;
pub mod flag;
pub mod ik_llama;
pub mod llama_cpp;
pub mod log;
pub mod mtp;
pub mod select;
pub mod server;

pub use flag::Flag;
pub use llama_cpp::parse::{canonical_flag, FLAG_SPELLINGS};
pub use server::ServerBinary;

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

/// A `llama-server` command line read back into its parts (see [`parse_command`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerCommand {
    /// The first word: the server binary as written (`llama-server`, or a path).
    pub server: String,
    /// `-m`.
    pub model: Option<std::path::PathBuf>,
    /// `--host` / `--port`, when given (trials ignore them: they listen on 127.0.0.1).
    pub host: Option<String>,
    pub port: Option<u16>,
    pub config: LaunchConfig,
}

/// Read back a `llama-server` argv as qtune renders it ([`Engine::parse_command`]): as
/// ik_llama.cpp's where the binary is qtune's ik build (its path names `ik_llama`) or it
/// spells a flag only ik has (`--fit-margin`, `-no-fmoe`, `-amb`, `-rtr`: see
/// [`ik_llama::parse::speaks_only_ik`]), else as llama.cpp's, whose error is the one said.
pub fn parse_command(argv: &[String]) -> Result<ServerCommand, String> {
    if argv.first().is_some_and(|s| s.contains("ik_llama")) {
        if let Ok(c) = IkLlama.parse_command(argv) {
            return Ok(c);
        }
    }
    LlamaCpp.parse_command(argv).or_else(|e| {
        if ik_llama::parse::speaks_only_ik(argv) {
            IkLlama.parse_command(argv)
        } else {
            Err(e)
        }
    })
}

/// What a tune's baselines are launched with, from its search space's fixed settings
/// (`SearchSpace::fixed.baseline_inputs()`): the engine sits below the search space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaselineInputs {
    /// Context size.
    pub ctx: u32,
    /// Slots (`-np`).
    pub parallel: u32,
    /// At most this many threads (a busy box's free cores).
    pub threads_cap: Option<u32>,
    /// The RPC workers' addresses, every launch's `--rpc`.
    pub rpc: Vec<String>,
}

/// What qtune needs of an inference server's dialect.
pub trait Engine {
    /// The engine's name, as the user reads it (`llama.cpp`).
    fn name(&self) -> &'static str;

    /// How this engine spells `flag` (llama.cpp's spelling unless it has its own).
    fn spelling(&self, flag: Flag) -> &'static str {
        flag::llama_cpp_spelling(flag)
    }

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
    fn default_baseline(&self, fixed: &BaselineInputs) -> LaunchConfig;

    /// The engine's own auto-fit keeping `headroom_mib` free on each of `cards` cards: the
    /// second baseline, the best command a user who asks for that headroom could type.
    fn fit_baseline(&self, fixed: &BaselineInputs, headroom_mib: u32, cards: usize)
        -> LaunchConfig;

    /// The flags that make the server log what qtune reads (buffer sizes, the memory
    /// breakdown): llama.cpp's `-lv 4`.
    fn log_args(&self) -> Vec<String> {
        vec!["-lv".to_string(), "4".to_string()]
    }

    /// The official server image of the engine at qtune's pinned build (a CUDA image when
    /// `gpu`), for a compose file: None where the engine publishes none.
    fn server_image(&self, _gpu: bool) -> Option<String> {
        None
    }

    /// Read back a command as qtune renders it for this engine ([`Engine::command`]): the
    /// binary, `-m`, the config's flags, `--host`, `--port`; any other flag is one clear error.
    fn parse_command(&self, _argv: &[String]) -> Result<ServerCommand, String> {
        Err(format!(
            "qtune reads back only llama.cpp's commands, not {}'s",
            self.name()
        ))
    }

    /// The flags qtune passes to this engine's server: a server without them is too old or
    /// not this engine's.
    fn required_flags(&self) -> &'static [&'static str];

    /// Whether a server's `--help` is this engine's (by flags only it has). The default
    /// engine is what no other recognizes.
    fn recognizes(&self, _help: &str) -> bool {
        false
    }

    /// The command that builds this engine's pinned server (`qtune server build`).
    fn build_command(&self) -> &'static str;

    /// A server's `--version` line as this engine's build of the pinned source should read
    /// (`path`: where the server is); any other version as it says.
    fn pinned_version(&self, raw: &str, _path: &Path) -> String {
        raw.to_string()
    }

    /// Whether a server's `--version` (`raw`) is qtune's own build of this engine's pinned
    /// source. False by default.
    fn is_pinned_build(&self, _raw: &str) -> bool {
        false
    }

    /// A server's version in words (`b11434`).
    fn version_text(&self, raw: &str) -> String {
        server::short_version(raw)
    }

    /// Find and check this engine's server: `explicit` (`--server`), else its usual places.
    fn resolve(&self, explicit: Option<&Path>) -> Result<ServerBinary>;

    /// Build the pinned server into qtune's cache (`cuda`: with CUDA); returns its path.
    /// `say` gets the progress lines.
    fn build(&self, cuda: bool, say: &dyn Fn(&str)) -> Result<PathBuf>;

    /// What the engine's server logs: the lines that say what went wrong, and how it names
    /// its buffers ([`log`] reads every engine's lines in every log).
    fn log_dialect(&self) -> log::LogDialect;

    /// What the engine can do: the settings of a [`LaunchConfig`] it has a flag for, and what
    /// its server and its answers offer. The rest of qtune asks this, never which engine it is.
    fn caps(&self) -> Caps;

    /// The engine's own levers worth a launch on `config` (each a copy of it with one lever
    /// set), and one line for each lever skipped, saying why. None by default.
    fn own_levers(&self, _config: &LaunchConfig, _ctx: &LeverContext) -> OwnLevers {
        OwnLevers::default()
    }
}

/// What an engine's own levers depend on: the box and where the config puts the experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeverContext {
    /// The box has a GPU the server uses.
    pub has_gpu: bool,
    /// Routed experts sit on the CPU (prompt processing copies them to the GPU, or runs on
    /// the CPU).
    pub experts_on_cpu: bool,
    /// The model has routed experts.
    pub moe: bool,
    /// The routed experts the model computes a token (0: dense).
    pub experts_used: u32,
    /// Why the model's answers cannot be checked against a reference's on this tune (random
    /// weights, no replayed answers): a lever that changes them is not tried. None: they can.
    pub answers_unchecked: Option<&'static str>,
    /// The server is qtune's own build of the engine's pinned source
    /// ([`Engine::is_pinned_build`]): a lever that build parses but does not apply is not tried.
    pub pinned_build: bool,
}

/// [`Engine::own_levers`]: the configs to measure, and the levers skipped with their reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnLevers {
    pub configs: Vec<LaunchConfig>,
    pub skipped: Vec<String>,
}

/// What one engine can do. Every field true is llama.cpp: a config that uses only what its
/// engine has is launched as meant; one that needs more is not proposed ([`Caps::unsupported`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// `--load-mode dio` (direct I/O).
    pub direct_io: bool,
    /// `--no-op-offload`.
    pub no_op_offload: bool,
    /// `--checkpoint-min-step`.
    pub checkpoint_min_step: bool,
    /// `-kvu` / `-no-kvu`: one KV pool for every slot, or not.
    pub kv_unified: bool,
    /// `--rpc` and `-ot` rules naming an RPC device (qtune's build of the engine has RPC).
    pub rpc: bool,
    /// `-sm row` and `-sm tensor`.
    pub split_row_tensor: bool,
    /// A `--fit-target` per card (an auto-fit headroom for each device, not one for all).
    pub fit_target_per_card: bool,
    /// qtune builds its server with CUDA (`qtune server build` picks CUDA on a GPU box).
    pub cuda_build: bool,
    /// `--spec-type draft-mtp`: drafting with the model's own MTP layer (issue 54).
    pub draft_mtp: bool,
    /// The levers of [`crate::config::EngineOpts`] (ik_llama.cpp's own: fused MoE off, the
    /// attention batch cap, run-time repack, smart expert reduction).
    pub own_levers: bool,
}

impl Caps {
    /// Every setting qtune varies (llama.cpp's are this without [`Caps::own_levers`]).
    pub const ALL: Caps = Caps {
        direct_io: true,
        no_op_offload: true,
        checkpoint_min_step: true,
        kv_unified: true,
        rpc: true,
        split_row_tensor: true,
        fit_target_per_card: true,
        cuda_build: true,
        draft_mtp: true,
        own_levers: true,
    };

    /// The settings of `config` these caps lack (their flags, as llama.cpp names them): empty
    /// when the engine can launch `config` as meant. [`Engine::server_args`] leaves them out;
    /// the search does not propose such a config.
    pub fn unsupported(&self, c: &LaunchConfig) -> Vec<&'static str> {
        use crate::config::{LoadMode, SplitMode};
        let mut out = Vec::new();
        if !self.direct_io && c.load_mode == LoadMode::Dio {
            out.push("--load-mode dio");
        }
        if !self.no_op_offload && !c.op_offload {
            out.push("--no-op-offload");
        }
        if !self.checkpoint_min_step && c.checkpoint_min_step.is_some() {
            out.push("--checkpoint-min-step");
        }
        if !self.kv_unified && c.kv_unified.is_some() {
            out.push("-kvu/-no-kvu");
        }
        if !self.rpc && (!c.rpc.is_empty() || !c.rpc_experts.is_empty()) {
            out.push("--rpc");
        }
        if !self.split_row_tensor
            && matches!(c.split_mode, Some(SplitMode::Row | SplitMode::Tensor))
        {
            out.push("-sm row/tensor");
        }
        if !self.fit_target_per_card
            && c.fit_target_mib
                .iter()
                .any(|&m| Some(&m) != c.fit_target_mib.first())
        {
            out.push("a --fit-target per card");
        }
        if !self.draft_mtp && c.spec_type.is_some_and(|t| t.is_mtp()) {
            out.push("--spec-type draft-mtp");
        }
        if !self.own_levers && !c.engine_opts.is_default() {
            out.push("ik_llama.cpp's fused MoE, attention batch, repack or expert reduction");
        }
        out
    }

    /// Whether the engine can launch `config` as meant.
    pub fn expresses(&self, c: &LaunchConfig) -> bool {
        self.unsupported(c).is_empty()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::rpc::RpcExperts;
    use crate::config::{BlockSet, CpuExperts, ExpertProj, GpuExperts, PartialBlock};
    use crate::config::{EngineOpts, FlashAttn, KvType, LoadMode, SpecType, SplitMode};

    /// Both engines' argv, pinned for a config that sets every field and for each value of
    /// the fields one engine spells its own way: rendering is shared code, and must stay
    /// byte-for-byte what each engine passed before.
    #[test]
    fn both_engines_render_every_field_as_pinned() {
        let full = LaunchConfig {
            ctx: 8192,
            parallel: 2,
            n_gpu_layers: Some(99),
            n_cpu_moe: Some(3),
            threads: Some(4),
            batch: Some(1024),
            ubatch: Some(256),
            cache_type_k: KvType::Q8_0,
            cache_type_v: KvType::Q4_0,
            flash_attn: FlashAttn::On,
            load_mode: LoadMode::Mlock,
            fit: Some(true),
            fit_target_mib: vec![512, 1024],
            cpu_experts: Some(CpuExperts {
                blocks: BlockSet::new([4, 5]),
                partial: Some(PartialBlock::new(6, [ExpertProj::Down])),
            }),
            op_offload: false,
            split_mode: Some(SplitMode::Layer),
            tensor_split: vec![3, 1],
            gpu_experts: vec![GpuExperts {
                device: 1,
                blocks: BlockSet::new([10, 11]),
            }],
            rpc: vec!["10.0.0.2:50052".into()],
            rpc_experts: vec![RpcExperts {
                device: "RPC0[10.0.0.2:50052]".into(),
                blocks: BlockSet::new([20]),
            }],
            spec_type: Some(SpecType::NgramMod),
            checkpoint_min_step: Some(1024),
            kv_unified: Some(true),
            engine: EngineKind::LlamaCpp,
            engine_opts: EngineOpts {
                no_fused_moe: true,
                attn_max_batch: Some(512),
                run_time_repack: true,
                expert_reduction: Some(6),
                ..Default::default()
            },
        };
        let both = |c: &LaunchConfig| [LlamaCpp.server_args(c), IkLlama.server_args(c)];
        let [l, ik] = both(&full).map(|a| a.join(" "));
        assert_eq!(
            l,
            "-c 8192 -np 2 --rpc 10.0.0.2:50052 -ngl 99 -sm layer -ts 3,1 --n-cpu-moe 3 \
             -ot blk\\.([4-5])\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU \
             -ot blk\\.6\\.ffn_(down)_(ch|)exps=CPU \
             -ot blk\\.(1[0-1])\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CUDA1 \
             -ot blk\\.(20)\\.ffn_(up|down|gate|gate_up)_(ch|)exps=RPC0[10.0.0.2:50052] \
             -t 4 -b 1024 -ub 256 -ctk q8_0 -ctv q4_0 -fa on --fit on --fit-target 512,1024 \
             --load-mode mlock --no-op-offload --spec-type ngram-mod \
             --checkpoint-min-step 1024 -kvu"
        );
        assert_eq!(
            ik,
            "-c 8192 -np 2 -ngl 99 -sm layer -ts 3,1 --n-cpu-moe 3 \
             -ot blk\\.([4-5])\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU \
             -ot blk\\.6\\.ffn_(down)_(ch|)exps=CPU \
             -ot blk\\.(1[0-1])\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CUDA1 \
             -t 4 -b 1024 -ub 256 -ctk q8_0 -ctv q4_0 -fa on --fit --fit-margin 1024 \
             --no-mmap --mlock --spec-type ngram-mod -no-fmoe -amb 512 -rtr -ser 6,1"
        );
        // One field at a time over `-c 2048 -np 1`: [llama.cpp's flags, ik's flags].
        let one = |f: &dyn Fn(&mut LaunchConfig)| {
            let mut c = LaunchConfig::baseline(2048);
            f(&mut c);
            both(&c).map(|a| {
                a.join(" ")
                    .replacen("-c 2048 -np 1", "", 1)
                    .trim()
                    .to_string()
            })
        };
        let load = [
            (LoadMode::Auto, ["", ""]),
            (LoadMode::None, ["--load-mode none", "--no-mmap"]),
            (LoadMode::Mmap, ["--load-mode mmap", ""]),
            (LoadMode::Mlock, ["--load-mode mlock", "--no-mmap --mlock"]),
            (LoadMode::MmapMlock, ["--load-mode mmap+mlock", "--mlock"]),
            (LoadMode::Dio, ["--load-mode dio", ""]),
        ];
        for (m, want) in load {
            assert_eq!(one(&|c| c.load_mode = m), want, "{m:?}");
        }
        let split = [
            (SplitMode::None, ["-sm none", "-sm none"]),
            (SplitMode::Layer, ["-sm layer", "-sm layer"]),
            (SplitMode::Row, ["-sm row", ""]),
            (SplitMode::Tensor, ["-sm tensor", ""]),
        ];
        for (m, want) in split {
            assert_eq!(one(&|c| c.split_mode = Some(m)), want, "{m:?}");
        }
        let fit = [
            (None, vec![], ["", ""]),
            (None, vec![512], ["--fit-target 512", ""]),
            (Some(false), vec![], ["--fit off", ""]),
            (Some(false), vec![512], ["--fit off --fit-target 512", ""]),
            (Some(true), vec![], ["--fit on", "--fit"]),
            (
                Some(true),
                vec![1024, 512],
                ["--fit on --fit-target 1024,512", "--fit --fit-margin 1024"],
            ),
        ];
        for (f, t, want) in fit {
            let got = one(&|c| {
                c.fit = f;
                c.fit_target_mib = t.clone();
            });
            assert_eq!(got, want, "{f:?} {t:?}");
        }
        assert_eq!(one(&|c| c.kv_unified = Some(false)), ["-no-kvu", ""]);
        assert_eq!(one(&|c| c.kv_unified = Some(true)), ["-kvu", ""]);
        assert_eq!(one(&|c| c.op_offload = false), ["--no-op-offload", ""]);
        assert_eq!(
            one(&|c| c.engine_opts.no_fused_moe = true),
            ["", "-no-fmoe"]
        );
        assert_eq!(one(&|c| c.engine_opts.run_time_repack = true), ["", "-rtr"]);
        assert_eq!(
            one(&|c| c.engine_opts.no_fused_up_gate = true),
            ["", "-no-fug"]
        );
        assert_eq!(
            one(&|c| c.engine_opts.no_fused_mmad = true),
            ["", "-no-mmad"]
        );
        assert_eq!(
            one(&|c| c.engine_opts.no_only_active_experts = true),
            ["", "-no-ooae"]
        );
        assert_eq!(
            one(&|c| c.engine_opts.cuda_params = Some("mmq-id-size=0".into())),
            ["", "-cuda mmq-id-size=0"]
        );
        assert_eq!(
            one(&|c| c.rpc = vec!["h:1".into(), "h:2".into()]),
            ["--rpc h:1,h:2", ""]
        );
    }
}
