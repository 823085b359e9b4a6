//! Shared by the profile tests: a hand-made tune result, written as
//! `results.json`, and a runner for the real binary. Hand-made values are fine here: these tests
//! are about the data format, not about measurements.
#![allow(dead_code)]

use qtune::run::TuneResult;
use serde_json::json;
use std::path::Path;
use std::process::{Command, Output};

fn stat(samples: &[f64]) -> serde_json::Value {
    serde_json::to_value(qtune::trial::Stat::from_samples(samples).unwrap()).unwrap()
}

fn config(ncmoe: Option<u32>, threads: Option<u32>, kv: &str) -> serde_json::Value {
    json!({
        "ctx": 8192, "parallel": 1, "n_gpu_layers": ncmoe.map(|_| 999), "n_cpu_moe": ncmoe,
        "threads": threads, "batch": 2048, "ubatch": 512,
        "cache_type_k": kv, "cache_type_v": kv, "flash_attn": "on", "mmap": true, "fit": null
    })
}

fn trial(id: u32, cfg: serde_json::Value, kind: &str, tg: &[f64], peak: u64) -> serde_json::Value {
    let metrics = if tg.is_empty() {
        serde_json::Value::Null
    } else {
        json!({
            "gen_tps": stat(tg),
            "prompt_tps": stat(&tg.iter().map(|v| v * 20.0).collect::<Vec<_>>()),
            "ttft_ms": stat(&[120.0, 125.0])
        })
    };
    json!({
        "id": id, "role": "search", "config": cfg, "kind": kind, "metrics": metrics,
        "peak_vram_mib": [peak], "message": "hand-made", "evidence": [],
        "started_at": "2026-11-22T16:00:00Z", "duration_s": 12.5,
        "log": "/home/alice/secret/trial.log", "warnings": []
    })
}

/// A tune of a fake MoE model on a fake 16 GiB card.
pub fn tune_result_json() -> serde_json::Value {
    let winner_cfg = config(Some(20), Some(8), "q8_0");
    json!({
        "qtune_version": "0.1.0",
        "server_path": "/home/alice/llama.cpp/build/bin/llama-server",
        "server_version": "version: 11434 (abc1234)",
        "started_at": "2026-11-22T16:00:00Z",
        "finished_at": "2026-11-22T16:20:00Z",
        "hardware": {
            "gpus": [{
                "index": 0, "name": "NVIDIA GeForce RTX 4080", "uuid": "GPU-1234",
                "vram_total_mib": 16376, "vram_free_mib": 15800, "vram_used_mib": 576,
                "pcie": {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16},
                "compute_capability": [8, 9], "processes": []
            }],
            "no_gpu_reason": null, "driver_version": "570.86", "cuda_version": "12.8",
            "host": {
                "cpu_model": "AMD Ryzen 7 7700X 8-Core Processor", "physical_cores": 8,
                "logical_cores": 16, "ram_total_mib": 64000, "ram_available_mib": 60000,
                "os": "Ubuntu 24.04", "mem_bandwidth_gbs": 61.0
            },
            "fingerprint": "0123456789abcdef"
        },
        "free_vram_at_start_mib": 15800,
        "headroom_mib": 512,
        "vram_budget_mib": 15288,
        "model_path": "/home/alice/models/secret-model.gguf",
        "model": {
            "arch": "qwen35moe", "name": "Qwen3.5-35B-A3B", "file_type": "Q4_K_M",
            "file_bytes": 21_000_000_000u64, "n_blocks": 40, "n_experts": 256, "n_experts_used": 8,
            "n_embd": 2048, "n_head": 16, "n_head_kv": 2, "head_dim_k": 256, "head_dim_v": 256,
            "n_vocab": 248320, "ctx_train": 262144,
            "kv_blocks": [], "recurrent_state_bytes": [], "blocks": [],
            "token_embd_bytes": 500_000_000u64, "output_bytes": 500_000_000u64, "other_bytes": 1000,
            "bytes_by_type": {"Q4_K": 18_000_000_000u64, "Q6_K": 2_000_000_000u64, "F32": 1_000_000u64},
            "tensor_bytes": 20_900_000_000u64,
            "fingerprint": "fedcba9876543210"
        },
        "space": {
            "name": "default",
            "vary": {},
            "fixed": {"ctx": 8192},
            "workload": {"prompt_tokens": 512, "gen_tokens": 128, "repetitions": 3}
        },
        "trials": [
            trial(1, config(None, None, "f16"), "ok", &[30.0, 31.0, 29.5], 15000),
            trial(2, config(Some(10), Some(8), "q8_0"), "oom-runtime", &[], 15700),
            trial(3, winner_cfg.clone(), "ok", &[40.0, 41.0, 39.0], 14000),
            trial(4, config(Some(30), Some(8), "q8_0"), "ok", &[33.0, 34.0, 33.5], 9000),
            trial(5, config(Some(25), Some(6), "q8_0"), "ok", &[32.0, 32.5, 31.0], 11000),
            trial(6, config(Some(0), Some(8), "f16"), "skipped", &[], 0)
        ],
        "confirmation": [],
        "winner": {
            "config": winner_cfg,
            "gen_tps": stat(&[40.0, 41.0, 39.0]),
            "prompt_tps": stat(&[800.0, 820.0, 780.0]),
            "peak_vram_mib": 14000,
            "gen_gain_pct": 31.1,
            "prompt_gain_pct": 5.0,
            "command": ["/home/alice/llama.cpp/build/bin/llama-server", "-m", "/home/alice/models/secret-model.gguf"]
        },
        "warnings": [],
        "minutes_used": 20.0
    })
}

pub fn tune_result() -> TuneResult {
    serde_json::from_value(tune_result_json()).expect("hand-made TuneResult matches the contract")
}

/// Write `results.json` for [`tune_result`] into `dir`.
pub fn write_run_dir(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_vec_pretty(&tune_result()).unwrap(),
    )
    .unwrap();
}

/// Run the real qtune in `cwd`, with `cwd` as its data directory (profiles in `cwd/profiles`).
pub fn qtune(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(args)
        .current_dir(cwd)
        .env("QTUNE_DATA_DIR", cwd)
        .env("QTUNE_NO_GPU", "1")
        .output()
        .expect("run qtune")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
