//! `qtune rpc link`: a loopback proxy of known rate in front of a real `ggml-rpc-server`. A
//! head measures the link through it (`qtune hw --rpc`) and `qtune compare` runs two
//! placements across it end to end; the proxy's own byte counters show the rate held. Bad
//! flags are one-line errors and need no server.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use support::{output_text, qtune};

/// A process this test started; killed when dropped.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nothing listened on {port} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn link(listen: u16, to: u16, gbit: &str, delay_ms: &str, stats: &Path) -> Started {
    let child = qtune()
        .args(["rpc", "link", "--gbit", gbit, "--delay-ms", delay_ms])
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .args(["--to", &format!("127.0.0.1:{to}")])
        .arg("--stats")
        .arg(stats)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let s = Started(child);
    wait_listening(listen);
    s
}

#[test]
fn bad_link_flags_are_one_line_errors() {
    for (args, want) in [
        (vec!["--gbit", "0"], "not a link rate"),
        (vec!["--gbit", "1e6"], "not a link rate"),
        (vec!["--gbit", "1", "--delay-ms", "2000"], "not a delay"),
        (
            vec!["--gbit", "1", "--to", "127.0.0.1:50099"],
            "forward to itself",
        ),
        (
            vec!["--gbit", "1", "--listen", "8.8.8.8:50099"],
            "public address",
        ),
        (vec!["--gbit", "1", "--to", "nowhere"], "host:port"),
    ] {
        let mut all = vec![
            "rpc",
            "link",
            "--listen",
            "127.0.0.1:50099",
            "--to",
            "127.0.0.1:1",
        ];
        // A later --listen or --to replaces the default one.
        for pair in args.chunks(2) {
            if let Some(i) = all.iter().position(|a| *a == pair[0]) {
                all[i + 1] = pair[1];
            } else {
                all.extend_from_slice(pair);
            }
        }
        let o = qtune().args(&all).stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{all:?}: {}", output_text(&o));
        assert!(err.contains(want), "{all:?}: {err}");
        assert!(!err.contains("panicked"), "{all:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{all:?}: {err}");
    }
}

fn stats(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Bytes of one direction at or under the burst plus the rate over its active time.
fn held(s: &serde_json::Value, dir: &str) -> bool {
    let rate = s["rate_bytes_s"].as_f64().unwrap();
    let burst = s["burst_bytes"].as_f64().unwrap();
    let bytes = s[dir]["bytes"].as_f64().unwrap();
    bytes <= burst + rate * s[dir]["active_s"].as_f64().unwrap()
}

#[test]
fn a_compare_across_a_slow_link_runs_and_the_proxy_holds_its_rate() {
    let Some(server) = support::real_server() else {
        return;
    };
    let bin: PathBuf = server.with_file_name("ggml-rpc-server");
    let Some(model) = support::require::tiny_qwen3moe() else {
        return;
    };
    assert!(
        bin.is_file(),
        "ggml-rpc-server next to {}",
        server.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let (wport, lport) = (support::free_port(), support::free_port());
    let _worker = Started(
        qtune()
            .args([
                "rpc",
                "serve",
                "--port",
                &wport.to_string(),
                "--threads",
                "1",
            ])
            .arg("--rpc-server")
            .arg(&bin)
            .env("LLAMA_CACHE", dir.path().join("cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(wport);
    // 0.1 Gbit/s (12.5 MB/s) with 1 ms each way.
    let stats_path = dir.path().join("link.json");
    let _link = link(lport, wport, "0.1", "1", &stats_path);
    let addr = format!("127.0.0.1:{lport}");

    // The head measures the link through the proxy: its rate and its delay.
    let o = qtune()
        .args(["hw", "--no-bandwidth", "--json", "--rpc", &addr])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let w = &v["rpc_workers"][0];
    let (write, rtt) = (
        w["write_mb_s"].as_f64().unwrap(),
        w["round_trip_ms"].as_f64().unwrap(),
    );
    assert!(
        write > 1.0 && write <= 12.5 * 1.05,
        "write {write} MB/s: {w}"
    );
    assert!(
        rtt >= 2.0,
        "round trip {rtt} ms under twice the 1 ms delay: {w}"
    );

    // Two placements across the link, end to end: every layer on the worker, and the
    // experts on the head's CPU.
    let m = model.display().to_string();
    let base = format!("llama-server -m {m} -c 1024 -np 1 --rpc {addr} -ngl 999 --fit off -ts 1");
    let cpu_experts = format!("{base} --n-cpu-moe 99");
    let o = qtune()
        .args(["compare", &base, &cpu_experts, "--rounds", "1"])
        .args([
            "--prompt-tokens",
            "32",
            "--gen-tokens",
            "8",
            "--repetitions",
            "1",
        ])
        .arg("--server")
        .arg(&server)
        .arg("--out")
        .arg(dir.path().join("compare"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(dir.path().join("compare/compare.json").is_file());

    // The counters are rewritten every 200 ms: wait for the last bytes to be in.
    std::thread::sleep(Duration::from_millis(600));
    let s = stats(&stats_path);
    let up = s["to_worker"]["bytes"].as_u64().unwrap();
    assert!(up > 20_000_000, "the weights crossed the link: {s}");
    assert!(s["connections"].as_u64().unwrap() >= 3, "{s}");
    assert!(held(&s, "to_worker") && held(&s, "to_head"), "{s}");
}
