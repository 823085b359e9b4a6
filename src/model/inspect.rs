//! `qtune inspect`: a model's layout and the predicted memory for every `--n-cpu-moe`.

use super::memory::{self, MemoryPrediction};
use super::ModelLayout;
use crate::config::{KvType, LaunchConfig};
use crate::engine::Flag;
use crate::escape::terminal;
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
    /// Two GPUs or more: the split by budget and each card's prediction per count of CPU
    /// expert blocks ([`build_cards`]); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cards: Vec<CardRow>,
}

/// One row of the two-GPU table: `n` blocks' experts on the CPU, taken from the cards' shares
/// (`-ts` by budget), and what each card is predicted to hold.
#[derive(Debug, Clone, Serialize)]
pub struct CardRow {
    pub cpu_blocks: u32,
    pub tensor_split: Vec<u32>,
    /// Per card, device order, MiB (buffers; each card also holds its CUDA context).
    pub card_mib: Vec<f64>,
    pub host_mib: f64,
    /// Every card's buffers within its budget less its CUDA context.
    pub fits: bool,
}

/// The two-GPU rows for `cards` (each card's budget, device order): every count of CPU expert
/// blocks, the layers split by the cards' budgets, the blocks taken as the search does.
pub fn build_cards(
    layout: &ModelLayout,
    ctx: u32,
    kv: KvType,
    cards: &[crate::hardware::GpuBudget],
) -> Vec<CardRow> {
    if cards.len() < 2 || !layout.is_moe() {
        return Vec::new();
    }
    let template = LaunchConfig {
        cache_type_k: kv,
        cache_type_v: kv,
        ..LaunchConfig::baseline(ctx)
    };
    let targets = super::cards::buffer_budgets_mib(cards);
    let split = super::cards::split_by_budget(&targets, 0);
    let extra = vec![super::cards::CARD_CONTEXT_MIB; cards.len()];
    let free: Vec<f64> = cards.iter().map(|g| g.free_mib as f64).collect();
    (0..=layout.n_blocks)
        .map(|n| {
            let mut c = template.clone();
            let blocks = super::cards::cpu_fill(layout, &template, &split, cards, &extra, n);
            c.place_on_gpus(split.clone(), blocks);
            let p = memory::predict_devices(layout, &c, &free);
            CardRow {
                cpu_blocks: n,
                tensor_split: split.clone(),
                card_mib: p.gpu_devices.iter().map(|d| d.total_mib).collect(),
                host_mib: p.host_mib,
                fits: memory::fits_devices(&p, &targets),
            }
        })
        .collect()
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
        cards: Vec::new(),
    }
}

fn mib(bytes: u64) -> String {
    fmt_mib(bytes as f64 / MIB)
}

/// The human-readable rendering (text from the file, its name and path, escaped).
pub fn render_text(r: &InspectReport) -> String {
    let l = &r.layout;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "model     {}{}",
        terminal(&r.path),
        l.name
            .as_deref()
            .map(|n| format!(" ({})", terminal(n)))
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
            "experts   none: a dense model has no expert dimension ({} does nothing; placement is {} only) · per block {}",
            Flag::NCpuMoe,
            Flag::GpuLayers,
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
    if l.details.mtp_layers > 0 {
        let _ = writeln!(
            s,
            "MTP       {} block{} · {} · loaded only to draft with it ({} draft-mtp)",
            l.details.mtp_layers,
            if l.details.mtp_layers == 1 { "" } else { "s" },
            mib(l.details.mtp_bytes),
            Flag::SpecType
        );
    }
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
    let _ = writeln!(s, "GPU       {}", terminal(&r.gpu_summary));
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
        Flag::NCpuMoe.to_string()
    } else {
        "placement".to_string()
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
                let _ = writeln!(s, "smallest {} predicted to fit: {n}", Flag::NCpuMoe);
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
    if let Some(first) = r.cards.first() {
        let ts: Vec<String> = first.tensor_split.iter().map(|v| v.to_string()).collect();
        let _ = writeln!(
            s,
            "\n{} GPUs: {} {} (by budget); the CPU experts are taken from each card's share, \
             as the search does. Per card: buffers (each card also holds its CUDA context).",
            first.card_mib.len(),
            Flag::TensorSplit,
            ts.join(",")
        );
        let mut head = format!("{:>10}", "CPU blocks");
        for i in 0..first.card_mib.len() {
            let _ = write!(head, "  {:>12}", format!("CUDA{i}"));
        }
        let _ = writeln!(s, "{head}  {:>12}  fits", "host RAM");
        for row in &r.cards {
            let mut line = format!("{:>10}", row.cpu_blocks);
            for m in &row.card_mib {
                let _ = write!(line, "  {:>12}", fmt_mib(*m));
            }
            let _ = writeln!(
                s,
                "{line}  {:>12}  {}",
                fmt_mib(row.host_mib),
                if row.fits { "yes" } else { "no" }
            );
        }
        if let Some(n) = r.cards.iter().find(|c| c.fits).map(|c| c.cpu_blocks) {
            let _ = writeln!(
                s,
                "\nfewest CPU expert blocks predicted to fit both cards: {n}"
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hardware::GpuBudget;
    use crate::model::BlockBytes;

    #[test]
    fn two_cards_get_a_per_card_table_and_one_card_none() {
        let l = ModelLayout {
            n_embd: 1024,
            blocks: vec![
                BlockBytes {
                    routed_experts: 400 << 20,
                    shared_experts: 1 << 20,
                    rest: 20 << 20,
                };
                24
            ],
            token_embd_bytes: 100 << 20,
            output_bytes: 100 << 20,
            ..ModelLayout::uniform(24, 8, 0, 0)
        };
        let card = |index: u32, free_mib: u64| GpuBudget {
            index,
            name: format!("card {index}"),
            free_mib,
            budget_mib: free_mib - 512,
        };
        let cards = [card(0, 6144), card(1, 4096)];
        let rows = build_cards(&l, 4096, KvType::Q8_0, &cards);
        assert_eq!(rows.len(), 25);
        assert!(!rows[0].fits && rows[24].fits);
        assert!(rows.iter().all(|r| r.card_mib.len() == 2));
        // Once it fits, more CPU blocks keep it fitting.
        let first = rows.iter().position(|r| r.fits).unwrap();
        assert!(rows[first..].iter().all(|r| r.fits));
        let mut report = build(
            std::path::Path::new("m.gguf"),
            &l,
            4096,
            KvType::Q8_0,
            Some(9216.0),
            "two cards".into(),
        );
        report.cards = rows;
        let text = render_text(&report);
        assert!(text.contains("2 GPUs: -ts 63,37 (by budget)"), "{text}");
        assert!(text.contains("CUDA1"), "{text}");
        assert!(
            text.contains(&format!(
                "fewest CPU expert blocks predicted to fit both cards: {first}"
            )),
            "{text}"
        );
        assert!(build_cards(&l, 4096, KvType::Q8_0, &cards[..1]).is_empty());
    }
}
