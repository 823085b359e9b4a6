//! `qtune compare CMD_A CMD_B [CMD_C...] --rounds N`: re-measure launch commands against each
//! other in paired, interleaved rounds, and say what the measurements support.
//!
//! Each command is a `llama-server` line as qtune prints it. The configs are launched once per
//! round in ABBA order (forward, then reversed), with the real trial runner; every launch is
//! journaled. The statistic is the per-round ratio against the first command, in logs, with a
//! Student-t interval over the rounds ([`crate::stats`]). The launch is the unit of evidence:
//! a launch's requests give its median, never independent samples.

mod render;
pub mod speculation;
mod warnings;
use crate::config::{split_shell_line, LaunchConfig};
use crate::engine::{parse_command, Flag};
use crate::objective::median;
use crate::run::setup::FindServer;
use crate::space::Workload;
use crate::stats::{abba_order, Band, PairedVerdict, Sample};
use crate::trial::{TrialOutcome, TrialRole, TrialRunner};
use anyhow::{bail, Context, Result};
pub use render::{fmt_opt, render_text};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file a comparison writes into its directory (rewritten after every launch).
pub const RESULT_FILE: &str = "compare.json";

/// What `qtune compare` was asked to do, free of clap.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// The launch commands, one shell line each; the first is the reference.
    pub commands: Vec<String>,
    pub rounds: u32,
    /// llama-server to use (else the commands' own binary, then QTUNE_LLAMA_SERVER, PATH, cache).
    pub server: Option<PathBuf>,
    /// The space whose workload to use (built-in name or YAML file).
    pub space: String,
    pub prompt_tokens: Option<u32>,
    pub gen_tokens: Option<u32>,
    pub repetitions: Option<u32>,
    /// The workload to compare on (time per request); every built-in is measured too.
    pub workload: Option<String>,
    /// Directory for logs, the journal and compare.json.
    pub out: Option<PathBuf>,
    pub band_pct: f64,
    pub json: bool,
}

/// A second server of a comparison, launching the commands of its engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtherServer {
    pub engine: crate::config::EngineKind,
    pub path: PathBuf,
    pub version: String,
}

/// One command of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparedCommand {
    /// `A`, `B`, ...
    pub name: String,
    /// The line as given.
    pub line: String,
    pub config: LaunchConfig,
}

/// One launch of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareLaunch {
    /// Index into the commands.
    pub command: usize,
    pub trial_id: u32,
    /// `ok`, `oom-load`, ... as the trial runner classified it.
    pub outcome: String,
    /// The launch's medians (tok/s), when it ran ok.
    pub gen_tps: Option<f64>,
    pub prompt_tps: Option<f64>,
    pub peak_vram_mib: Option<u64>,
    /// Each request shape of the workloads, as this launch measured it (ok launches).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<crate::workloads::ShapeTiming>,
    /// Each GPU's peak on a box with two or more (device order); empty with one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peak_vram_per_gpu_mib: Vec<u64>,
    pub message: String,
    /// A replayed trace (`--workload FILE.jsonl`): each request's counts and times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::trial::replay_trace::ReplayTiming>,
    /// Speculative decoding on the fixed request (no `--workload`): the drafted and accepted
    /// tokens of its measured repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drafts: Option<crate::trial::acceptance::Acceptance>,
}

/// One round: every command launched once, in `order`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareRound {
    pub order: Vec<usize>,
    pub launches: Vec<CompareLaunch>,
}

impl CompareRound {
    fn sample(&self, command: usize) -> Option<Sample> {
        let l = self.launches.iter().find(|l| l.command == command)?;
        let s = Sample {
            gen_tps: l.gen_tps?,
            prompt_tps: l.prompt_tps?,
            request_rate: None,
        };
        s.is_valid().then_some(s)
    }
}

/// A command against the first, over the rounds where both ran ok.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgainstFirst {
    pub command: usize,
    /// None when fewer than one round has both launches ok.
    pub verdict: Option<PairedVerdict>,
    /// `+4.1 % [−1.2, +9.6] (95 %, 6 rounds)`, for generation and prompt.
    pub gen: Option<String>,
    pub prompt: Option<String>,
    /// The per-round ratios (command / first), in round order, and their medians.
    pub gen_ratios: Vec<f64>,
    pub prompt_ratios: Vec<f64>,
    pub gen_median_ratio: Option<f64>,
    pub prompt_median_ratio: Option<f64>,
}

/// Everything a comparison measured and concluded: `compare.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareResult {
    pub qtune_version: String,
    pub started_at: String,
    pub server_path: PathBuf,
    pub server_version: String,
    /// The other engine's server, where the commands name two (llama.cpp's and
    /// ik_llama.cpp's): its commands' configs carry its engine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_servers: Vec<OtherServer>,
    pub model_path: PathBuf,
    pub workload: Workload,
    pub commands: Vec<ComparedCommand>,
    pub rounds_asked: u32,
    pub rounds: Vec<CompareRound>,
    pub confidence: f64,
    pub band_pct: f64,
    /// Every command but the first, against the first.
    pub against_first: Vec<AgainstFirst>,
    /// Highest peak VRAM over each command's launches (MiB; None where not sampled).
    pub peak_vram_mib: Vec<Option<u64>>,
    pub warnings: Vec<String>,
    /// Time per request of each workload measured (`--workload`): every command's median,
    /// and every command against every earlier one, paired by round.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<WorkloadComparison>,
    /// Each command with `--spec-type`: its acceptance, and its greedy answers against the
    /// command that is the same config without it (issue 54).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub speculation: Vec<speculation::SpeculationCheck>,
}

/// The commands compared on one workload's time per request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadComparison {
    pub workload: String,
    /// Median time per request of each command over its ok launches, seconds.
    pub median_request_s: Vec<Option<f64>>,
    /// For a replayed trace: the median over its launches of each command's 90th percentile
    /// of the time per request, seconds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub median_p90_s: Vec<Option<f64>>,
    /// Command `command` against command `reference` (requests per second: the ratio of
    /// times per request), for every `reference < command`.
    pub pairs: Vec<RequestPair>,
    /// For a replayed trace: the median over its launches of each command's aggregate
    /// generation (all generated tokens over the replay's wall clock, tokens/s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub median_aggregate_tps: Vec<Option<f64>>,
    /// The aggregate generation of command `command` against command `reference`, paired by
    /// round, for every `reference < command`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregate_pairs: Vec<RequestPair>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestPair {
    pub command: usize,
    pub reference: usize,
    pub comparison: Option<crate::stats::Comparison>,
    pub decision: Option<crate::stats::Decision>,
}

/// Time per request of `mix` in every launch, compared between the commands.
pub fn workload_comparisons(
    rounds: &[CompareRound],
    n_commands: usize,
    mixes: &[crate::workloads::Mix],
    confidence: f64,
    band: Band,
) -> Vec<WorkloadComparison> {
    let time = |r: &CompareRound, c: usize, mix: &crate::workloads::Mix| -> Option<f64> {
        let l = r.launches.iter().find(|l| l.command == c)?;
        l.gen_tps?;
        mix.request_s(&l.shapes)
    };
    mixes
        .iter()
        .map(|mix| {
            times_compared(&mix.name, rounds, n_commands, confidence, band, |r, c| {
                time(r, c, mix)
            })
        })
        .collect()
}

/// A replayed trace's mean time per request in every launch, compared between the commands,
/// with the median of each command's 90th percentiles.
pub fn replay_comparison(
    name: &str,
    rounds: &[CompareRound],
    n_commands: usize,
    confidence: f64,
    band: Band,
) -> WorkloadComparison {
    let replay = |r: &CompareRound, c: usize| {
        let l = r.launches.iter().find(|l| l.command == c)?;
        l.gen_tps?;
        l.replay.clone()
    };
    let mut w = times_compared(name, rounds, n_commands, confidence, band, |r, c| {
        replay(r, c).map(|t| t.mean_s)
    });
    w.median_p90_s = (0..n_commands)
        .map(|c| {
            let v: Vec<f64> = rounds
                .iter()
                .filter_map(|r| replay(r, c).map(|t| t.p90_s))
                .collect();
            median(&v)
        })
        .collect();
    let aggregate = |r: &CompareRound, c: usize| replay(r, c).and_then(|t| t.aggregate_tps);
    w.median_aggregate_tps = (0..n_commands)
        .map(|c| {
            let v: Vec<f64> = rounds.iter().filter_map(|r| aggregate(r, c)).collect();
            median(&v)
        })
        .collect();
    if w.median_aggregate_tps.iter().any(Option::is_some) {
        w.aggregate_pairs = paired(rounds, n_commands, confidence, band, aggregate);
    } else {
        w.median_aggregate_tps.clear();
    }
    w
}

/// Every command against every earlier one on `speed` (higher is better), paired by round.
fn paired(
    rounds: &[CompareRound],
    n_commands: usize,
    confidence: f64,
    band: Band,
    speed: impl Fn(&CompareRound, usize) -> Option<f64>,
) -> Vec<RequestPair> {
    let mut pairs = Vec::new();
    for c in 1..n_commands {
        for reference in 0..c {
            let p: Vec<(f64, f64)> = rounds
                .iter()
                .filter_map(|r| Some((speed(r, c)?, speed(r, reference)?)))
                .collect();
            let comparison = crate::stats::Comparison::from_pairs(&p, confidence);
            pairs.push(RequestPair {
                command: c,
                reference,
                decision: comparison.as_ref().map(|x| x.claim(band)),
                comparison,
            });
        }
    }
    pairs
}

/// Each command's median of `time` over the rounds, and every pair compared.
fn times_compared(
    name: &str,
    rounds: &[CompareRound],
    n_commands: usize,
    confidence: f64,
    band: Band,
    time: impl Fn(&CompareRound, usize) -> Option<f64>,
) -> WorkloadComparison {
    let median_request_s = (0..n_commands)
        .map(|c| {
            let v: Vec<f64> = rounds.iter().filter_map(|r| time(r, c)).collect();
            median(&v)
        })
        .collect();
    // Requests per second: reference time over command time.
    let pairs = paired(rounds, n_commands, confidence, band, |r, c| {
        Some(1.0 / time(r, c)?)
    });
    WorkloadComparison {
        workload: name.to_string(),
        median_request_s,
        median_p90_s: Vec::new(),
        pairs,
        median_aggregate_tps: Vec::new(),
        aggregate_pairs: Vec::new(),
    }
}

/// `A`, `B`, ..., `Z`, `C27`, ...
pub fn command_name(i: usize) -> String {
    if i < 26 {
        ((b'A' + i as u8) as char).to_string()
    } else {
        format!("C{}", i + 1)
    }
}

/// A parsed command line and the model and server it names.
struct Parsed {
    line: String,
    server: String,
    model: PathBuf,
    config: LaunchConfig,
}

fn parse_all(commands: &[String]) -> Result<Vec<Parsed>> {
    if commands.len() < 2 {
        bail!("compare needs at least two commands (the first is the reference)");
    }
    let mut out: Vec<Parsed> = Vec::new();
    for (i, line) in commands.iter().enumerate() {
        let name = command_name(i);
        let words = split_shell_line(line).map_err(|e| anyhow::anyhow!("command {name}: {e}"))?;
        let c = parse_command(&words).map_err(|e| anyhow::anyhow!("command {name}: {e}"))?;
        let model = c
            .model
            .with_context(|| format!("command {name} has no -m MODEL.gguf"))?;
        if let Some(first) = out.first() {
            if first.model != model {
                bail!(
                    "command {name} launches {}, command A launches {}: compare launches of one model",
                    model.display(),
                    first.model.display()
                );
            }
        }
        out.push(Parsed {
            line: line.clone(),
            server: c.server,
            model,
            config: c.config,
        });
    }
    Ok(out)
}

/// The server binaries: `--server` for every command, else the commands' own binary when it
/// is a path, else the usual search (QTUNE_LLAMA_SERVER, PATH, qtune's cache). The commands
/// may name two servers only where they are different engines (llama.cpp's and
/// ik_llama.cpp's): each command is then launched by its own. Each command's config takes its
/// server's engine, whose dialect it is launched in.
fn servers_for(
    explicit: Option<&Path>,
    parsed: &mut [Parsed],
) -> Result<Vec<crate::engine::binary::ServerBinary>> {
    let mut names: Vec<String> = Vec::new();
    if explicit.is_none() {
        for p in parsed.iter() {
            if !names.contains(&p.server) {
                names.push(p.server.clone());
            }
        }
    }
    // Found and checked as a tune's (a comparison builds nothing).
    let find = |explicit: Option<&Path>| crate::run::setup::server(explicit, FindServer::Look);
    let servers = if explicit.is_some() {
        vec![find(explicit)?]
    } else {
        names
            .iter()
            .map(|n| find(n.contains('/').then_some(Path::new(n))))
            .collect::<Result<Vec<_>>>()?
    };
    for (i, s) in servers.iter().enumerate() {
        if let Some(j) = (0..i).find(|&j| servers[j].engine == s.engine) {
            bail!(
                "the commands name different servers ({} and {}): pass --server PATH to choose one (two servers are compared only when one is llama.cpp's and the other ik_llama.cpp's)",
                names[j],
                names[i]
            );
        }
    }
    for p in parsed.iter_mut() {
        let k = names.iter().position(|n| n == &p.server).unwrap_or(0);
        p.config.engine = servers[k].engine;
    }
    Ok(servers)
}

fn launch_of(command: usize, o: &TrialOutcome) -> CompareLaunch {
    let sample = Sample::from_outcome(o);
    CompareLaunch {
        command,
        trial_id: o.id,
        outcome: o.kind.to_string(),
        gen_tps: sample.map(|s| s.gen_tps),
        prompt_tps: sample.map(|s| s.prompt_tps),
        peak_vram_mib: o.peak_vram_total_mib(),
        peak_vram_per_gpu_mib: if o.peak_vram_mib.len() >= 2 {
            o.peak_vram_mib.clone()
        } else {
            Vec::new()
        },
        message: o.message.clone(),
        shapes: match (&sample, &o.metrics) {
            (Some(_), Some(m)) => m.shapes.clone(),
            _ => Vec::new(),
        },
        replay: match (&sample, &o.metrics) {
            (Some(_), Some(m)) => m.replay.clone(),
            _ => None,
        },
        drafts: sample.and(o.metrics.as_ref()).and_then(|m| m.drafts),
    }
}

/// Launch `configs` in `rounds` ABBA rounds with `runner`. `after_launch` sees every round so
/// far after each launch (to keep results on disk and show progress).
pub fn measure_rounds(
    runner: &mut dyn TrialRunner,
    configs: &[LaunchConfig],
    rounds: u32,
    mut after_launch: impl FnMut(&[CompareRound]),
) -> Vec<CompareRound> {
    let mut done: Vec<CompareRound> = Vec::new();
    for r in 0..rounds as usize {
        let order = abba_order(configs.len(), r);
        done.push(CompareRound {
            order: order.clone(),
            launches: Vec::new(),
        });
        for &c in &order {
            let o = runner.run(&configs[c], TrialRole::Confirm);
            if runner.fatal().is_some() {
                // No launch can give a result (the caller says why).
                return done;
            }
            done[r].launches.push(launch_of(c, &o));
            after_launch(&done);
        }
    }
    done
}

/// The paired verdict of every command against the first, peak VRAM and warnings.
pub fn summarize(
    rounds: &[CompareRound],
    n_commands: usize,
    confidence: f64,
    band: Band,
) -> (Vec<AgainstFirst>, Vec<Option<u64>>, Vec<String>) {
    let against = (1..n_commands)
        .map(|c| {
            let pairs: Vec<(Sample, Sample)> = rounds
                .iter()
                .filter_map(|r| Some((r.sample(c)?, r.sample(0)?)))
                .collect();
            let verdict =
                PairedVerdict::from_pairs(&pairs, confidence, band).map(|v| v.claimed(band));
            let gen_ratios: Vec<f64> = pairs.iter().map(|(c, r)| c.gen_tps / r.gen_tps).collect();
            let prompt_ratios: Vec<f64> = pairs
                .iter()
                .map(|(c, r)| c.prompt_tps / r.prompt_tps)
                .collect();
            AgainstFirst {
                command: c,
                gen_median_ratio: median(&gen_ratios),
                prompt_median_ratio: median(&prompt_ratios),
                gen_ratios,
                prompt_ratios,
                gen: verdict.as_ref().map(|v| v.gen.to_string()),
                prompt: verdict.as_ref().map(|v| v.prompt.to_string()),
                verdict,
            }
        })
        .collect();
    let peak = (0..n_commands)
        .map(|c| {
            rounds
                .iter()
                .flat_map(|r| &r.launches)
                .filter(|l| l.command == c)
                .filter_map(|l| l.peak_vram_mib)
                .max()
        })
        .collect();
    let warnings = warnings::not_measured(rounds);
    (against, peak, warnings)
}

fn default_dir(model: &Path) -> PathBuf {
    let stem: String = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let date = chrono::Local::now().format("%Y%m%d-%H%M%S");
    crate::util::runs_dir().join(format!("{date}-compare-{stem}"))
}

/// Run a comparison with the real llama-server; writes `compare.json` (after every launch),
/// logs and the journal into the output directory, and returns the result with it.
///
/// `on_launch` hears of every launch as it ends (round number from 1, the launch).
pub fn compare(
    opts: &CompareOptions,
    on_launch: &mut dyn FnMut(usize, &CompareLaunch),
) -> Result<(CompareResult, PathBuf)> {
    if opts.rounds == 0 {
        bail!("--rounds must be at least 1 (2 or more give an interval)");
    }
    if !(opts.band_pct >= 0.0 && opts.band_pct < 100.0) {
        bail!(
            "--band must be a percentage from 0 to 100, not {}",
            opts.band_pct
        );
    }
    let mut parsed = parse_all(&opts.commands)?;
    let model = parsed[0].model.clone();
    // The model is checked as `qtune tune` checks it (missing, a folder, not a GGUF, an
    // unsupported architecture: the same one-line error), before any server is looked for.
    let n_vocab = crate::model::load(&model)?.n_vocab;
    let servers = servers_for(opts.server.as_deref(), &mut parsed)?;
    let server = servers[0].clone();
    // Drafting with MTP where the server or the file cannot: one line, before any launch.
    if let Some(p) = parsed
        .iter()
        .find(|p| p.config.spec_type.is_some_and(|t| t.is_mtp()))
    {
        let s = servers.iter().find(|s| s.engine == p.config.engine);
        let offers = crate::engine::mtp::server_offers_mtp(&s.unwrap_or(&server).path);
        let layout = crate::model::load(&model)?;
        if let Some(why) =
            crate::engine::mtp::unavailable(&layout.arch, layout.details.mtp_layers, offers)
        {
            let why = why.trim_start_matches("MTP: not tried, ");
            bail!(
                "{} draft-mtp cannot run in `{}`: {why}",
                Flag::SpecType,
                p.line
            );
        }
    }
    let meta = std::fs::metadata(&model)
        .with_context(|| format!("cannot read the model {}", model.display()))?;
    let mut workload = crate::space::load(&opts.space)?.workload;
    // The shortest context of the commands: a session rendered there, and mixes fitted to it,
    // every command can replay.
    let ctx = parsed.iter().map(|p| p.config.ctx).min().unwrap_or(4096);
    if let Some(w) = &opts.workload {
        let render = crate::run::setup::Renderer {
            server: &server.path,
            model: &model,
            ctx,
        };
        crate::run::setup::ask_workload(&mut workload, w, Some(render))?;
    }
    if let Some(p) = opts.prompt_tokens {
        workload.prompt_tokens = p;
    }
    if let Some(g) = opts.gen_tokens {
        workload.gen_tokens = g;
    }
    if let Some(r) = opts.repetitions {
        workload.repetitions = r;
        workload.shape_repetitions = r;
    }
    if workload.prompt_tokens == 0 || workload.gen_tokens == 0 || workload.repetitions == 0 {
        bail!("--prompt-tokens, --gen-tokens and --repetitions must be at least 1");
    }
    if let Some(msg) = crate::space::workload_range_error(
        workload.prompt_tokens,
        workload.gen_tokens,
        workload.repetitions,
        workload.context_depth,
    ) {
        bail!("--{}", msg.replacen('_', "-", 1));
    }
    // A replayed trace sends its own requests (checked against each -c when it is read).
    let replaying = workload
        .mix
        .as_deref()
        .is_some_and(crate::traffic::plan::is_trace);
    for p in parsed.iter().filter(|_| !replaying) {
        if u64::from(workload.prompt_tokens)
            + u64::from(workload.gen_tokens)
            + u64::from(workload.context_depth.unwrap_or(0))
            > u64::from(p.config.ctx)
        {
            bail!(
                "the workload ({} prompt + {} generated tokens) does not fit {} {} of `{}`",
                workload.prompt_tokens,
                workload.gen_tokens,
                Flag::Ctx,
                p.config.ctx,
                p.line
            );
        }
    }
    if workload.mix.is_some() {
        crate::run::setup::resolve_workload(&mut workload, ctx, n_vocab, &mut |note| {
            eprintln!("qtune: {note}")
        })?;
    }
    let dir = opts.out.clone().unwrap_or_else(|| default_dir(&model));
    if dir.join(RESULT_FILE).exists() {
        bail!(
            "{} already holds a comparison: pass another --out",
            dir.display()
        );
    }
    // Locked like a tune's folder: a real folder of this user's, no link in it, and new or
    // empty (a folder of the user's own is never overwritten).
    let _lock = crate::run::lock(&dir)?;
    crate::run::check_fresh(&dir, "a comparison")?;
    // After the inputs are checked (bad input is one line), before the first launch.
    busy_check()?;
    let journal = crate::trial::journal::Journal::open(&dir)?;
    let mut runner = crate::trial::llama_runner::LlamaServerRunner::new(
        &server.path,
        &model,
        meta.len(),
        workload.clone(),
        &dir,
        journal,
        None,
        crate::run::setup::request_timeout(&workload),
    )?;
    for s in &servers[1..] {
        runner = runner.with_engine_server(s.engine, &s.path);
    }
    // The same ceiling on believable speeds as a tune's, and the same predicted pace of its
    // timeouts, where the model's header can be read (else the absolute bound).
    if let Ok(layout) = crate::model::load(&model) {
        let hw = crate::hardware::probe(true);
        runner = runner
            .with_speed_ceiling(crate::trial::plausible::ceiling_for(&layout, &hw))
            .with_predicted_pace(crate::trial::plausible::pace_for(&layout, &hw));
    }
    let commands: Vec<ComparedCommand> = parsed
        .iter()
        .enumerate()
        .map(|(i, p)| ComparedCommand {
            name: command_name(i),
            line: p.line.clone(),
            config: p.config.clone(),
        })
        .collect();
    let configs: Vec<LaunchConfig> = parsed.iter().map(|p| p.config.clone()).collect();
    let band = Band { pct: opts.band_pct };
    let confidence = 0.95;
    let started_at = chrono::Local::now().to_rfc3339();
    let build = |rounds: &[CompareRound]| {
        let (against_first, peak_vram_mib, warnings) =
            summarize(rounds, commands.len(), confidence, band);
        CompareResult {
            qtune_version: env!("CARGO_PKG_VERSION").to_string(),
            started_at: started_at.clone(),
            server_path: server.path.clone(),
            server_version: server.version.clone(),
            other_servers: servers[1..]
                .iter()
                .map(|s| OtherServer {
                    engine: s.engine,
                    path: s.path.clone(),
                    version: s.version.clone(),
                })
                .collect(),
            model_path: model.clone(),
            workload: workload.clone(),
            commands: commands.clone(),
            rounds_asked: opts.rounds,
            rounds: rounds.to_vec(),
            confidence,
            band_pct: opts.band_pct,
            against_first,
            peak_vram_mib,
            warnings,
            speculation: speculation::checks(&commands, rounds),
            workloads: match &workload.replay {
                Some(t) => vec![replay_comparison(
                    &t.name,
                    rounds,
                    commands.len(),
                    confidence,
                    band,
                )],
                None => {
                    workload_comparisons(rounds, commands.len(), &workload.mixes, confidence, band)
                }
            },
        }
    };
    let path = dir.join(RESULT_FILE);
    let mut write_error: Option<anyhow::Error> = None;
    let rounds = measure_rounds(&mut runner, &configs, opts.rounds, |done| {
        let r = done.len();
        if let Some(l) = done[r - 1].launches.last() {
            on_launch(r, l);
        }
        // Keep the result current after every launch: an interrupted comparison loses nothing.
        let text = serde_json::to_string_pretty(&build(done)).expect("serializable");
        if let Err(e) = crate::util::write_atomic(&path, text.as_bytes()) {
            write_error.get_or_insert(e);
        }
    });
    if let Some(why) = runner.fatal() {
        bail!("{why}");
    }
    if let Some(e) = write_error {
        return Err(e.context(format!("cannot write {}", path.display())));
    }
    let result = build(&rounds);
    crate::util::write_atomic(&path, serde_json::to_string_pretty(&result)?.as_bytes())?;
    Ok((result, dir))
}

/// A busy box, named before it costs a comparison: stop where even one thread would get
/// under a quarter of a core (unless `QTUNE_ALLOW_BUSY=1`); else warn. The commands run as
/// typed (they are what is compared), so the warning says which `-t` fits.
fn busy_check() -> Result<()> {
    use crate::hardware::busy;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let b = busy::measure(busy::WINDOW, cores, &Default::default());
    if b.too_busy() && !busy::allow_busy_env() {
        bail!("{}", b.stop_message("set QTUNE_ALLOW_BUSY=1"));
    }
    if b.is_busy() {
        eprintln!(
            "qtune: warning: the box is busy: {}: each command runs as typed, and one with more threads than the {} free cores (llama-server's default is the physical cores) will collapse; add {} {} to compare at the free cores",
            b.describe(),
            b.free_cores(),
            Flag::Threads,
            b.free_cores()
        );
    }
    Ok(())
}
