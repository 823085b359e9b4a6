//! Hand-made [`TuneResult`]s for tests of the report, plots and launch script: a GPU tune of a
//! 48-block MoE on an emulated 16 GiB card (with every kind of failure), and a CPU-only tune of
//! a dense model. The numbers are invented; they only have to look like a real landscape.
//! [`committed`] reads a real one: a GPU tune committed under docs/evidence.

use crate::config::{KvType, LaunchConfig};
use crate::engine::LaunchArgs;
use crate::hardware::{GpuInfo, HardwareProfile, HostInfo, PcieLink};
use crate::model::ModelLayout;
use crate::objective::Objective;
use crate::run::{Confirmed, TuneResult, Winner};
use crate::space::{Budget, Fixed, SearchSpace, Threads, Vary, Workload};
use crate::trial::{Metrics, OutcomeKind, Stat, TrialOutcome, TrialRole};
use std::path::{Path, PathBuf};

/// A stat of three samples around `median` whose spread is `spread_pct`.
pub fn stat(median: f64, spread_pct: f64) -> Stat {
    let h = median * spread_pct / 200.0;
    Stat::from_samples(&[median - h, median, median + h]).expect("three samples")
}

fn metrics(tg: f64, pp: f64) -> Metrics {
    Metrics {
        drafts: None,
        gen_tps: stat(tg, 2.0),
        prompt_tps: stat(pp, 3.0),
        ttft_ms: stat(512.0 / pp * 1000.0, 3.0),
        gen_tps_at_depth: None,
        shapes: Vec::new(),
        request_s: crate::space::Workload::default().single_request_s(tg, pp),
        replay: None,
    }
}

fn trial(
    id: u32,
    role: TrialRole,
    config: LaunchConfig,
    kind: OutcomeKind,
    speeds: Option<(f64, f64)>,
    vram: Option<u64>,
    message: &str,
) -> TrialOutcome {
    TrialOutcome {
        id,
        role,
        config,
        kind,
        metrics: speeds.map(|(tg, pp)| metrics(tg, pp)),
        peak_vram_mib: vram.into_iter().collect(),
        reported: None,
        message: message.to_string(),
        evidence: Vec::new(),
        started_at: format!("2025-11-22T14:{:02}:00Z", id),
        duration_s: if kind == OutcomeKind::Skipped {
            0.0
        } else {
            40.0 + id as f64
        },
        log: Some(PathBuf::from(format!("logs/trial-{id:03}.log"))),
        warnings: Vec::new(),
        busy_box: None,
    }
}

fn space(name: &str, moe: bool) -> SearchSpace {
    SearchSpace {
        name: name.to_string(),
        description: "hand-made space for report tests".to_string(),
        vary: Vary {
            n_cpu_moe: if moe {
                Some(crate::space::NCpuMoe::Range { min: 0, max: 48 })
            } else {
                None
            },
            threads: vec![Threads::Count(1), Threads::Count(2)],
            batch_ubatch: vec![[2048, 512], [4096, 1024]],
            kv_types: vec![[KvType::F16, KvType::F16], [KvType::Q8_0, KvType::Q8_0]],
            flash_attn: vec![crate::config::FlashAttn::Auto],
            load_mode: None,
            placement: vec![crate::space::PlacementStyle::First],
            no_op_offload_max_ubatch: None,
            split_shift_pct: None,
            levers: Default::default(),
        },
        fixed: Fixed {
            ctx: 8192,
            parallel: 1,
            mmap: Some(true),
            fit_target_mib: None,
            threads_cap: None,
            engine: Default::default(),
            also_engines: Vec::new(),
            rpc_workers: Vec::new(),
        },
        workload: Workload::default(),
        objective: Objective::default(),
        budget: Budget::default(),
        quality: None,
    }
}

fn host() -> HostInfo {
    HostInfo {
        cpu_model: "AMD EPYC 9654 96-Core Processor".to_string(),
        physical_cores: Some(16),
        logical_cores: 16,
        ram_total_mib: 131_072,
        ram_available_mib: 120_000,
        os: "Ubuntu 22.04".to_string(),
        mem_bandwidth_gbs: Some(180.0),
        mem_bandwidth_by_threads: Vec::new(),
    }
}

fn layout(arch: &str, n_blocks: u32, n_experts: u32, file_bytes: u64) -> ModelLayout {
    let per_block = file_bytes / n_blocks as u64;
    ModelLayout {
        arch: arch.to_string(),
        name: Some(format!("Sample {arch}")),
        file_bytes,
        tensor_bytes: file_bytes,
        ..ModelLayout::uniform(n_blocks, n_experts, per_block * 9 / 10, per_block / 10)
    }
}

fn moe(n: u32) -> LaunchConfig {
    LaunchConfig {
        n_gpu_layers: Some(999),
        n_cpu_moe: Some(n),
        fit: Some(false),
        batch: Some(2048),
        ubatch: Some(512),
        ..LaunchConfig::baseline(8192)
    }
}

/// A sample tune's inputs: its server and model, space and box, with 1 GiB of headroom.
fn inputs(
    server: &Path,
    model: &Path,
    space: SearchSpace,
    hardware: HardwareProfile,
    started_at: &str,
) -> crate::run::RunInputs {
    crate::run::RunInputs {
        model_path: model.to_path_buf(),
        server_path: server.to_path_buf(),
        server_version: "version: 11434 (abcdef0)".to_string(),
        space,
        headroom_mib: 1_024,
        free_vram_at_start_mib: hardware.free_vram_mib(),
        vram_budget_mib: crate::run::box_vram_budget_mib(&hardware, 1_024),
        gpu_budgets: crate::run::gpu_budgets(&hardware, 1_024),
        hardware,
        started_at: started_at.to_string(),
        host: crate::run::DEFAULT_HOST.into(),
        port: crate::run::DEFAULT_PORT,
        quality: None,
        start: None,
        model_fingerprint: None,
        model_bytes: None,
        server_bytes: None,
        engine_servers: Vec::new(),
    }
}

/// A GPU tune on an H200 of which another process held all but 16 GiB (an emulated 16 GiB
/// card), with a winner, oom-load, oom-runtime, spill, skipped and bad-flag trials.
pub fn gpu_result(server: &Path, model: &Path) -> TuneResult {
    use OutcomeKind::*;
    use TrialRole::*;
    let t8 = LaunchConfig {
        threads: Some(8),
        ..moe(11)
    };
    let base = LaunchConfig::baseline(8192);
    let trials = vec![
        trial(
            1,
            Baseline,
            base.clone(),
            Ok,
            Some((18.2, 210.0)),
            Some(14_900),
            "ok",
        ),
        trial(
            2,
            Search,
            moe(24),
            Ok,
            Some((32.0, 260.0)),
            Some(10_450),
            "ok",
        ),
        trial(
            3,
            Search,
            moe(12),
            Ok,
            Some((38.4, 300.0)),
            Some(14_575),
            "ok",
        ),
        trial(
            4,
            Search,
            moe(6),
            OomLoad,
            None,
            None,
            "out of memory while loading: cudaMalloc failed to allocate 1,230 MiB on CUDA0",
        ),
        trial(
            5,
            Search,
            moe(9),
            Spill,
            Some((12.0, 150.0)),
            Some(15_800),
            "peak VRAM 15,800 MiB above the budget of 15,360 MiB",
        ),
        trial(
            6,
            Search,
            moe(11),
            Ok,
            Some((39.1, 305.0)),
            Some(14_920),
            "ok",
        ),
        trial(
            7,
            Search,
            t8.clone(),
            Ok,
            Some((40.2, 310.0)),
            Some(14_930),
            "ok",
        ),
        trial(
            8,
            Search,
            LaunchConfig {
                batch: Some(4096),
                ubatch: Some(1024),
                ..t8.clone()
            },
            OomRuntime,
            None,
            Some(15_500),
            "out of memory on the first request (compute buffer | 1,024 MiB)",
        ),
        trial(
            9,
            Search,
            LaunchConfig {
                cache_type_k: KvType::Q8_0,
                cache_type_v: KvType::Q8_0,
                ..t8.clone()
            },
            Ok,
            Some((40.0, 298.0)),
            Some(14_100),
            "ok",
        ),
        trial(
            10,
            Search,
            moe(0),
            Skipped,
            None,
            None,
            "predicted 18,700 MiB > budget 15,360 MiB: not launched",
        ),
        trial(
            11,
            Sweep,
            moe(36),
            Ok,
            Some((25.0, 220.0)),
            Some(6_325),
            "ok",
        ),
        trial(
            12,
            Sweep,
            moe(48),
            Ok,
            Some((17.5, 190.0)),
            Some(2_200),
            "ok",
        ),
        trial(
            13,
            Search,
            LaunchConfig {
                flash_attn: crate::config::FlashAttn::On,
                ..moe(30)
            },
            BadFlag,
            None,
            None,
            &format!(
                "llama-server rejected '{} on': error: invalid argument",
                crate::engine::Flag::FlashAttn
            ),
        ),
        trial(
            14,
            Confirm,
            t8.clone(),
            Ok,
            Some((40.1, 309.0)),
            Some(14_930),
            "ok",
        ),
        trial(
            15,
            Confirm,
            base.clone(),
            Ok,
            Some((18.3, 211.0)),
            Some(14_900),
            "ok",
        ),
        trial(
            16,
            Confirm,
            t8.clone(),
            Ok,
            Some((40.3, 311.0)),
            Some(14_935),
            "ok",
        ),
        trial(
            17,
            Confirm,
            base.clone(),
            Ok,
            Some((18.1, 209.0)),
            Some(14_905),
            "ok",
        ),
    ];
    let mut trials = trials;
    trials[4]
        .warnings
        .push("spread 14 % is too wide to rank it reliably".to_string());
    let (w_tg, w_pp) = (stat(40.2, 1.5), stat(310.0, 1.0));
    let (b_tg, b_pp) = (stat(18.2, 1.2), stat(210.0, 1.0));
    let confirmation = vec![
        Confirmed {
            config: t8.clone(),
            is_baseline: false,
            gen_tps: Some(w_tg.clone()),
            prompt_tps: Some(w_pp.clone()),
            peak_vram_mib: Some(14_935),
            trial_ids: vec![14, 16],
        },
        Confirmed {
            config: base.clone(),
            is_baseline: true,
            gen_tps: Some(b_tg.clone()),
            prompt_tps: Some(b_pp.clone()),
            peak_vram_mib: Some(14_905),
            trial_ids: vec![15, 17],
        },
    ];
    let model_pick = Some(t8.clone());
    let winner = Winner {
        gen_vs_baseline: None,
        prompt_vs_baseline: None,
        command: t8.command(server, model, "127.0.0.1", 8080),
        config: t8,
        gen_gain_pct: Some((w_tg.median / b_tg.median - 1.0) * 100.0),
        prompt_gain_pct: Some((w_pp.median / b_pp.median - 1.0) * 100.0),
        gen_tps: w_tg,
        prompt_tps: w_pp,
        peak_vram_mib: Some(14_935),
        reference: None,
        request_s: None,
        request_vs_baseline: None,
        status: None,
    };
    TuneResult {
        race: None,
        qtune_version: env!("CARGO_PKG_VERSION").to_string(),
        inputs: inputs(
            server,
            model,
            space("moe-gpu", true),
            HardwareProfile {
                gpus: vec![GpuInfo {
                    index: 0,
                    name: "NVIDIA H200".to_string(),
                    uuid: "GPU-00000000".to_string(),
                    vram_total_mib: 143_771,
                    vram_free_mib: 16_384,
                    vram_used_mib: 127_387,
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
                driver_version: Some("570.86.15".to_string()),
                cuda_version: Some("12.8".to_string()),
                host: host(),
                fingerprint: "hwfp".to_string(),
            },
            "2025-11-22T14:00:00Z",
        ),
        finished_at: "2025-11-22T14:25:00Z".to_string(),
        model: layout("qwen3moe", 48, 128, 18_556_000_000),
        trials,
        confirmation,
        winner: Some(winner),
        warnings: vec!["the baseline's auto-fit left 1,460 MiB of the budget unused".to_string()],
        minutes_used: 25.0,
        model_pick,
        workload_picks: Vec::new(),
        budget_stop: None,
    }
}

/// A CPU-only tune of a dense model: no GPU, no VRAM measured, a crash and a winner.
pub fn cpu_result(server: &Path, model: &Path) -> TuneResult {
    use OutcomeKind::*;
    use TrialRole::*;
    let base = LaunchConfig::baseline(2048);
    let t = |n: u32| LaunchConfig {
        threads: Some(n),
        ..LaunchConfig::baseline(2048)
    };
    let trials = vec![
        trial(
            1,
            Baseline,
            base.clone(),
            Ok,
            Some((60.0, 400.0)),
            None,
            "ok",
        ),
        trial(2, Search, t(1), Ok, Some((30.0, 180.0)), None, "ok"),
        trial(3, Search, t(2), Ok, Some((62.0, 390.0)), None, "ok"),
        trial(
            4,
            Search,
            LaunchConfig {
                batch: Some(512),
                ubatch: Some(1024),
                ..t(2)
            },
            Crash,
            None,
            None,
            "llama-server exited with status 134 before /health was ready",
        ),
        trial(5, Confirm, t(2), Ok, Some((61.5, 395.0)), None, "ok"),
        trial(
            6,
            Confirm,
            base.clone(),
            Ok,
            Some((59.0, 401.0)),
            None,
            "ok",
        ),
    ];
    let winner = Winner {
        gen_vs_baseline: None,
        prompt_vs_baseline: None,
        command: t(2).command(server, model, "127.0.0.1", 8080),
        config: t(2),
        gen_tps: stat(61.5, 2.0),
        prompt_tps: stat(395.0, 2.0),
        peak_vram_mib: None,
        gen_gain_pct: Some((61.5 / 59.0 - 1.0) * 100.0),
        prompt_gain_pct: Some((395.0 / 401.0 - 1.0) * 100.0),
        reference: None,
        request_s: None,
        request_vs_baseline: None,
        status: None,
    };
    TuneResult {
        inputs: inputs(
            server,
            model,
            space("cpu", false),
            HardwareProfile {
                gpus: Vec::new(),
                no_gpu_reason: Some("NVML not found (no NVIDIA driver)".to_string()),
                driver_version: None,
                cuda_version: None,
                host: host(),
                fingerprint: "hwfp-cpu".to_string(),
            },
            "2025-11-22T15:00:00Z",
        ),
        race: None,
        qtune_version: env!("CARGO_PKG_VERSION").to_string(),
        finished_at: "2025-11-22T15:04:00Z".to_string(),
        model: layout("llama", 30, 0, 91_000_000),
        trials,
        confirmation: vec![
            Confirmed {
                config: t(2),
                is_baseline: false,
                gen_tps: Some(stat(61.5, 2.0)),
                prompt_tps: Some(stat(395.0, 2.0)),
                peak_vram_mib: None,
                trial_ids: vec![5],
            },
            Confirmed {
                config: base,
                is_baseline: true,
                gen_tps: Some(stat(59.0, 2.0)),
                prompt_tps: Some(stat(401.0, 2.0)),
                peak_vram_mib: None,
                trial_ids: vec![6],
            },
        ],
        winner: Some(winner),
        warnings: Vec::new(),
        minutes_used: 4.0,
        model_pick: None,
        workload_picks: Vec::new(),
        budget_stop: None,
    }
}

/// A GPU tune's results.json committed under docs/evidence (gzipped), e.g.
/// `committed("gpu-h100-workload4/work30-24")`. Panics when it is missing or does not read: for
/// the library's unit tests (flate2 is a dev-dependency).
#[cfg(test)]
pub fn committed(run: &str) -> TuneResult {
    let gz = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/evidence")
        .join(run)
        .join("results.json.gz");
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap()),
        &mut text,
    )
    .unwrap();
    serde_json::from_str(&text).unwrap()
}
