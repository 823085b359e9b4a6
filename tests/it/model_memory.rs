//! Memory prediction against the real CPU llama-server's own report (`-lv 4` buffer lines):
//! SmolLM2 (dense) and the tiny synthetic MoE shapes, two contexts, two KV types.

use crate::support;
use qtune::engine::LaunchArgs;
use support::{free_port, health_ok, require};

use qtune::config::{KvType, LaunchConfig};
use qtune::model::{self, memory};
use qtune::trial::logparse;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server in its own process group, killed (group) on drop.
struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// POST /completion with n_predict 16; returns timings.predicted_n.
fn predicted_n(port: u16) -> i64 {
    // ignore_eos: a real model (SmolLM2) may otherwise stop before 16 tokens.
    let body = r#"{"prompt":"Hello there","n_predict":16,"ignore_eos":true,"temperature":0}"#;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "POST /completion HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let json = buf.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    let v: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("bad /completion reply ({e}): {buf}"));
    v["timings"]["predicted_n"].as_i64().unwrap_or(-1)
}

/// Start the server for `cfg`, wait until healthy, optionally generate 16 tokens, return its log.
fn run_server(bin: &Path, model: &Path, cfg: &LaunchConfig, log: &Path, generate: bool) -> String {
    use std::os::unix::process::CommandExt;
    let port = free_port();
    let argv = cfg.command(bin, model, "127.0.0.1", port);
    let logf = std::fs::File::create(log).unwrap();
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .args(["-lv", "4"])
        .stdin(Stdio::null())
        .stdout(logf.try_clone().unwrap())
        .stderr(logf)
        .process_group(0)
        .spawn()
        .expect("spawn llama-server");
    let mut server = Server { child };
    let t0 = Instant::now();
    loop {
        if health_ok(port) {
            break;
        }
        if let Ok(Some(st)) = server.child.try_wait() {
            panic!(
                "llama-server exited ({st}) for {}: {}",
                cfg.label(),
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "server never became healthy"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    if generate {
        assert_eq!(predicted_n(port), 16, "{}", model.display());
    }
    drop(server);
    std::fs::read_to_string(log).unwrap()
}

fn close(pred: f64, rep: f64, abs_mib: f64, rel: f64) -> bool {
    (pred - rep).abs() <= abs_mib.max(rel * rep)
}

#[test]
fn predictions_match_the_cpu_servers_report() {
    let Some(bin) = require::or_skip(require::server(), "the real llama-server") else {
        return;
    };
    let Some(smollm2) = support::smollm2() else {
        return;
    };
    let mut models = vec![smollm2];
    for s in ["tiny-qwen35moe", "tiny-qwen3moe"] {
        models.push(qtune::fixtures::tiny_moe(s).expect("tiny synthetic fixture"));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for m in &models {
        let layout = model::load(m).unwrap();
        for ctx in [1000u32, 4096] {
            for kv in [KvType::F16, KvType::Q8_0] {
                let cfg = LaunchConfig {
                    cache_type_k: kv,
                    cache_type_v: kv,
                    threads: Some(2),
                    ..LaunchConfig::baseline(ctx)
                };
                let generate = ctx == 4096 && kv == KvType::F16;
                let log = run_server(&bin, m, &cfg, &dir.path().join("server.log"), generate);
                if layout.is_moe() {
                    // The server read the expert and block counts we wrote.
                    assert!(log.contains(&format!("n_expert              = {}", layout.n_experts)));
                    assert!(log.contains(&format!("n_layer               = {}", layout.n_blocks)));
                }
                let rep = logparse::parse_reported_memory(&log);
                let p = memory::predict(&layout, &cfg, false);
                let b = &p.breakdown;
                let rep_model = rep.model_mib.get("CPU_Mapped").copied().unwrap_or(0.0)
                    + rep.model_mib.get("CPU").copied().unwrap_or(0.0);
                let rep_repack = rep.model_mib.get("CPU_REPACK").copied().unwrap_or(0.0);
                let rep_kv: f64 = rep.kv_mib.values().sum();
                let rep_rs: f64 = rep.recurrent_mib.values().sum();
                let rep_compute: f64 = rep.compute_mib.values().sum();
                let rep_host = logparse::host_total_mib(&rep);
                let name = m.file_name().unwrap().to_string_lossy();
                println!(
                    "{name} ctx={ctx} kv={kv}: model {:.2}/{:.2} repack {:.2}/{:.2} kv {:.2}/{:.2} rs {:.2}/{:.2} compute+out {:.2}/{:.2} host {:.2}/{:.2} (predicted/reported MiB)",
                    b.weights_host_mib(), rep_model,
                    b.repack_host_mib(), rep_repack,
                    b.kv_host_mib, rep_kv,
                    b.recurrent_host_mib, rep_rs,
                    b.compute_host_mib + b.output_host_mib, rep_compute,
                    p.host_mib, rep_host
                );
                assert!(rep_model > 0.0, "no model buffer parsed from the log");
                // Weights: the mapped buffer spans the tensor data (plus alignment) from the
                // first to the last tensor it holds. Repacked tensors at the end of what is
                // loaded fall outside it: tiny-qwen35moe's last block ends in three Q4_K
                // shared-expert matrices (0.105 MiB) since the MTP block after it (skipped
                // without draft-mtp) moved that block's ffn_down out of the more-bits rule.
                let checks = [
                    ("weights", b.weights_host_mib(), rep_model, 0.12, 0.0),
                    ("repack", b.repack_host_mib(), rep_repack, 0.05, 0.0),
                    ("kv", b.kv_host_mib, rep_kv, 0.01, 0.0),
                    ("recurrent", b.recurrent_host_mib, rep_rs, 0.01, 0.0),
                    (
                        "compute",
                        b.compute_host_mib + b.output_host_mib,
                        rep_compute,
                        0.5,
                        0.05,
                    ),
                    ("host total", p.host_mib, rep_host, 64.0, 0.03),
                ];
                for (what, pred, r, abs, rel) in checks {
                    if !close(pred, r, abs, rel) {
                        failures.push(format!(
                            "{name} ctx={ctx} kv={kv} {what}: predicted {pred:.2} MiB, reported {r:.2} MiB"
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--spec-type draft-mtp` (issue 54) on tiny-qwen35moe, which `qtune synth` writes with its
/// MTP layer: the server loads that block (skipped otherwise), keeps 1 + 3 copies of the
/// recurrent state, and a second context over the block with its own f16 KV (whatever `-ctk`
/// says), logits and compute buffer.
#[test]
fn mtp_draft_context_predictions_match_the_cpu_servers_report() {
    let Some(bin) = require::or_skip(require::server(), "the real llama-server") else {
        return;
    };
    if !support::vocab() {
        return;
    }
    let m = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("tiny synthetic fixture");
    let layout = model::load(&m).unwrap();
    assert_eq!(layout.details.mtp_layers, 1);
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (ctx, kv) in [
        (4096u32, KvType::F16),
        (4096, KvType::Q8_0),
        (1000, KvType::F16),
    ] {
        let cfg = LaunchConfig {
            cache_type_k: kv,
            cache_type_v: kv,
            threads: Some(2),
            spec_type: Some(qtune::config::SpecType::DraftMtp),
            ..LaunchConfig::baseline(ctx)
        };
        let log = run_server(&bin, &m, &cfg, &dir.path().join("server.log"), false);
        assert!(log.contains("creating MTP draft context"), "{log}");
        let rep = logparse::parse_reported_memory(&log);
        let p = memory::predict(&layout, &cfg, false);
        let b = &p.breakdown;
        let rep_model = rep.model_mib.get("CPU_Mapped").copied().unwrap_or(0.0)
            + rep.model_mib.get("CPU").copied().unwrap_or(0.0);
        let rep_repack = rep.model_mib.get("CPU_REPACK").copied().unwrap_or(0.0);
        let rep_kv: f64 = rep.kv_mib.values().sum();
        let rep_rs: f64 = rep.recurrent_mib.values().sum();
        let rep_compute: f64 = rep.compute_mib.values().sum();
        println!(
            "draft-mtp ctx={ctx} kv={kv}: model {:.2}/{rep_model:.2} repack {:.2}/{rep_repack:.2} kv {:.2}/{rep_kv:.2} rs {:.2}/{rep_rs:.2} compute+out {:.2}/{rep_compute:.2} (predicted/reported MiB)",
            b.weights_host_mib(),
            b.repack_host_mib(),
            b.kv_host_mib,
            b.recurrent_host_mib,
            b.compute_host_mib + b.output_host_mib,
        );
        let checks = [
            ("weights", b.weights_host_mib(), rep_model, 0.05, 0.0),
            ("repack", b.repack_host_mib(), rep_repack, 0.05, 0.0),
            ("kv", b.kv_host_mib, rep_kv, 0.01, 0.0),
            ("recurrent", b.recurrent_host_mib, rep_rs, 0.01, 0.0),
            (
                "compute",
                b.compute_host_mib + b.output_host_mib,
                rep_compute,
                0.5,
                0.05,
            ),
        ];
        for (what, pred, r, abs, rel) in checks {
            if !close(pred, r, abs, rel) {
                failures.push(format!(
                    "ctx={ctx} kv={kv} {what}: predicted {pred:.2} MiB, reported {r:.2} MiB"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Parallel slots (issue 42): `-np` 1, 2 and 4 of one `-c`, with the KV split between the
/// slots (an explicit `-np`'s default) and unified (`-kvu`): the KV holds `-c` cells in all
/// either way, the recurrent state and the logits grow with the slots.
#[test]
fn slot_predictions_match_the_cpu_servers_report() {
    let Some(bin) = require::or_skip(require::server(), "the real llama-server") else {
        return;
    };
    let Some(smollm2) = support::smollm2() else {
        return;
    };
    let models = [
        smollm2,
        qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("tiny synthetic fixture"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for m in &models {
        let layout = model::load(m).unwrap();
        let name = m.file_name().unwrap().to_string_lossy();
        for np in [1u32, 2, 4] {
            for kvu in [None, Some(true)] {
                let cfg = LaunchConfig {
                    parallel: np,
                    kv_unified: kvu,
                    threads: Some(1),
                    ..LaunchConfig::baseline(4096)
                };
                let log = run_server(&bin, m, &cfg, &dir.path().join("server.log"), false);
                let rep = logparse::parse_reported_memory(&log);
                let p = memory::predict(&layout, &cfg, false);
                let b = &p.breakdown;
                let rep_kv: f64 = rep.kv_mib.values().sum();
                let rep_rs: f64 = rep.recurrent_mib.values().sum();
                let rep_compute: f64 = rep.compute_mib.values().sum();
                let rep_host = logparse::host_total_mib(&rep);
                println!(
                    "{name} -np {np} kvu={kvu:?}: kv {:.2}/{rep_kv:.2} rs {:.2}/{rep_rs:.2} compute+out {:.2}/{rep_compute:.2} host {:.2}/{rep_host:.2} (predicted/reported MiB)",
                    b.kv_host_mib,
                    b.recurrent_host_mib,
                    b.compute_host_mib + b.output_host_mib,
                    p.host_mib,
                );
                assert!(rep_kv > 0.0, "no KV buffer parsed from the log");
                let checks = [
                    ("kv", b.kv_host_mib, rep_kv, 0.01, 0.0),
                    ("recurrent", b.recurrent_host_mib, rep_rs, 0.01, 0.0),
                    (
                        "compute",
                        b.compute_host_mib + b.output_host_mib,
                        rep_compute,
                        0.5,
                        0.05,
                    ),
                    ("host total", p.host_mib, rep_host, 64.0, 0.03),
                ];
                for (what, pred, r, abs, rel) in checks {
                    if !close(pred, r, abs, rel) {
                        failures.push(format!(
                            "{name} -np {np} kvu={kvu:?} {what}: predicted {pred:.2} MiB, reported {r:.2} MiB"
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
