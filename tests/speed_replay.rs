//! The speed model replayed against the committed GPU runs (docs/evidence/gpu-h*/**/journal.jsonl):
//! H100 and H200, synthetic Qwen3.5-35B-A3B and Qwen3-30B-A3B (Q4_K_M), 16 and 24 GiB cards.
//!
//! Trials are grouped by (GPU, card, shape, config); a group's measurement is the median of its
//! trials' medians (launch-to-launch noise is +-15 %, so single launches are not the unit).
//! `fit_constants` refits the model's constants by least squares on relative error and prints
//! them (that is where `qtune::model::speed::FITTED` came from); `held_out_configs_*` fits on
//! two thirds of the groups, predicts the rest and asserts each within the error the model
//! states. `--fit` placements are left out: their placement is not known before the launch.
//!
//! `cargo test --test speed_replay -- --nocapture` prints predicted vs measured per group.

use qtune::config::LaunchConfig;
use qtune::model::speed::{self, SpeedBox, SpeedConstants, TokenBytes, FITTED};
use qtune::model::synth::SynthFtype;
use qtune::model::ModelLayout;
use std::collections::BTreeMap;
use std::path::Path;

mod support;
use support::evidence;

fn layout_of(shape: &str) -> ModelLayout {
    qtune::model::synth::shape_layout(shape, SynthFtype::Q4KM).unwrap()
}

/// One (GPU, card, shape, config) group of committed trials.
#[derive(Debug, Clone)]
struct Group {
    gpu: String,
    card_gib: u32,
    shape: String,
    cfg: LaunchConfig,
    host_bw: f64,
    prompt_tokens: u32,
    tg: f64,
    pp: f64,
    n: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Issue 14's four H100 tunes (2026-11-23), committed after the first fit. `FITTED` is now
/// fitted on them too (they hold the only committed `last-split` placements, which the
/// depth-dependent touch of the synthetic models needs); `held_out_run_*` refits without them
/// and predicts them, a held-out run.
const AFTER_THE_FIT: &[&str] = &["gpu-h100-proof14"];

fn after_the_fit(journal: &Path) -> bool {
    journal
        .components()
        .any(|c| AFTER_THE_FIT.iter().any(|d| c.as_os_str() == *d))
}

/// Issue 14's second to sixth pre-registered runs (H100, 2026-11-23, five leases): their
/// plans were written with [`PLANNED_WITH`], and `the_*pre_registered_run*` predicts each with
/// it (they have been in `FITTED`'s fit since the refit after run 10).
const PRE_REGISTERED: &[&str] = &[
    "gpu-h100-run4",
    "gpu-h100-run5",
    "gpu-h100-run6",
    "gpu-h100-run7",
    "gpu-h100-run8",
];

/// The constants runs 4-8's plans were written with (`FITTED` until run 8: one prefill cost
/// per block, attention or recurrent). The pre-registered runs are predicted with these, as
/// their plans were; `the_split_prefill_block_cost_*` compares the constants since.
const PLANNED_WITH: SpeedConstants = SpeedConstants {
    host_bw_fraction: 0.920,
    thread_exponent: 1.0,
    block_overhead_ms: 0.0771,
    recurrent_block_overhead_ms: 0.117,
    kv_quant_s_per_gb: 5.05e-3,
    cpu_block_overhead_ms: 0.183,
    h2d_pinned_fraction: 47.0 / 63.0,
    h2d_pageable_fraction: 0.159,
    prefill_s_per_token_gb: 3.69e-5,
    prefill_block_ms: 0.460,
    prefill_recurrent_block_ms: 0.460,
    prefill_recurrent_us: 0.990,
    synthetic_touch_qwen3moe: [0.618, -0.00868, 1.0],
    synthetic_touch_qwen35moe: [0.0655, 0.320, 8.0],
    tg_rel_err: 0.13,
    pp_rel_err: 0.23,
};

/// Issue 14's seventh and eighth pre-registered runs (runs 9 and 10, H100, 2026-11-23): their
/// plans were written with [`PLANNED_WITH_RUN9`] (the prefill's fixed cost split, attention
/// against recurrent), and each is predicted with it.
const PLANNED_WITH_RUN9_RUNS: &[&str] = &["gpu-h100-run9", "gpu-h100-run10"];

/// The constants runs 9 and 10's plans were written with (`FITTED` from run 9 to run 10: fitted
/// on every run before issue 14's pre-registered ones).
const PLANNED_WITH_RUN9: SpeedConstants = SpeedConstants {
    host_bw_fraction: 0.920,
    thread_exponent: 1.0,
    block_overhead_ms: 0.0771,
    recurrent_block_overhead_ms: 0.117,
    kv_quant_s_per_gb: 5.05e-3,
    cpu_block_overhead_ms: 0.183,
    h2d_pinned_fraction: 47.0 / 63.0,
    h2d_pageable_fraction: 0.160,
    prefill_s_per_token_gb: 3.85e-5,
    prefill_block_ms: 0.373,
    prefill_recurrent_block_ms: 0.602,
    prefill_recurrent_us: 0.818,
    synthetic_touch_qwen3moe: [0.627, 0.00523, 1.0],
    synthetic_touch_qwen35moe: [0.0641, 0.312, 8.0],
    tg_rel_err: 0.13,
    pp_rel_err: 0.23,
};

/// Runs whose plans were written with `FITTED` as it stands (refitted after run 10 on every
/// committed single-GPU run, issue 14's runs 4-10 included): out of the fit, predicted with
/// `FITTED`. Runs 11, 12 and 13: issue 14's ninth to eleventh pre-registered runs (H100,
/// three leases, 2026-11-23/24, the binary built at `f7d0214`).
const PLANNED_WITH_FITTED: &[&str] = &["gpu-h100-run11", "gpu-h100-run12", "gpu-h100-run13"];

/// Issue 14's pre-registered runs 4-10, each planned with constants fitted without it.
fn pre_registered(journal: &Path) -> bool {
    journal.components().any(|c| {
        PRE_REGISTERED
            .iter()
            .chain(PLANNED_WITH_RUN9_RUNS)
            .any(|d| c.as_os_str() == *d)
    })
}

/// A run planned with `FITTED` as it stands: never in its fit.
fn planned_with_fitted(journal: &Path) -> bool {
    journal
        .components()
        .any(|c| PLANNED_WITH_FITTED.iter().any(|d| c.as_os_str() == *d))
}

fn in_run(journal: &Path, run: &str) -> bool {
    journal.components().any(|c| c.as_os_str() == run)
}

/// Where a committed run directory ran: one GPU (which), the emulated card, the model's shape
/// and the host's measured read bandwidth. None for two cards (layer split and pipeline
/// parallelism, not this model's box) or a run with no card size recorded.
struct RunBox {
    gpu: &'static str,
    card_gib: u32,
    shape: &'static str,
    host_bw: f64,
}

fn run_box(dir: &Path) -> Option<RunBox> {
    let card = evidence::try_read(dir.join("card.txt"))?;
    if card.contains("GPU 1") {
        return None;
    }
    let gpu = if card.contains("H200") {
        "NVIDIA H200"
    } else if card.contains("H100") {
        "NVIDIA H100 80GB HBM3"
    } else {
        return None;
    };
    let meta: serde_json::Value = serde_json::from_str(
        &evidence::try_read(dir.join("run.json"))
            .or_else(|| evidence::try_read(dir.join("compare.json")))?,
    )
    .ok()?;
    let model = meta["model_path"].as_str()?;
    Some(RunBox {
        gpu,
        card_gib: if card.contains("24 GiB") { 24 } else { 16 },
        shape: if model.contains("qwen3-30b") {
            "qwen3-30b-a3b"
        } else {
            "qwen3.5-35b-a3b"
        },
        host_bw: meta["hardware"]["host"]["mem_bandwidth_gbs"]
            .as_f64()
            .unwrap_or(100.0),
    })
}

/// A journal's trials of the given kinds that measured both speeds: config, median tg and pp.
/// Configs older builds wrote with fields since renamed (`fit_target`) are `--fit` placements,
/// left out anyway.
fn measured(journal: &Path, kinds: &[&str]) -> Vec<(LaunchConfig, f64, f64)> {
    evidence::read(journal)
        .lines()
        .filter_map(|line| {
            let j = serde_json::from_str::<serde_json::Value>(line).ok()?;
            if !kinds.contains(&j["kind"].as_str()?) {
                return None;
            }
            let cfg = serde_json::from_value::<LaunchConfig>(j["config"].clone()).ok()?;
            let tg = j["metrics"]["gen_tps"]["median"].as_f64()?;
            let pp = j["metrics"]["prompt_tps"]["median"].as_f64()?;
            Some((cfg, tg, pp))
        })
        .collect()
}

/// The single-GPU groups `FITTED` is fitted on: every committed run but those planned with it.
fn groups() -> Vec<Group> {
    groups_where(|f| !planned_with_fitted(f))
}

fn groups_where(keep: impl Fn(&Path) -> bool) -> Vec<Group> {
    let mut files = evidence::journals("");
    files.retain(|f| keep(f));
    type Key = (String, u32, String, String);
    type Acc = (Group, Vec<f64>, Vec<f64>, Vec<f64>);
    let mut by: BTreeMap<Key, Acc> = BTreeMap::new();
    for f in files {
        let dir = f.parent().unwrap();
        let Some(RunBox {
            gpu,
            card_gib,
            shape,
            host_bw,
        }) = run_box(dir)
        else {
            continue;
        };
        let meta: serde_json::Value = serde_json::from_str(
            &evidence::try_read(dir.join("run.json"))
                .or_else(|| evidence::try_read(dir.join("compare.json")))
                .unwrap(),
        )
        .unwrap();
        let workload = if meta["workload"].is_object() {
            &meta["workload"]
        } else {
            &meta["space"]["workload"]
        };
        let prompt_tokens = workload["prompt_tokens"].as_u64().unwrap() as u32;
        for (cfg, tg, pp) in measured(&f, &["ok", "spill"]) {
            if cfg.is_auto_placement() || cfg.is_fit_placement() {
                continue;
            }
            let key = (
                gpu.to_string(),
                card_gib,
                shape.to_string(),
                serde_json::to_string(&cfg).unwrap(),
            );
            let e = by.entry(key).or_insert_with(|| {
                (
                    Group {
                        gpu: gpu.into(),
                        card_gib,
                        shape: shape.into(),
                        cfg: cfg.clone(),
                        host_bw,
                        prompt_tokens,
                        tg: 0.0,
                        pp: 0.0,
                        n: 0,
                    },
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                )
            });
            e.1.push(tg);
            e.2.push(pp);
            e.3.push(host_bw);
        }
    }
    by.into_values()
        .map(|(mut g, tg, pp, bw)| {
            g.n = tg.len();
            g.tg = median(tg);
            g.pp = median(pp);
            g.host_bw = median(bw);
            g
        })
        .collect()
}

fn speed_box(g: &Group) -> SpeedBox {
    SpeedBox {
        gpu_bw_gbs: speed::gpu_bandwidth_by_name(&g.gpu),
        pcie_gbs: Some(speed::pcie_gbs(5, 16)),
        host_bw_gbs: g.host_bw,
        physical_cores: 16,
        host_bw_share_by_threads: Vec::new(),
        sources: Vec::new(),
    }
}

/// Least squares: minimise |A x - b|^2 (normal equations, Gaussian elimination).
#[allow(clippy::needless_range_loop)]
fn lstsq(a: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let n = a[0].len();
    let mut m = vec![vec![0.0; n + 1]; n];
    for (row, &y) in a.iter().zip(b) {
        for i in 0..n {
            for j in 0..n {
                m[i][j] += row[i] * row[j];
            }
            m[i][n] += row[i] * y;
        }
    }
    for c in 0..n {
        let p = (c..n)
            .max_by(|&x, &y| m[x][c].abs().partial_cmp(&m[y][c].abs()).unwrap())
            .unwrap();
        m.swap(c, p);
        let d = m[c][c];
        assert!(d.abs() > 1e-30, "singular fit");
        for j in c..=n {
            m[c][j] /= d;
        }
        for r in 0..n {
            if r != c {
                let f = m[r][c];
                for j in c..=n {
                    m[r][j] -= f * m[c][j];
                }
            }
        }
    }
    (0..n).map(|i| m[i][n]).collect()
}

#[derive(Clone)]
struct Prepared {
    g: Group,
    tb: TokenBytes,
    sb: SpeedBox,
    ub: u32,
    n_ub: u32,
    /// A synthetic model that copies `synthetic_touch_qwen35moe` of its CPU experts (not
    /// `qwen3moe`: see `speed::synthetic_touch`).
    synthetic35: bool,
    /// A synthetic model (its copy share is fitted; a real model copies all its CPU experts).
    synthetic: bool,
    /// Each CPU block's expert bytes and depth (`speed::depth_share`): with depth^power as
    /// `y`, the copy is `touch_first * sum b (1 - y) + touch_last * sum b y` (before clamping).
    depth_bytes: Vec<(f64, f64)>,
}

fn prepare(gs: &[Group]) -> Vec<Prepared> {
    let mut layouts: BTreeMap<String, ModelLayout> = BTreeMap::new();
    gs.iter()
        .map(|g| {
            let l = layouts
                .entry(g.shape.clone())
                .or_insert_with(|| layout_of(&g.shape))
                .clone();
            let tb = speed::token_bytes(&l, &g.cfg, true, g.prompt_tokens + 64);
            let depth_bytes = speed::host_expert_bytes(&l, &g.cfg, true)
                .iter()
                .enumerate()
                .filter(|(_, &b)| b > 0)
                .map(|(il, &b)| (b as f64, speed::depth_share(&l, il as u32)))
                .collect();
            let ub = g
                .cfg
                .ubatch
                .unwrap_or(512)
                .min(g.cfg.batch.unwrap_or(2048))
                .min(g.prompt_tokens);
            Prepared {
                g: g.clone(),
                tb,
                sb: speed_box(g),
                ub,
                n_ub: g.prompt_tokens.div_ceil(ub),
                synthetic35: speed::is_synthetic(&l) && l.arch != "qwen3moe",
                synthetic: speed::is_synthetic(&l),
                depth_bytes,
            }
        })
        .collect()
}

/// Pinned host-to-device copies ran at about 47 GB/s on the GPU machine's PCIe 5 x16 link
/// (measured, /work/shared/notes/gpu-rig.md): the anchor of the copy terms, which the prefill
/// data alone cannot separate from the synthetic models' touch fractions.
const PINNED_FRACTION: f64 = 47.0 / 63.0;

/// The powers of depth the synthetic models' touch may follow (grid search, per architecture).
const TOUCH_POWERS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0];

fn sse(a: &[Vec<f64>], b: &[f64], x: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(r, y)| (r.iter().zip(x).map(|(u, v)| u * v).sum::<f64>() - y).powi(2))
        .sum()
}

/// Fit the constants on `ps` (relative least squares; the thread exponent and the
/// pinned/pageable copy-rate ratio by grid search).
fn fit(ps: &[Prepared]) -> SpeedConstants {
    let mut best: Option<(f64, SpeedConstants)> = None;
    // The exponent stays at most 1: host bandwidth does not grow faster than the threads.
    for step in 0..=10 {
        let gamma = 0.5 + 0.05 * step as f64;
        // Decode: 1/tg = gpu_bytes/gpu_bw + (1/f_host) cpu_bytes/(host_bw share)
        //   + c attention blocks + r recurrent blocks + d cpu blocks + q quantized KV GB.
        let mut a = Vec::new();
        let mut b = Vec::new();
        for p in ps {
            let share = (p.g.cfg.threads.unwrap_or(16) as f64 / 16.0)
                .min(1.0)
                .powf(gamma);
            let t = 1.0 / p.g.tg;
            let gpu = p.tb.gpu / (p.sb.gpu_bw_gbs.unwrap() * 1e9);
            let cpu = p.tb.cpu / (p.sb.host_bw_gbs * 1e9 * share);
            let na = (p.tb.gpu_blocks - p.tb.gpu_recurrent_blocks) as f64 * 1e-3;
            let nr = p.tb.gpu_recurrent_blocks as f64 * 1e-3;
            let nc = (p.tb.cpu_blocks as f64) * 1e-3;
            let q = p.tb.gpu_kv_quant / 1e9;
            a.push(vec![cpu / t, na / t, nr / t, nc / t, q / t]);
            b.push((t - gpu) / t);
        }
        let x = lstsq(&a, &b);
        let e = sse(&a, &b, &x);
        let k = SpeedConstants {
            host_bw_fraction: 1.0 / x[0],
            thread_exponent: gamma,
            block_overhead_ms: x[1],
            recurrent_block_overhead_ms: x[2],
            cpu_block_overhead_ms: x[3],
            kv_quant_s_per_gb: x[4],
            ..FITTED
        };
        if best.as_ref().is_none_or(|(s, _)| e < *s) {
            best = Some((e, k));
        }
    }
    let mut k = best.unwrap().1;
    // Prefill per micro-batch: s ub active_gb + p nblocks + u ub recurrent blocks + the copy,
    // at the measured pinned rate, `ratio` times slower from the page cache, times each
    // synthetic shape's touch fraction.
    let mut best: Option<(f64, f64, [f64; 2], Vec<f64>)> = None;
    let weights = |p: &Prepared, power: f64| -> [f64; 2] {
        p.depth_bytes.iter().fold([0.0, 0.0], |w, &(b, x)| {
            let y = x.powf(power);
            [w[0] + b * (1.0 - y), w[1] + b * y]
        })
    };
    for (step, &p30, &p35) in (0..=180).flat_map(|step| {
        TOUCH_POWERS
            .iter()
            .flat_map(move |p30| TOUCH_POWERS.iter().map(move |p35| (step, p30, p35)))
    }) {
        let ratio = 1.0 + 0.05 * step as f64;
        let mut a = Vec::new();
        let mut b = Vec::new();
        for p in ps {
            let t = p.g.prompt_tokens as f64 / (p.g.pp * p.n_ub as f64);
            let slow = if p.g.cfg.load_mode.maps_file() {
                ratio
            } else {
                1.0
            };
            let rate = p.sb.pcie_gbs.unwrap() * 1e9 * PINNED_FRACTION / slow;
            let copy = p.tb.cpu_experts_all / rate;
            let w = weights(p, if p.synthetic35 { p35 } else { p30 });
            let (first, last) = (w[0] / rate / t, w[1] / rate / t);
            let s30 = p.synthetic && !p.synthetic35;
            let pick = |yes: bool, v: f64| if yes { v } else { 0.0 };
            a.push(vec![
                p.ub as f64 * p.tb.active_total / 1e9 / t,
                (p.tb.gpu_blocks - p.tb.gpu_recurrent_blocks) as f64 * 1e-3 / t,
                p.ub as f64 * p.tb.gpu_recurrent_blocks as f64 * 1e-6 / t,
                pick(s30, first),
                pick(s30, last),
                pick(p.synthetic35, first),
                pick(p.synthetic35, last),
                p.tb.gpu_recurrent_blocks as f64 * 1e-3 / t,
            ]);
            b.push(if p.synthetic { 1.0 } else { 1.0 - copy / t });
        }
        let x = lstsq(&a, &b);
        let e = sse(&a, &b, &x);
        if best.as_ref().is_none_or(|(s, _, _, _)| e < *s) {
            best = Some((e, ratio, [p30, p35], x));
        }
    }
    let (_, ratio, powers, x) = best.unwrap();
    k.prefill_s_per_token_gb = x[0];
    k.prefill_block_ms = x[1];
    k.prefill_recurrent_block_ms = x[7];
    k.prefill_recurrent_us = x[2];
    k.synthetic_touch_qwen3moe = [x[3], x[4], powers[0]];
    k.synthetic_touch_qwen35moe = [x[5], x[6], powers[1]];
    k.h2d_pinned_fraction = PINNED_FRACTION;
    k.h2d_pageable_fraction = PINNED_FRACTION / ratio;
    k
}

fn predict(p: &Prepared, k: &SpeedConstants) -> (f64, f64) {
    let l = layout_of_cached(&p.g.shape);
    let s = speed::predict(&l, &p.g.cfg, &p.sb, true, p.g.prompt_tokens, k).unwrap();
    (s.tg.tps, s.pp.tps)
}

fn layout_of_cached(shape: &str) -> ModelLayout {
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<BTreeMap<String, ModelLayout>>> = OnceLock::new();
    let m = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut g = m.lock().unwrap();
    g.entry(shape.to_string())
        .or_insert_with(|| layout_of(shape))
        .clone()
}

/// Relative errors (pred/meas - 1) of tg and pp for `ps`, printed.
fn report(label: &str, ps: &[Prepared], k: &SpeedConstants) -> (Vec<f64>, Vec<f64>) {
    let (mut etg, mut epp) = (Vec::new(), Vec::new());
    for p in ps {
        let (tg, pp) = predict(p, k);
        let (a, b) = (tg / p.g.tg - 1.0, pp / p.g.pp - 1.0);
        println!(
            "{label} {} {}G {} ncmoe={:?} cpu-exps={} t={:?} ub={:?} kv={} load={} (n={}): tg {tg:.0} vs {:.0} ({:+.0} %), pp {pp:.0} vs {:.0} ({:+.0} %)",
            p.g.gpu.replace("NVIDIA ", ""),
            p.g.card_gib,
            p.g.shape,
            p.g.cfg.n_cpu_moe,
            p.g.cfg
                .cpu_experts
                .as_ref()
                .map_or("-".to_string(), |e| e.label()),
            p.g.cfg.threads,
            p.g.cfg.ubatch,
            p.g.cfg.cache_type_k,
            p.g.cfg.load_mode.as_str(),
            p.g.n,
            p.g.tg,
            a * 100.0,
            p.g.pp,
            b * 100.0
        );
        etg.push(a);
        epp.push(b);
    }
    (etg, epp)
}

fn print_constants(k: &SpeedConstants) {
    println!("fitted: {k:#?}");
}

#[test]
fn there_are_enough_committed_groups_of_both_shapes_and_cards() {
    let gs = groups();
    let count = |f: &dyn Fn(&Group) -> bool| gs.iter().filter(|g| f(g)).count();
    println!("{} groups", gs.len());
    assert!(gs.len() >= 30, "{} groups", gs.len());
    assert!(count(&|g| g.shape == "qwen3-30b-a3b") >= 5);
    assert!(count(&|g| g.card_gib == 24) >= 5);
    assert!(count(&|g| g.gpu.contains("H100")) >= 3);
    assert!(count(&|g| g.cfg.threads == Some(8)) >= 2);
}

/// Refit on every group: prints the constants `FITTED` should carry and checks that it does
/// (to the printed precision, 5 %).
#[test]
fn fit_constants() {
    let ps = prepare(&groups());
    let k = fit(&ps);
    print_constants(&k);
    report("all", &ps, &k);
    let close = |a: f64, b: f64| (a / b - 1.0).abs() <= 0.05;
    for (name, a, b) in [
        (
            "host_bw_fraction",
            k.host_bw_fraction,
            FITTED.host_bw_fraction,
        ),
        (
            "block_overhead_ms",
            k.block_overhead_ms,
            FITTED.block_overhead_ms,
        ),
        (
            "h2d_pageable_fraction",
            k.h2d_pageable_fraction,
            FITTED.h2d_pageable_fraction,
        ),
        (
            "prefill_s_per_token_gb",
            k.prefill_s_per_token_gb,
            FITTED.prefill_s_per_token_gb,
        ),
        (
            "recurrent_block_overhead_ms",
            k.recurrent_block_overhead_ms,
            FITTED.recurrent_block_overhead_ms,
        ),
        (
            "kv_quant_s_per_gb",
            k.kv_quant_s_per_gb,
            FITTED.kv_quant_s_per_gb,
        ),
        (
            "prefill_recurrent_us",
            k.prefill_recurrent_us,
            FITTED.prefill_recurrent_us,
        ),
        (
            "prefill_block_ms",
            k.prefill_block_ms,
            FITTED.prefill_block_ms,
        ),
        (
            "prefill_recurrent_block_ms",
            k.prefill_recurrent_block_ms,
            FITTED.prefill_recurrent_block_ms,
        ),
        (
            "synthetic_touch_qwen3moe[0]",
            k.synthetic_touch_qwen3moe[0],
            FITTED.synthetic_touch_qwen3moe[0],
        ),
        (
            "synthetic_touch_qwen3moe[1]",
            k.synthetic_touch_qwen3moe[1],
            FITTED.synthetic_touch_qwen3moe[1],
        ),
        (
            "synthetic_touch_qwen3moe[2]",
            k.synthetic_touch_qwen3moe[2],
            FITTED.synthetic_touch_qwen3moe[2],
        ),
        (
            "synthetic_touch_qwen35moe[0]",
            k.synthetic_touch_qwen35moe[0],
            FITTED.synthetic_touch_qwen35moe[0],
        ),
        (
            "synthetic_touch_qwen35moe[1]",
            k.synthetic_touch_qwen35moe[1],
            FITTED.synthetic_touch_qwen35moe[1],
        ),
        (
            "synthetic_touch_qwen35moe[2]",
            k.synthetic_touch_qwen35moe[2],
            FITTED.synthetic_touch_qwen35moe[2],
        ),
    ] {
        assert!(
            close(a, b),
            "{name}: refit {a}, FITTED has {b}: update FITTED"
        );
    }
}

/// Fit on two thirds of the groups, predict the rest (three folds): the interval the model
/// states (FITTED.tg_rel_err / pp_rel_err, meant as about 90 % coverage) holds for at least
/// 85 % of the held-out groups, and no group is off by more than twice that.
#[test]
fn held_out_configs_are_predicted_within_the_stated_error() {
    let ps = prepare(&groups());
    let (mut etg, mut epp) = (Vec::new(), Vec::new());
    for fold in 0..3 {
        let (train, test): (Vec<_>, Vec<_>) =
            ps.iter().enumerate().partition(|(i, _)| i % 3 != fold);
        let train: Vec<Prepared> = train.into_iter().map(|(_, p)| p.clone()).collect();
        let test: Vec<Prepared> = test.into_iter().map(|(_, p)| p.clone()).collect();
        let k = fit(&train);
        let (a, b) = report(&format!("held-out {fold}"), &test, &k);
        etg.extend(a);
        epp.extend(b);
    }
    for (what, errs, stated) in [
        ("tg", &etg, FITTED.tg_rel_err),
        ("pp", &epp, FITTED.pp_rel_err),
    ] {
        let mut abs: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
        abs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let within = abs.iter().filter(|&&e| e <= stated).count() as f64 / abs.len() as f64;
        let q90 = abs[(abs.len() as f64 * 0.9) as usize - 1];
        let worst = abs[abs.len() - 1];
        println!(
            "{what}: {} held-out groups, {:.0} % within the stated +-{:.0} %, 90th percentile {:.1} %, worst {:.1} %",
            abs.len(),
            within * 100.0,
            stated * 100.0,
            q90 * 100.0,
            worst * 100.0
        );
        assert!(
            within >= 0.85,
            "{what}: only {:.0} % within",
            within * 100.0
        );
        assert!(worst <= 2.0 * stated, "{what}: worst {worst}");
    }
}

/// The runs of `AFTER_THE_FIT` (issue 14's four H100 tunes of 2026-11-23, both shapes, 16 and
/// 24 GiB) held out as a whole: the constants are refitted on every other run and predict
/// them. The stated error is meant as about 90 % coverage; this asks for 80 % of the groups
/// within it (fewer groups, one noisier box: 16 of 19 launches of one tune spread over 10 %)
/// and none beyond twice it, and prints each group. Its only `last-split` placements are
/// extrapolated here: the other runs placed whole blocks from the first.
#[test]
fn held_out_run_is_predicted_within_the_stated_error() {
    let k = fit(&prepare(&groups_where(|f| {
        !after_the_fit(f) && !pre_registered(f)
    })));
    print_constants(&k);
    let ps = prepare(&groups_where(after_the_fit));
    assert!(ps.len() >= 10, "{} groups in the held-out run", ps.len());
    assert_run_within_the_stated_error("held-out run", &ps, &k);
}

/// A whole run predicted with `k`: at least 80 % of its groups within the stated error in tg
/// and in pp, none beyond twice it; prints each group and the rates.
fn assert_run_within_the_stated_error(label: &str, ps: &[Prepared], k: &SpeedConstants) {
    let (etg, epp) = report(label, ps, k);
    for (what, errs, stated) in [("tg", &etg, k.tg_rel_err), ("pp", &epp, k.pp_rel_err)] {
        let within = count_within(errs, stated) as f64 / errs.len() as f64;
        let worst = errs.iter().fold(0.0f64, |m, e| m.max(e.abs()));
        println!(
            "{what} {label}: {} groups, {:.0} % within the stated +-{:.0} %, worst {:.1} %",
            errs.len(),
            within * 100.0,
            stated * 100.0,
            worst * 100.0
        );
        assert!(
            within >= 0.80,
            "{what}: only {:.0} % within",
            within * 100.0
        );
        assert!(worst <= 2.0 * stated, "{what}: worst {worst}");
    }
}

/// How many of the relative errors `errs` are within `stated` either way.
fn count_within(errs: &[f64], stated: f64) -> usize {
    errs.iter().filter(|e| e.abs() <= stated).count()
}

/// `report`'s errors for `ps`, with how many are within `k`'s stated error in tg and in pp
/// (printed under `label`).
struct Counted {
    etg: Vec<f64>,
    epp: Vec<f64>,
    wtg: usize,
    wpp: usize,
}

fn counted(label: &str, ps: &[Prepared], k: &SpeedConstants) -> Counted {
    let (etg, epp) = report(label, ps, k);
    let (wtg, wpp) = (
        count_within(&etg, k.tg_rel_err),
        count_within(&epp, k.pp_rel_err),
    );
    println!(
        "{label}: {} groups, tg {wtg} and pp {wpp} within the stated error",
        etg.len()
    );
    Counted { etg, epp, wtg, wpp }
}

/// The one group of `ps` whose generation error (`etg`, in the same order) is beyond twice
/// `k`'s stated error: asserts there is exactly one, launched once, and returns it.
fn the_single_launch_beyond_twice<'a>(
    ps: &'a [Prepared],
    etg: &[f64],
    k: &SpeedConstants,
) -> &'a Prepared {
    let beyond: Vec<&Prepared> = ps
        .iter()
        .zip(etg)
        .filter(|(_, e)| e.abs() > 2.0 * k.tg_rel_err)
        .map(|(p, _)| p)
        .collect();
    assert!(
        beyond.len() == 1 && beyond[0].g.n == 1,
        "one single launch beyond twice the stated tg error: {:?}",
        beyond.iter().map(|p| (&p.g.cfg, p.g.n)).collect::<Vec<_>>()
    );
    beyond[0]
}

/// A lease whose card ran slower than the model: every generation error `etg` positive (each
/// group measured below its prediction), and fewer than 80 % within `k`'s stated error.
fn assert_a_slow_lease(label: &str, etg: &[f64], k: &SpeedConstants) {
    let within = count_within(etg, k.tg_rel_err);
    println!(
        "tg {label}: {} groups, {within} within the stated +-{:.0} %",
        etg.len(),
        k.tg_rel_err * 100.0
    );
    assert!(
        etg.iter().all(|&e| e > 0.0) && (within as f64) < 0.8 * etg.len() as f64,
        "{label}: every group over-predicted, fewer than 80 % within the stated error: {etg:?}"
    );
}

/// A run's groups, those of the 24 GiB card and those of the 16 GiB card, at least that many of
/// each.
fn groups_by_card(run: &str, min_24: usize, min_16: usize) -> (Vec<Prepared>, Vec<Prepared>) {
    let (big, small): (Vec<Prepared>, Vec<Prepared>) = prepare(&groups_where(|f| in_run(f, run)))
        .into_iter()
        .partition(|p| p.g.card_gib == 24);
    assert!(
        big.len() >= min_24 && small.len() >= min_16,
        "{} + {} groups in {run}",
        big.len(),
        small.len()
    );
    (big, small)
}

/// Issue 14's second pre-registered run, predicted with the constants its plans were written
/// with (`PLANNED_WITH`, fitted without it): held out by construction.
#[test]
fn the_pre_registered_run_is_predicted_with_the_constants_it_was_planned_with() {
    let ps = prepare(&groups_where(|f| in_run(f, "gpu-h100-run4")));
    assert!(
        ps.len() >= 10,
        "{} groups in the pre-registered run",
        ps.len()
    );
    assert_run_within_the_stated_error("pre-registered run", &ps, &PLANNED_WITH);
}

/// The third (run 5, after the race sized for one candidate and whole-card tunes started at
/// f16 KV): the same constants, every placed config its six tunes measured.
#[test]
fn the_third_pre_registered_run_is_predicted_with_the_same_constants() {
    let ps = prepare(&groups_where(|f| in_run(f, "gpu-h100-run5")));
    assert!(ps.len() >= 10, "{} groups in run 5", ps.len());
    assert_run_within_the_stated_error("run 5", &ps, &PLANNED_WITH);
}

/// The fourth (run 6, another lease; every tune kept the default): the same constants. Its
/// 24 GiB groups are within the stated error. Its 16 GiB groups are not (issue 14 stays open):
/// every placed config measured below its predicted generation (predictions 2-37 % high; the
/// 35B's `--n-cpu-moe 13 -ub 2048` pinned at 78-97 tok/s in run 6 against 103-118 in run 5's
/// race, the default at 96 against 105-111). This test asserts both, so a refit that hides the
/// miss, or a model that stops over-predicting that lease, shows here. The run's directory also
/// holds the plan's two 16 GiB configs re-measured on a later lease (`planned*-compare`):
/// predicted 8 % and 1 % high there, pooled into these groups.
#[test]
fn the_fourth_pre_registered_run_is_predicted_on_24_gib_and_missed_on_16_gib() {
    let (big, small) = groups_by_card("gpu-h100-run6", 10, 10);
    assert_run_within_the_stated_error("run 6, 24 GiB", &big, &PLANNED_WITH);
    assert_a_slow_lease(
        "run 6, 16 GiB",
        &report("run 6, 16 GiB", &small, &PLANNED_WITH).0,
        &PLANNED_WITH,
    );
}

/// The fifth (run 7, the tune launching the speed model's pick third): every placed config its
/// four tunes and the 30B 16 GiB re-measurement measured, with the same constants, on each
/// card: both within the stated error (on this lease the 16 GiB groups were too, unlike run 6's).
#[test]
fn the_fifth_pre_registered_run_is_predicted_with_the_same_constants() {
    let (big, small) = groups_by_card("gpu-h100-run7", 8, 10);
    assert_run_within_the_stated_error("run 7, 24 GiB", &big, &PLANNED_WITH);
    assert_run_within_the_stated_error("run 7, 16 GiB", &small, &PLANNED_WITH);
}

/// The sixth (run 8, another lease, the same constants): every placed config its four tunes and
/// the 35B 16 GiB re-measurement measured. 24 GiB within the stated error. 16 GiB: 12 of 14
/// groups within ±13 % in tg and 13 of 14 within ±23 % in pp, but one group beyond twice the
/// stated error: the 30B's `-ot` 36-47 + 35 `gate` (run 7's winner, 96.8 tok/s over its
/// launches there) launched once here, as the pick, at 74 tok/s, 35 % below its prediction
/// (the `down` twin ran at 87). The test asserts that reading, so a refit or a changed file
/// shows here.
#[test]
fn the_sixth_pre_registered_run_is_predicted_with_the_same_constants() {
    let (big, small) = groups_by_card("gpu-h100-run8", 8, 10);
    assert_run_within_the_stated_error("run 8, 24 GiB", &big, &PLANNED_WITH);
    let Counted { etg, epp, wtg, wpp } = counted("run 8, 16 GiB", &small, &PLANNED_WITH);
    let n = etg.len();
    assert!(
        wtg as f64 >= 0.8 * n as f64 && wpp as f64 >= 0.8 * n as f64,
        "tg {wtg}, pp {wpp} of {n}"
    );
    let beyond = the_single_launch_beyond_twice(&small, &etg, &PLANNED_WITH);
    assert!(
        beyond.g.shape == "qwen3-30b-a3b"
            && beyond
                .g
                .cfg
                .cpu_experts
                .as_ref()
                .is_some_and(|e| e.label() == "36-47+35:gate"),
        "{:?}",
        beyond.g.cfg
    );
    assert!(epp.iter().all(|e| e.abs() <= 2.0 * PLANNED_WITH.pp_rel_err));
}

/// Issue 14's "done when", read from run 7's committed files: each case's plan, written before
/// its tune (`*-plan.json`: from the model alone; `*-plan-from-24.json`: from the 24 GiB
/// card's profile), against the tune's winner (`results.json`), and the launch at which the
/// tune first ran its winner. Three of the four cases meet every goal; the 35B on 16 GiB kept
/// the server's default (its race was undecided: generation -1.8 % [-8.3, +5.2], prompt +95 %),
/// whose prompt speed is not the plan's config's, and the model puts the default's prompt 35 %
/// low. The test states that table, so a changed file or a changed reading shows here.
#[test]
fn run_7s_plans_against_the_tuned_winners() {
    plans_against_the_tuned_winners(
        "gpu-h100-run7",
        &[
            ("proof30-24", true, true),
            ("proof35-24", true, true),
            ("proof30-16", true, true),
            ("proof35-16", true, false),
        ],
    );
}

/// The same for run 8 (the sixth pre-registered run, the race's undecided rule widened to an
/// estimate inside the band): three of four again. The 35B on 16 GiB now ends on the model's
/// pick (launch #3, generation +1.2 % [-10.9, +14.9], an estimate ahead: the old rule would have
/// taken it too); the 35B on 24 GiB kept the default, its race having shown the pick slower in
/// generation (-4.3 % [-7.7, -0.7], 3 rounds; run 7 had it at 0.0 % [-1.3, +1.3]), so prompt
/// misses (+32 %). The 30B on 16 GiB ended on fit's candidate (launch #10).
#[test]
fn run_8s_plans_against_the_tuned_winners() {
    plans_against_the_tuned_winners(
        "gpu-h100-run8",
        &[
            ("proof30-24", true, true),
            ("proof35-24", true, false),
            ("proof30-16", true, true),
            ("proof35-16", true, true),
        ],
    );
}

/// The seventh (run 9, two leases of a slower host: its tunes measured 80-84 GB/s of host read
/// bandwidth, runs 5-8's 106-126), predicted with the constants its plans were written with
/// (`PLANNED_WITH_RUN9`: the prefill's fixed cost split). 24 GiB: 9 of 10 groups within the stated error
/// in generation and every one in prompt; the one beyond twice the stated error is the 35B at
/// q8_0 KV, launched once (157 tok/s against the f16 twin's 197 over 6 launches; predicted
/// 200). 16 GiB, where the CPU's experts set the speed: every placed config measured below its
/// predicted generation, most beyond the stated error, as on run 6's lease; the configs
/// launched once early in the tune ran slowest (the 35B's race winner: +8 % over 10 launches,
/// its single-launch neighbours +19 % to +36 %). The test asserts that reading, so a refit or
/// a changed file shows here.
#[test]
fn the_seventh_pre_registered_run_is_predicted_on_24_gib_and_missed_on_16_gib() {
    let (big, small) = groups_by_card("gpu-h100-run9", 8, 10);
    let Counted { etg, epp, wtg, wpp } = counted("run 9, 24 GiB", &big, &PLANNED_WITH_RUN9);
    assert!(wtg as f64 >= 0.8 * etg.len() as f64);
    assert_eq!(wpp, epp.len());
    let beyond = the_single_launch_beyond_twice(&big, &etg, &PLANNED_WITH_RUN9);
    assert!(
        beyond.g.shape == "qwen3.5-35b-a3b"
            && beyond.g.cfg.cache_type_k == qtune::config::KvType::Q8_0,
        "{:?}",
        beyond.g.cfg
    );
    assert_a_slow_lease(
        "run 9, 16 GiB",
        &report("run 9, 16 GiB", &small, &PLANNED_WITH_RUN9).0,
        &PLANNED_WITH_RUN9,
    );
}

/// The eighth (run 10, H100, on a later machine after the first was lost mid-run; the same
/// constants as run 9, `PLANNED_WITH_RUN9`). 24 GiB: every group within the stated error, both
/// speeds. 16 GiB, where the CPU's experts take half of each token: every placed config
/// measured below its predicted generation again (as on runs 6 and 9's leases, not on runs 7
/// and 8's), by +5 % to +25 %, 10 of 14 groups within the stated error; prompt 12 of 14
/// within. The host's read bandwidth measured 85-112 GB/s over the lease's tunes. The test
/// asserts that reading, so a refit or a changed file shows here.
#[test]
fn the_eighth_pre_registered_run_is_predicted_on_24_gib_and_over_predicted_on_16_gib() {
    let (big, small) = groups_by_card("gpu-h100-run10", 8, 10);
    assert_run_within_the_stated_error("run 10, 24 GiB", &big, &PLANNED_WITH_RUN9);
    let Counted { etg, epp, wpp, .. } = counted("run 10, 16 GiB", &small, &PLANNED_WITH_RUN9);
    assert_a_slow_lease("run 10, 16 GiB", &etg, &PLANNED_WITH_RUN9);
    assert!(
        wpp as f64 >= 0.8 * epp.len() as f64,
        "pp {wpp} of {}",
        epp.len()
    );
    assert!(etg
        .iter()
        .all(|e| e.abs() <= 2.0 * PLANNED_WITH_RUN9.tg_rel_err));
    assert!(epp
        .iter()
        .all(|e| e.abs() <= 2.0 * PLANNED_WITH_RUN9.pp_rel_err));
}

/// The same for run 9 (the seventh pre-registered run, plans from the split prefill cost):
/// three of four meet every goal, the 35B on 16 GiB included (tg +6.6 %, pp -20.2 %, from the
/// 24 GiB profile -3.9 %, winner at launch #3). The 30B on 16 GiB misses both no-profile goals
/// by under a point: tg +15.6 %, pp +25.9 % against fit's candidate (79.1 tok/s, the median of
/// 15 samples on a lease whose paired noise was 11.8 %; the plan's own config ran once, at 76.6);
/// from the 24 GiB profile -9.3 %; winner at launch #10.
#[test]
fn run_9s_plans_against_the_tuned_winners() {
    plans_against_the_tuned_winners(
        "gpu-h100-run9",
        &[
            ("proof30-24", true, true),
            ("proof35-24", true, true),
            ("proof30-16", false, false),
            ("proof35-16", true, true),
        ],
    );
}

/// The same for run 10 (the eighth pre-registered run, the same constants): generation from
/// the model alone within 15 % in all four cases for the first time in one run (+1.5 %, +6.6 %,
/// +13.9 %, +6.2 %), from the 24 GiB profile within 10 % in both 16 GiB cases (-5.3 %, -7.6 %),
/// winners at launches #3, #3, #3 and #10. Prompt misses on both 16 GiB cases: the 30B's winner
/// (the plan's placement with `gate` for `down` at the split block, 84.8 / 6,412 over 6
/// launches) +25.5 %; the 35B's, fit's candidate (99.7 / 4,846), +30.3 % against the plan's
/// `--n-cpu-moe 13 -ub 512` f16 (6,316).
#[test]
fn run_10s_plans_against_the_tuned_winners() {
    plans_against_the_tuned_winners(
        "gpu-h100-run10",
        &[
            ("proof30-24", true, true),
            ("proof35-24", true, true),
            ("proof30-16", true, false),
            ("proof35-16", true, false),
        ],
    );
}

/// One run's table: for each `(case, tg_meets, pp_meets)`, the plan's tg within 15 % of the
/// winner's exactly when `tg_meets`, its pp within 25 % exactly when `pp_meets`, the winner
/// first launched by #12, and on 16 GiB the plan from the 24 GiB profile within 10 % in tg.
/// A committed JSON file (a plan, a tune's results).
fn read_json(p: std::path::PathBuf) -> serde_json::Value {
    evidence::json(p)
}

fn plans_against_the_tuned_winners(run: &str, cases: &[(&str, bool, bool)]) {
    let root = evidence::path(run);
    // The plans are named after the gpu-proof case: `proofNN-GG-tune-plan.json` or
    // `proofNN-GG-plan.json`.
    let plan_file = |dir: &Path, suffix: &str| -> Option<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.to_string_lossy().ends_with(suffix))
    };
    let err = |pred: f64, measured: f64| (pred / measured - 1.0) * 100.0;
    println!("{run}: case | plan tg / pp | winner tg / pp | errors tg / pp | from-24 tg | winner's first launch");
    for &(case, tg_meets, pp_meets) in cases {
        let dir = root.join(case);
        let r = read_json(dir.join("results.json"));
        let w = &r["winner"];
        let (tg, pp) = (
            w["gen_tps"]["median"].as_f64().unwrap(),
            w["prompt_tps"]["median"].as_f64().unwrap(),
        );
        let first = r["trials"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["config"] == w["config"])
            .and_then(|t| t["id"].as_u64())
            .unwrap();
        let plan =
            read_json(plan_file(&dir, "-plan.json").expect("a plan written before the tune"));
        let s = &plan["speed"]["prediction"];
        let (ptg, ppp) = (
            s["tg"]["tps"].as_f64().unwrap(),
            s["pp"]["tps"].as_f64().unwrap(),
        );
        let (etg, epp) = (err(ptg, tg), err(ppp, pp));
        let etg_other = plan_file(&dir, "-plan-from-24.json").map(|from| {
            err(
                read_json(from)["speed"]["prediction"]["tg"]["tps"]
                    .as_f64()
                    .unwrap(),
                tg,
            )
        });
        println!(
            "{case} | {ptg:6.1} / {ppp:6.0} | {tg:6.1} / {pp:6.0} | {etg:+5.1} % / {epp:+6.1} % | {} | #{first}",
            etg_other.map_or("-".into(), |e| format!("{e:+.1} %"))
        );
        assert!(
            first <= 12,
            "{case}: the winner first ran at launch {first}"
        );
        assert_eq!(etg.abs() <= 15.0, tg_meets, "{case}: tg {etg:+.1} %");
        assert_eq!(epp.abs() <= 25.0, pp_meets, "{case}: pp {epp:+.1} %");
        if case.ends_with("-16") {
            let e = etg_other.expect("a plan from the 24 GiB profile");
            assert!(e.abs() <= 10.0, "{case}: from the other card {e:+.1} %");
        }
    }
}

fn gpu_machine(name: &str, free_mib: u64) -> qtune::hardware::HardwareProfile {
    use qtune::hardware::{GpuInfo, HardwareProfile, HostInfo, PcieLink};
    HardwareProfile {
        gpus: vec![GpuInfo {
            index: 0,
            name: name.into(),
            uuid: "GPU-0".into(),
            vram_total_mib: 81_559,
            vram_free_mib: free_mib,
            vram_used_mib: 81_559 - free_mib,
            pcie: PcieLink {
                gen_current: Some(5),
                gen_max: Some(5),
                width_current: Some(16),
                width_max: Some(16),
            },
            compute_capability: Some((9, 0)),
            processes: Vec::new(),
            mem_bandwidth_gbs: None,
        }],
        no_gpu_reason: None,
        driver_version: None,
        cuda_version: None,
        host: HostInfo {
            cpu_model: "Intel(R) Xeon(R) Processor".into(),
            physical_cores: Some(16),
            logical_cores: 16,
            ram_total_mib: 128_887,
            ram_available_mib: 120_000,
            os: "test".into(),
            mem_bandwidth_gbs: Some(100.0),
            mem_bandwidth_by_threads: Vec::new(),
        },
        fingerprint: "0123456789abcdef".into(),
    }
}

/// What `qtune plan` predicts on the GPU machine (H100, 16 and 24 GiB free, both shapes), next
/// to the committed measurements of the same config where there are some: each within twice
/// the stated error (the plan's config may have few or no committed launches).
#[test]
fn plan_on_the_gpu_machine_predicts_near_committed_runs() {
    let gs = groups();
    for shape in ["qwen3.5-35b-a3b", "qwen3-30b-a3b"] {
        let l = layout_of_cached(shape);
        for gib in [16u64, 24] {
            let hw = gpu_machine("NVIDIA H100 80GB HBM3", gib * 1024);
            let plan = qtune::profile::plan(&l, &hw, None, 32768, 512);
            let sp = plan.speed.as_ref().expect("a speed prediction");
            let p = &sp.prediction;
            println!(
                "plan {shape} {gib} GiB: {} -> tg {} pp {} ({})",
                plan.config.label(),
                p.tg.text(),
                p.pp.text(),
                plan.speed_note
            );
            for g in gs.iter().filter(|g| {
                g.shape == shape
                    && g.card_gib as u64 == gib
                    && g.cfg.n_cpu_moe == plan.config.n_cpu_moe
                    && g.cfg.ubatch == plan.config.ubatch
            }) {
                println!(
                    "  measured {} {} load={} kv={} (n={}): tg {:.0}, pp {:.0}",
                    g.gpu,
                    g.card_gib,
                    g.cfg.load_mode.as_str(),
                    g.cfg.cache_type_k,
                    g.n,
                    g.tg,
                    g.pp
                );
            }
            assert!(p.tg.low < p.tg.tps && p.tg.tps < p.tg.high);
        }
    }
}

/// `qtune plan` with another box's profile: that box's measured winner scaled by the model's
/// ratio (this config here over the winner's config there). Replayed for every pair of
/// committed boxes running the same shape (other card size, other GPU): the source's
/// most-launched config stands for its winner, every target group of 2+ launches is predicted.
/// The scaled prediction is held to the same stated error as the model alone, with the same
/// allowance as the held-out replay (85 % of pairs within it; 90 % were on the committed runs).
/// The model-alone errors printed beside it are in-sample (FITTED saw these groups).
#[test]
fn another_boxs_measured_winner_scaled_by_the_model() {
    let ps = prepare(&groups());
    let boxes: std::collections::BTreeSet<(String, u32, String)> = ps
        .iter()
        .map(|p| (p.g.gpu.clone(), p.g.card_gib, p.g.shape.clone()))
        .collect();
    let (mut scaled_err, mut model_err) = (Vec::new(), Vec::new());
    for src in &boxes {
        let of = |b: &(String, u32, String)| -> Vec<&Prepared> {
            ps.iter()
                .filter(|p| (p.g.gpu.clone(), p.g.card_gib, p.g.shape.clone()) == *b)
                .collect()
        };
        let Some(win) = of(src).into_iter().max_by_key(|p| p.g.n) else {
            continue;
        };
        let (wtg, _) = predict(win, &FITTED);
        for dst in boxes.iter().filter(|d| *d != src && d.2 == src.2) {
            for t in of(dst).into_iter().filter(|p| p.g.n >= 2) {
                let (ttg, _) = predict(t, &FITTED);
                let scaled = ttg * win.g.tg / wtg;
                let (e, m) = (scaled / t.g.tg - 1.0, ttg / t.g.tg - 1.0);
                println!(
                    "profile {} {}G -> {} {}G {} ncmoe={:?} ub={:?} load={}: scaled {scaled:.0}, model {ttg:.0}, measured {:.0} ({:+.0} % scaled, {:+.0} % model)",
                    src.0.replace("NVIDIA ", ""), src.1, dst.0.replace("NVIDIA ", ""), dst.1, dst.2,
                    t.g.cfg.n_cpu_moe, t.g.cfg.ubatch, t.g.cfg.load_mode.as_str(), t.g.tg, e * 100.0, m * 100.0
                );
                scaled_err.push(e.abs());
                model_err.push(m.abs());
            }
        }
    }
    assert!(scaled_err.len() >= 10, "{} pairs", scaled_err.len());
    let within = |v: &[f64], x: f64| v.iter().filter(|&&e| e <= x).count() as f64 / v.len() as f64;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "{} pairs: scaled mean |err| {:.1} %, {:.0} % within +-10 %, {:.0} % within the stated +-{:.0} %; model alone mean |err| {:.1} %",
        scaled_err.len(),
        mean(&scaled_err) * 100.0,
        within(&scaled_err, 0.10) * 100.0,
        within(&scaled_err, FITTED.tg_rel_err) * 100.0,
        FITTED.tg_rel_err * 100.0,
        mean(&model_err) * 100.0
    );
    assert!(within(&scaled_err, FITTED.tg_rel_err) >= 0.85);
    assert!(scaled_err.iter().all(|&e| e <= 2.0 * FITTED.tg_rel_err));
}

fn default_cfg(ctx: u32) -> LaunchConfig {
    LaunchConfig::baseline(ctx)
}

/// Issue 14: the server's default (no flags), which a tune keeps when nothing is proven faster,
/// predicted from the placement its own fit is expected to choose
/// (`server_default_stand_in`: the last blocks' experts on the CPU, filled to the free VRAM
/// less fit's 1 GiB target, mmap'd, f16 KV, `-ub 512`), against every committed single-GPU
/// run's default launches (baseline and race rounds), grouped by (GPU, card, shape). The
/// constants were fitted on the placed configs only: these launches were never in the fit.
#[test]
fn the_server_default_is_predicted_from_the_placement_its_fit_is_expected_to_choose() {
    let files = evidence::journals("");
    type Acc = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, u32);
    let mut by: BTreeMap<(String, u32, String), Acc> = BTreeMap::new();
    for f in files {
        let dir = f.parent().unwrap();
        let Some(RunBox {
            gpu,
            card_gib,
            shape,
            host_bw,
        }) = run_box(dir)
        else {
            continue;
        };
        let Some(meta) = evidence::try_read(dir.join("run.json")) else {
            continue; // a compare: no hardware record of the free VRAM
        };
        let meta: serde_json::Value = serde_json::from_str(&meta).unwrap();
        let Some(free) = meta["hardware"]["gpus"][0]["vram_free_mib"].as_f64() else {
            continue;
        };
        let ctx = meta["space"]["fixed"]["ctx"].as_u64().unwrap_or(32768) as u32;
        if meta["space"]["workload"]["prompt_tokens"].as_u64() != Some(2048) {
            continue;
        }
        let default = LaunchConfig::baseline(ctx);
        for (cfg, tg, pp) in measured(&f, &["ok"]) {
            if cfg != default {
                continue;
            }
            let e = by
                .entry((gpu.to_string(), card_gib, shape.to_string()))
                .or_insert_with(|| (Vec::new(), Vec::new(), Vec::new(), Vec::new(), ctx));
            e.0.push(tg);
            e.1.push(pp);
            e.2.push(host_bw);
            e.3.push(free);
        }
    }
    assert!(by.len() >= 4, "{} groups", by.len());
    let (mut etg, mut epp) = (Vec::new(), Vec::new());
    for ((gpu, card_gib, shape), (tg, pp, bw, free, ctx)) in by {
        let n = tg.len();
        let (tg, pp, bw, free) = (median(tg), median(pp), median(bw), median(free));
        let layout = layout_of_cached(&shape);
        let sb = SpeedBox {
            gpu_bw_gbs: speed::gpu_bandwidth_by_name(&gpu),
            pcie_gbs: Some(speed::pcie_gbs(5, 16)),
            host_bw_gbs: bw,
            physical_cores: 16,
            host_bw_share_by_threads: Vec::new(),
            sources: Vec::new(),
        };
        let (stand_in, p) = qtune::search::candidates::predict_server_default(
            &layout,
            &default_cfg(ctx),
            free,
            &sb,
            2048,
        )
        .expect("a placement and a prediction");
        assert!(
            (p.tg.low..=p.tg.high).contains(&tg),
            "{shape} {card_gib}G: tg {tg:.0} outside {}",
            p.tg.text()
        );
        assert!(
            (p.pp.low..=p.pp.high).contains(&pp),
            "{shape} {card_gib}G: pp {pp:.0} outside {}",
            p.pp.text()
        );
        let (a, b) = (p.tg.tps / tg - 1.0, p.pp.tps / pp - 1.0);
        println!(
            "default {} {card_gib}G {shape} (n={n}, free {free:.0} MiB, stand-in {}): tg {:.0} vs {tg:.0} ({:+.1} %), pp {:.0} vs {pp:.0} ({:+.1} %)",
            gpu.replace("NVIDIA ", ""),
            stand_in.cpu_experts.as_ref().map_or("all on the GPU".to_string(), |e| e.label()),
            p.tg.tps,
            a * 100.0,
            p.pp.tps,
            b * 100.0
        );
        etg.push(a);
        epp.push(b);
    }
    let worst = |v: &[f64]| v.iter().fold(0.0f64, |m, x| m.max(x.abs())) * 100.0;
    println!(
        "server default: tg worst {:.1} %, pp worst {:.1} % over {} groups (stated ±{:.0} % / ±{:.0} %)",
        worst(&etg),
        worst(&epp),
        etg.len(),
        FITTED.tg_rel_err * 100.0,
        FITTED.pp_rel_err * 100.0
    );
}

/// Since run 8 the prefill's fixed cost per block and micro-batch is split, attention against
/// recurrent (as decode's overhead is): one cost for both put the attention-only Qwen3-30B-A3B's
/// `-ub 512` prompt speed ~20 % low. The split's constants (`PLANNED_WITH_RUN9`) were refitted on
/// the same groups as before (none of issue 14's pre-registered runs), so runs 4-8 are held out
/// from both fits: the split must
/// predict their prompt speed no worse, pooled (groups within the stated error, median
/// error), and leave generation as it was.
#[test]
fn the_split_prefill_block_cost_predicts_the_pre_registered_runs_no_worse() {
    // Each run's groups on their own (a config measured on two leases is two groups).
    let ps: Vec<Prepared> = PRE_REGISTERED
        .iter()
        .flat_map(|run| prepare(&groups_where(|f| in_run(f, run))))
        .collect();
    assert!(ps.len() >= 100, "{} groups in runs 4-8", ps.len());
    let errs = |k: &SpeedConstants| -> (Vec<f64>, Vec<f64>) {
        ps.iter()
            .map(|p| {
                let (tg, pp) = predict(p, k);
                ((tg / p.g.tg - 1.0).abs(), (pp / p.g.pp - 1.0).abs())
            })
            .unzip()
    };
    let summary = |e: &[f64], stated: f64| {
        let mut v = e.to_vec();
        v.sort_by(f64::total_cmp);
        (count_within(&v, stated), v[v.len() / 2])
    };
    let (tg_then, pp_then) = errs(&PLANNED_WITH);
    let (tg_now, pp_now) = errs(&PLANNED_WITH_RUN9);
    let (within_then, median_then) = summary(&pp_then, PLANNED_WITH_RUN9.pp_rel_err);
    let (within_now, median_now) = summary(&pp_now, PLANNED_WITH_RUN9.pp_rel_err);
    println!(
        "runs 4-8, {} groups: pp within +-{:.0} %: {within_then} then, {within_now} now; median |pp error| {:.1} % then, {:.1} % now",
        ps.len(),
        PLANNED_WITH_RUN9.pp_rel_err * 100.0,
        median_then * 100.0,
        median_now * 100.0
    );
    assert!(within_now >= within_then && median_now <= median_then);
    let (tg_within_then, _) = summary(&tg_then, PLANNED_WITH_RUN9.tg_rel_err);
    let (tg_within_now, _) = summary(&tg_now, PLANNED_WITH_RUN9.tg_rel_err);
    assert_eq!(
        tg_within_now, tg_within_then,
        "generation is not the prefill's"
    );
}

/// After run 10, `FITTED` was refitted on every committed single-GPU run, issue 14's
/// pre-registered runs 4-10 included (until then each was held out and predicted with the
/// constants its plans were written with). The refit is judged as those runs were: each run
/// held out in turn, the constants refitted on every other run predict it. Pooled over the
/// seven runs, the held-out refits must predict prompt speed no worse than the constants the
/// runs were planned with (groups within the stated error, median error) and generation no
/// worse (groups within the stated error), and the Qwen3-30B-A3B's `-ot` placements (the last
/// blocks' experts on the CPU, whose synthetic touch had fallen to ~0 at the last block)
/// closer in prompt speed.
#[test]
fn refitting_with_each_pre_registered_run_held_out_predicts_it_no_worse() {
    let runs: Vec<(&str, SpeedConstants)> = PRE_REGISTERED
        .iter()
        .map(|r| (*r, PLANNED_WITH))
        .chain(
            PLANNED_WITH_RUN9_RUNS
                .iter()
                .map(|r| (*r, PLANNED_WITH_RUN9)),
        )
        .collect();
    // (|tg error|, |pp error|, a 30B -ot group) with the planned constants, then held out.
    let (mut planned, mut refit) = (Vec::new(), Vec::new());
    for (run, k_planned) in &runs {
        let k = fit(&prepare(&groups_where(|f| {
            !in_run(f, run) && !planned_with_fitted(f)
        })));
        for p in prepare(&groups_where(|f| in_run(f, run))) {
            let ot = p.g.shape == "qwen3-30b-a3b"
                && p.g.cfg.n_cpu_moe.is_none()
                && p.g.cfg.cpu_experts.is_some();
            for (out, k) in [(&mut planned, k_planned), (&mut refit, &k)] {
                let (tg, pp) = predict(&p, k);
                out.push((tg / p.g.tg - 1.0, pp / p.g.pp - 1.0, ot));
            }
        }
    }
    assert!(
        planned.len() >= 150,
        "{} groups in runs 4-10",
        planned.len()
    );
    let within = |v: &[(f64, f64, bool)], tg: bool, stated: f64| {
        v.iter()
            .filter(|e| (if tg { e.0 } else { e.1 }).abs() <= stated)
            .count()
    };
    let median_pp = |v: &[(f64, f64, bool)], only_ot: bool| {
        median(
            v.iter()
                .filter(|e| !only_ot || e.2)
                .map(|e| if only_ot { e.1 } else { e.1.abs() })
                .collect(),
        )
    };
    let (tg_then, tg_now) = (
        within(&planned, true, FITTED.tg_rel_err),
        within(&refit, true, FITTED.tg_rel_err),
    );
    let (pp_then, pp_now) = (
        within(&planned, false, FITTED.pp_rel_err),
        within(&refit, false, FITTED.pp_rel_err),
    );
    let (med_then, med_now) = (median_pp(&planned, false), median_pp(&refit, false));
    let (ot_then, ot_now) = (median_pp(&planned, true), median_pp(&refit, true));
    println!(
        "runs 4-10, {} groups, as planned -> each held out of a refit: tg within +-{:.0} % {tg_then} -> {tg_now}; pp within +-{:.0} % {pp_then} -> {pp_now}, median |pp error| {:.1} % -> {:.1} %; the 30B's -ot ({} groups) median pp error {:+.1} % -> {:+.1} %",
        planned.len(),
        FITTED.tg_rel_err * 100.0,
        FITTED.pp_rel_err * 100.0,
        med_then * 100.0,
        med_now * 100.0,
        planned.iter().filter(|e| e.2).count(),
        ot_then * 100.0,
        ot_now * 100.0
    );
    assert!(tg_now >= tg_then, "tg {tg_then} -> {tg_now}");
    assert!(pp_now >= pp_then && med_now <= med_then);
    assert!(ot_now.abs() < ot_then.abs());
}

/// The ninth (run 11, H100, the first planned with `FITTED` refitted after run 10). 24 GiB:
/// every group within the stated error in both speeds. 16 GiB: 10 of 14 groups within it in
/// generation (the four beyond, +14 % to +18 %, over-predicted: a slower lease than run 12's,
/// less so than runs 6, 9 and 10's) and 13 of 14 in prompt; none beyond twice it.
#[test]
fn the_ninth_pre_registered_run_is_predicted_with_the_refitted_constants() {
    let (big, small) = groups_by_card("gpu-h100-run11", 8, 10);
    let Counted { etg, epp, wtg, wpp } = counted("run 11, 24 GiB", &big, &FITTED);
    assert_eq!((wtg, wpp), (etg.len(), epp.len()));
    let Counted { etg, epp, wtg, wpp } = counted("run 11, 16 GiB", &small, &FITTED);
    assert!(
        wtg as f64 >= 0.7 * etg.len() as f64,
        "tg {wtg} of {}",
        etg.len()
    );
    assert!(
        wpp as f64 >= 0.9 * epp.len() as f64,
        "pp {wpp} of {}",
        epp.len()
    );
    assert!(etg.iter().all(|e| e.abs() <= 2.0 * FITTED.tg_rel_err));
    assert!(epp.iter().all(|e| e.abs() <= 2.0 * FITTED.pp_rel_err));
}

/// The tenth (run 12, H100, another lease, the same constants and binary): every group of
/// both cards within the stated error in both speeds (24 GiB: 10, 16 GiB: 14).
#[test]
fn the_tenth_pre_registered_run_is_predicted_within_the_stated_error_on_both_cards() {
    let (big, small) = groups_by_card("gpu-h100-run12", 8, 10);
    for (label, ps) in [("run 12, 24 GiB", &big), ("run 12, 16 GiB", &small)] {
        let Counted { etg, epp, wtg, wpp } = counted(label, ps, &FITTED);
        assert_eq!((wtg, wpp), (etg.len(), epp.len()), "{label}");
    }
}

/// Run 11's table (the refitted constants): generation from the model alone within 15 % in
/// all four cases (+3.1 %, +0.5 %, +12.4 %, +6.7 %), from the 24 GiB profile within 10 % in
/// both 16 GiB cases (-8.7 %, +8.5 %), winners first launched by #3. Prompt misses on both 35B
/// cases, where the tune kept the server's default: on 24 GiB the race took `-ub 256`
/// (fastest single launch) and could not separate it from the default (generation +2.2 %
/// [-3.9, +8.8]); on 16 GiB the tune's model pick raced at generation -7.2 % [-18.0, +4.9],
/// prompt +95.8 % [+68.9, +127.1] (5 rounds, paired σ 10.0 %), undecided. What the plans
/// rated first measured within the goals in the tunes: on 24 GiB the plan's own config, 195 /
/// 9,202 tok/s over 2 launches (planned 205 / 9,119); on 16 GiB the tune's model pick, the
/// plan's placement taken from the first blocks instead of the last (`--n-cpu-moe 12` plus
/// block 12's gate and down, the same count), 95 / 8,131 over 6 launches (planned 108 /
/// 8,356). The misses are the default's prompt speed (7,216 and 4,090), not the plans'.
#[test]
fn run_11s_plans_against_the_tuned_winners() {
    plans_against_the_tuned_winners(
        "gpu-h100-run11",
        &[
            ("proof30-24", true, true),
            ("proof35-24", true, false),
            ("proof30-16", true, true),
            ("proof35-16", true, false),
        ],
    );
}

/// Run 12's table (the same constants, the next lease): every goal met in all four cases, the
/// first run to do so. Generation from the model alone -4.9 %, -1.7 %, +11.0 %, -0.2 %; prompt
/// -10.3 %, +18.4 % (the 35B on 24 GiB kept the default again), +9.4 %, -0.7 %; from the 24 GiB
/// profile +5.2 % and +0.5 %; winners first launched at #3, #1, #3, #3.
#[test]
fn run_12s_plans_against_the_tuned_winners() {
    plans_against_the_tuned_winners(
        "gpu-h100-run12",
        &[
            ("proof30-24", true, true),
            ("proof35-24", true, true),
            ("proof30-16", true, true),
            ("proof35-16", true, true),
        ],
    );
}

/// Run 13's table (the same constants, a third lease): three of four cases meet every goal
/// (30B 24 GiB +0.9 % / -8.0 %, 30B 16 GiB +10.6 % / +9.6 %, 35B 16 GiB +1.9 % / -0.2 %, from
/// the 24 GiB profile -3.2 % and +3.2 %; winners first launched at #3, #1, #3, #6). The 35B on
/// 24 GiB kept the default again: its race had the plan's config at generation +3.7 % [-3.6,
/// +11.6], prompt +26.1 % [+9.1, +45.8] (4 rounds, paired σ 5.2 %), the prompt's lower end just
/// short of the 10 % an undecided race asks for, so prompt misses (+30.0 % against the
/// default's 7,013).
#[test]
fn run_13s_plans_against_the_tuned_winners() {
    plans_against_the_tuned_winners(
        "gpu-h100-run13",
        &[
            ("proof30-24", true, true),
            ("proof35-24", true, false),
            ("proof30-16", true, true),
            ("proof35-16", true, true),
        ],
    );
}

/// The eleventh (run 13): 24 GiB every group within the stated error in both speeds; 16 GiB
/// 10 of 14 in generation and 12 of 14 in prompt, none beyond twice the stated error (the
/// 35B's single launches of one stretch ran 15-24 % below their predictions).
#[test]
fn the_eleventh_pre_registered_run_is_predicted_with_the_refitted_constants() {
    let (big, small) = groups_by_card("gpu-h100-run13", 8, 10);
    let Counted { etg, epp, wtg, wpp } = counted("run 13, 24 GiB", &big, &FITTED);
    assert_eq!((wtg, wpp), (etg.len(), epp.len()));
    let Counted { etg, epp, wtg, wpp } = counted("run 13, 16 GiB", &small, &FITTED);
    assert!(
        wtg as f64 >= 0.7 * etg.len() as f64,
        "tg {wtg} of {}",
        etg.len()
    );
    assert!(
        wpp as f64 >= 0.8 * epp.len() as f64,
        "pp {wpp} of {}",
        epp.len()
    );
    assert!(etg.iter().all(|e| e.abs() <= 2.0 * FITTED.tg_rel_err));
    assert!(epp.iter().all(|e| e.abs() <= 2.0 * FITTED.pp_rel_err));
}

/// Each plan prints, before the tune, its own config's predicted speeds, those of every config
/// it compared, and the server default's. Read that way (the plan's line for the config the
/// tune recommended), runs 11-13 meet both no-profile goals in all twelve cases: where the tune
/// kept the default (four cases), the plan's line for the default (35B 24 GiB: predicted 205 /
/// 7,106 tok/s, measured 200.8-208.2 / 7,013-7,699); where it recommended a config the plan
/// printed (four), that line; where it recommended a variant the plan did not print (four:
/// the 30B's `gate` instead of `down` at the split block, the 35B's `--n-cpu-moe 12` plus block
/// 12's gate and down), the model's prediction with the plan's constants and the host
/// bandwidth the plan measured, which is not a line written before the run. The closest is the
/// default's prompt on the 35B 16 GiB card in run 11 (predicted 3,077, measured 4,090:
/// -24.8 %), whose memory-mapped deep blocks the model under-predicts.
#[test]
fn the_plans_line_for_each_tuned_winner_meets_both_goals_in_runs_11_to_13() {
    let mut n = 0;
    for run in ["gpu-h100-run11", "gpu-h100-run12", "gpu-h100-run13"] {
        for case in ["proof30-24", "proof35-24", "proof30-16", "proof35-16"] {
            let dir = evidence::path(run).join(case);
            let w = read_json(dir.join("results.json"))["winner"].clone();
            let cfg: LaunchConfig = serde_json::from_value(w["config"].clone()).unwrap();
            let plan = read_json(dir.join(format!("{case}-tune-plan.json")));
            let (line, tg_pred, pp_pred) = if cfg == LaunchConfig::baseline(32768) {
                let p = &plan["server_default"]["prediction"];
                (
                    "the default".to_string(),
                    p["tg"]["tps"].as_f64().unwrap(),
                    p["pp"]["tps"].as_f64().unwrap(),
                )
            } else if let Some(c) = plan["compared"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["config"] == cfg.label())
            {
                (
                    cfg.label(),
                    c["tg_tps"].as_f64().unwrap(),
                    c["pp_tps"].as_f64().unwrap(),
                )
            } else {
                // A variant the tune made (another projection at the split block): the model,
                // with the plan's constants and the box as the plan measured it.
                let note = plan["speed_note"].as_str().unwrap();
                let host: f64 = note
                    .split("host ")
                    .nth(1)
                    .and_then(|t| t.split(" GB/s").next())
                    .and_then(|t| t.parse().ok())
                    .expect("the plan's measured host bandwidth");
                let shape = if case.starts_with("proof30") {
                    "qwen3-30b-a3b"
                } else {
                    "qwen3.5-35b-a3b"
                };
                let sb = SpeedBox {
                    gpu_bw_gbs: speed::gpu_bandwidth_by_name("NVIDIA H100 80GB HBM3"),
                    pcie_gbs: Some(speed::pcie_gbs(5, 16)),
                    host_bw_gbs: host,
                    physical_cores: 16,
                    host_bw_share_by_threads: Vec::new(),
                    sources: Vec::new(),
                };
                let p = speed::predict(&layout_of_cached(shape), &cfg, &sb, true, 2048, &FITTED)
                    .unwrap();
                (
                    format!("{} (the model, not printed by the plan)", cfg.label()),
                    p.tg.tps,
                    p.pp.tps,
                )
            };
            let (tg, pp) = (
                w["gen_tps"]["median"].as_f64().unwrap(),
                w["prompt_tps"]["median"].as_f64().unwrap(),
            );
            let (etg, epp) = ((tg_pred / tg - 1.0) * 100.0, (pp_pred / pp - 1.0) * 100.0);
            println!(
                "{run} {case}: {line}: planned {tg_pred:.1} / {pp_pred:.0}, measured {tg:.1} / {pp:.0}: {etg:+.1} % / {epp:+.1} %"
            );
            assert!(etg.abs() <= 15.0 && epp.abs() <= 25.0, "{run} {case}");
            n += 1;
        }
    }
    assert_eq!(n, 12);
}
