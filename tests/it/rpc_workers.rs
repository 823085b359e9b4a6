//! llama.cpp's RPC workers against real processes: two loopback `ggml-rpc-server` workers
//! started by `qtune rpc serve`, measured by `qtune hw --rpc`, and a real tune over them that
//! compares placements with the naive split while one worker is killed mid-tune.
//! `qtune rpc serve`'s address policy needs no server.

use crate::support;

use qtune::engine::LaunchArgs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use support::{output_text, qtune, servers};

/// The worker binary next to the real llama-server (`qtune server build` builds both).
fn rpc_server() -> Option<PathBuf> {
    let server = support::real_server()?;
    let p = server.with_file_name("ggml-rpc-server");
    if p.is_file() {
        Some(p)
    } else {
        support::require::missing(&format!(
            "ggml-rpc-server next to {} (a build before RPC support: run `qtune server build`)",
            server.display()
        ));
        None
    }
}

/// A worker this test started (`qtune rpc serve`, which becomes the rpc-server); killed when
/// dropped.
struct Worker {
    child: Child,
    port: u16,
}

impl Worker {
    fn start(bin: &Path, port: u16, cache: &Path) -> Worker {
        let child = qtune()
            .args([
                "rpc",
                "serve",
                "--port",
                &port.to_string(),
                "--threads",
                "1",
            ])
            .arg("--rpc-server")
            .arg(bin)
            .env("LLAMA_CACHE", cache)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let w = Worker { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "worker on port {port} did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        w
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn serve_refuses_a_public_address_warns_on_a_private_one_and_prints_the_head_argument() {
    let sh = Path::new("/bin/sh"); // any file: --dry-run runs nothing
                                   // `--listen HOST:PORT`, as `qtune record --listen` takes it (issue 52).
    let run = |host: &str, extra: &[&str]| {
        qtune()
            .args(["rpc", "serve", "--dry-run", "--listen"])
            .arg(format!("{host}:50111"))
            .arg("--rpc-server")
            .arg(sh)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run("127.0.0.1", &["--device", "CPU", "--threads", "2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}", output_text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim_end().lines().last(),
        Some("--rpc 127.0.0.1:50111")
    );
    assert!(
        err.contains("/bin/sh -H 127.0.0.1 -p 50111 -d CPU -t 2 -c"),
        "{err}"
    );
    assert!(!err.contains("warning"), "loopback is quiet: {err}");

    // The parts alone still work, and a --listen without its port is one line.
    let o = qtune()
        .args([
            "rpc",
            "serve",
            "--dry-run",
            "--host",
            "127.0.0.1",
            "--port",
            "50112",
        ])
        .arg("--rpc-server")
        .arg(sh)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim_end().lines().last(),
        Some("--rpc 127.0.0.1:50112")
    );
    let o = qtune()
        .args(["rpc", "serve", "--dry-run", "--listen", "127.0.0.1"])
        .arg("--rpc-server")
        .arg(sh)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", output_text(&o));
    assert!(
        err.starts_with("qtune: error: --listen: ") && err.lines().count() == 1,
        "{err}"
    );

    let o = run("192.168.1.20", &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        err.contains("qtune: warning: 192.168.1.20 is on a private network")
            && err.contains("no authentication"),
        "{err}"
    );

    for public in ["0.0.0.0", "8.8.8.8"] {
        let o = run(public, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{}", output_text(&o));
        assert!(
            err.starts_with("qtune: error: refusing to bind the worker to")
                && err.contains("--allow-public")
                && err.lines().count() == 1,
            "{err}"
        );
        assert!(
            o.stdout.is_empty(),
            "nothing printed for the head: {}",
            output_text(&o)
        );
        let o = run(public, &["--allow-public"]);
        assert!(o.status.success(), "{}", output_text(&o));
    }
}

#[test]
fn hw_lists_each_workers_devices_memory_and_link_and_names_a_dead_one() {
    let Some(bin) = rpc_server() else { return };
    let cache = tempfile::tempdir().unwrap();
    let a = Worker::start(&bin, support::free_port(), cache.path());
    let b = Worker::start(&bin, support::free_port(), cache.path());
    let list = format!("{},{}", a.address(), b.address());
    let o = qtune()
        .args(["hw", "--no-bandwidth", "--json", "--rpc", &list])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let workers = v["rpc_workers"].as_array().expect("rpc_workers");
    assert_eq!(workers.len(), 2, "{v}");
    for (w, addr) in workers.iter().zip([a.address(), b.address()]) {
        assert_eq!(w["address"], addr.as_str());
        assert!(w["protocol"].as_str().unwrap().starts_with("7."), "{w}");
        let d = &w["devices"][0];
        assert_eq!(d["name"], format!("RPC0[{addr}]").as_str(), "{w}");
        assert!(d["total_mib"].as_u64().unwrap() > 0, "{w}");
        assert!(d["free_mib"].as_u64().unwrap() > 0, "{w}");
        for k in ["connect_ms", "round_trip_ms", "write_mb_s"] {
            let x = w[k].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{k}: {w}");
        }
    }
    let text = qtune()
        .args(["hw", "--no-bandwidth", "--rpc", &a.address()])
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(text.status.success(), "{}", output_text(&text));
    assert!(
        t.contains(&format!("RPC worker {} (protocol 7.", a.address()))
            && t.contains(&format!("RPC0[{}]: ", a.address())),
        "{t}"
    );

    // A worker that is gone: named, with what to do, and a failing exit.
    let gone = format!("127.0.0.1:{}", support::free_port());
    let o = qtune()
        .args([
            "hw",
            "--no-bandwidth",
            "--rpc",
            &format!("{},{gone}", a.address()),
        ])
        .output()
        .unwrap();
    let all = output_text(&o);
    assert!(!o.status.success(), "{all}");
    assert!(
        all.contains(&format!("worker {gone} is not reachable")) && all.contains("qtune rpc serve"),
        "{all}"
    );
}

/// The trials of a finished run: (kind, message, the server's flags).
fn trials(run: &Path) -> Vec<(String, String, String)> {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    json["trials"]
        .as_array()
        .expect("trials")
        .iter()
        .map(|t| {
            let c: qtune::config::LaunchConfig =
                serde_json::from_value(t["config"].clone()).unwrap();
            (
                t["kind"].as_str().unwrap_or("").to_string(),
                t["message"].as_str().unwrap_or("").to_string(),
                c.server_args().join(" "),
            )
        })
        .collect()
}

#[test]
fn a_tune_places_the_model_over_two_workers_against_the_naive_split_and_goes_on_past_a_killed_worker(
) {
    let Some(bin) = rpc_server() else { return };
    let Some(model) = support::require::tiny_qwen3moe() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("rpc-tiny.gguf");
    std::os::unix::fs::symlink(&model, &m).unwrap();
    let needle = m.display().to_string();
    let cache = dir.path().join("llama-cache");
    let a = Worker::start(&bin, support::free_port(), &cache);
    let b_port = support::free_port();
    let b = std::sync::Arc::new(std::sync::Mutex::new(Some(Worker::start(
        &bin, b_port, &cache,
    ))));
    let b_addr = format!("127.0.0.1:{b_port}");
    // Nothing to step but placement: the baseline, the placements over the workers, the race.
    let space = dir.path().join("rpc.yaml");
    std::fs::write(
        &space,
        "name: rpc-test\nvary:\n  n_cpu_moe: auto\n  threads: [1]\n  batch_ubatch: [[512, 512]]\n  kv_types: [[f16, f16]]\n  flash_attn: [auto]\n  load_mode: [auto]\nfixed:\n  ctx: 1024\n  parallel: 1\nworkload:\n  prompt_tokens: 32\n  gen_tokens: 8\n  repetitions: 1\nbudget:\n  trials: 9\n  minutes: 20\n  confirm_top: 1\n  confirm_rounds: 1\n",
    )
    .unwrap();

    // Kill worker B once the third head is healthy (the baseline is the first), then start it
    // again on the same port once the loss is journaled: the tune must classify that trial,
    // name B, and go on.
    let run = dir.path().join("run");
    let killer = {
        let b = b.clone();
        let journal = run.clone();
        let (bin, cache, needle) = (bin.clone(), cache.clone(), needle.clone());
        std::thread::spawn(move || -> Option<String> {
            let deadline = Instant::now() + Duration::from_secs(900);
            let mut seen: Vec<u32> = Vec::new();
            while Instant::now() < deadline {
                for pid in servers::servers_mentioning(&needle) {
                    if !seen.contains(&pid) {
                        seen.push(pid);
                    }
                }
                if seen.len() >= 3 {
                    let pid = seen[2];
                    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    let words: Vec<String> = String::from_utf8_lossy(&cmd)
                        .split('\0')
                        .map(str::to_string)
                        .collect();
                    let port: Option<u16> = words
                        .windows(2)
                        .find(|w| w[0] == "--port")
                        .and_then(|w| w[1].parse().ok());
                    let until = Instant::now() + Duration::from_secs(300);
                    while port.is_some_and(|p| !support::health_ok(p)) && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    drop(b.lock().unwrap().take()); // SIGKILL, waited for
                    let gone = Instant::now() + Duration::from_secs(120);
                    while servers::servers_mentioning(&needle).contains(&pid)
                        && Instant::now() < gone
                    {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    // Back once the loss is journaled (so the runner found it gone).
                    let journaled = Instant::now() + Duration::from_secs(300);
                    while !std::fs::read_to_string(journal.join("journal.jsonl"))
                        .unwrap_or_default()
                        .contains("rpc-worker-lost")
                        && Instant::now() < journaled
                    {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    *b.lock().unwrap() = Some(Worker::start(&bin, b_port, &cache));
                    return Some(words.join(" "));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            None
        })
    };

    let out = qtune()
        .args(["tune", "--model"])
        .arg(&m)
        .arg("--space")
        .arg(&space)
        .args(["--rpc", &format!("{},{b_addr}", a.address())])
        .arg("--allow-busy")
        .arg("--out")
        .arg(&run)
        .env("LLAMA_CACHE", &cache)
        .output()
        .unwrap();
    let killed = killer.join().unwrap();
    let all = output_text(&out);
    assert!(
        out.status.success(),
        "the tune goes on past the lost worker: {all}"
    );
    assert!(
        killed.is_some(),
        "no third launch to kill a worker under: {all}"
    );
    servers::assert_none_left(&needle, "after the tune");
    let rpc = format!("--rpc {},{b_addr}", a.address());
    let t = trials(&run);
    let summary: Vec<String> = t.iter().map(|(k, _, c)| format!("{k}: {c}")).collect();
    // Every launch carries the workers; the first (the baseline) is the naive split: --rpc
    // and nothing placed.
    assert!(t.iter().all(|(_, _, c)| c.contains(&rpc)), "{summary:#?}");
    let base = &t[0].2;
    for placed in ["-ts", "-ot", "-ngl", "--fit"] {
        assert!(!base.split(' ').any(|w| w == placed), "baseline: {base}");
    }
    // Placements over the workers were launched: layers by -ts, experts on the head's CPU or
    // on the last worker.
    assert!(
        t.iter().any(|(_, _, c)| c.contains("-ngl 999 -ts 1,1")),
        "{summary:#?}"
    );
    assert!(
        t.iter()
            .any(|(_, _, c)| c.contains(&format!("=RPC0[{b_addr}]")) || c.contains("=CPU")),
        "{summary:#?}"
    );
    // The killed worker: its trial classified, the worker named; later trials measured.
    let lost = t
        .iter()
        .position(|(k, _, _)| k == "rpc-worker-lost")
        .unwrap_or_else(|| panic!("no rpc-worker-lost trial: {summary:#?}\n{all}"));
    eprintln!("the lost worker's trial {lost}: {}", t[lost].1);
    assert!(
        t[lost].1.contains(&format!("RPC worker {b_addr}")),
        "the message names the worker: {}",
        t[lost].1
    );
    assert!(
        t[lost + 1..].iter().any(|(k, _, _)| k == "ok"),
        "the tune goes on and measures after the lost worker: {summary:#?}"
    );
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    assert!(journal.contains("rpc-worker-lost"), "journaled");
    // The launch script names each worker's command and checks they answer.
    let script = std::fs::read_to_string(run.join("launch.sh")).unwrap();
    assert!(
        script.contains(&format!("qtune rpc serve --listen 127.0.0.1:{b_port}"))
            && script.contains("/dev/tcp/"),
        "{script}"
    );
    // The report compares against the naive split.
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(md.contains("--rpc"), "{md}");
    drop(a);
}
