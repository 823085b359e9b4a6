//! `qtune tune` and `qtune demo`: prepare the run directory, pick the trial runner and the
//! clock (the real llama-server and the machine's clock, or a replayed landscape and a manual
//! clock), run the search, write the finished run and its report, and print the outcome.

mod resume;
mod space;
use crate::clock::{Clock, ManualClock};
use crate::config::LaunchConfig;
use crate::run::setup::FindServer;
use crate::run::{RunInputs, TuneResult};
use crate::search::Resume;
use crate::space::SearchSpace;
use crate::trial::cleanup::Interrupted;
use crate::trial::journal::Journal;
use crate::trial::TrialRunner;
use anyhow::{bail, Context, Result};
use resume::{extend_budget, resume_command, verify_resume};
use space::{room_for_engines, space_for};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What `qtune tune` was asked to do, free of clap.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    /// The model; with `--resume`, optional (the run directory knows it).
    pub model: Option<PathBuf>,
    pub server: Option<PathBuf>,
    /// `--engine`: the engines raced (None: both where found, [`crate::engine::select`]).
    pub engine: Option<crate::engine::select::EngineChoice>,
    pub space: Option<String>,
    pub headroom_mib: u64,
    pub ctx: Option<u32>,
    /// `--workload`: the request mix the objective is computed for.
    pub workload: Option<String>,
    pub budget_trials: Option<u32>,
    pub budget_minutes: Option<f64>,
    pub out: Option<PathBuf>,
    pub resume: Option<PathBuf>,
    pub from_profile: Option<PathBuf>,
    pub host: String,
    pub port: u16,
    pub json: bool,
    /// No banner, progress or summary on stderr: errors, warnings and the command only.
    pub quiet: bool,
    /// Print the launches the tune would make and exit without launching.
    pub dry_run: bool,
    /// Tune a dense (non-MoE) model anyway.
    pub allow_dense: bool,
    /// Tune on a box too busy to time ([`crate::hardware::busy::Busy::too_busy`]).
    pub allow_busy: bool,
    /// Run against a replayed landscape instead of llama-server (hidden; for tests).
    pub replay: Option<ReplayOptions>,
    /// `--rpc host:port,...`: the RPC workers to spread the model over.
    pub rpc: Option<String>,
}

/// The hidden `--replay JOURNAL` switch: every trial is answered from a recorded journal,
/// time is a manual clock advanced by each recorded trial's duration, nothing is launched.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// A `journal.jsonl` (or the run directory holding one). A `run.json` next to it supplies
    /// the recorded box (hardware, free VRAM), so the replay is the same on any machine.
    pub journal: PathBuf,
    /// Re-sample recorded successes by ±this percent (0: replay them verbatim).
    pub noise_pct: f64,
    pub seed: u64,
    /// Simulate Ctrl-C after this many trials of this session.
    pub interrupt_after: Option<u32>,
    /// Real milliseconds spent in every replayed trial (0: none), so a signal can land mid-tune.
    pub pace_ms: u64,
}

impl ReplayOptions {
    fn journal_dir(&self) -> PathBuf {
        if self.journal.is_dir() {
            self.journal.clone()
        } else {
            self.journal
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf()
        }
    }
}

/// A new, empty `<data dir>/runs/<date>-<model>-<host>/`, or `...-2/`, `-3/`... where another
/// tune took that name in the same second: each name is claimed by creating its folder, so two
/// tunes started at once never share one.
fn new_default_run_dir(model: &Path, tag: Option<&str>) -> Result<PathBuf> {
    let base = default_run_dir(model, tag);
    if let Some(parent) = base.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    for n in 1..=100 {
        let dir = if n == 1 {
            base.clone()
        } else {
            let mut name = base.clone().into_os_string();
            name.push(format!("-{n}"));
            PathBuf::from(name)
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
        }
    }
    bail!(
        "100 run folders named {} already exist: give --out DIR",
        base.display()
    )
}

/// `<data dir>/runs/<date>-<model>-<host>/` ([`crate::util::runs_dir`]).
fn default_run_dir(model: &Path, tag: Option<&str>) -> PathBuf {
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let host = sysinfo::System::host_name().unwrap_or_else(|| "host".into());
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let date = chrono::Local::now().format("%Y%m%d-%H%M%S");
    crate::util::runs_dir().join(format!(
        "{date}-{}{}-{}",
        tag.map(|t| format!("{t}-")).unwrap_or_default(),
        clean(&stem),
        clean(&host)
    ))
}

/// A path the "last stdout line is the command" contract cannot carry is refused up front.
fn check_printable(what: &str, path: &Path) -> Result<()> {
    let s = path.to_string_lossy();
    if s.contains('\n') || s.contains('\r') {
        anyhow::bail!(
            "the {what} path {:?} contains a line break: the launch command qtune prints as its last line could not carry it; rename or link the file",
            s
        );
    }
    Ok(())
}

/// `path` made absolute against the current directory (not resolving links), so `launch.sh`
/// and `--resume` work from any directory.
fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot make {} absolute", path.display()))
}

/// The size of a file, when it can be read.
fn file_bytes(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// `--from-profile`: the earlier winner the search starts from.
fn from_profile(opts: &TuneOptions) -> Result<Option<crate::config::Base>> {
    match &opts.from_profile {
        Some(p) => Ok(Some(
            crate::profile::resolve_profile(p)?.1.winner.config.base(),
        )),
        None => Ok(None),
    }
}

/// What a fresh tune starts from, checked before anything is written or launched.
struct Checked {
    model: PathBuf,
    server_path: PathBuf,
    server_version: String,
    /// The other engines' servers raced (`--engine both`).
    engine_servers: Vec<crate::engine::select::EngineServer>,
    layout: crate::model::ModelLayout,
    hardware: crate::hardware::HardwareProfile,
    space: SearchSpace,
    /// Said in the banner: why the space is cpu-only, a context lowered to the trained one.
    notes: Vec<String>,
}

/// Resolve the model, server, box and space of a fresh tune and apply the guard rails
/// ([`super::preflight`]): a dense model, a context past the trained one, a headroom bigger
/// than the card, a model that cannot fit in VRAM + RAM are refused here, before any launch.
fn preflight(opts: &TuneOptions) -> Result<Checked> {
    let model = opts
        .model
        .clone()
        .context("--model is required (or --resume DIR to continue a tune)")?;
    check_printable("model", &model)?;
    let model = absolute(&model)?;
    // The model first: a wrong path is said before a server is built for it.
    let layout = crate::model::load(&model)?;
    let mut notes: Vec<String> = Vec::new();
    let mut engine_servers = Vec::new();
    let (server_path, server_version, server) = match &opts.replay {
        Some(r) => (
            opts.server
                .clone()
                .unwrap_or_else(|| PathBuf::from("llama-server")),
            format!("replay of {}", r.journal.display()),
            None,
        ),
        // A dry run launches nothing, and builds nothing either.
        None => {
            let t = super::engines::resolve(
                opts.engine,
                opts.server.as_deref(),
                opts.rpc.is_some(),
                !opts.dry_run,
            )?;
            engine_servers = t.others;
            notes.extend(t.note);
            (
                absolute(&t.primary.path)?,
                t.primary.version.clone(),
                Some(t.primary),
            )
        }
    };
    check_printable("llama-server", &server_path)?;
    let hardware = match &opts.replay {
        // The recorded box, when the journal comes with its run.json.
        Some(r) => match crate::run::read_inputs(&r.journal_dir()) {
            Ok(recorded) => recorded.hardware,
            Err(_) => crate::hardware::probe(false),
        },
        None => crate::hardware::probe(true),
    };
    if let Some(server) = &server {
        super::preflight::check_server_backend(&hardware, server)?;
    }
    let (mut space, space_note) = space_for(
        opts,
        &hardware,
        &layout,
        server
            .as_ref()
            .map(|_| (server_path.as_path(), model.as_path())),
    )?;
    if let Some(list) = &opts.rpc {
        if opts.replay.is_some() {
            anyhow::bail!("--rpc launches real workers' devices: it cannot be replayed");
        }
        if let Some(s) = server
            .as_ref()
            .filter(|s| !crate::engine::of(s.engine).caps().rpc)
        {
            anyhow::bail!(
                "--rpc needs llama.cpp's llama-server: {} is {}'s, which qtune builds without RPC",
                s.path.display(),
                s.engine
            );
        }
        space.fixed.rpc_workers = super::rpc::tune_workers(list, &server_path)?;
    }
    super::preflight::check_moe(&model, &layout, opts.allow_dense)?;
    notes.extend(space_note);
    for o in &engine_servers {
        notes.push(format!(
            "engine: {} raced too ({})",
            o.engine,
            o.path.display()
        ));
    }
    space.fixed.also_engines = engine_servers.iter().map(|s| s.engine).collect();
    room_for_engines(opts, &mut space, hardware.has_gpu());
    if let Some(s) = server.as_ref().filter(|s| !s.engine.is_default()) {
        // Every launch of the tune, baselines included, in the server's own dialect.
        space.fixed.engine = s.engine;
        notes.push(format!(
            "engine: {} (every launch in its own flags)",
            s.engine
        ));
    }
    let (ctx, ctx_note) =
        super::preflight::check_ctx(space.fixed.ctx, opts.ctx.is_some(), &layout)?;
    space.fixed.ctx = ctx;
    notes.extend(ctx_note);
    super::preflight::check_headroom(&hardware, opts.headroom_mib)?;
    super::preflight::check_fits(&layout, &hardware, ctx, opts.headroom_mib)?;
    if opts.replay.is_none() {
        for w in super::preflight::check_busy(
            &hardware,
            &mut space,
            opts.allow_busy,
            "add --allow-busy (or set QTUNE_ALLOW_BUSY=1)",
        )? {
            let line = match w.strip_prefix("note: ") {
                Some(info) => format!("qtune: {info}"),
                None => format!("qtune: warning: {w}"),
            };
            eprintln!("{}", crate::util::fit(&line));
        }
    }
    for w in crate::space::host_warnings(&space, hardware.host.logical_cores, layout.n_blocks) {
        let w = crate::escape::terminal_lines(&w);
        eprintln!("{}", crate::util::fit(&format!("qtune: warning: {w}")));
    }
    Ok(Checked {
        model,
        server_path,
        server_version,
        engine_servers,
        layout,
        hardware,
        space,
        notes,
    })
}

/// The run directory (locked for this process), its inputs and the model: read back and
/// verified for `--resume`, else measured and written.
/// Also returns the notes the banner says (why the space is cpu-only, ...).
fn prepare(
    opts: &TuneOptions,
) -> Result<(
    PathBuf,
    RunInputs,
    crate::model::ModelLayout,
    crate::run::RunLock,
    Vec<String>,
)> {
    if let Some(dir) = &opts.resume {
        if !crate::run::holds_a_tune(dir) {
            anyhow::bail!(
                "cannot resume: {} is not a qtune run directory (it has no {})",
                dir.display(),
                crate::run::RUN_FILE
            );
        }
        let lock = crate::run::lock(dir)?;
        // Before anything else: what a SIGKILLed tune's last server left running.
        if let Some(note) = crate::trial::leftover::sweep(dir) {
            eprintln!("qtune: warning: {}", crate::escape::terminal(&note));
        }
        let inputs = crate::run::read_inputs(dir).context("cannot resume")?;
        if let Some(m) = opts.model.as_ref() {
            if absolute(m)? != inputs.model_path && *m != inputs.model_path {
                anyhow::bail!(
                    "cannot resume: {} was a tune of {}, not {}",
                    dir.display(),
                    inputs.model_path.display(),
                    m.display()
                );
            }
        }
        let layout = crate::model::load(&inputs.model_path)
            .with_context(|| format!("cannot resume {}", dir.display()))?;
        verify_resume(opts, dir, &inputs, &layout)?;
        let mut inputs = inputs;
        if let Some(r) = inputs.space.workload.replay.as_mut() {
            // The trace is read again (the run directory keeps its path and SHA-256 only).
            r.reload()
                .with_context(|| format!("cannot resume {}", dir.display()))?;
        }
        inputs
            .space
            .workload
            .check_vocab(layout.n_vocab)
            .with_context(|| format!("cannot resume {}", dir.display()))?;
        let notes = extend_budget(opts, &mut inputs)?;
        if !notes.is_empty() {
            crate::run::write_inputs(dir, &inputs)?;
            crate::search::reopen(dir)?;
        }
        return Ok((dir.clone(), inputs, layout, lock, notes));
    }
    if let Some(out) = &opts.out {
        // Before the checks and the quality floor (minutes): a folder of the user's fails at
        // once. One holding a tune is told apart after the lock (it may be in use).
        crate::run::check_run_files(out)?;
        if !crate::run::holds_a_tune(out) {
            crate::run::check_fresh(out, "a new tune")?;
        }
    }
    let checked = preflight(opts)?;
    let Checked {
        model,
        server_path,
        server_version,
        engine_servers,
        layout,
        hardware,
        space,
        notes,
    } = checked;
    // The quality floor: KV types below it leave the space before the first trial.
    let mut space = space;
    let quality =
        crate::quality::floor::apply(&mut space, &model, Some(&server_path), &mut |line| {
            let line = crate::escape::terminal_lines(&line);
            eprintln!("{}", crate::util::fit(&format!("qtune: {line}")))
        })?;
    let start = from_profile(opts)?;
    let run_dir = match &opts.out {
        Some(out) => out.clone(),
        None => new_default_run_dir(&model, None)?,
    };
    let lock = crate::run::lock(&run_dir)?;
    check_new_run_dir(&run_dir)?;
    let inputs = RunInputs::resolve(crate::run::Resolved {
        model_path: model,
        layout: &layout,
        server_path,
        server_version,
        real_server: opts.replay.is_none(),
        hardware,
        space,
        headroom_mib: opts.headroom_mib,
        host: opts.host.clone(),
        port: opts.port,
        start,
        quality,
        engine_servers,
    });
    crate::run::write_inputs(&run_dir, &inputs)?;
    Ok((run_dir, inputs, layout, lock, notes))
}

/// A new tune's folder: not one holding a tune already (that one is resumed), and new or
/// empty ([`crate::run::check_fresh`]).
fn check_new_run_dir(run_dir: &Path) -> Result<()> {
    if crate::run::holds_a_tune(run_dir) {
        anyhow::bail!(
            "{} already holds a tune: use --resume {} to continue it, or another --out",
            run_dir.display(),
            run_dir.display()
        );
    }
    crate::run::check_fresh(run_dir, "a new tune")
}

/// The trial runner and clock of this tune: the real server and clock, or a replay.
fn runner_and_clock(
    opts: &TuneOptions,
    run_dir: &Path,
    inputs: &RunInputs,
    layout: &crate::model::ModelLayout,
    resume: &Resume,
    started: std::time::Instant,
    (doing, busy): (
        crate::trial::phase::PhaseCell,
        crate::trial::phase::BusyNote,
    ),
) -> Result<(Box<dyn TrialRunner>, Arc<dyn Clock>)> {
    let journal = Journal::open(run_dir)?;
    if let Some(r) = &opts.replay {
        let recorded = Journal::read(&r.journal_dir())?;
        if recorded.is_empty() {
            anyhow::bail!("{} holds no recorded trials to replay", r.journal.display());
        }
        let clock = ManualClock::new();
        let mut runner =
            crate::trial::replay::ReplayRunner::from_journal(&recorded, r.noise_pct, r.seed)
                .with_first_id(resume.next_id)
                .with_journal(journal)
                .with_vram_budget(inputs.vram_budget_mib)
                .with_gpu_budgets(inputs.gpu_budgets.iter().map(|g| g.budget_mib).collect())
                .with_clock(clock.clone());
        if r.pace_ms > 0 {
            runner = runner.with_pace(std::time::Duration::from_millis(r.pace_ms));
        }
        if let Some(n) = r.interrupt_after {
            runner = runner.with_interrupt_after(n);
        }
        return Ok((Box::new(runner), Arc::new(clock)));
    }
    let server =
        crate::engine::binary::check(&inputs.server_path, crate::engine::binary::Source::Flag)?;
    let hw = &inputs.hardware;
    let runner = super::engines::with_servers(
        crate::trial::llama_runner::LlamaServerRunner::new(
            &server.path,
            &inputs.model_path,
            layout.file_bytes,
            inputs.space.workload.clone(),
            run_dir,
            journal,
            inputs.vram_budget_mib,
            crate::run::setup::request_timeout(&inputs.space.workload),
        )?
        .with_first_id(resume.next_id)
        .with_reference_answers(&resume.done)
        .with_gpu_budgets(inputs.gpu_budgets.iter().map(|g| g.budget_mib).collect())
        .with_env(crate::hardware::cuda_device_env(&inputs.gpu_budgets))
        .with_free_vram_at_start(hw.has_gpu().then_some(inputs.free_vram_at_start_mib))
        .with_deadline(budget_deadline(
            started,
            inputs.space.budget.minutes,
            resume.elapsed_s,
        ))
        .with_speed_ceiling(crate::trial::plausible::ceiling_for(layout, hw))
        .with_predicted_pace(crate::trial::plausible::pace_for(layout, hw))
        .with_phase(doing)
        .with_busy_note(busy)
        .with_random_weights(crate::model::speed::is_synthetic(layout)),
        &inputs.engine_servers,
    );
    Ok((Box::new(runner), crate::clock::system()))
}

/// When the minutes budget ends, counted from when this session `started` (the probing and
/// checks before the first launch count too), given what earlier sessions spent: load and
/// request timeouts are capped by it.
fn budget_deadline(started: std::time::Instant, minutes: f64, spent_s: f64) -> std::time::Instant {
    let left = (minutes * 60.0 - spent_s).clamp(0.0, 1.0e7);
    started + std::time::Duration::from_secs_f64(left)
}

/// Run a whole tune; write its results and report. Returns the finished run and its directory.
pub fn run_tune(opts: &TuneOptions) -> Result<(TuneResult, PathBuf)> {
    let started = std::time::Instant::now();
    crate::trial::cleanup::install_handlers();
    if opts.resume.is_none() {
        super::outcome::host_check(&opts.host)?;
        super::outcome::port_check(opts.port)?;
    }
    let (run_dir, inputs, layout, _lock, notes) = prepare(opts)?;
    if let Some(report) = Journal::repair(&run_dir)? {
        eprintln!("qtune: {}", crate::escape::terminal_lines(&report));
    }
    let resume = crate::search::resume_point(&run_dir)?;
    if !opts.quiet {
        let baselines = banner_baselines(&inputs, &layout);
        let space_note = notes.join("; ");
        for line in super::preflight::banner(
            &inputs.model_path,
            &layout,
            &inputs.space,
            (!space_note.is_empty()).then_some(space_note.as_str()),
            &inputs.hardware,
            &run_dir,
            &baselines,
        ) {
            eprintln!("{}", crate::util::fit(&line));
        }
    }
    if !resume.done.is_empty() {
        eprintln!(
            "qtune: resuming {}: {} already done",
            crate::escape::terminal_path(&run_dir),
            crate::util::count(resume.done.len() as u64, "trial", "trials")
        );
    }
    if opts.resume.is_some() {
        for n in &notes {
            eprintln!("{}", crate::util::fit(&format!("qtune: {n}")));
        }
    }
    let doing = crate::trial::phase::PhaseCell::default();
    let busy_note = crate::trial::phase::BusyNote::default();
    let (runner, clock) = runner_and_clock(
        opts,
        &run_dir,
        &inputs,
        &layout,
        &resume,
        started,
        (doing.clone(), busy_note.clone()),
    )?;
    let mut progress = super::progress::Progress::new(
        super::progress::TuneBudget {
            launches: inputs.space.budget.trials,
            minutes: inputs.space.budget.minutes,
            launches_done: resume.done.len() as u32,
            elapsed_s: resume.elapsed_s,
        },
        opts.quiet,
    )
    .with_phase(doing);
    if opts.replay.is_none() {
        // Before every launch: a box that got busy after the start is said as it happens,
        // and the launches that ran on it are noted in the journal.
        let host = &inputs.hardware.host;
        progress = progress.with_busy_watch(super::progress::BusyWatch::new(
            Box::new(crate::hardware::busy::SystemProbe {
                logical_cores: host.logical_cores,
                window: crate::hardware::busy::WINDOW / 2,
            }),
            host.physical_cores.unwrap_or(host.logical_cores).max(1),
            busy_note,
        ));
    }
    let progress = Arc::new(progress);
    let outcome = crate::search::tune(
        &run_dir,
        &inputs,
        layout,
        runner,
        resume,
        clock,
        Some(progress.clone()),
    );
    progress.finish();
    let result = match outcome {
        Ok(r) => r,
        Err(e) => {
            if e.downcast_ref::<Interrupted>().is_some() {
                let kept = Journal::read(&run_dir).map(|j| j.len()).unwrap_or(0);
                return Err(e.context(crate::util::ResumeHint {
                    message: format!(
                        "interrupted: {} kept in {} (continue with the command below)",
                        crate::util::count(kept as u64, "finished trial", "finished trials"),
                        run_dir.join(crate::trial::journal::FILE_NAME).display(),
                    ),
                    command: resume_command(opts, &run_dir),
                }));
            }
            return Err(e);
        }
    };
    crate::run::write_results(&run_dir, &result, crate::report::verdict_json(&result))?;
    crate::report::write_all(&run_dir, &result)?;
    Ok((result, run_dir))
}

/// `qtune tune`.
pub fn tune(opts: TuneOptions) -> Result<()> {
    if opts.dry_run {
        super::outcome::port_check(opts.port)?;
        return dry_run(&opts);
    }
    let (result, run_dir) = run_tune(&opts)?;
    super::outcome::print_outcome(
        &result,
        &run_dir,
        opts.json,
        opts.quiet,
        &resume_command(&opts, &run_dir),
    )
}

/// The distinct baseline configs the tune launches first ([`crate::search::first_launches`]),
/// for the banner.
fn banner_baselines(inputs: &RunInputs, layout: &crate::model::ModelLayout) -> Vec<LaunchConfig> {
    let ctx = crate::search::context(inputs, layout, crate::clock::system());
    let mut out: Vec<LaunchConfig> = Vec::new();
    for l in crate::search::first_launches(&ctx).into_iter().filter(|l| {
        matches!(
            l.role,
            crate::trial::TrialRole::Baseline | crate::trial::TrialRole::SecondBaseline
        )
    }) {
        if !out.contains(&l.config) {
            out.push(l.config);
        }
    }
    out
}

/// `qtune tune --dry-run`: the checks, the banner and the launches the tune would start with;
/// nothing is written or launched.
fn dry_run(opts: &TuneOptions) -> Result<()> {
    let c = preflight(opts)?;
    let run_dir = opts
        .out
        .clone()
        .unwrap_or_else(|| default_run_dir(&c.model, None));
    let inputs = RunInputs::resolve(crate::run::Resolved {
        model_path: c.model.clone(),
        layout: &c.layout,
        server_path: c.server_path.clone(),
        server_version: c.server_version.clone(),
        real_server: opts.replay.is_none(),
        hardware: c.hardware.clone(),
        space: c.space.clone(),
        headroom_mib: opts.headroom_mib,
        host: opts.host.clone(),
        port: opts.port,
        start: from_profile(opts)?,
        // A dry run measures no quality floor.
        quality: None,
        engine_servers: c.engine_servers.clone(),
    });
    let note = c.notes.join("; ");
    let ctx = crate::search::context(&inputs, &c.layout, crate::clock::system());
    let first = crate::search::first_launches(&ctx);
    let baselines = banner_baselines(&inputs, &c.layout);
    let banner = super::preflight::banner(
        &c.model,
        &c.layout,
        &c.space,
        (!note.is_empty()).then_some(note.as_str()),
        &c.hardware,
        &run_dir,
        &baselines,
    );
    for line in banner.iter().filter(|_| !opts.quiet) {
        match line.strip_prefix("  run directory: ") {
            Some(dir) => eprintln!("  run directory: {dir} (not created: a dry run)"),
            None => eprintln!("{}", crate::util::fit(line)),
        }
    }
    println!(
        "# qtune tune --dry-run: nothing launched. The tune would start with these launches, then search from what they measure, within {} and {}:",
        crate::util::count(c.space.budget.trials as u64, "launch", "launches"),
        crate::util::minutes(c.space.budget.minutes)
    );
    for (i, l) in first.iter().enumerate() {
        println!(
            "{:>2}. {:<8} {}  # {}",
            i + 1,
            crate::search::progress::launch_word(l.role, &l.config),
            super::preflight::flags(&l.config),
            l.why
        );
    }
    Ok(())
}

/// `qtune demo`: obtain a server (building it if needed), synthesize the tiny MoE model and
/// run a small tune end to end.
pub fn demo(out: Option<PathBuf>, server: Option<PathBuf>, allow_busy: bool) -> Result<()> {
    let server =
        crate::run::setup::server(server.as_deref(), FindServer::OrBuild(&super::info::say))?;
    eprintln!(
        "qtune demo: llama-server {} ({})",
        crate::escape::terminal_path(&server.path),
        crate::escape::terminal(&crate::engine::binary::short_version(&server.version))
    );
    let model = crate::fixtures::tiny_moe("tiny-qwen35moe")?;
    eprintln!(
        "qtune demo: model {} (synthetic tiny qwen35moe)",
        model.display()
    );
    let opts = TuneOptions {
        rpc: None,
        model: Some(model.clone()),
        server: Some(server.path),
        engine: None,
        space: Some("demo".into()),
        headroom_mib: 512,
        ctx: None,
        budget_trials: None,
        budget_minutes: None,
        out: Some(match out {
            Some(out) => out,
            None => new_default_run_dir(&model, Some("demo"))?,
        }),
        resume: None,
        from_profile: None,
        host: crate::run::DEFAULT_HOST.into(),
        port: crate::run::DEFAULT_PORT,
        json: false,
        quiet: false,
        dry_run: false,
        allow_dense: false,
        allow_busy,
        replay: None,
        workload: None,
    };
    tune(opts)
}
