//! Commands that describe this box and its inputs: `hw`, `inspect`, `synth` (and its
//! `--test-models`), `server ...`.

use super::Format;
use crate::config::EngineKind;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// `qtune hw`: print the hardware profile.
pub fn hw(format: Format, measure_bandwidth: bool, rpc: Option<String>) -> Result<()> {
    let mut hw = crate::hardware::probe(measure_bandwidth);
    if measure_bandwidth {
        crate::hardware::measure_thread_scaling(&mut hw);
    }
    let workers = match &rpc {
        Some(list) => super::rpc::measure_workers(list)?,
        None => Vec::new(),
    };
    // With workers, the JSON and YAML carry them as `rpc_workers` (an unreachable one as
    // `{address, error}`).
    let with_workers = || -> Result<serde_json::Value> {
        let mut v = serde_json::to_value(&hw)?;
        let list: Vec<serde_json::Value> = workers
            .iter()
            .map(|w| match w {
                Ok(w) => serde_json::to_value(w),
                Err(e) => Ok(serde_json::json!({ "error": e })),
            })
            .collect::<Result<_, _>>()?;
        v["rpc_workers"] = serde_json::Value::Array(list);
        Ok(v)
    };
    let text = match (format, rpc.is_some()) {
        (Format::Text, _) => {
            let mut t = crate::hardware::render_text(&hw);
            if !workers.is_empty() {
                t.push('\n');
                t.push_str(&crate::rpc::probe::render(&workers));
            }
            crate::escape::terminal_lines(&t)
        }
        (Format::Json, false) => serde_json::to_string_pretty(&hw)?,
        (Format::Yaml, false) => serde_yaml::to_string(&hw)?,
        (Format::Json, true) => serde_json::to_string_pretty(&with_workers()?)?,
        (Format::Yaml, true) => serde_yaml::to_string(&with_workers()?)?,
    };
    println!("{}", text.trim_end());
    // The head's own llama-server must list the workers' devices (a build without RPC does not).
    let ok: Vec<_> = workers
        .iter()
        .filter_map(|w| w.as_ref().ok().cloned())
        .collect();
    if let (false, Some((server, _))) = (ok.is_empty(), crate::engine::binary::locate(None)) {
        if let Err(e) = super::rpc::check_head(&server, &ok) {
            eprintln!("qtune: warning: {e:#}");
        }
    }
    if workers.iter().any(|w| w.is_err()) {
        anyhow::bail!("a worker of --rpc could not be measured (see above)");
    }
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

/// `qtune synth OUT --shape S --ftype F [--no-mtp]`: write a random-weight GGUF of a real MoE
/// shape (without its MTP block where asked).
pub fn synth(out: &Path, shape: &str, ftype: &str, no_mtp: bool) -> Result<()> {
    use crate::model::synth;
    let mut shape = synth::shape_by_name(shape)?;
    if no_mtp {
        if shape.nextn_layers == 0 {
            anyhow::bail!("--no-mtp: the shape {} has no MTP block", shape.name);
        }
        shape.nextn_layers = 0;
    }
    let ftype = synth::SynthFtype::parse_flag(ftype, "--ftype")?;
    // One file written: a new path or a regular file to replace, never a link or a device
    // (a folder is named by the writer).
    if !out.is_dir() {
        crate::util::check_out_path("OUT", out)?;
    }
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
) -> Result<crate::engine::binary::ServerBinary> {
    crate::engine::of(engine).resolve(explicit.as_deref())
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
        crate::engine::of(s.engine).required_flags().join(" ")
    );
    println!("devices: {}", s.backend());
    let hw = crate::hardware::probe(false);
    if let Err(e) = super::preflight::check_server_backend(&hw, &s) {
        eprintln!("warning: {e:#}");
    }
    Ok(())
}

/// `qtune server build [--cuda|--cpu] [--engine ik]`. Without either, an engine qtune builds
/// with CUDA (llama.cpp) is built with CUDA where NVML sees a GPU (what a tune on this box
/// needs), and the first line says so.
pub fn server_build(cuda: bool, cpu: bool, engine: EngineKind) -> Result<()> {
    let dialect = crate::engine::of(engine);
    let cuda = if cuda || cpu || !dialect.caps().cuda_build {
        cuda
    } else {
        let hw = crate::hardware::probe(false);
        let gpu = hw.has_gpu();
        if gpu
            && !crate::engine::binary::is_built(&crate::engine::binary::build_dir(true).join("bin"))
        {
            say(&crate::engine::binary::auto::build_line(
                true,
                &hw,
                crate::engine::binary::auto::find_nvcc().as_deref(),
            )?);
        }
        gpu
    };
    let path = dialect.build(cuda, &say)?;
    let s = crate::engine::binary::check(&path, crate::engine::binary::Source::Cache)?;
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
