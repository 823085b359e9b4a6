//! Commands that describe this box and its inputs: `hw`, `inspect`, `synth` (and its
//! `--test-models`), `server ...`.

use super::Format;
use crate::config::EngineKind;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// `qtune hw`: print the hardware profile.
pub fn hw(format: Format, measure_bandwidth: bool) -> Result<()> {
    let mut hw = crate::hardware::probe(measure_bandwidth);
    if measure_bandwidth {
        crate::hardware::measure_thread_scaling(&mut hw);
    }
    let text = match format {
        Format::Text => crate::escape::terminal_lines(&crate::hardware::render_text(&hw)),
        Format::Json => serde_json::to_string_pretty(&hw)?,
        Format::Yaml => serde_yaml::to_string(&hw)?,
    };
    println!("{}", text.trim_end());
    Ok(())
}

/// `qtune inspect`: layout summary and predicted memory for every `--n-cpu-moe`.
pub fn inspect(
    path: &Path,
    ctx: Option<u32>,
    kv: crate::config::KvType,
    headroom_mib: u64,
    format: Format,
) -> Result<()> {
    let layout = crate::model::load(path)?;
    let hw = crate::hardware::probe(false);
    let ctx = match ctx {
        Some(c) => super::preflight::check_ctx(c, true, &layout)?.0,
        None => super::preflight::default_ctx(&hw, &layout),
    };
    let budget = crate::run::box_vram_budget_mib(&hw, headroom_mib).map(|b| b as f64);
    let mut report = crate::model::inspect::build(path, &layout, ctx, kv, budget, hw.summary());
    report.cards = crate::model::inspect::build_cards(
        &layout,
        ctx,
        kv,
        &crate::run::gpu_budgets(&hw, headroom_mib),
    );
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Yaml => print!("{}", serde_yaml::to_string(&report)?),
        Format::Text => print!(
            "{}",
            crate::escape::terminal_lines(&crate::model::inspect::render_text(&report))
        ),
    }
    Ok(())
}

/// `qtune synth OUT --shape S --ftype F`: write a random-weight GGUF of a real MoE shape.
pub fn synth(out: &Path, shape: &str, ftype: &str) -> Result<()> {
    use crate::model::synth;
    let shape = synth::shape_by_name(shape)?;
    let ftype = synth::SynthFtype::parse_flag(ftype, "--ftype")?;
    let t0 = std::time::Instant::now();
    // A progress line on stderr: bytes written of the total, rate and what is left.
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "writing {msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec}, {eta} left",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    bar.set_message(out.display().to_string());
    let mut last_line = std::time::Instant::now();
    let hidden = bar.is_hidden();
    let n = synth::write_synthetic_reporting(
        out,
        &shape,
        ftype,
        &synth::default_vocab_dir(),
        &mut |done, all| {
            bar.set_length(all);
            bar.set_position(done);
            // Off a terminal: a plain line every 10 s (and at the end).
            if hidden && (last_line.elapsed().as_secs() >= 10 || done == all) {
                last_line = std::time::Instant::now();
                eprintln!(
                    "qtune synth: {} of {} written ({:.0} %)",
                    crate::util::fmt_mib(done as f64 / 1_048_576.0),
                    crate::util::fmt_mib(all as f64 / 1_048_576.0),
                    100.0 * done as f64 / all.max(1) as f64
                );
            }
        },
    );
    bar.finish_and_clear();
    let n = n?;
    println!(
        "wrote {} ({} bytes, {:.2} GiB, shape {}, {:.1} s)",
        crate::escape::terminal_path(out),
        n,
        n as f64 / (1u64 << 30) as f64,
        shape.name,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The server of `engine`: `--server` (checked, whichever engine it is), else that engine's
/// usual places.
fn resolve_engine(
    explicit: Option<PathBuf>,
    engine: EngineKind,
) -> Result<crate::server_binary::ServerBinary> {
    match engine {
        EngineKind::LlamaCpp => crate::server_binary::resolve(explicit.as_deref()),
        EngineKind::IkLlama => crate::server_binary::ik::resolve(explicit.as_deref()),
    }
}

/// `qtune server path [--engine ik]`.
pub fn server_path(explicit: Option<PathBuf>, engine: EngineKind) -> Result<()> {
    let s = resolve_engine(explicit, engine)?;
    println!("{}", crate::escape::terminal_path(&s.path));
    Ok(())
}

/// `qtune server check [--engine ik]`: the server, its engine and version, its devices.
pub fn server_check(explicit: Option<PathBuf>, engine: EngineKind) -> Result<()> {
    let s = resolve_engine(explicit, engine)?;
    println!(
        "{} (from {}): {} {}; has {}",
        crate::escape::terminal_path(&s.path),
        s.source.describe(),
        s.engine,
        crate::escape::terminal(&s.version_text()),
        crate::server_binary::required_flags(s.engine).join(" ")
    );
    println!("devices: {}", s.backend());
    let hw = crate::hardware::probe(false);
    if let Err(e) = super::preflight::check_server_backend(&hw, &s) {
        eprintln!("warning: {e:#}");
    }
    Ok(())
}

/// `qtune server build [--cuda] [--engine ik]`.
pub fn server_build(cuda: bool, engine: EngineKind) -> Result<()> {
    let path = match engine {
        EngineKind::LlamaCpp => crate::server_binary::build(cuda, &say)?,
        EngineKind::IkLlama => crate::server_binary::ik::build(cuda, &say)?,
    };
    let s = crate::server_binary::check(&path, crate::server_binary::Source::Cache)?;
    println!("{}", s.path.display());
    Ok(())
}

/// Progress of a long stage operation (a build, a download), one line on stderr.
pub fn say(line: &str) {
    eprintln!("{line}");
}

/// `qtune synth --test-models`: prepare every test model and print their paths.
pub fn test_models() -> Result<()> {
    println!("{}", crate::fixtures::smollm2()?.display());
    for s in crate::fixtures::TINY_SHAPES {
        println!("{}", crate::fixtures::tiny_moe(s)?.display());
    }
    Ok(())
}
