//! `qtune inspect`: a model's layout and the predicted memory for every `--n-cpu-moe`.

use super::memory::{self, MemoryPrediction};
use super::ModelLayout;
use crate::config::{KvType, LaunchConfig};
use crate::util::fmt_mib;
use serde::Serialize;
use std::fmt::Write as _;

const MIB: f64 = 1024.0 * 1024.0;

/// One row of the table: a `--n-cpu-moe` value and its prediction.
#[derive(Debug, Clone, Serialize)]
pub struct InspectRow {
    pub n_cpu_moe: u32,
    pub gpu_mib: f64,
    pub host_mib: f64,
    /// `None` when there is no GPU to compare against.
    pub fits: Option<bool>,
    pub prediction: MemoryPrediction,
}

/// Everything `qtune inspect` shows.
#[derive(Debug, Clone, Serialize)]
pub struct InspectReport {
    pub path: String,
    pub layout: ModelLayout,
    pub ctx: u32,
    pub kv: KvType,
    /// Free VRAM minus headroom (MiB), when there is a GPU.
    pub vram_budget_mib: Option<f64>,
    pub gpu_summary: String,
    pub rows: Vec<InspectRow>,
    /// Smallest `--n-cpu-moe` predicted to fit, when there is a GPU and one fits.
    pub min_n_cpu_moe: Option<u32>,
}

/// Build the report (no printing): predictions for `--n-cpu-moe 0..=blocks` (one row, 0, for
/// dense models), marked against `vram_budget_mib` when given.
pub fn build(
    path: &std::path::Path,
    layout: &ModelLayout,
    ctx: u32,
    kv: KvType,
    vram_budget_mib: Option<f64>,
    gpu_summary: String,
) -> InspectReport {
    let template = LaunchConfig {
        cache_type_k: kv,
        cache_type_v: kv,
        ..LaunchConfig::baseline(ctx)
    };
    let max = if layout.is_moe() { layout.n_blocks } else { 0 };
    let rows: Vec<InspectRow> = (0..=max)
        .map(|n| {
            let cfg = LaunchConfig {
                n_cpu_moe: if layout.is_moe() { Some(n) } else { None },
                ..template.clone()
            };
            let p = memory::predict(layout, &cfg, true);
            InspectRow {
                n_cpu_moe: n,
                gpu_mib: p.gpu_mib,
                host_mib: p.host_mib,
                fits: vram_budget_mib.map(|b| p.gpu_mib <= b),
                prediction: p,
            }
        })
        .collect();
    let min_n_cpu_moe = rows
        .iter()
        .find(|r| r.fits == Some(true))
        .map(|r| r.n_cpu_moe);
    InspectReport {
        path: path.display().to_string(),
        layout: layout.clone(),
        ctx,
        kv,
        vram_budget_mib,
        gpu_summary,
        rows,
        min_n_cpu_moe,
    }
}

fn mib(bytes: u64) -> String {
    fmt_mib(bytes as f64 / MIB)
}

/// The human-readable rendering.
pub fn render_text(r: &InspectReport) -> String {
    let l = &r.layout;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "model     {}{}",
        r.path,
        l.name
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        s,
        "arch      {} · {} · file {:.2} GiB · vocab {} · trained ctx {} · fingerprint {}",
        l.arch,
        l.file_type.as_deref().unwrap_or("unknown file type"),
        l.file_bytes as f64 / (1u64 << 30) as f64,
        l.n_vocab,
        l.ctx_train,
        l.fingerprint
    );
    let n_kv = l.kv_blocks.iter().filter(|&&k| k).count();
    let n_rec = l.recurrent_state_bytes.iter().filter(|&&b| b > 0).count();
    let rec = if n_rec > 0 {
        let per = l.recurrent_state_bytes.iter().copied().max().unwrap_or(0);
        format!(
            ", {n_rec} recurrent (delta-net) blocks with {:.2} MiB state each per sequence",
            per as f64 / MIB
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "blocks    {} ({n_kv} with KV cache{rec}) · n_embd {} · heads {}/{} kv · head dim {}",
        l.n_blocks, l.n_embd, l.n_head, l.n_head_kv, l.head_dim_k
    );
    let nb = l.n_blocks.max(1) as u64;
    let routed: u64 = l.blocks.iter().map(|b| b.routed_experts).sum();
    let shared: u64 = l.blocks.iter().map(|b| b.shared_experts).sum();
    let rest: u64 = l.blocks.iter().map(|b| b.rest).sum();
    if l.is_moe() {
        let _ = writeln!(
            s,
            "experts   {} used of {} routed · per block: routed experts {}, shared experts + router {}, rest {}",
            l.n_experts_used,
            l.n_experts,
            mib(routed / nb),
            mib(shared / nb),
            mib(rest / nb)
        );
    } else {
        let _ = writeln!(
            s,
            "experts   none: a dense model has no expert dimension (--n-cpu-moe does nothing; placement is -ngl only) · per block {}",
            mib((rest + shared) / nb)
        );
    }
    let _ = writeln!(
        s,
        "weights   blocks {} · token_embd {} (stays on the host) · output {}{} · total {}",
        mib(routed + shared + rest),
        mib(l.token_embd_bytes),
        mib(l.output_bytes),
        if l.output_bytes == 0 {
            " (tied to token_embd)"
        } else {
            ""
        },
        mib(l.tensor_bytes)
    );
    let types: Vec<String> = l
        .bytes_by_type
        .iter()
        .map(|(t, b)| format!("{t} {}", mib(*b)))
        .collect();
    let _ = writeln!(s, "types     {}", types.join(", "));
    let kv = r
        .rows
        .first()
        .map(|row| row.prediction.breakdown.kv_gpu_mib + row.prediction.breakdown.kv_host_mib)
        .unwrap_or(0.0);
    let _ = writeln!(
        s,
        "KV cache  ctx {} · {} · {} in {n_kv} blocks",
        r.ctx,
        r.kv,
        fmt_mib(kv)
    );
    let _ = writeln!(s, "GPU       {}", r.gpu_summary);
    match r.vram_budget_mib {
        Some(b) => {
            let _ = writeln!(s, "budget    {} of VRAM (free minus headroom)", fmt_mib(b));
        }
        None => {
            let _ = writeln!(s, "budget    no GPU: the table shows what a GPU would need");
        }
    }
    let _ = writeln!(s);
    let head = if l.is_moe() {
        "--n-cpu-moe"
    } else {
        "placement"
    };
    let _ = writeln!(s, "{head:>11}  {:>12}  {:>12}  fits", "VRAM", "host RAM");
    for row in &r.rows {
        let label = if l.is_moe() {
            row.n_cpu_moe.to_string()
        } else {
            "all on GPU".to_string()
        };
        let fits = match row.fits {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let _ = writeln!(
            s,
            "{label:>11}  {:>12}  {:>12}  {fits}",
            fmt_mib(row.gpu_mib),
            fmt_mib(row.host_mib)
        );
    }
    if r.vram_budget_mib.is_some() {
        let _ = writeln!(s);
        match (r.min_n_cpu_moe, l.is_moe()) {
            (Some(n), true) => {
                let _ = writeln!(s, "smallest --n-cpu-moe predicted to fit: {n}");
            }
            (Some(_), false) => {
                let _ = writeln!(s, "the whole model is predicted to fit on the GPU");
            }
            (None, _) => {
                let _ = writeln!(
                    s,
                    "nothing is predicted to fit: lower --ctx, quantize the KV cache (--kv q8_0) or use a smaller model"
                );
            }
        }
    }
    s
}
