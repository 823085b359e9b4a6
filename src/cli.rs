//! The command line: clap definitions (the dispatch to the app layer is in `cli/dispatch.rs`). Nothing here decides anything; each
//! subcommand hands plain values to its function in the app layer (`crate::app`).

use crate::config::KvType;
use crate::util::Format;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

mod dispatch;
pub use dispatch::dispatch;

/// Tune llama-server launch flags for Mixture-of-Experts GGUF models on this box.
///
/// `qtune --model M.gguf` is the same as `qtune tune --model M.gguf`: it profiles the box,
/// reads the model, searches `--n-cpu-moe`, threads, batch sizes and KV types with real
/// llama-server trials, and prints the fastest safe launch command as its last line.
#[derive(Debug, Parser)]
#[command(name = "qtune", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub tune: Option<TuneArgs>,

    /// More log output (-v: debug, -vv: trace). QTUNE_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
}

/// What `qtune` alone prints: the help, and where a newcomer starts.
/// `--budget-minutes`: a finite number of minutes above 0 and at most a week (issue 53: the
/// class of input, so `inf`, `nan`, `-1` and `1e9` are refused alike, in one line).
fn budget_minutes(s: &str) -> Result<f64, String> {
    let m: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of minutes"))?;
    if !m.is_finite() || m <= 0.0 || m > crate::space::MAX_BUDGET_MINUTES {
        return Err(format!(
            "'{s}' is not a budget: give minutes above 0 and at most {} (a week)",
            crate::space::MAX_BUDGET_MINUTES as u32
        ));
    }
    Ok(m)
}

/// `--rpc`: checked as the list it is (addresses, duplicates, how many) before anything is
/// measured or launched; kept as given.
fn rpc_list(s: &str) -> Result<String, String> {
    crate::config::rpc::parse_workers(s).map(|_| s.to_string())
}

pub fn bare_help() -> String {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    format!(
        "{}\nNew here? `qtune demo` tunes a tiny model end to end in a few minutes (the first run \
         builds llama-server), then `qtune --model YOUR.gguf` tunes yours.\n",
        cmd.render_help()
    )
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Find the fastest safe launch config for a model on this box (the default command).
    Tune(TuneArgs),
    /// Run the whole pipeline on a built-in tiny MoE model: obtains llama-server, synthesizes
    /// the model, tunes it and writes the report.
    Demo(DemoArgs),
    /// Print this box's hardware profile: GPUs (VRAM, PCIe link), RAM, cores.
    Hw(HwArgs),
    /// Read a GGUF and predict memory for every --n-cpu-moe.
    Inspect(InspectArgs),
    /// Write a random-weight GGUF of a real MoE shape (for testing and benchmarking).
    Synth(SynthArgs),
    /// Find, check or build llama-server.
    #[command(subcommand)]
    Server(ServerSubcommand),
    /// llama.cpp's RPC workers: lend this box's devices to a head box's llama-server.
    #[command(subcommand)]
    Rpc(RpcCommand),
    /// Re-render the report (Markdown, plots, launch script) of a run directory.
    Report(ReportArgs),
    /// Write a launch script for the winner of a run.
    Script(ScriptArgs),
    /// Export, import, list and show shareable profiles.
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Propose a config for this box without trials, from the memory prediction and profiles;
    /// or, with --box and --shape/--quant, for a box and models you do not have yet.
    Plan(PlanArgs),
    /// Measure a run's winner at every --n-cpu-moe in a range (brute force, for comparison).
    Sweep(SweepArgs),
    /// Measure a run's winner with tokens already in context (does speed hold at long context?).
    Depth(DepthArgs),
    /// Compare the memory prediction with what llama-server reports for its buffers.
    Calibrate(CalibrateArgs),
    /// Measure what KV cache types cost in accuracy against f16 (KL divergence, same top-1 %).
    Quality(QualityArgs),
    /// Re-measure launch commands against the first in paired, interleaved (ABBA) rounds,
    /// with confidence intervals.
    Compare(CompareArgs),
    /// Record what clients send to a running llama-server: a proxy in front of it writes each
    /// generation request (prompt tokens, timing, overlap, the server's timings) to a trace.
    Record(RecordArgs),
    /// Read a recorded trace.
    #[command(subcommand)]
    Trace(TraceCommand),
    /// Print a shell completion script: `qtune completions bash > ~/.local/share/bash-completion/completions/qtune`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print qtune's man page (roff), or write it and every subcommand's page (qtune-tune.1,
    /// ...) into a folder: `qtune man --dir ~/.local/share/man/man1`.
    Man {
        /// Write qtune.1 and a page per subcommand into DIR (created if missing) instead of
        /// printing qtune.1 alone.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Clone, Args)]
pub struct TuneArgs {
    /// The GGUF model to tune (with --resume, taken from the run directory).
    #[arg(long, short = 'm', required_unless_present = "resume")]
    pub model: Option<PathBuf>,
    /// llama-server to use (else QTUNE_LLAMA_SERVER, PATH, then qtune's cache).
    #[arg(long)]
    pub server: Option<PathBuf>,
    /// Which engines to race: llama, ik (ik_llama.cpp) or both (default: both where both
    /// servers are found and none is named by --server or QTUNE_LLAMA_SERVER).
    #[arg(long, value_name = "llama|ik|both", conflicts_with = "resume")]
    pub engine: Option<crate::engine::select::EngineChoice>,
    /// Search space: a YAML file or a built-in name (default, quick, cpu-only, long-context).
    #[arg(long)]
    pub space: Option<String>,
    /// VRAM (MiB) to keep free: the budget is free VRAM before the tune minus this.
    #[arg(long, default_value_t = 512)]
    pub target_vram_headroom: u64,
    /// Context size (default: the space's: 32768 with a GPU, 4096 on the cpu-only space, at
    /// most the model's trained context).
    #[arg(long)]
    pub ctx: Option<u32>,
    /// What you run: agent (a coding agent's session; also agent-session), chat-session or
    /// subagents-session (a chat, or three sub-agents at once), of real text rendered by the
    /// model's own chat template and replayed; chat, agent-shapes, long-doc or a workload YAML
    /// file (request shapes of filler text); or a trace FILE.jsonl from `qtune record`. The
    /// tune minimizes its time per request (overrides the space's workload).
    #[arg(long)]
    pub workload: Option<String>,
    /// Most search trials (overrides the space's budget).
    #[arg(long)]
    pub budget_trials: Option<u32>,
    /// Wall-clock limit in minutes (overrides the space's budget).
    #[arg(long, allow_negative_numbers = true, value_parser = budget_minutes)]
    pub budget_minutes: Option<f64>,
    /// Run directory (default: ~/.local/share/qtune/runs/<date>-<model>-<host>/, under
    /// $XDG_DATA_HOME if set; QTUNE_DATA_DIR moves it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue a killed tune from its run directory without repeating finished trials.
    #[arg(long, conflicts_with = "out")]
    pub resume: Option<PathBuf>,
    /// Start the search from a profile's winner: a profile file, or a name as `plan --profile`
    /// and `profile show` take it (see `qtune profile list`).
    #[arg(long)]
    pub from_profile: Option<PathBuf>,
    /// RPC workers to spread the model over (host:port,...; each started with
    /// `qtune rpc serve` on its box): every launch gets `--rpc`, the baseline is the server's
    /// own spread, and the tune tries layer splits (-ts) and expert placements over them.
    #[arg(long, value_name = "HOST:PORT,...", conflicts_with = "resume", value_parser = rpc_list)]
    pub rpc: Option<String>,
    /// Host for the printed launch command (trials always use 127.0.0.1).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port for the printed launch command.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Print the result as JSON instead of the summary table.
    #[arg(long)]
    pub json: bool,
    /// No banner, progress or summary on stderr (errors, warnings and the command still print).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Print the launches the tune would make (baselines, first configs, budget) and exit
    /// without launching anything.
    #[arg(long, conflicts_with = "resume")]
    pub dry_run: bool,
    /// Tune a dense (non-MoE) model: only threads, batch sizes and the KV type are searched.
    #[arg(long)]
    pub allow_dense: bool,
    /// Tune even where other processes hold every core and the load average is 4 per core
    /// or more (a busy box otherwise stops the tune before its first launch). Also
    /// `QTUNE_ALLOW_BUSY=1`.
    #[arg(long)]
    pub allow_busy: bool,
    /// Testing: answer every trial from this recorded journal.jsonl instead of launching
    /// llama-server (a run.json next to it supplies the recorded box); time is replayed too.
    #[arg(long, hide = true, value_name = "JOURNAL")]
    pub replay: Option<PathBuf>,
    /// Testing: re-sample replayed successes by ±PCT percent (seeded by --replay-seed).
    #[arg(long, hide = true, requires = "replay", default_value_t = 0.0)]
    pub replay_noise: f64,
    #[arg(long, hide = true, requires = "replay", default_value_t = 42)]
    pub replay_seed: u64,
    /// Testing: simulate Ctrl-C after N replayed trials.
    #[arg(long, hide = true, requires = "replay")]
    pub replay_interrupt_after: Option<u32>,
    /// Testing: spend this many real milliseconds in every replayed trial.
    #[arg(long, hide = true, requires = "replay", default_value_t = 0)]
    pub replay_pace_ms: u64,
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Run directory (default: ~/.local/share/qtune/runs/<date>-demo-<model>-<host>/, under
    /// $XDG_DATA_HOME if set; QTUNE_DATA_DIR moves it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// llama-server to use (built into qtune's cache when none is found).
    #[arg(long)]
    pub server: Option<PathBuf>,
    /// Run even where other processes hold every core (as `tune --allow-busy`).
    #[arg(long)]
    pub allow_busy: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    /// The run directory (its winner's flags are kept, --n-cpu-moe varies).
    pub dir: PathBuf,
    /// First --n-cpu-moe (default 0).
    #[arg(long)]
    pub from: Option<u32>,
    /// Last --n-cpu-moe (default: the block count).
    #[arg(long)]
    pub to: Option<u32>,
    #[arg(long, default_value_t = 1)]
    pub step: u32,
}

#[derive(Debug, Clone, Args)]
pub struct DepthArgs {
    /// The run directory whose winner to measure.
    pub dir: PathBuf,
    /// Tokens already in context, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,8192")]
    pub depths: Vec<u32>,
}

/// The model of a command: `--model M` (every command takes it), or positional `M` for the
/// commands that took it that way before.
#[derive(Debug, Clone, Args)]
pub struct ModelArg {
    /// The GGUF model (also accepted as the first argument).
    #[arg(long = "model", short = 'm', value_name = "MODEL")]
    pub flag: Option<PathBuf>,
    #[arg(value_name = "MODEL", conflicts_with = "flag", hide = true)]
    pub positional: Option<PathBuf>,
}

impl ModelArg {
    fn path(self) -> anyhow::Result<PathBuf> {
        self.flag
            .or(self.positional)
            .ok_or_else(|| anyhow::anyhow!("give the model: --model M.gguf"))
    }
}

#[derive(Debug, Clone, Args)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub model: ModelArg,
    #[arg(long)]
    pub server: Option<PathBuf>,
    /// --n-cpu-moe values (GPU only), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub n_cpu_moe: Vec<u32>,
    /// Context sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8192")]
    pub ctx: Vec<u32>,
    /// KV cache types (K = V), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "f16")]
    pub kv: Vec<KvType>,
    /// Micro-batch sizes (-ub; -b is at least 2048), comma-separated; default: the server's.
    #[arg(long, value_delimiter = ',')]
    pub ubatch: Vec<u32>,
    /// Directory for the server logs and calibration.json: a new or empty folder.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct QualityArgs {
    /// The GGUF model (a real one: synthetic random-weight models are refused). With
    /// --against, the quantization(s) to score: repeat -m for several.
    #[arg(long, short = 'm', required = true)]
    pub model: Vec<PathBuf>,
    /// Score each -m file against this one, a reference quantization of the same model (e.g.
    /// -m Q4_K_M.gguf --against Q8_0.gguf): mean KLD, same top-1 % and perplexity, f16 KV.
    #[arg(long, conflicts_with = "kv")]
    pub against: Option<PathBuf>,
    /// Plain-text file to score (default: the King James Version, fetched with pip).
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// KV cache types to compare with f16 (K = V), comma-separated (default q8_0,q4_0).
    #[arg(long, value_delimiter = ',')]
    pub kv: Vec<KvType>,
    /// Context of each chunk: the context you will run (lowered only if the text is too short).
    #[arg(long, default_value_t = 4096)]
    pub ctx: u32,
    /// Chunks per run (default: 16,384 tokens / ctx, at least 2; fewer if the text or disk bound says so).
    #[arg(long)]
    pub chunks: Option<u32>,
    /// Most disk (MiB) the f16 reference's logits may take; chunks are cut to fit.
    #[arg(long, default_value_t = crate::quality::DEFAULT_MAX_DISK_MIB)]
    pub max_disk_mib: u64,
    /// llama-perplexity to use (else QTUNE_LLAMA_PERPLEXITY, else next to llama-server).
    #[arg(long)]
    pub perplexity: Option<PathBuf>,
    /// llama-server whose bin/ holds llama-perplexity.
    #[arg(long)]
    pub server: Option<PathBuf>,
    /// Threads for llama-perplexity (default: its own).
    #[arg(long)]
    pub threads: Option<u32>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// Two or more llama-server command lines, each one quoted argument, as qtune prints them
    /// (e.g. 'llama-server -m M.gguf -c 32768 -np 1'). The first is the reference.
    #[arg(required = true, num_args = 2..)]
    pub commands: Vec<String>,
    /// Rounds: each launches every command once, in ABBA order.
    #[arg(long, default_value_t = 6)]
    pub rounds: u32,
    /// llama-server to use (else the commands' own binary, QTUNE_LLAMA_SERVER, PATH, cache).
    #[arg(long)]
    pub server: Option<PathBuf>,
    /// The search space whose workload to run (a built-in name or a YAML file).
    #[arg(long, default_value = "default")]
    pub space: String,
    /// Prompt tokens per request (overrides the space's workload).
    #[arg(long)]
    pub prompt_tokens: Option<u32>,
    /// Generated tokens per request (overrides the space's workload).
    #[arg(long)]
    pub gen_tokens: Option<u32>,
    /// Measured requests per launch (overrides the space's workload).
    #[arg(long)]
    pub repetitions: Option<u32>,
    /// Compare the commands on time per request for this workload: agent (the agent
    /// session), chat-session, subagents-session or a trace FILE.jsonl, replayed in each
    /// launch; or chat, agent-shapes, long-doc or a YAML file (request shapes: every built-in
    /// mix is measured in each launch, this one decides).
    #[arg(long)]
    pub workload: Option<String>,
    /// Differences smaller than this many percent are a tie.
    #[arg(long, default_value_t = 3.0)]
    pub band: f64,
    /// Directory for logs, the journal and compare.json (default:
    /// ~/.local/share/qtune/runs/<date>-compare-<model>/; QTUNE_DATA_DIR moves it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// The running llama-server to forward to, e.g. http://127.0.0.1:8081.
    #[arg(long)]
    pub upstream: String,
    /// The address clients connect to, e.g. 127.0.0.1:8080 (only this address is bound;
    /// anything but loopback lets other machines in, and qtune warns).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: String,
    /// The trace to write (JSON Lines, created user-only; never over an existing file).
    /// Default: ~/.local/share/qtune/traces/<time>.jsonl (QTUNE_DATA_DIR moves it).
    #[arg(long, value_name = "FILE.jsonl")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Summarise a trace: requests, sessions, prefixes, cached and re-read tokens, overlap.
    Show {
        /// The trace (written by 'qtune record').
        file: PathBuf,
        /// Print the summary and per-request rows as JSON (never the prompts).
        #[arg(long)]
        json: bool,
    },
    /// Build the built-in agent (chat, subagents) session from Python's standard-library sources and
    /// render it through a running llama-server's own chat template and tokenizer into a trace
    /// ('qtune trace show' summarises it).
    Session {
        /// agent (a coding agent: tools, file reads, edits, test logs, thinking, sub-agents in
        /// parallel), chat (a conversation about code) or subagents (three sub-agents sending
        /// every turn at once, each a quarter of the context deep).
        #[arg(value_parser = ["agent", "chat", "subagents"])]
        kind: String,
        /// The running llama-server whose template and tokenizer render it, e.g.
        /// http://127.0.0.1:8080.
        #[arg(long)]
        server: String,
        /// The context the session fills, in tokens (default: the server's context per slot;
        /// the subagents session fills a quarter of it each).
        #[arg(long)]
        ctx: Option<u64>,
        /// The trace to write (never over an existing file). Default:
        /// ~/.local/share/qtune/traces/session-<kind>-<time>.jsonl (QTUNE_DATA_DIR moves it).
        #[arg(long, value_name = "FILE.jsonl")]
        out: Option<PathBuf>,
        /// Also ask the server for each request's greedy answer (as a replay generates it) and
        /// keep its tokens, so 'trace show' predicts speculative decoding's acceptance.
        #[arg(long)]
        answers: bool,
    },
}

#[derive(Debug, Clone, Args)]
pub struct HwArgs {
    #[arg(long, conflicts_with = "yaml")]
    pub json: bool,
    #[arg(long)]
    pub yaml: bool,
    /// Skip the host memory bandwidth measurement (about two seconds).
    #[arg(long)]
    pub no_bandwidth: bool,
    /// Also measure these RPC workers (host:port,...): their devices and free memory, the
    /// link's latency and write bandwidth.
    #[arg(long, value_name = "HOST:PORT,...", value_parser = rpc_list)]
    pub rpc: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum RpcCommand {
    /// Start an RPC worker (llama.cpp's ggml-rpc-server) on this box and print the --rpc
    /// argument for the head box. It has no authentication: bind loopback or a private
    /// network; a public address is refused unless --allow-public.
    Serve(RpcServeArgs),
    /// A loopback proxy of known rate in front of a worker: one box with a worker per GPU
    /// stands in for two boxes on a 1 or 10 Gbit/s network (no root, no tc). Runs until
    /// stopped; point the head's --rpc at --listen.
    Link(RpcLinkArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RpcLinkArgs {
    /// Where the head connects, e.g. 127.0.0.1:50062.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: String,
    /// The worker behind the link, e.g. 127.0.0.1:50052.
    #[arg(long, value_name = "HOST:PORT")]
    pub to: String,
    /// The link's rate in each direction, Gbit/s (10^9 bits per second).
    #[arg(long)]
    pub gbit: f64,
    /// One-way delay added to every chunk, ms (the round trip grows by twice this).
    #[arg(long, default_value_t = 0.0)]
    pub delay_ms: f64,
    /// Write the proxy's byte counters here (JSON, rewritten every 200 ms).
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct RpcServeArgs {
    /// The address to listen on, as `qtune record --listen` takes it: the one the head box
    /// reaches this box at (a private or VPN address for a second box; loopback to try it on
    /// one box), e.g. 192.168.1.20:50052 or [fd00::2]:50052. Default: 127.0.0.1:50052.
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["host", "port"])]
    pub listen: Option<String>,
    /// The host part alone (the port stays 50052 unless --port names another).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port part alone.
    #[arg(long, default_value_t = crate::rpc::DEFAULT_PORT)]
    pub port: u16,
    /// Devices to lend, comma-separated as the worker names them (e.g. CUDA0,CPU); default:
    /// every device.
    #[arg(long, value_delimiter = ',')]
    pub device: Vec<String>,
    /// CPU threads of the worker's CPU device (default: rpc-server's).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Turn off the worker's local tensor cache (-c: a worker that saw a large tensor before
    /// reads it from its own disk instead of the network on the next load).
    #[arg(long)]
    pub no_cache: bool,
    /// Bind a public address (or every interface, 0.0.0.0) anyway: only behind a firewall.
    #[arg(long)]
    pub allow_public: bool,
    /// ggml-rpc-server to run (else QTUNE_RPC_SERVER, else next to the llama-server qtune
    /// uses).
    #[arg(long)]
    pub rpc_server: Option<PathBuf>,
    /// Print the worker's command and the head's --rpc argument, and exit.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// Context size for the KV cache prediction (default: what 'qtune tune' would use here:
    /// 32768 with a GPU, 4096 without, at most the model's trained context).
    #[arg(long)]
    pub ctx: Option<u32>,
    /// KV cache type (K and V).
    #[arg(long, default_value = "f16")]
    pub kv: KvType,
    /// VRAM (MiB) to keep free when marking what fits.
    #[arg(long, default_value_t = 512)]
    pub target_vram_headroom: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SynthArgs {
    /// Output GGUF path: a new path or a regular file to replace (never a link or a device).
    #[arg(required_unless_present = "test_models")]
    pub out: Option<PathBuf>,
    /// qwen3.5-35b-a3b, qwen3-30b-a3b, tiny-qwen35moe or tiny-qwen3moe.
    #[arg(long, required_unless_present = "test_models")]
    pub shape: Option<String>,
    /// Instead: prepare the models qtune's own tests use in its cache (SmolLM2 from its PyPI
    /// wheel, the tiny synthetic MoE models) and print their paths (scripts/test.sh runs this).
    #[arg(long, conflicts_with_all = ["out", "shape"])]
    pub test_models: bool,
    /// The quantization mix: q4_k_m, q4_k_l, mxfp4_moe or q8_0 (the recipes `qtune plan
    /// --quant` lays out).
    #[arg(long, default_value = "q4_k_m")]
    pub ftype: String,
    /// Leave out the MTP block a Qwen3.5 GGUF carries as llama.cpp's converter writes it: the
    /// layout of GGUFs made without it (the 35B's 733 tensors, not 753), the only one
    /// ik_llama.cpp 0.1.5 loads.
    #[arg(long)]
    pub no_mtp: bool,
}

#[derive(Debug, Subcommand)]
pub enum ServerSubcommand {
    /// Print the llama-server qtune will use: --server, QTUNE_LLAMA_SERVER, PATH, cache
    /// (with --engine ik: --server, QTUNE_IK_SERVER, cache).
    Path {
        #[arg(long)]
        server: Option<PathBuf>,
        /// Print the RPC worker (ggml-rpc-server) next to that llama-server instead.
        #[arg(long)]
        rpc_server: bool,
        /// Which engine's server: llama.cpp or ik (ik_llama.cpp).
        #[arg(long, default_value = "llama.cpp")]
        engine: crate::config::EngineKind,
    },
    /// Check that a llama-server runs and has the flags qtune passes; names its engine.
    Check {
        #[arg(long)]
        server: Option<PathBuf>,
        /// Which engine's server to look for when --server is not given: llama.cpp or ik.
        #[arg(long, default_value = "llama.cpp")]
        engine: crate::config::EngineKind,
    },
    /// Build llama-server from the pinned llama.cpp source into qtune's cache (with --engine
    /// ik: ik_llama.cpp's, from the PyPI sdist ik-llama-cpp-python 0.1.5: CPU unless --cuda).
    Build {
        /// Build with CUDA for the compute capability NVML reports (the default where NVML
        /// sees a GPU; needs the CUDA toolkit's nvcc).
        #[arg(long, conflicts_with = "cpu")]
        cuda: bool,
        /// Build for the CPU alone, even where the box has a GPU.
        #[arg(long)]
        cpu: bool,
        /// Which engine: llama.cpp or ik (ik_llama.cpp).
        #[arg(long, default_value = "llama.cpp")]
        engine: crate::config::EngineKind,
    },
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// The run directory.
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct ScriptArgs {
    /// The run directory whose winner to launch.
    #[arg(long)]
    pub from: PathBuf,
    /// Where to write the script.
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Also write a systemd unit next to the script.
    #[arg(long)]
    pub systemd: bool,
    /// Also write a docker compose file (OUT.compose.yaml) for the llama.cpp server image.
    #[arg(long)]
    pub compose: bool,
}

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Export a run's result as a shareable profile.
    Export {
        dir: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
    /// Validate a profile from elsewhere and add it to profiles/.
    Import { file: PathBuf },
    /// List the profiles in profiles/.
    List,
    /// Show one profile.
    Show { name: String },
}

#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// The model file (or, with --box, --shape and --quant instead). A file holding only the
    /// model's first megabytes (`curl -L -r 0-16777215 URL -o head.gguf`) plans from its GGUF
    /// header; so does a plain http:// URL, read for its header only.
    #[arg(long, short = 'm', required_unless_present_any = ["shape", "list_boxes"])]
    pub model: Option<PathBuf>,
    /// Plan for a box described rather than this one: a built-in name (--list-boxes) or a
    /// YAML file of the form `qtune hw --yaml` writes.
    #[arg(long = "box", value_name = "NAME|FILE")]
    pub box_spec: Option<String>,
    /// List the built-in boxes and exit.
    #[arg(long, conflicts_with_all = ["model", "shape"])]
    pub list_boxes: bool,
    /// Plan a model that is not downloaded: its shape (as `qtune synth --shape`), with --quant.
    #[arg(long, conflicts_with = "model", requires = "quant")]
    pub shape: Option<String>,
    /// Quantizations of --shape to plan, comma-separated (q4_k_m, q4_k_l, mxfp4_moe, q8_0).
    #[arg(long, value_delimiter = ',', requires = "shape")]
    pub quant: Vec<String>,
    /// The workload the recommendation is for (chat, agent-shapes, long-doc or a YAML file);
    /// every built-in's time per request is shown. Or a trace FILE.jsonl with answer tokens:
    /// its answers predict speculative decoding on the box, and the command adds
    /// `--spec-type ngram-mod` where it pays. Only with --box or --shape.
    #[arg(long)]
    pub workload: Option<String>,
    /// With --box: the host's physical cores instead of the box's.
    #[arg(long, requires = "box_spec")]
    pub cores: Option<u32>,
    /// With --box: the host's RAM, GiB, instead of the box's.
    #[arg(long, requires = "box_spec")]
    pub ram_gib: Option<u64>,
    /// With --box: the host's memory read bandwidth, GB/s (`qtune hw` measures it), instead of
    /// the box's.
    #[arg(long, requires = "box_spec", allow_negative_numbers = true)]
    pub host_bw_gbs: Option<f64>,
    /// Start from this profile (else the best match in profiles/).
    #[arg(long, conflicts_with_all = ["box_spec", "shape"])]
    pub profile: Option<PathBuf>,
    /// Use no profile: the memory and speed models alone.
    #[arg(long, conflicts_with = "profile")]
    pub no_profile: bool,
    /// Context size (default: the profile's; without one, what 'qtune tune' would use here:
    /// 32768 with a GPU, 4096 without, at most the model's trained context).
    #[arg(long)]
    pub ctx: Option<u32>,
    #[arg(long, default_value_t = 512)]
    pub target_vram_headroom: u64,
    /// Print the plan (config, predicted memory and speed with intervals, launch command) as
    /// JSON on stdout instead of the command line.
    #[arg(long)]
    pub json: bool,
}
