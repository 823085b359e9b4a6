//! `qtune trace show` on hand-made traces: the summary it derives (sessions, prefixes,
//! re-reads, overlap) and one-line errors for traces it cannot trust. No server needed.

use crate::support;
use support::qtune;

use std::path::Path;

const HEADER: &str = r#"{"type":"header","format":"qtune-trace","version":1,"qtune_version":"0.1.0","started_at":"2026-11-26T00:00:00Z","upstream":"http://127.0.0.1:8081","server":{"build_info":"b11434","model_file":"m.gguf","slots":2,"chat_template_sha256":null},"model":{"n_vocab":100,"n_ctx":64,"n_ctx_train":64,"n_params":1,"size_bytes":1},"tokenizer_sha256":"x"}"#;

const END: &str = r#"{"type":"end","ended_at":"2026-11-26T00:01:00Z","requests":1,"interrupted":0,"other_requests":0}"#;

fn req(id: u64, at: f64, end: f64, tokens: &[u32], cache: u64, read: u64, over: &[u64]) -> String {
    serde_json::json!({
        "type": "request", "id": id, "endpoint": "/v1/chat/completions", "stream": id % 2 == 0,
        "arrived_ms": at, "first_byte_ms": at + 1.0, "ended_ms": end, "overlapped": over,
        "status": 200, "outcome": "ok", "prompt_tokens": tokens, "n_generated": 4,
        "max_tokens": 4,
        "timings": {"cache_n": cache, "prompt_n": read, "prompt_ms": 1.0, "predicted_n": 4, "predicted_ms": 2.0}
    })
    .to_string()
}

fn write(dir: &Path, name: &str, body: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// A session of three turns (the third diverges from the second at 6 tokens and the server
/// re-read more than the divergence needed), an unrelated request overlapping the second.
fn good_trace() -> String {
    let a: Vec<u32> = (1..=8).collect();
    let b: Vec<u32> = (1..=12).collect(); // extends a
    let c: Vec<u32> = vec![50, 51, 52, 53, 54]; // new
    let d: Vec<u32> = (1..=6).chain([90, 91, 92, 93]).collect(); // diverges from b at 6
    [
        HEADER.to_string(),
        req(1, 0.0, 100.0, &a, 0, 8, &[]),
        req(3, 150.0, 200.0, &c, 0, 5, &[2]),
        req(2, 120.0, 300.0, &b, 8, 4, &[3]),
        req(4, 400.0, 450.0, &d, 0, 10, &[]),
        r#"{"type":"end","ended_at":"2026-11-26T00:01:00Z","requests":4,"interrupted":0,"other_requests":2}"#.into(),
    ]
    .join("\n")
        + "\n"
}

#[test]
fn show_derives_sessions_prefixes_rereads_and_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.jsonl", good_trace().as_bytes());
    let o = qtune()
        .args(["trace", "show", "--json"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", support::output_text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &v["summary"];
    assert_eq!(s["requests"], 4);
    assert_eq!(s["sessions"], 2, "{s}");
    assert_eq!(s["max_concurrent"], 2);
    assert_eq!(s["cached_tokens"], 8);
    assert_eq!(s["reread_tokens"], 27);
    // Request 4 needed 4 tokens after its 6-token common prefix and the server read 10.
    assert_eq!(s["reread_beyond_divergence"], 6, "{s}");
    assert_eq!(s["generated_tokens"], 16);
    assert_eq!(s["complete"], true);
    let r = v["requests"].as_array().unwrap();
    let ids: Vec<u64> = r.iter().map(|x| x["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3, 4], "arrival order");
    assert_eq!(r[1]["parent"], 1);
    assert_eq!(r[1]["extends_parent"], true);
    assert_eq!(r[1]["turn"], 2);
    assert_eq!(r[2]["parent"], serde_json::Value::Null);
    assert_eq!(r[2]["session"], 2);
    assert_eq!(r[3]["parent"], 2);
    assert_eq!(r[3]["common_prefix"], 6);
    assert_eq!(r[3]["extends_parent"], false);
    assert_eq!(
        (r[3]["session"].as_u64(), r[3]["turn"].as_u64()),
        (Some(1), Some(3))
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("prompt_tokens\": ["));

    let o = qtune().args(["trace", "show"]).arg(&p).output().unwrap();
    assert!(o.status.success(), "{}", support::output_text(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("4 requests (4 ok) over 0.5s, in 2 sessions"),
        "{text}"
    );
    assert!(text.contains("at most 2 at once"), "{text}");
    assert!(
        text.contains("extends #1") && text.contains("6 of #2"),
        "{text}"
    );
    assert!(
        text.contains("re-read beyond the divergence: 6 tokens"),
        "{text}"
    );
}

/// Each bad trace: one line on stderr, `qtune: error: the trace ...`, and a failure status.
fn one_line_error(p: &Path, expect: &str) {
    let t0 = std::time::Instant::now();
    let o = qtune().args(["trace", "show"]).arg(p).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", support::output_text(&o));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("qtune: error: "), "{err}");
    assert!(err.contains(expect), "wanted {expect:?} in {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(o.stdout.is_empty());
    assert!(t0.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn bad_traces_get_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = good_trace();

    let cut = &good[..good.len() - 40];
    one_line_error(&write(d, "cut.jsonl", cut.as_bytes()), "is cut off");

    let mut bin = good.clone().into_bytes();
    bin[300] = 0xff;
    bin[301] = 0xfe;
    one_line_error(&write(d, "bin.jsonl", &bin), "not UTF-8");
    one_line_error(
        &write(d, "nul.jsonl", b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\n"),
        "binary",
    );

    one_line_error(
        &write(d, "junk.jsonl", b"{\"hello\": 1}\n"),
        "line 1 is not a trace header",
    );
    one_line_error(&write(d, "empty.jsonl", b""), "empty");
    let v2 = HEADER.replace("\"version\":1", "\"version\":2");
    one_line_error(&write(d, "v2.jsonl", v2.as_bytes()), "format version 2");

    // A million requests: refused before they are parsed.
    let mut big = String::from(HEADER);
    big.push('\n');
    big.push_str(&"{}\n".repeat(1_000_000));
    one_line_error(
        &write(d, "big.jsonl", big.as_bytes()),
        "at most 100,000 requests",
    );

    // A negative gap: request 2 arrives before request 1.
    let neg = format!(
        "{HEADER}\n{}\n{}\n",
        req(1, 500.0, 600.0, &[1, 2], 0, 2, &[]),
        req(2, 100.0, 200.0, &[1, 2, 3], 0, 3, &[])
    );
    one_line_error(&write(d, "neg.jsonl", neg.as_bytes()), "negative gap");
    let back = format!("{HEADER}\n{}\n", req(1, 500.0, 100.0, &[1], 0, 1, &[]));
    one_line_error(&write(d, "back.jsonl", back.as_bytes()), "ended");

    // Longer than the server's context (64 tokens per slot in the header).
    let long: Vec<u32> = (0..70).collect();
    let l = format!("{HEADER}\n{}\n", req(1, 0.0, 1.0, &long, 0, 70, &[]));
    one_line_error(
        &write(d, "long.jsonl", l.as_bytes()),
        "longer than the server's context",
    );

    let vocab = format!("{HEADER}\n{}\n", req(1, 0.0, 1.0, &[5, 100], 0, 2, &[]));
    one_line_error(
        &write(d, "vocab.jsonl", vocab.as_bytes()),
        "outside the model's vocabulary",
    );
    // An answer's tokens are held to the vocabulary too (issue 54).
    let mut answer: serde_json::Value =
        serde_json::from_str(&req(1, 0.0, 1.0, &[5, 6], 0, 2, &[])).unwrap();
    answer["answer_tokens"] = serde_json::json!([7, 100]);
    let answer = format!("{HEADER}\n{answer}\n");
    one_line_error(
        &write(d, "answer-vocab.jsonl", answer.as_bytes()),
        "token id 100 is outside the model's vocabulary",
    );

    // A complete trace (its end line written) that names a request it does not hold lies.
    let ghost = format!("{HEADER}\n{}\n{END}\n", req(1, 0.0, 1.0, &[5], 0, 1, &[9]));
    one_line_error(
        &write(d, "ghost.jsonl", ghost.as_bytes()),
        "not in the trace",
    );

    // Counts near 2^64 never wrap past the context check: 50 prompt tokens and 2^64 - 3
    // generated wrapped to 47 and passed it (a debug build panicked).
    let fifty: Vec<u32> = (0..50).collect();
    let huge = format!("{HEADER}\n{}\n", req(1, 0.0, 1.0, &fifty, 0, 50, &[])).replace(
        "\"n_generated\":4",
        &format!("\"n_generated\":{}", u64::MAX - 2),
    );
    one_line_error(
        &write(d, "huge.jsonl", huge.as_bytes()),
        "n_generated is 18446744073709551613",
    );
    let cached = format!("{HEADER}\n{}\n", req(1, 0.0, 1.0, &[5], u64::MAX, 2, &[]));
    one_line_error(
        &write(d, "cached.jsonl", cached.as_bytes()),
        "timings.cache_n is 18446744073709551615",
    );
    let ctx = HEADER.replace("\"n_ctx\":64,", &format!("\"n_ctx\":{},", u64::MAX));
    let ctx = format!("{ctx}\n{}\n", req(1, 0.0, 1.0, &[5], 0, 1, &[]));
    one_line_error(&write(d, "ctx.jsonl", ctx.as_bytes()), "model.n_ctx is");

    one_line_error(d, "is a directory");
    one_line_error(&d.join("missing.jsonl"), "cannot read the trace");
}

/// A recorder killed with SIGKILL leaves no end line, and its last finished requests name the
/// ones still in flight, which never got a line: the trace reads, those ids dropped.
#[test]
fn a_trace_cut_short_by_a_killed_recorder_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "{HEADER}\n{}\n{}\n",
        req(1, 0.0, 100.0, &[1, 2, 3], 0, 3, &[2, 8]),
        req(2, 10.0, 50.0, &[7, 8], 0, 2, &[1, 8, 9])
    );
    let p = write(dir.path(), "killed.jsonl", body.as_bytes());
    let o = qtune()
        .args(["trace", "show", "--json"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", support::output_text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["summary"]["requests"], 2, "{v}");
    assert_eq!(v["summary"]["complete"], false, "{v}");
    assert_eq!(v["summary"]["max_concurrent"], 2, "{v}");
    let o = qtune().args(["trace", "show"]).arg(&p).output().unwrap();
    assert!(o.status.success(), "{}", support::output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("no end line"),
        "{}",
        support::output_text(&o)
    );
}
