//! `qtune record` for real: the pinned CPU llama-server with SmolLM2-135M, the recording proxy
//! in front of it, and a scripted multi-turn session sent by the real `openai` Python client
//! (streamed and not, two requests at once, llama.cpp's own `/completion`). Checks what the
//! client got through the proxy and what the trace holds against the server's own counts.
//! Never asserts a speed.

use crate::support;
use support::record::{signal, start_record, start_server, wait_exit, wait_until, Reap};
use support::{free_port, health_ok, output_text};

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn a_recorded_session_matches_what_the_client_and_server_saw() {
    let openai = Command::new("python3")
        .args(["-c", "import openai"])
        .output();
    if !openai.is_ok_and(|o| o.status.success()) {
        support::require::missing("python3 with the openai package (pip install openai)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(model) = support::smollm2() else {
        return;
    };
    let Some((_server, sport)) = start_server(
        dir.path(),
        &model,
        "record-smollm2.gguf",
        &["-c", "8192", "-np", "2", "-t", "1"],
    ) else {
        return;
    };
    let out = dir.path().join("traces").join("session.jsonl");
    let (mut rec, pport) = start_record(sport, &out, dir.path());

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/record-client.py");
    let o = Command::new("python3")
        .arg(&script)
        .arg(format!("http://127.0.0.1:{pport}"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}\nqtune record's stderr:\n{}",
        output_text(&o),
        std::fs::read_to_string(dir.path().join("record.err")).unwrap_or_default()
    );
    let client: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();

    // A body over the proxy's bound is refused at once (413), never read into memory.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", pport)).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        qtune::traffic::proxy::MAX_BODY + 1
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 413");
    drop(s);

    signal(&rec.0, libc::SIGINT);
    let st = wait_exit(&mut rec.0, 60);
    let err = std::fs::read_to_string(dir.path().join("record.err")).unwrap();
    assert!(st.success(), "{st:?}\n{err}");
    assert!(err.contains("recorded 5 generation requests"), "{err}");

    // The trace and its folder are the user's alone.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&out), 0o600);
    assert_eq!(mode(out.parent().unwrap()), 0o700);

    let t = lines(&out);
    assert_eq!(t[0]["type"], "header");
    assert_eq!(t[0]["format"], "qtune-trace");
    assert_eq!(t[0]["server"]["model_file"], "record-smollm2.gguf");
    assert!(
        t[0]["model"]["n_vocab"].as_u64().unwrap() > 1000,
        "{}",
        t[0]
    );
    assert!(t[0]["tokenizer_sha256"]
        .as_str()
        .is_some_and(|s| s.len() == 64));
    let end = t.last().unwrap();
    assert_eq!(end["type"], "end", "{end}");
    assert_eq!(
        (end["requests"].as_u64(), end["interrupted"].as_u64()),
        (Some(5), Some(0))
    );
    assert!(
        end["other_requests"].as_u64().unwrap() >= 1,
        "/v1/models: {end}"
    );
    let mut reqs: Vec<&serde_json::Value> = t.iter().filter(|l| l["type"] == "request").collect();
    reqs.sort_by_key(|r| r["id"].as_u64());
    assert_eq!(reqs.len(), 5);
    // Sent in this order (turn3 and the sub-agent overlap; turn3 arrived first).
    let names = ["turn1", "turn2", "turn3", "subagent", "native"];
    for (r, name) in reqs.iter().zip(names) {
        let c = &client[name];
        assert_eq!(r["outcome"], "ok", "{name}: {r}");
        assert_eq!(r["status"], 200);
        let tokens = r["prompt_tokens"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: {r}"));
        let tm = &r["timings"];
        // The prompt tokens recorded are the server's: its cached + read counts, and what it
        // told the client.
        assert_eq!(
            tokens.len() as u64,
            tm["cache_n"].as_u64().unwrap() + tm["prompt_n"].as_u64().unwrap(),
            "{name}: {r}"
        );
        assert_eq!(
            tokens.len() as u64,
            c["prompt_tokens"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(r["n_generated"], c["completion_tokens"], "{name}: {r}");
        assert_eq!(r["n_generated"], tm["predicted_n"], "{name}");
        assert_eq!(r["stream"], c["stream"], "{name}");
        let (a, e) = (
            r["arrived_ms"].as_f64().unwrap(),
            r["ended_ms"].as_f64().unwrap(),
        );
        assert!(
            e >= a && r["first_byte_ms"].as_f64().unwrap() >= a,
            "{name}: {r}"
        );
    }
    assert_eq!(reqs[4]["endpoint"], "/completion");
    // The client's sampling, as it sent it (issue 54): greedy turns, a sampling sub-agent.
    for i in [0, 1, 2, 4] {
        assert_eq!(reqs[i]["temperature"], 0.0, "{}", reqs[i]);
        assert!(reqs[i]["top_p"].is_null(), "{}", reqs[i]);
    }
    assert_eq!(
        (&reqs[3]["temperature"], &reqs[3]["top_p"]),
        (&serde_json::json!(0.7), &serde_json::json!(0.9)),
        "{}",
        reqs[3]
    );
    // The two at once name each other; the others overlap nothing.
    assert_eq!(reqs[2]["overlapped"], serde_json::json!([4]), "{}", reqs[2]);
    assert_eq!(reqs[3]["overlapped"], serde_json::json!([3]), "{}", reqs[3]);
    for i in [0, 1, 4] {
        assert_eq!(reqs[i]["overlapped"], serde_json::json!([]), "{}", reqs[i]);
    }
    // The streams reached the client whole (finish reason and usage come in the last events)
    // and as they were generated, not at the end.
    for name in ["turn2", "turn3"] {
        let c = &client[name];
        assert!(c["finish_reason"].is_string(), "{name}: {c}");
        assert!(c["content_chunks"].as_u64().unwrap() >= 4, "{name}: {c}");
        let spread = c["last_chunk_s"].as_f64().unwrap() - c["first_chunk_s"].as_f64().unwrap();
        assert!(spread > 0.02, "{name}: its chunks came all at once: {c}");
    }

    // trace show: one session of three turns that extend each other, the sub-agent and the
    // raw prompt on their own; the overlap; the server's counts.
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["trace", "show", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &v["summary"];
    assert_eq!(s["requests"], 5);
    assert_eq!(s["max_concurrent"], 2, "{s}");
    assert_eq!(s["complete"], true);
    let r = v["requests"].as_array().unwrap();
    assert_eq!(r[1]["parent"], 1, "{}", r[1]);
    assert_eq!(r[2]["parent"], 2, "{}", r[2]);
    assert_eq!(
        (r[2]["session"].as_u64(), r[2]["turn"].as_u64()),
        (r[0]["session"].as_u64(), Some(3)),
        "{}",
        r[2]
    );
    assert_ne!(r[3]["session"], r[0]["session"], "{}", r[3]);
    let gen: u64 = reqs
        .iter()
        .map(|r| r["n_generated"].as_u64().unwrap())
        .sum();
    assert_eq!(s["generated_tokens"], gen);
    let text = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["trace", "show"])
        .arg(&out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("client sampling: temperature 0-0.7, top_p 0.9, on 5 of 5 requests"),
        "{text}"
    );
    assert!(
        text.contains("5 requests (5 ok)") && text.contains("at most 2 at once"),
        "{text}"
    );
}

#[test]
fn a_stop_marks_the_request_in_flight_and_completes_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let Some(model) = support::smollm2() else {
        return;
    };
    let Some((_server, sport)) = start_server(
        dir.path(),
        &model,
        "record-smollm2.gguf",
        &["-c", "8192", "-np", "2", "-t", "1"],
    ) else {
        return;
    };
    let out = dir.path().join("stop.jsonl");
    let (mut rec, pport) = start_record(sport, &out, dir.path());
    // A long streamed generation, read raw.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", pport)).unwrap();
    let body = r#"{"prompt":"Once upon a time","n_predict":4000,"ignore_eos":true,"stream":true}"#;
    write!(
        s,
        "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 64];
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let n = s.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    // Ctrl-C, then SIGTERM: stop now.
    signal(&rec.0, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(500));
    signal(&rec.0, libc::SIGTERM);
    let st = wait_exit(&mut rec.0, 30);
    let err = std::fs::read_to_string(dir.path().join("record.err")).unwrap();
    assert!(st.success(), "{st:?}\n{err}");
    assert!(err.contains("(1 interrupted)"), "{err}");
    let t = lines(&out);
    assert_eq!(t.len(), 3, "{t:?}");
    assert_eq!(t[1]["outcome"], "interrupted", "{}", t[1]);
    assert_eq!(t[1]["endpoint"], "/completion");
    assert_eq!(t[2]["type"], "end");
    assert_eq!(t[2]["interrupted"], 1);
    assert_eq!(
        std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // An existing trace is never written over.
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["record", "--upstream"])
        .arg(format!("http://127.0.0.1:{sport}"))
        .args(["--listen", &format!("127.0.0.1:{}", free_port()), "--out"])
        .arg(&out)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("already exists"),
        "{}",
        output_text(&o)
    );
    assert_eq!(lines(&out).len(), 3);
}

#[test]
fn launch_sh_record_puts_the_proxy_on_the_users_port() {
    use std::os::unix::process::CommandExt;
    let Some(server) = support::real_server() else {
        return;
    };
    let Some(model) = support::smollm2() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("launch-record-smollm2.gguf");
    std::os::unix::fs::symlink(&model, &m).unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let result = qtune::run::sample::cpu_result(&server, &m);
    std::fs::write(
        run.join("results.json"),
        serde_json::to_string(&result).unwrap(),
    )
    .unwrap();
    let script = dir.path().join("launch.sh");
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["script", "--from"])
        .arg(&run)
        .arg("--out")
        .arg(&script)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));

    let (port, sport) = (free_port(), free_port());
    let trace = dir.path().join("agent.jsonl");
    let log = dir.path().join("launch.log");
    let f = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .args(["--port", &port.to_string(), "--record"])
        .arg(&trace)
        .env("QTUNE_SERVER_PORT", sport.to_string())
        .env_remove("QTUNE_BIN")
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .process_group(0);
    // SAFETY: only async-signal-safe calls between fork and exec (as in report_script.rs).
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = Reap(cmd.spawn().unwrap());
    struct Group(i32);
    impl Drop for Group {
        fn drop(&mut self) {
            unsafe { libc::killpg(self.0, libc::SIGKILL) };
        }
    }
    let _group = Group(child.0.id() as i32);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("launch.sh --record", 300, || {
        assert!(child.0.try_wait().unwrap().is_none(), "{}", text());
        health_ok(port) && health_ok(sport)
    });
    // Issue 52: "ready" names the proxy's URL, the one a client copies; the server's own
    // (which records nothing) was printed as ready before.
    let ready = |p: u16| format!("ready: http://127.0.0.1:{p} ");
    wait_until("the ready line", 30, || text().contains(&ready(port)));
    assert!(!text().contains(&ready(sport)), "{}", text());
    assert!(
        text().contains("recording what clients send to"),
        "{}",
        text()
    );
    // One generation request on the user's port.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let body = r#"{"prompt":"def main():","n_predict":4}"#;
    write!(
        s,
        "POST /completion HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    signal(&child.0, libc::SIGTERM);
    let st = wait_exit(&mut child.0, 60);
    assert_eq!(st.code(), Some(143), "{}", text());
    let t = lines(&trace);
    assert_eq!(t.len(), 3, "{t:?}\n{}", text());
    assert_eq!(t[1]["outcome"], "ok");
    assert_eq!(t[1]["n_generated"], 4);
    assert_eq!(t[2]["type"], "end");
    assert_eq!(
        std::fs::metadata(&trace).unwrap().permissions().mode() & 0o777,
        0o600
    );
    support::servers::assert_none_left("launch-record-smollm2.gguf", "after launch.sh stopped");
}

/// A stand-in upstream that answers 503 to everything for `loading` (a llama-server loading
/// its model), then `{}` (200) to everything but `/props`' own answer; its port.
fn loading_upstream(loading: Duration) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t0 = std::time::Instant::now();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = Vec::new();
                let mut b = [0u8; 4096];
                // The head, then the body its Content-Length declares.
                loop {
                    let Ok(n) = c.read(&mut b) else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&b[..n]);
                    let text = String::from_utf8_lossy(&buf).to_ascii_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let head = String::from_utf8_lossy(&buf).into_owned();
                let (status, body) = if t0.elapsed() < loading {
                    (
                        "503 Service Unavailable",
                        r#"{"error":{"code":503,"message":"Loading model"}}"#,
                    )
                } else if head.starts_with("GET /props") {
                    ("200 OK", r#"{"build_info":"b11434","total_slots":1}"#)
                } else {
                    ("200 OK", "{}")
                };
                let _ = write!(
                    c,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

/// `qtune record` started while its upstream still loads its model waits for it, saying so,
/// instead of exiting (issue 52). A POST that looks like generation on a path it does not
/// record is forwarded and named in a warning, at once and at the end.
#[test]
fn record_waits_for_a_loading_upstream_and_warns_of_unrecorded_generation() {
    let dir = tempfile::tempdir().unwrap();
    let up = loading_upstream(Duration::from_secs(3));
    let out = dir.path().join("t.jsonl");
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env_remove("QTUNE_LOG")
        .args(["record", "--upstream"])
        .arg(format!("http://127.0.0.1:{up}"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--out"])
        .arg(&out)
        .stdout(std::fs::File::create(dir.path().join("record.out")).unwrap())
        .stderr(std::fs::File::create(dir.path().join("record.err")).unwrap())
        .spawn()
        .unwrap();
    let mut rec = Reap(child);
    let err = || std::fs::read_to_string(dir.path().join("record.err")).unwrap_or_default();
    wait_until("qtune record", 60, || {
        let exited = rec.0.try_wait().unwrap();
        assert!(
            exited.is_none(),
            "qtune record exited: {exited:?}\n{}",
            err()
        );
        health_ok(port)
    });
    assert!(
        err().contains("is loading its model (503): waiting for it (up to 600 s)"),
        "{}",
        err()
    );
    for path in [
        "/api/generate",
        "/v1/engines/x/completions",
        "/api/generate",
    ] {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    signal(&rec.0, libc::SIGINT);
    let st = wait_exit(&mut rec.0, 60);
    let err = err();
    assert!(st.success(), "{st:?}\n{err}");
    let warned: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("warning: POST"))
        .collect();
    assert_eq!(warned.len(), 2, "once per path: {err}");
    assert!(
        warned[0].ends_with("POST /api/generate looks like generation: forwarded, not recorded"),
        "{err}"
    );
    assert!(
        warned[1].contains("POST /v1/engines/x/completions looks like generation"),
        "{err}"
    );
    assert!(
        err.contains("3 generation-looking requests were forwarded unrecorded"),
        "{err}"
    );
    assert!(
        err.lines()
            .filter(|l| l.contains("warning") || l.contains("loading"))
            .all(|l| l.chars().count() <= 100),
        "{err}"
    );
}
