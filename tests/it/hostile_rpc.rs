//! Issue 48, new surfaces: `qtune hw --rpc` (and `tune --rpc`, which measures its workers the
//! same way) against a hostile worker. A worker here is a thread that speaks llama.cpp's RPC
//! framing (the real rpc-server answers no absurd number on demand): one that claims four
//! billion devices, one whose device has more memory than any box, one that never answers,
//! one that drips its answer. Each is one line naming the worker, in bounded time, no panic.

use crate::support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use support::output_text;

/// How a hostile worker answers.
#[derive(Clone, Copy)]
enum Worker {
    /// A good HELLO, then four billion devices.
    Devices,
    /// A good HELLO, one device, then u64::MAX bytes free of u64::MAX.
    Memory,
    /// A good HELLO, one device, then more free memory than total.
    FreePastTotal,
    /// Reads every request, answers none.
    Silent,
    /// Answers HELLO a byte every 2 s, with a size of 1 MiB.
    Drip,
    /// A good worker of one 1 GiB device, but each memory query not right after a write
    /// waits 1 s: slow round trips, quick writes.
    SlowTrips,
}

/// One request: its command, or None when the head closed the connection.
fn request(s: &mut TcpStream) -> Option<u8> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).ok()?;
    let size = u64::from_le_bytes(head[1..].try_into().unwrap());
    std::io::copy(&mut s.take(size), &mut std::io::sink()).ok()?;
    Some(head[0])
}

fn answer(s: &mut TcpStream, payload: &[u8]) -> bool {
    let mut out = (payload.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(payload);
    s.write_all(&out).is_ok()
}

/// A good HELLO answer: protocol 7.0.0 and 24 bytes of plain-TCP capabilities.
fn hello() -> Vec<u8> {
    let mut v = vec![7u8, 0, 0, 0];
    v.resize(4 + 24, 0);
    v
}

fn serve(mut s: TcpStream, w: Worker) {
    let mut last = None;
    while let Some(cmd) = request(&mut s) {
        let after_write = last == Some(6);
        last = Some(cmd);
        let ok = match (w, cmd) {
            (Worker::Silent, _) => {
                std::thread::sleep(Duration::from_secs(600));
                false
            }
            (Worker::Drip, _) => {
                let mut out = (1u64 << 20).to_le_bytes().to_vec();
                out.resize(8 + (1 << 20), 0);
                out.iter().all(|b| {
                    std::thread::sleep(Duration::from_secs(2));
                    s.write_all(&[*b]).is_ok()
                })
            }
            (_, 14) => answer(&mut s, &hello()),
            (Worker::Devices, 15) => answer(&mut s, &u32::MAX.to_le_bytes()),
            (_, 15) => answer(&mut s, &1u32.to_le_bytes()),
            (Worker::Memory, 11) => {
                let mut m = u64::MAX.to_le_bytes().to_vec();
                m.extend_from_slice(&u64::MAX.to_le_bytes());
                answer(&mut s, &m)
            }
            (Worker::SlowTrips, 11) => {
                if !after_write {
                    std::thread::sleep(Duration::from_secs(1));
                }
                let mut m = (1u64 << 30).to_le_bytes().to_vec();
                m.extend_from_slice(&(1u64 << 30).to_le_bytes());
                answer(&mut s, &m)
            }
            // ALLOC_BUFFER: a buffer at 4096 of 64 MiB; BUFFER_GET_BASE: 4096; SET_TENSOR and
            // FREE_BUFFER have no answer.
            (Worker::SlowTrips, 0) => {
                let mut m = 4096u64.to_le_bytes().to_vec();
                m.extend_from_slice(&(64u64 << 20).to_le_bytes());
                answer(&mut s, &m)
            }
            (Worker::SlowTrips, 3) => answer(&mut s, &4096u64.to_le_bytes()),
            (Worker::SlowTrips, 4 | 6) => true,
            (_, 11) => {
                // free, total: 2 GiB free of 1 GiB.
                let mut m = (2u64 << 30).to_le_bytes().to_vec();
                m.extend_from_slice(&(1u64 << 30).to_le_bytes());
                answer(&mut s, &m)
            }
            _ => false,
        };
        if !ok {
            return;
        }
    }
}

/// Start a hostile worker; its `host:port`.
fn worker(w: Worker) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || serve(s, w));
        }
    });
    addr
}

/// `qtune hw --no-bandwidth --rpc ADDR`, killed after `limit`; its output and how long it
/// took.
fn hw(addr: &str, limit: Duration) -> (std::process::Output, Duration) {
    let mut c = support::qtune();
    c.args(["hw", "--no-bandwidth", "--rpc", addr]);
    run_for(c, limit)
}

/// `c` run, killed after `limit`; its output and how long it took.
fn run_for(mut c: std::process::Command, limit: Duration) -> (std::process::Output, Duration) {
    let t0 = Instant::now();
    let mut child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    (o, t0.elapsed())
}

/// The worker's failure is one line naming it and `needle`, with a failing exit and no panic,
/// within `within`.
fn refused_in_one_line(w: Worker, needle: &str, within: Duration) {
    let addr = worker(w);
    let (o, took) = hw(&addr, within + Duration::from_secs(60));
    let all = output_text(&o);
    assert!(took < within, "took {took:?}: {all}");
    assert!(!o.status.success(), "{all}");
    assert!(!all.contains("panicked"), "{all}");
    let lines: Vec<&str> = all.lines().filter(|l| l.contains(&addr)).collect();
    assert_eq!(lines.len(), 1, "{all}");
    assert!(lines[0].contains(needle), "{all}");
    assert!(lines[0].len() < 400, "{all}");
}

#[test]
fn a_worker_with_four_billion_devices_is_refused_at_once() {
    refused_in_one_line(
        Worker::Devices,
        "4294967295 devices",
        Duration::from_secs(20),
    );
}

#[test]
fn a_worker_with_more_memory_than_any_box_is_refused() {
    refused_in_one_line(
        Worker::Memory,
        "no device's memory",
        Duration::from_secs(20),
    );
    refused_in_one_line(
        Worker::FreePastTotal,
        "2147483648 bytes free of 1073741824",
        Duration::from_secs(20),
    );
}

#[test]
fn a_worker_that_never_answers_costs_the_answer_limit() {
    // 30 s (hardware::rpc::ANSWER_LIMIT) and the connection tries.
    refused_in_one_line(
        Worker::Silent,
        "no whole answer within 30 s",
        Duration::from_secs(50),
    );
}

#[test]
fn a_worker_that_drips_its_answer_costs_the_answer_limit() {
    // A byte every 2 s never runs into a 30 s read timeout; the answer's own limit stops it.
    refused_in_one_line(
        Worker::Drip,
        "no whole answer within 30 s",
        Duration::from_secs(50),
    );
}

/// `qtune tune --rpc` measures its workers the same way: a worker claiming four billion
/// devices stops the tune before anything is launched, in one line naming it.
#[test]
fn a_tune_over_a_hostile_worker_stops_in_one_line() {
    if support::real_server().is_none() {
        return;
    }
    let addr = worker(Worker::Devices);
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut c = support::qtune();
    c.arg("tune")
        .arg("--model")
        .arg(qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap())
        .args(["--budget-trials", "1", "--rpc", &addr, "--out"])
        .arg(&run);
    let (o, took) = run_for(c, Duration::from_secs(90));
    let all = output_text(&o);
    assert!(took < Duration::from_secs(60), "took {took:?}: {all}");
    assert!(!o.status.success(), "{all}");
    let err = String::from_utf8_lossy(&o.stderr);
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{all}");
    assert!(
        errors[0].starts_with("qtune: error: --rpc: worker")
            && errors[0].contains("4294967295 devices"),
        "{all}"
    );
    assert!(!run.join("journal.jsonl").exists(), "{all}");
}

/// A worker slow to answer its round trips (1 s) and quick after a write: the write speed
/// `hw` prints is still one the link gave, not the 33,554,432 MB/s of a write time less a
/// round trip longer than it.
#[test]
fn a_worker_with_slow_round_trips_gets_no_absurd_write_speed() {
    let addr = worker(Worker::SlowTrips);
    let mut c = support::qtune();
    c.args(["hw", "--no-bandwidth", "--json", "--rpc", &addr]);
    let (o, _) = run_for(c, Duration::from_secs(120));
    let all = output_text(&o);
    assert!(o.status.success(), "{all}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let w = &v["rpc_workers"][0];
    let rtt = w["round_trip_ms"].as_f64().unwrap();
    assert!(rtt >= 900.0, "{w}");
    let mbs = w["write_mb_s"].as_f64().unwrap();
    assert!(mbs > 0.0 && mbs < 100_000.0, "write {mbs} MB/s: {w}");
}

/// Issue 53: three workers that never answer are probed at once: one answer limit (30 s) in
/// all, not three one after the other; each is named in its own line.
#[test]
fn dead_workers_are_probed_at_once() {
    let addrs: Vec<String> = (0..3).map(|_| worker(Worker::Silent)).collect();
    let (o, took) = hw(&addrs.join(","), Duration::from_secs(150));
    let all = output_text(&o);
    assert!(took < Duration::from_secs(75), "took {took:?}: {all}");
    assert!(!o.status.success(), "{all}");
    for a in &addrs {
        let lines: Vec<&str> = all.lines().filter(|l| l.contains(a.as_str())).collect();
        assert_eq!(lines.len(), 1, "{a}: {all}");
        assert!(lines[0].contains("no whole answer within 30 s"), "{all}");
    }
}
