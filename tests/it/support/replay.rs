//! The speed model against the GPU evidence (docs/evidence/, named by its manifest.json):
//! trials grouped by (GPU, card, shape, config), the least-squares fit of the model's constants,
//! and predictions against the groups. Shared by tests/it/speed_replay.rs and
//! `cargo run --example refit` (which prints the refit), so it reaches the evidence reader as
//! `crate::support::evidence`.
//!
//! A group's measurement is the median of its trials' medians (launch-to-launch noise is
//! +-15 %, so single launches are not the unit). `--fit` placements are left out: their
//! placement is not known before the launch.
#![allow(dead_code)]

use crate::support::evidence;
use qtune::config::LaunchConfig;
use qtune::model::speed::{self, SpeedBox, SpeedConstants, TokenBytes, FITTED};
use qtune::model::synth::SynthFtype;
use qtune::model::ModelLayout;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

pub fn layout_of(shape: &str) -> ModelLayout {
    qtune::model::synth::shape_layout(shape, SynthFtype::Q4KM).unwrap()
}

/// One (GPU, card, shape, config) group of committed trials.
#[derive(Debug, Clone)]
pub struct Group {
    pub gpu: String,
    pub card_gib: u32,
    pub shape: String,
    pub cfg: LaunchConfig,
    pub host_bw: f64,
    pub prompt_tokens: u32,
    pub tg: f64,
    pub pp: f64,
    pub n: usize,
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// docs/evidence/manifest.json: the runs, and the constants older plans were written with.
#[derive(Debug, Deserialize)]
pub struct Manifest {
    pub runs: Vec<Run>,
    /// Constant sets by name (`planned_with`); "fitted" is [`FITTED`] itself.
    pub constants: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub struct Run {
    pub id: String,
    pub folder: String,
    pub speed_model: SpeedRole,
}

/// How the speed model's replay uses a run (see the manifest's `about`).
#[derive(Debug, Deserialize)]
pub struct SpeedRole {
    /// fit, held-out, pre-registered, planned-with-fitted or none.
    pub role: String,
    #[serde(default)]
    pub planned_with: Option<String>,
    #[serde(default)]
    pub checks: Vec<Check>,
    #[serde(default)]
    pub plans: Vec<PlanGoal>,
    #[serde(default)]
    pub plan_lines_meet_both_goals: bool,
    #[serde(default)]
    pub reading: String,
}

/// What a run's predictions read, on one emulated card (or the whole run): fractions of its
/// config groups within the stated error, and the shape of its misses.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Check {
    pub card_gib: Option<u32>,
    pub min_groups: usize,
    pub tg_within_at_least: Option<f64>,
    pub pp_within_at_least: Option<f64>,
    /// A slow lease: fewer than this fraction within the stated generation error...
    pub tg_within_below: Option<f64>,
    /// ...and every group measured below its predicted generation.
    #[serde(default)]
    pub tg_all_over_predicted: bool,
    #[serde(default)]
    pub tg_worst_within_twice: bool,
    #[serde(default)]
    pub pp_worst_within_twice: bool,
    /// Exactly one group beyond twice the stated generation error, launched once, this one.
    pub tg_single_launch_beyond_twice: Option<Outlier>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outlier {
    pub shape: String,
    pub cpu_experts: Option<String>,
    pub cache_type_k: Option<String>,
}

/// One case of a run's plans against its tuned winner: the plan's generation within 15 % of
/// the winner's exactly when `tg_meets`, its prompt within 25 % exactly when `pp_meets`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanGoal {
    pub case: String,
    pub tg_meets: bool,
    pub pp_meets: bool,
}

pub fn manifest() -> Manifest {
    serde_json::from_value(evidence::json("manifest.json")).expect("docs/evidence/manifest.json")
}

impl Manifest {
    /// The constants named `name` ("fitted": [`FITTED`]).
    pub fn constants(&self, name: &str) -> SpeedConstants {
        if name == "fitted" {
            return FITTED;
        }
        let v = self
            .constants
            .get(name)
            .unwrap_or_else(|| panic!("no constants {name:?} in the manifest"));
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove("about");
        serde_json::from_value(v).unwrap_or_else(|e| panic!("constants {name}: {e}"))
    }

    /// The runs of `role`, in the manifest's order.
    pub fn with_role<'a>(&'a self, role: &'a str) -> impl Iterator<Item = &'a Run> + 'a {
        self.runs.iter().filter(move |r| r.speed_model.role == role)
    }

    /// The ids of the runs of `role`.
    pub fn ids(&self, role: &str) -> Vec<String> {
        self.with_role(role).map(|r| r.id.clone()).collect()
    }

    /// The single-GPU groups `FITTED` is fitted on: every run but those planned with it (and
    /// the `not-fitted` ones, which [`groups_where`] never reads).
    pub fn fit_groups(&self) -> Vec<Group> {
        let out = self.ids("planned-with-fitted");
        groups_where(|f| !in_any(f, &out))
    }
}

/// True when `journal` lies in the folder of run `run`.
pub fn in_run(journal: &Path, run: &str) -> bool {
    journal.components().any(|c| c.as_os_str() == run)
}

/// True when `journal` lies in one of `runs`.
pub fn in_any(journal: &Path, runs: &[String]) -> bool {
    runs.iter().any(|r| in_run(journal, r))
}

/// Where a committed run directory ran: one GPU (which), the emulated card, the model's shape
/// and the host's measured read bandwidth. None for two cards (layer split and pipeline
/// parallelism, not this model's box) or a run with no card size recorded.
pub struct RunBox {
    pub gpu: &'static str,
    pub card_gib: u32,
    pub shape: &'static str,
    pub host_bw: f64,
}

pub fn run_box(dir: &Path) -> Option<RunBox> {
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
pub fn measured(journal: &Path, kinds: &[&str]) -> Vec<(LaunchConfig, f64, f64)> {
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

/// The config groups of the journals `keep` accepts, never those of a `not-fitted` run (a
/// demo of the tiny model on a whole card, a tune on a replayed trace: added after FITTED and
/// kept out of every fit).
pub fn groups_where(keep: impl Fn(&Path) -> bool) -> Vec<Group> {
    let never = manifest().ids("not-fitted");
    let mut files = evidence::journals("");
    files.retain(|f| keep(f) && !in_any(f, &never));
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

pub fn speed_box(g: &Group) -> SpeedBox {
    SpeedBox {
        gpu_bw_gbs: speed::gpu_bandwidth_by_name(&g.gpu),
        pcie_gbs: Some(speed::pcie_gbs(5, 16)),
        host_bw_gbs: g.host_bw,
        physical_cores: 16,
        host_bw_share_by_threads: Vec::new(),
        sources: Vec::new(),
        rpc_links: Vec::new(),
    }
}

/// Least squares: minimise |A x - b|^2 (normal equations, Gaussian elimination).
#[allow(clippy::needless_range_loop)]
pub fn lstsq(a: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
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
pub struct Prepared {
    pub g: Group,
    pub tb: TokenBytes,
    pub sb: SpeedBox,
    pub ub: u32,
    pub n_ub: u32,
    /// A synthetic model that copies `synthetic_touch_qwen35moe` of its CPU experts (not
    /// `qwen3moe`: see `speed::synthetic_touch`).
    pub synthetic35: bool,
    /// A synthetic model (its copy share is fitted; a real model copies all its CPU experts).
    pub synthetic: bool,
    /// Each CPU block's expert bytes and depth (`speed::depth_share`): with depth^power as
    /// `y`, the copy is `touch_first * sum b (1 - y) + touch_last * sum b y` (before clamping).
    pub depth_bytes: Vec<(f64, f64)>,
}

pub fn prepare(gs: &[Group]) -> Vec<Prepared> {
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
pub const PINNED_FRACTION: f64 = 47.0 / 63.0;

/// The powers of depth the synthetic models' touch may follow (grid search, per architecture).
pub const TOUCH_POWERS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0];

pub fn sse(a: &[Vec<f64>], b: &[f64], x: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(r, y)| (r.iter().zip(x).map(|(u, v)| u * v).sum::<f64>() - y).powi(2))
        .sum()
}

/// Fit the constants on `ps` (relative least squares; the thread exponent and the
/// pinned/pageable copy-rate ratio by grid search).
pub fn fit(ps: &[Prepared]) -> SpeedConstants {
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

pub fn predict(p: &Prepared, k: &SpeedConstants) -> (f64, f64) {
    let l = layout_of_cached(&p.g.shape);
    let s = speed::predict(&l, &p.g.cfg, &p.sb, true, p.g.prompt_tokens, k).unwrap();
    (s.tg.tps, s.pp.tps)
}

pub fn layout_of_cached(shape: &str) -> ModelLayout {
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<BTreeMap<String, ModelLayout>>> = OnceLock::new();
    let m = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut g = m.lock().unwrap();
    g.entry(shape.to_string())
        .or_insert_with(|| layout_of(shape))
        .clone()
}

/// Relative errors (pred/meas - 1) of tg and pp for `ps`, printed.
pub fn report(label: &str, ps: &[Prepared], k: &SpeedConstants) -> (Vec<f64>, Vec<f64>) {
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

pub fn print_constants(k: &SpeedConstants) {
    println!("fitted: {k:#?}");
}
