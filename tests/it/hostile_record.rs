//! Issue 48, new surfaces: the recording proxy (`qtune record`) against hostile clients and
//! upstreams. A request body that parses into gigabytes (60 MiB of token ids) is forwarded
//! with the proxy's memory bounded, in front of the real llama-server; an upstream whose
//! `/props` answer is 1 GiB, or never comes, is refused in one line in bounded memory and
//! time (the fake server plays that upstream: a real one does neither on demand).
//! Issue 53: stalled uploads and hundreds of idle connections from other clients never hold up
//! a real client's requests, and the upstream's credentials are never printed or stored.

use crate::support;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::record::{
    connect_from, start_record_at, start_server, stop_record, wait_exit, wait_until, Reap,
};

/// `qtune record` run by a small Python parent that forwards SIGINT to it and, once it
/// exits, prints its peak resident memory (`maxrss_kib N`, getrusage of its children) on
/// stderr. The recorder dies with the parent (PR_SET_PDEATHSIG): a test that fails before
/// it stops the recorder (and so kills only the parent) leaves no `qtune record` behind.
fn record_measured(upstream: u16, listen: u16, dir: &Path) -> Reap {
    let wrapper = "import ctypes, resource, signal, subprocess, sys\n\
die = lambda: ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n\
p = subprocess.Popen(sys.argv[1:], preexec_fn=die)\n\
signal.signal(signal.SIGINT, lambda *a: p.send_signal(signal.SIGINT))\n\
r = p.wait()\n\
print('maxrss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n\
sys.exit(r)\n";
    let child = Command::new("python3")
        .args(["-c", wrapper])
        .arg(env!("CARGO_BIN_EXE_qtune"))
        .args(["record", "--upstream"])
        .arg(format!("http://127.0.0.1:{upstream}"))
        .args(["--listen", &format!("127.0.0.1:{listen}"), "--out"])
        .arg(dir.join("trace.jsonl"))
        .env_remove("QTUNE_LOG")
        .stdout(std::fs::File::create(dir.join("record.out")).unwrap())
        .stderr(std::fs::File::create(dir.join("record.err")).unwrap())
        .spawn()
        .unwrap();
    Reap(child)
}

/// The real llama-server on SmolLM2 (linked into `dir` as `link`: each test's own name, so
/// the servers left after it are its own) that every recorder test here forwards to: 2,048
/// tokens of context, one slot, one thread. None after SKIP without the server or the model.
fn smollm2_upstream(dir: &Path, link: &str) -> Option<(Reap, u16)> {
    let model = support::smollm2()?;
    start_server(dir, &model, link, &["-c", "2048", "-np", "1", "-t", "1"])
}

/// The peak resident memory the wrapper printed, MiB.
fn peak_mib(dir: &Path) -> u64 {
    let err = std::fs::read_to_string(dir.join("record.err")).unwrap();
    let kib: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("maxrss_kib "))
        .unwrap_or_else(|| panic!("no peak memory: {err}"))
        .trim()
        .parse()
        .unwrap();
    kib / 1024
}

/// A body of 60 MiB (under the proxy's 64 MiB bound): a `/completion` prompt of 30 million
/// token ids. Parsed whole into JSON values it took qtune record to 1 GiB resident; it is
/// forwarded as it came (llama-server answers it) and recorded without its prompt.
#[test]
fn a_request_body_of_millions_of_values_is_forwarded_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_server, sport)) = smollm2_upstream(dir.path(), "hostile-record.gguf") else {
        return;
    };
    let listen = support::free_port();
    let mut rec = record_measured(sport, listen, dir.path());
    wait_until("qtune record", 60, || support::health_ok(listen));

    let n = 30 << 20;
    let mut body = Vec::with_capacity(2 * n + 64);
    body.extend_from_slice(b"{\"n_predict\":1,\"prompt\":[");
    for i in 0..n {
        body.extend_from_slice(if i + 1 < n { b"0," } else { b"0" });
    }
    body.extend_from_slice(b"]}");
    assert!(body.len() < qtune::traffic::proxy::MAX_BODY);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", listen)).unwrap();
    write!(
        s,
        "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(&body).unwrap();
    drop(body);
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    // llama-server's own answer, forwarded (it refuses a prompt past its context).
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    assert!(!answer.contains("qtune record"), "{answer}");

    support::record::signal(&rec.0, libc::SIGINT);
    let st = wait_exit(&mut rec.0, 60);
    let err = std::fs::read_to_string(dir.path().join("record.err")).unwrap();
    assert!(st.success(), "{st:?}\n{err}");
    let peak = peak_mib(dir.path());
    assert!(peak < 512, "qtune record peaked at {peak} MiB\n{err}");
    let trace = std::fs::read_to_string(dir.path().join("trace.jsonl")).unwrap();
    let req: serde_json::Value = trace
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["type"] == "request")
        .expect("the request is recorded");
    assert!(req["prompt_tokens"].is_null(), "{req}");
    assert!(
        req["note"]
            .as_str()
            .is_some_and(|n| n.contains("JSON values")),
        "{req}"
    );
}

/// The fake server as an upstream in `mode` on a free port, healthy.
fn fake_upstream(mode: &str, dir: &Path) -> (Reap, u16) {
    let port = support::free_port();
    let child = Command::new(support::trial::fake_server())
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .env("FAKE_MODE", mode)
        .env("FAKE_REPLY_MIB", "1024")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("upstream.log")).unwrap())
        .spawn()
        .unwrap();
    let child = Reap(child);
    wait_until("the fake upstream", 60, || support::health_ok(port));
    (child, port)
}

/// `qtune record` in front of a hostile upstream: it stops within `within` with one error
/// line holding `needle`, in bounded memory, and listens nowhere.
fn refused_upstream(mode: &str, needle: &str, within: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let (_up, uport) = fake_upstream(mode, dir.path());
    let listen = support::free_port();
    let t0 = Instant::now();
    let mut rec = record_measured(uport, listen, dir.path());
    let st = loop {
        if let Some(st) = rec.0.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > within + Duration::from_secs(60) {
            let _ = rec.0.kill();
            let _ = rec.0.wait();
            panic!(
                "{mode}: qtune record still running after {:?}: {}",
                t0.elapsed(),
                std::fs::read_to_string(dir.path().join("record.err")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let took = t0.elapsed();
    let err = std::fs::read_to_string(dir.path().join("record.err")).unwrap();
    assert!(!st.success(), "{mode}: {err}");
    assert!(took < within, "{mode}: took {took:?}: {err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{mode}: {err}");
    assert!(errors[0].starts_with("qtune: error: "), "{mode}: {err}");
    assert!(errors[0].contains(needle), "{mode}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let peak = peak_mib(dir.path());
    assert!(
        peak < 256,
        "{mode}: qtune record peaked at {peak} MiB: {err}"
    );
    assert!(!support::health_ok(listen), "{mode}: a proxy is listening");
}

#[test]
fn an_upstream_whose_props_answer_is_a_gigabyte_is_refused_in_bounded_memory() {
    refused_upstream("huge-props", "larger than 16 MiB", Duration::from_secs(60));
}

#[test]
fn an_upstream_that_never_answers_is_refused_in_bounded_time() {
    // /props waits 30 s at most.
    refused_upstream("hang-props", "/props", Duration::from_secs(50));
}

/// Issue 53: 200 clients at once, each answered 15 MiB (under the 16 MiB kept per answer),
/// took the recorder to 1.3 GB when the bound was per connection. Answers are kept up to
/// 128 MiB for all at once; past that they are forwarded unread. Every client gets its whole
/// answer, and the recorder's peak stays far under the 3 GB it would keep. (The fake server
/// is the upstream: a real one does not answer 15 MiB on demand.)
#[test]
fn two_hundred_large_answers_at_once_are_kept_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let up = Command::new(support::trial::fake_server())
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .env("FAKE_MODE", "huge-reply")
        .env("FAKE_REPLY_MIB", "15")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("upstream.log")).unwrap())
        .spawn()
        .unwrap();
    let _up = Reap(up);
    wait_until("the fake upstream", 60, || support::health_ok(port));
    let listen = support::free_port();
    let mut rec = record_measured(port, listen, dir.path());
    wait_until("qtune record", 60, || support::health_ok(listen));
    // From four addresses (one address may hold 128 connections).
    let clients: Vec<_> = (0..200u8)
        .map(|i| {
            std::thread::spawn(move || {
                let from = std::net::Ipv4Addr::new(127, 0, 0, 2 + i % 4);
                let mut s = connect_from(from, listen);
                s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
                let body = r#"{"messages":[{"role":"user","content":"hi"}]}"#;
                write!(
                    s,
                    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\
                     Content-Type: application/json\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
                let mut n = 0usize;
                let mut head = Vec::new();
                let mut buf = vec![0u8; 1 << 16];
                while let Ok(k) = s.read(&mut buf) {
                    if k == 0 {
                        break;
                    }
                    if head.len() < 512 {
                        head.extend_from_slice(&buf[..k.min(512)]);
                    }
                    n += k;
                }
                (n, String::from_utf8_lossy(&head).into_owned())
            })
        })
        .collect();
    let got: Vec<(usize, String)> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    for (n, head) in &got {
        assert!(
            *n > 15 << 20,
            "a client got {n} bytes, not its whole answer: {head}"
        );
    }
    stop_record(&mut rec, dir.path());
    let peak = peak_mib(dir.path());
    let err = std::fs::read_to_string(dir.path().join("record.err")).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert!(peak < 512, "qtune record peaked at {peak} MiB: {err}");
    eprintln!("200 answers of 15 MiB at once: qtune record peaked at {peak} MiB");
}

/// One request of a real client (from 127.0.0.1) to the proxy at `port`: how long its whole
/// answer took, and its status line. Given up after 20 s (a frozen recorder).
fn ask(port: u16, method: &str, path: &str, body: &str) -> (Duration, String) {
    let t0 = Instant::now();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.lines().next().unwrap_or("no answer").to_string();
    (t0.elapsed(), status)
}

/// The real client's requests: a bodiless one, a small one and a generation.
fn client_round(port: u16) -> Vec<(Duration, String)> {
    let chat = r#"{"messages":[{"role":"user","content":"Say hi."}],"max_tokens":1}"#;
    vec![
        ask(port, "GET", "/health", ""),
        ask(port, "POST", "/tokenize", r#"{"content":"hello"}"#),
        ask(port, "POST", "/v1/chat/completions", chat),
    ]
}

/// Issue 53: 16 stalled uploads (each declares 64 MiB and sends one byte; four of them
/// chunked) from one client and 600 idle connections (50 of them sending a head byte by
/// byte, slowloris) from another, and a real client's requests are still answered within
/// 2 s each. At 8dab55a the 16 reservations took the whole 1 GiB of body room and the
/// 512 connection slots were all taken: nothing was answered. The upstream is given with
/// credentials: they are used, and never printed or stored.
#[test]
fn stalled_uploads_and_idle_connections_never_hold_up_a_real_client() {
    use std::net::Ipv4Addr;
    let dir = tempfile::tempdir().unwrap();
    let Some((_server, sport)) = smollm2_upstream(dir.path(), "hostile-busy.gguf") else {
        return;
    };
    let out = dir.path().join("trace.jsonl");
    let upstream = format!("http://qtune:s3cr3t-pw@127.0.0.1:{sport}");
    let (mut rec, port) = start_record_at(&upstream, &out, dir.path());
    // The same requests before: the bound allows for a slow box (never less than 2 s).
    let before = client_round(port);
    for (took, status) in &before {
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        assert!(*took < Duration::from_secs(20), "{took:?}");
    }

    let uploader = Ipv4Addr::new(127, 0, 0, 3);
    let mut hostile = Vec::new();
    for i in 0..16 {
        let mut s = connect_from(uploader, port);
        let framing = if i < 4 {
            "Transfer-Encoding: chunked\r\n\r\n4000000\r\n{".to_string()
        } else {
            format!("Content-Length: {}\r\n\r\n{{", 64 << 20)
        };
        write!(
            s,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{framing}"
        )
        .unwrap();
        hostile.push(s);
    }
    let idler = Ipv4Addr::new(127, 0, 0, 2);
    for i in 0..600 {
        let mut s = connect_from(idler, port);
        if i % 12 == 0 {
            let _ = s.write_all(b"GET /health HTTP/1.1\r\nHo");
        }
        hostile.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    for round in 0..3 {
        for (i, (took, status)) in client_round(port).into_iter().enumerate() {
            let bound = Duration::from_secs(2).max(before[i].0 * 3);
            assert!(
                status.starts_with("HTTP/1.1 200"),
                "round {round}, request {i}: {status} after {took:?}"
            );
            assert!(
                took < bound,
                "round {round}, request {i}: answered after {took:?} (bound {bound:?})"
            );
        }
    }
    // Past its cap, the idle client's connections were answered 503 and closed at once.
    let last = hostile.last_mut().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut refused = String::new();
    let _ = last.read_to_string(&mut refused);
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("connections"), "{refused}");
    drop(hostile);

    stop_record(&mut rec, dir.path());
    let err = std::fs::read_to_string(dir.path().join("record.err")).unwrap();
    let trace = std::fs::read_to_string(&out).unwrap();
    assert!(err.contains(&format!("127.0.0.1:{sport}")), "{err}");
    for text in [&err, &trace] {
        assert!(!text.contains("s3cr3t"), "the credentials leaked: {text}");
    }
    let lines: Vec<serde_json::Value> = trace
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["upstream"], format!("http://127.0.0.1:{sport}"));
    let recorded = lines.iter().filter(|v| v["type"] == "request").count();
    assert_eq!(recorded, 4, "the client's four generations are recorded");
}

/// Issue 53: four addresses at the per-address cap (4 x 128 = 512 idle connections) used to
/// fill every connection the recorder serves; the last 64 are kept for light clients, so a
/// real client's requests are still answered within 2 s (or 3x the same before), and a busy
/// address's next connection is answered 503 at once instead of waiting.
#[test]
fn four_busy_addresses_never_lock_out_a_real_client() {
    use std::net::Ipv4Addr;
    let dir = tempfile::tempdir().unwrap();
    let Some((_server, sport)) = smollm2_upstream(dir.path(), "hostile-four.gguf") else {
        return;
    };
    let out = dir.path().join("trace.jsonl");
    let (mut rec, port) = support::record::start_record(sport, &out, dir.path());
    let before = client_round(port);
    let mut idle = Vec::new();
    for i in 2..6 {
        for _ in 0..128 {
            idle.push(connect_from(Ipv4Addr::new(127, 0, 0, i), port));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    for (i, (took, status)) in client_round(port).into_iter().enumerate() {
        let bound = Duration::from_secs(2).max(before[i].0 * 3);
        assert!(status.starts_with("HTTP/1.1 200"), "request {i}: {status}");
        assert!(
            took < bound,
            "request {i}: answered after {took:?} (bound {bound:?})"
        );
    }
    let mut more = connect_from(Ipv4Addr::new(127, 0, 0, 5), port);
    more.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t0 = Instant::now();
    let mut refused = String::new();
    let _ = more.read_to_string(&mut refused);
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(
        refused.contains("connections are open already"),
        "{refused}"
    );
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    drop(idle);
    stop_record(&mut rec, dir.path());
}

/// Issue 53, the fourth probe: hostile bodies on the recorder's new routes, `/v1/messages`
/// (Claude Code's) and `/v1/responses` (tests/fixtures/hostile-messages.py: not JSON, the
/// wrong types, a 10,000-deep nesting, a tool schema past serde's 128 levels, lone
/// surrogates, a cut billing header, 2,000 messages, a 4 MiB string, duplicate keys), sent raw
/// through `qtune record` in front of the real server. Each is answered (the recorder forwards,
/// the server judges), `/health` right after each within 2 s, nothing panics, the trace reads,
/// and a body qtune cannot parse says so instead of "the request has no messages".
#[test]
fn hostile_messages_and_responses_bodies_are_forwarded_and_never_break_the_recorder() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_server, sport)) = smollm2_upstream(dir.path(), "hostile-messages.gguf") else {
        return;
    };
    let trace = dir.path().join("trace.jsonl");
    let (mut rec, port) = support::record::start_record(sport, &trace, dir.path());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile-messages.py");
    let o = Command::new("python3")
        .arg(&script)
        .arg(format!("http://127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cases: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cases = cases.as_object().unwrap();
    assert!(cases.len() >= 30, "{cases:?}");
    for (name, c) in cases {
        let status = c["status"].as_u64();
        assert!(
            status.is_some_and(|s| (200..600).contains(&s)),
            "{name}: no answer: {c}"
        );
        assert_eq!(c["health"], 200, "{name}: {c}");
        assert!(c["health_s"].as_f64().unwrap() < 2.0, "{name}: {c}");
    }
    stop_record(&mut rec, dir.path());
    let err = std::fs::read_to_string(dir.path().join("record.err")).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    let show = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["trace", "show"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(
        show.status.success(),
        "{}",
        String::from_utf8_lossy(&show.stderr)
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    // The pinned server reads the 240-deep schema (nlohmann has no depth limit) and answers;
    // qtune's serde stops at 128 levels and says so.
    assert_eq!(
        cases["messages-tool-deep-schema"]["status"], 200,
        "{cases:?}"
    );
    assert!(
        text.contains("qtune cannot read its body as JSON (recursion limit exceeded"),
        "{text}"
    );
}
