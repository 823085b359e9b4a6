//! Before the first launch: the context a command runs at (one default for `inspect`, `plan`
//! and `tune`), the guard rails that refuse a tune that cannot work (with what would), the
//! start banner, and `--dry-run`'s list of launches.

use crate::config::LaunchConfig;
use crate::engine::LaunchArgs;
use crate::escape::{terminal, terminal_path};
use crate::hardware::HardwareProfile;
use crate::model::ModelLayout;
use crate::space::SearchSpace;
use anyhow::{bail, Result};

/// The space a tune uses when none is given: `default` with a GPU and a MoE model, else
/// `cpu-only`; with the reason when it is `cpu-only`.
pub fn default_space(hw: &HardwareProfile, layout: &ModelLayout) -> (&'static str, Option<String>) {
    if hw.has_gpu() && layout.is_moe() {
        ("default", None)
    } else if !hw.has_gpu() {
        (
            "cpu-only",
            Some(format!(
                "no GPU ({}): switched to the cpu-only space",
                hw.no_gpu_reason.as_deref().unwrap_or("none found")
            )),
        )
    } else {
        (
            "cpu-only",
            Some("a dense model has no experts to place: switched to the cpu-only space".into()),
        )
    }
}

/// The context `inspect`, `plan` and `tune` use when `--ctx` is not given: the context of the
/// space `tune` would search on this box (32768 with a GPU, the `default` space's; 4096
/// without, `cpu-only`'s), lowered to the model's trained context. One rule, so the three
/// commands predict, plan and measure the same thing.
pub fn default_ctx(hw: &HardwareProfile, layout: &ModelLayout) -> u32 {
    let (name, _) = default_space(hw, layout);
    let ctx = crate::space::load(name).map_or(4096, |s| s.fixed.ctx);
    lower_to_trained(ctx, layout)
}

fn lower_to_trained(ctx: u32, layout: &ModelLayout) -> u32 {
    if layout.ctx_train > 0 {
        ctx.min(layout.ctx_train)
    } else {
        ctx
    }
}

/// Check a context. An explicit `--ctx` of 0 or past the model's trained context is an error;
/// a default (the space's) past it is lowered to it, with a note. Returns the context to use.
pub fn check_ctx(ctx: u32, explicit: bool, layout: &ModelLayout) -> Result<(u32, Option<String>)> {
    if ctx == 0 {
        bail!("--ctx 0: the context must hold at least the prompt; give --ctx N with N > 0 (e.g. --ctx 4096)");
    }
    let trained = layout.ctx_train;
    if trained > 0 && ctx > trained {
        if explicit {
            bail!(
                "--ctx {ctx} is past the model's trained context of {trained} tokens: use --ctx {trained} or less"
            );
        }
        return Ok((
            trained,
            Some(format!(
                "the space's context {ctx} is past the model's trained context: using {trained}"
            )),
        ));
    }
    Ok((ctx, None))
}

/// qtune tunes where a MoE model's experts go; a dense model is refused unless asked for.
pub fn check_moe(model: &std::path::Path, layout: &ModelLayout, allow_dense: bool) -> Result<()> {
    if !layout.is_moe() && !allow_dense {
        bail!(
            "{} is a dense model ({}, no experts): qtune is for Mixture-of-Experts models, where it places the experts; \
             pass --allow-dense to tune only threads, batch sizes and the KV cache type",
            model
                .file_name()
                .map_or_else(|| model.display().to_string(), |n| n.to_string_lossy().into_owned()),
            layout.arch
        );
    }
    Ok(())
}

/// The headroom must leave something of every card.
pub fn check_headroom(hw: &HardwareProfile, headroom_mib: u64) -> Result<()> {
    if let Some(g) = hw.gpus.iter().min_by_key(|g| g.vram_total_mib) {
        if headroom_mib >= g.vram_total_mib {
            bail!(
                "--target-vram-headroom {headroom_mib} MiB is more than the {} MiB of {} (CUDA{}): give less than its {} MiB free, e.g. --target-vram-headroom 512",
                g.vram_total_mib,
                g.name,
                g.index,
                g.vram_free_mib
            );
        }
        if headroom_mib >= g.vram_free_mib {
            bail!(
                "--target-vram-headroom {headroom_mib} MiB leaves nothing of the {} MiB free on {} (CUDA{}): give less, e.g. --target-vram-headroom 512, or free VRAM",
                g.vram_free_mib,
                g.name,
                g.index
            );
        }
    }
    Ok(())
}

/// Memory the model needs at `ctx` wherever it goes: its weights once (no repacked copy, no
/// page cache counted twice), the KV cache and state, the compute and output buffers.
fn whole_model_mib(layout: &ModelLayout, ctx: u32) -> f64 {
    let b = crate::model::memory::predict(layout, &LaunchConfig::baseline(ctx), false).breakdown;
    (b.weights_host_bytes + b.weights_gpu_bytes) as f64 / 1_048_576.0
        + b.kv_host_mib
        + b.kv_gpu_mib
        + b.recurrent_host_mib
        + b.recurrent_gpu_mib
        + b.compute_host_mib
        + b.output_host_mib
}

/// The model must fit in VRAM (the budget) and RAM together at `ctx`; if not, say the largest
/// context that would, or that no context would.
pub fn check_fits(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    ctx: u32,
    headroom_mib: u64,
) -> Result<()> {
    let mib = crate::util::fmt_mib;
    let vram = crate::run::box_vram_budget_mib(hw, headroom_mib).unwrap_or(0) as f64;
    let room = vram + hw.host.ram_total_mib as f64;
    let need = whole_model_mib(layout, ctx);
    if need <= room {
        return Ok(());
    }
    let what = format!(
        "the model needs about {} at ctx {ctx} (weights, KV cache, buffers), more than this box's {} RAM{}",
        mib(need),
        mib(hw.host.ram_total_mib as f64),
        if vram > 0.0 {
            format!(" + {} VRAM budget", mib(vram))
        } else {
            String::new()
        }
    );
    let mut lo = 0u32;
    let mut c = 512u32;
    while c <= ctx {
        if whole_model_mib(layout, c) <= room {
            lo = c;
        }
        c = c.saturating_mul(2);
        if c == 0 {
            break;
        }
    }
    if lo > 0 {
        bail!("{what}: --ctx {lo} would fit, or a smaller quantization");
    }
    bail!("{what}: even a small context does not fit; use a smaller quantization or a box with more memory");
}

/// The workload in a few words.
pub fn workload_text(space: &SearchSpace) -> String {
    let w = &space.workload;
    if let Some(r) = &w.replay {
        return format!(
            "the trace {}: {}; the mean time per request is the objective",
            r.name,
            r.plan.describe()
        );
    }
    if let Some(mix) = w.objective_mix() {
        let others: Vec<&str> = w.mixes[1..].iter().map(|m| m.name.as_str()).collect();
        return format!(
            "{}: time per request is the objective{}",
            mix.describe(),
            if others.is_empty() {
                String::new()
            } else {
                format!(" ({} measured too)", others.join(", "))
            }
        );
    }
    format!(
        "{} prompt + {} generated tokens, {} requests per launch{}",
        w.prompt_tokens,
        w.gen_tokens,
        w.repetitions,
        w.context_depth
            .map(|d| format!(", {d} tokens already in context"))
            .unwrap_or_default()
    )
}

/// The llama.cpp flags of a config, as the user would type them (no server, model, host, port).
pub fn flags(c: &LaunchConfig) -> String {
    crate::config::shell_line(&c.server_args())
}

/// The lines printed before the first launch.
#[allow(clippy::too_many_arguments)]
pub fn banner(
    model: &std::path::Path,
    layout: &ModelLayout,
    space: &SearchSpace,
    space_note: Option<&str>,
    hw: &HardwareProfile,
    run_dir: &std::path::Path,
    baselines: &[LaunchConfig],
) -> Vec<String> {
    let mut out = Vec::new();
    out.push(format!(
        "qtune: tuning {} ({}, {}{})",
        terminal_path(model),
        layout.arch,
        crate::util::fmt_mib(layout.file_bytes as f64 / 1_048_576.0),
        if layout.is_moe() {
            format!(
                ", {} experts, {} used",
                layout.n_experts, layout.n_experts_used
            )
        } else {
            ", dense".to_string()
        }
    ));
    let gpus = if hw.gpus.is_empty() {
        "no GPU".to_string()
    } else {
        hw.gpus
            .iter()
            .map(|g| format!("{} ({} MiB free)", terminal(&g.name), g.vram_free_mib))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    out.push(format!(
        "  box: {gpus}; {} logical cores, {} RAM",
        hw.host.logical_cores,
        crate::util::fmt_mib(hw.host.ram_total_mib as f64)
    ));
    out.push(format!(
        "  space: {}{}",
        terminal(&space.name),
        space_note
            .map(|n| format!(" ({})", terminal(n)))
            .unwrap_or_default()
    ));
    out.push(format!("  workload: {}", terminal(&workload_text(space))));
    out.push(format!("  ctx: {}", space.fixed.ctx));
    if let Some(t) = space.fixed.threads_cap {
        out.push(format!(
            "  threads: at most {} {t} in every launch, the baseline included (the free cores when the tune started, or {})",
            crate::engine::Flag::Threads,
            crate::hardware::busy::MAX_THREADS_ENV
        ));
    }
    // Grown for other engines: from what, for whom, and how to set it.
    let grown = space.budget.before_engines.map(|b| {
        let names: Vec<String> = space
            .fixed
            .also_engines
            .iter()
            .map(|e| e.to_string())
            .collect();
        format!(
            "the space's {} and {}, plus {}'s baselines and variants; --budget-minutes sets \
             it; ",
            b.trials,
            crate::util::minutes(b.minutes),
            names.join(" and ")
        )
    });
    out.push(format!(
        "  budget: at most {} and {} ({}the tune ends within {}: no launch starts once they are spent)",
        crate::util::count(space.budget.trials as u64, "launch", "launches"),
        crate::util::minutes(space.budget.minutes),
        grown.unwrap_or_default(),
        crate::util::minutes(space.budget.minutes)
    ));
    // Another engine's baselines (`--engine both`) are named by their engine, not as the
    // first engine's second baseline.
    let first = baselines.first().map(|b| b.engine);
    for (i, b) in baselines.iter().enumerate() {
        let which = match i {
            _ if Some(b.engine) != first => format!("{} baseline", b.engine),
            0 => "baseline".to_string(),
            _ => "second baseline".to_string(),
        };
        out.push(format!(
            "  {which} (what you get without qtune): {}",
            flags(b)
        ));
    }
    if baselines.len() > 1 {
        out.push("  reference: the better of the baselines on the objective".to_string());
    }
    out.push(format!("  run directory: {}", terminal_path(run_dir)));
    out
}

/// A box with a GPU is tuned with a server that can use it: a llama-server that lists no GPU
/// device (a CPU-only build found first on PATH or in the cache) would tune the CPU alone
/// without a word. Refused with the command that builds one. A server that cannot list its
/// devices passes.
pub fn check_server_backend(
    hw: &HardwareProfile,
    server: &crate::engine::binary::ServerBinary,
) -> Result<()> {
    let Some(gpu) = hw.gpus.first() else {
        return Ok(());
    };
    if server.devices.as_ref().is_some_and(|d| d.is_empty()) {
        bail!(
            "this box has a GPU ({}) but {} lists no GPU device (a CPU-only build): leave --server and \
             QTUNE_LLAMA_SERVER out (qtune builds the CUDA one), or build it with 'qtune server build --cuda' \
             and pass it with --server, or set QTUNE_NO_GPU=1 to tune on the CPU alone",
            crate::escape::one_line(&gpu.name),
            server.path.display()
        );
    }
    Ok(())
}

/// A busy box, named before it costs a tune: measure the CPU other processes use (and the
/// GPUs' other processes); stop when even one thread would get under a quarter of a core
/// (unless `allow_busy`); else cap every launch's `-t` at the free cores (and at
/// `QTUNE_MAX_THREADS`), in `space.fixed.threads_cap`. Returns the warning lines to print.
pub fn check_busy(
    hw: &HardwareProfile,
    space: &mut SearchSpace,
    allow_busy: bool,
    anyway: &str,
) -> Result<Vec<String>> {
    use crate::hardware::busy;
    let env_max = busy::max_threads_env().map_err(|e| anyhow::anyhow!(e))?;
    let gpu = if hw.has_gpu() {
        crate::hardware::gpu::activity_now()
    } else {
        Default::default()
    };
    let b = busy::measure(busy::WINDOW, hw.host.logical_cores, &gpu);
    if b.too_busy() && !allow_busy && !busy::allow_busy_env() {
        bail!("{}", b.stop_message(anyway));
    }
    let default_threads = hw
        .host
        .physical_cores
        .unwrap_or(hw.host.logical_cores)
        .max(1);
    let mut out = Vec::new();
    if !b.gpu_idle.is_empty() {
        out.push(format!(
            "note: {} {} VRAM on the GPU and {} nothing: not a busy box (the budget is the VRAM left free)",
            b.gpu_idle.join(", "),
            if b.gpu_idle.len() == 1 { "holds" } else { "hold" },
            if b.gpu_idle.len() == 1 { "computes" } else { "compute" }
        ));
    }
    let cap = busy::thread_cap(Some(&b), env_max, default_threads);
    let action = |t: u32| {
        format!(
            "every launch gets {} {t} ({}), the baseline included, instead of the server's default {default_threads} threads",
            crate::engine::Flag::Threads,
            if b.is_busy() && b.free_cores() == t {
                "the free cores".to_string()
            } else {
                format!("{}={t}", busy::MAX_THREADS_ENV)
            }
        )
    };
    match (b.is_busy(), cap) {
        (true, Some(t)) => out.push(format!(
            "the box is busy: {}: {}, which would spin on cores other work holds and collapse; close what is running for timings of the whole box",
            b.describe(),
            action(t)
        )),
        (true, None) => out.push(format!(
            "the box is busy: {}: timings will be slower and noisier than on a quiet box; close what is running for timings of the whole box",
            b.describe()
        )),
        (false, Some(t)) => out.push(action(t)),
        (false, None) => {}
    }
    space.fixed.threads_cap = cap;
    Ok(out)
}
