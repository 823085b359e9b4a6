//! `--workload FILE.jsonl`: a recorded trace replayed against each launch (issue 41, part 2).
//! Real server on the CPU: a session recorded through `qtune record`, then `qtune compare`
//! replays it; the replay's prompts, cache hits and generated counts match the recording. Bad
//! traces are refused with one line before anything is launched. Never asserts a speed.

use crate::support;
use support::output_text;
use support::record::{start_record, start_server, stop_record};

use std::path::{Path, PathBuf};
use std::process::Command;

fn lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The recorded requests, by id.
fn recorded(trace: &Path) -> Vec<serde_json::Value> {
    let mut r: Vec<serde_json::Value> = lines(trace)
        .into_iter()
        .filter(|l| l["type"] == "request")
        .collect();
    r.sort_by_key(|r| r["id"].as_u64());
    r
}

/// `qtune compare --workload trace` of two commands on `model` with `args`, one round; the
/// comparison's JSON.
/// `private` are words of the recorded prompts: none may be in the comparison's folder.
fn compare(
    dir: &Path,
    model: &Path,
    args: &str,
    trace: &Path,
    private: &[&str],
) -> serde_json::Value {
    let server = support::real_server().unwrap();
    let out = dir.join("cmp");
    let m = model.display();
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env("QTUNE_ALLOW_BUSY", "1")
        .args(["compare", "--rounds", "1", "--out"])
        .arg(&out)
        .arg("--workload")
        .arg(trace)
        .arg("--server")
        .arg(&server)
        .arg(format!("llama-server -m {m} {args}"))
        .arg(format!("llama-server -m {m} {args} -b 1024"))
        .output()
        .unwrap();
    let text = output_text(&o);
    assert!(o.status.success(), "{text}");
    let flat = support::flat(&text);
    assert!(flat.contains("time per request, "), "{text}");
    assert!(flat.contains("90th percentile"), "{text}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
    // Privacy: nothing of the prompts in the comparison's folder (its JSON, journal and the
    // servers' logs): neither their token ids nor their text.
    for e in walk(&out) {
        let body = String::from_utf8_lossy(&std::fs::read(&e).unwrap()).into_owned();
        assert!(!body.contains("\"prompt_tokens\":["), "{}", e.display());
        assert!(!body.contains("answer_tokens"), "{}", e.display());
        for p in private {
            assert!(!body.contains(p), "{p:?} in {}", e.display());
        }
    }
    v
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// How many leading prompt tokens two recorded requests share.
fn common_prefix(a: &serde_json::Value, b: &serde_json::Value) -> u64 {
    let (a, b) = (
        a["prompt_tokens"].as_array().unwrap(),
        b["prompt_tokens"].as_array().unwrap(),
    );
    a.iter().zip(b).take_while(|(x, y)| x == y).count() as u64
}

/// Every launch replayed every recorded request with the recorded prompt length and generated
/// count, and (for a request sent while no other ran) the recorded cache hit.
fn assert_replayed_as_recorded(v: &serde_json::Value, rec: &[serde_json::Value]) {
    let launches = v["rounds"][0]["launches"].as_array().unwrap();
    assert_eq!(launches.len(), 2, "{v}");
    for l in launches {
        assert_eq!(l["outcome"], "ok", "{l}");
        let reps = l["replay"]["requests"].as_array().unwrap();
        assert_eq!(reps.len(), rec.len(), "{l}");
        for (i, (got, want)) in reps.iter().zip(rec).enumerate() {
            let t = &want["timings"];
            let what = format!("request {}: replayed {got}, recorded {t}", want["id"]);
            assert_eq!(got["id"], want["id"], "{what}");
            let len = want["prompt_tokens"].as_array().unwrap().len() as u64;
            assert_eq!(got["prompt_tokens"].as_u64().unwrap(), len, "{what}");
            assert_eq!(got["generated"], want["n_generated"], "{what}");
            let (cache, read) = (got["cache_n"].as_u64(), got["prompt_n"].as_u64());
            if got["in_flight"] == 0 {
                assert_eq!(got["cache_n"], t["cache_n"], "{what}");
                assert_eq!(got["prompt_n"], t["prompt_n"], "{what}");
            } else {
                // Sent while another request ran: the server picks the free slot (or restores
                // a prompt from its RAM cache), and that choice depends on timing. The cache hit
                // is still bounded by what an earlier prompt shares with this one.
                let shared = rec[..i]
                    .iter()
                    .map(|e| common_prefix(e, want))
                    .max()
                    .unwrap_or(0);
                assert!(cache.unwrap() <= shared, "{what}: shares {shared}");
                assert_eq!(cache.unwrap() + read.unwrap(), len, "{what}");
            }
        }
        let mean = l["replay"]["mean_s"].as_f64().unwrap();
        let p90 = l["replay"]["p90_s"].as_f64().unwrap();
        assert!(mean > 0.0 && p90 > 0.0, "{l}");
    }
    let w = &v["workloads"][0];
    assert_eq!(w["workload"], "session.jsonl", "{w}");
    assert_eq!(w["median_p90_s"].as_array().unwrap().len(), 2, "{w}");
}

/// A session recorded through `qtune record` in front of the real llama-server on `model`
/// (linked into `dir` as `link`) with `server_args`: `client` sends its requests to the
/// recorder's port. The trace's path (`dir/session.jsonl`), or None after SKIP where there is
/// no real server.
fn record_session(
    dir: &Path,
    model: &Path,
    link: &str,
    server_args: &[&str],
    client: impl FnOnce(u16),
) -> Option<PathBuf> {
    let (server, sport) = start_server(dir, model, link, server_args)?;
    let trace = dir.join("session.jsonl");
    let (mut rec, pport) = start_record(sport, &trace, dir);
    client(pport);
    stop_record(&mut rec, dir);
    drop(server);
    Some(trace)
}

#[test]
fn a_recorded_session_replays_with_its_prompts_cache_hits_and_lengths() {
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
    let args = "-c 8192 -np 2 -t 1";
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/record-client.py");
    let client = |port: u16| {
        let o = Command::new("python3")
            .arg(&script)
            .arg(format!("http://127.0.0.1:{port}"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", output_text(&o));
    };
    let server_args: Vec<&str> = args.split(' ').collect();
    let Some(trace) = record_session(dir.path(), &model, "smollm2.gguf", &server_args, client)
    else {
        return;
    };
    let rec = recorded(&trace);
    assert_eq!(rec.len(), 5);
    let private = ["terse assistant", "sorting algorithm", "type hints"];
    let v = compare(dir.path(), &model, args, &trace, &private);
    assert_replayed_as_recorded(&v, &rec);
    // The two requests that overlapped in the recording overlapped in the replay.
    let reps = v["rounds"][0]["launches"][0]["replay"]["requests"]
        .as_array()
        .unwrap();
    assert_eq!(reps[3]["in_flight"], 1, "{}", reps[3]);
    assert_eq!(reps[4]["in_flight"], 0, "{}", reps[4]);
}

/// POST `body` to `path` on the recorder at `port`; the request must succeed.
fn post(port: u16, path: &str, body: &serde_json::Value) {
    let o = Command::new("curl")
        .args([
            "-sS",
            "--fail",
            "-m",
            "600",
            "-H",
            "Content-Type: application/json",
        ])
        .arg("-d")
        .arg(body.to_string())
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
}

/// One `/completion` through the recorder: `prompt` (text), `n` tokens generated.
fn complete(port: u16, prompt: &str, n: u32) {
    let body = serde_json::json!({"prompt": prompt, "n_predict": n, "ignore_eos": true,
        "temperature": 0, "cache_prompt": true});
    post(port, "/completion", &body);
}

#[test]
fn a_diverging_history_on_a_recurrent_model_rereads_as_it_did_live() {
    let dir = tempfile::tempdir().unwrap();
    if !support::vocab() {
        return;
    }
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model");
    let args = "-c 4096 -np 1 -t 1";
    // A history, its extension, then the same history edited well before its end (a client
    // compacting it): the recurrent state cannot roll back, so the server re-reads.
    let words: Vec<String> = (0..300).map(|i| format!("w{i}")).collect();
    let client = |port: u16| {
        let history = words.join(" ");
        complete(port, &history, 4);
        let longer = format!("{history} and then some more words follow here");
        complete(port, &longer, 4);
        let edited = format!(
            "{} EDITED {}",
            words[..100].join(" "),
            words[100..].join(" ")
        );
        complete(port, &edited, 4);
    };
    let server_args: Vec<&str> = args.split(' ').collect();
    let Some(trace) = record_session(
        dir.path(),
        &model,
        "tiny-qwen35moe.gguf",
        &server_args,
        client,
    ) else {
        return;
    };
    let rec = recorded(&trace);
    assert_eq!(rec.len(), 3);
    // The recording shows the recurrent re-read: the server could not resume the third prompt
    // where it diverged from the second (its state does not roll back), so it reused less than
    // the common prefix and read the rest again.
    let tokens = |i: usize| rec[i]["prompt_tokens"].as_array().unwrap().clone();
    let (p2, p3) = (tokens(1), tokens(2));
    let common = p2.iter().zip(&p3).take_while(|(a, b)| a == b).count() as u64;
    let t3 = &rec[2]["timings"];
    assert!(common > 100, "the edit is not deep enough: {common}");
    assert!(
        t3["cache_n"].as_u64().unwrap() < common,
        "no re-read before the divergence ({common} tokens in common): {t3}"
    );
    let v = compare(dir.path(), &model, args, &trace, &["w150 w151", "EDITED"]);
    assert_replayed_as_recorded(&v, &rec);
}

/// A request that generates a single token replays as a real one (the plausibility check
/// had read llama-server's `predicted_ms` of 0.001 for it, the first token being timed with
/// the prompt, as a million tokens a second: every launch of such a trace was implausible),
/// and the replay's generation speed counts the tokens after the first, as the server does.
#[test]
fn a_request_of_one_generated_token_replays_as_a_real_one() {
    let dir = tempfile::tempdir().unwrap();
    let Some(model) = support::smollm2() else {
        return;
    };
    let args = "-c 2048 -np 1 -t 1";
    let client = |port: u16| {
        complete(
            port,
            "Classify this request in one word: fix the failing test",
            1,
        );
        complete(port, "Write one sentence about the sea and the wind", 16);
    };
    let server_args: Vec<&str> = args.split(' ').collect();
    let Some(trace) = record_session(dir.path(), &model, "smollm2.gguf", &server_args, client)
    else {
        return;
    };
    let rec = recorded(&trace);
    assert_eq!(rec.len(), 2);
    let v = compare(dir.path(), &model, args, &trace, &[]);
    assert_replayed_as_recorded(&v, &rec);
    let body = v.to_string();
    assert!(!body.contains("mplausible"), "{body}");
    for l in v["rounds"][0]["launches"].as_array().unwrap() {
        let reqs = l["replay"]["requests"].as_array().unwrap();
        assert_eq!(reqs[0]["generated"], 1, "{l}");
        // Its generation time is the server's clamp, not a time a token took.
        assert!(reqs[0]["predicted_ms"].as_f64().unwrap() < 0.01, "{l}");
    }
}

/// A trace file with `requests` request lines of a 4-token prompt, `n_ctx` in the header.
fn write_trace(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
}

const HEADER: &str = r#"{"type":"header","format":"qtune-trace","version":1,"qtune_version":"0","started_at":"2026-11-26T00:00:00Z","upstream":"http://x","model":{"n_vocab":200000,"n_ctx":100000}}"#;

fn request(id: u64, arrived: f64, prompt_len: usize, gen: u64) -> String {
    let prompt: Vec<u32> = (1..=prompt_len as u32).collect();
    serde_json::json!({"type":"request","id":id,"endpoint":"/completion","stream":false,
        "arrived_ms":arrived,"first_byte_ms":arrived + 1.0,"ended_ms":arrived + 2.0,
        "overlapped":[],"status":200,"outcome":"ok","prompt_tokens":prompt,
        "n_generated":gen,"max_tokens":null,
        "timings":{"cache_n":0,"prompt_n":prompt_len,"prompt_ms":1.0,"predicted_n":gen,"predicted_ms":1.0}})
    .to_string()
}

/// `qtune tune` and `qtune compare` with `--workload trace`: each refuses with one line, a
/// non-zero exit, no server started and no run folder written.
fn refused(dir: &Path, trace: &Path, want: &str) {
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model");
    let m = model.display();
    let run = dir.join("run");
    // The fake server, noting any launch of a model (qtune asks it for its version first).
    let launched = dir.join("launched");
    let fake = dir.join("llama-server");
    let real_fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-llama-server");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" -m \"*) echo \"$*\" >> '{}' ;; esac\nexec '{}' \"$@\"\n",
            launched.display(),
            real_fake.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    for cmd in ["tune", "compare"] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_qtune"));
        c.env("QTUNE_ALLOW_BUSY", "1");
        match cmd {
            "tune" => c
                .args(["tune", "--ctx", "4096", "--budget-trials", "1", "--model"])
                .arg(&model)
                .arg("--server")
                .arg(&fake)
                .arg("--out")
                .arg(&run),
            _ => c
                .args(["compare", "--out"])
                .arg(&run)
                .arg("--server")
                .arg(&fake)
                .arg(format!("llama-server -m {m} -c 4096 -np 1"))
                .arg(format!("llama-server -m {m} -c 4096 -np 1 -b 1024")),
        };
        let o = c.arg("--workload").arg(trace).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{cmd}: {}", output_text(&o));
        let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
        assert_eq!(errors.len(), 1, "{cmd}: {err}");
        assert!(errors[0].starts_with("qtune: error: "), "{cmd}: {err}");
        assert!(errors[0].contains(want), "{cmd}: want {want:?} in {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            !run.exists() || std::fs::read_dir(&run).unwrap().next().is_none(),
            "{cmd}: a run folder was written for {want}"
        );
        assert!(
            !launched.exists(),
            "{cmd}: a server was launched for {want}: {}",
            std::fs::read_to_string(&launched).unwrap_or_default()
        );
    }
}

#[test]
fn bad_traces_are_refused_with_one_line_before_anything_is_launched() {
    if !support::vocab() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t.jsonl");
    let ok = format!("{HEADER}\n{}\n", request(1, 0.0, 8, 4));
    // Malformed.
    write_trace(&t, &format!("{HEADER}\n{{\"type\":\"request\",\"id\":\n"));
    refused(dir.path(), &t, "line 2 is not a trace line");
    // Cut off mid-line (the recorder killed while writing).
    write_trace(&t, &format!("{HEADER}\n{}", &request(1, 0.0, 8, 4)[..40]));
    refused(dir.path(), &t, "cut off");
    // Binary.
    std::fs::write(&t, b"\x7fELF\x02\x01\x01\x00\x00\x00").unwrap();
    refused(dir.path(), &t, "binary");
    // A million requests (bounded: refused above the documented limit).
    let mut big = String::from(HEADER);
    big.push('\n');
    // Counted before any line is parsed: short lines make the point.
    for _ in 0..1_000_000 {
        big.push_str("{}\n");
    }
    write_trace(&t, &big);
    refused(dir.path(), &t, "holds at most 100,000 requests");
    // Longer than the launch's context.
    write_trace(&t, &format!("{HEADER}\n{}\n", request(1, 0.0, 5000, 4)));
    refused(dir.path(), &t, "more than the launch's context (-c 4096)");
    // Times going backwards.
    write_trace(
        &t,
        &format!(
            "{HEADER}\n{}\n{}\n",
            request(1, 50.0, 8, 4),
            request(2, 10.0, 8, 4)
        ),
    );
    refused(dir.path(), &t, "negative gap");
    // Nothing replayable.
    write_trace(
        &t,
        &ok.replace("\"outcome\":\"ok\"", "\"outcome\":\"client_gone\""),
    );
    refused(dir.path(), &t, "can be replayed");
    // Recorded with another tokenizer (the header's vocabulary is 200,000 tokens; the tiny
    // model's 151,936): refused before the first launch, with no --resume hint.
    write_trace(&t, &ok);
    refused(
        dir.path(),
        &t,
        "recorded with another tokenizer (a vocabulary of 200,000",
    );
    // A token id outside the model's vocabulary (every trial read as a crash).
    // (The header names no vocabulary: the model's is what counts.)
    let same = HEADER.replace("\"n_vocab\":200000,", "");
    let oov = format!("{same}\n{}\n", request(1, 0.0, 8, 4)).replacen("[1,", "[151936,", 1);
    write_trace(&t, &oov);
    refused(
        dir.path(),
        &t,
        "token id 151936, outside this model's vocabulary",
    );
    // A trace without its end line is fine: the plan says so (checked in the unit tests); a
    // trace that is not named .jsonl is recognised by its header.
    let y = dir.path().join("session.trace");
    write_trace(&y, &format!("{HEADER}\n{}\n", request(1, 50.0, 5000, 4)));
    refused(dir.path(), &y, "more than the launch's context");
}

#[test]
fn a_trace_of_another_tokenizer_stops_the_tune_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    if !support::vocab() {
        return;
    }
    let Some(server) = support::real_server() else {
        return;
    };
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model");
    let t = dir.path().join("other.jsonl");
    // Its vocabulary is the model's size (another size is refused before any launch): only a
    // launched server can tell its tokenizer apart.
    let header = HEADER.replace("200000", "151936").replace(
        "\"model\":",
        &format!("\"tokenizer_sha256\":\"{}\",\"model\":", "ab".repeat(32)),
    );
    write_trace(&t, &format!("{header}\n{}\n", request(1, 0.0, 8, 4)));
    let run = dir.path().join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env("QTUNE_ALLOW_BUSY", "1")
        .args(["tune", "--ctx", "4096", "--budget-trials", "3", "--model"])
        .arg(&model)
        .arg("--server")
        .arg(&server)
        .arg("--out")
        .arg(&run)
        .arg("--workload")
        .arg(&t)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{}", output_text(&o));
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].contains("was recorded with another tokenizer"),
        "{err}"
    );
    // No resume can help: the same trace meets the same tokenizer.
    assert!(!err.contains("--resume"), "{err}");
    // No trial of it was journaled: nothing was measured.
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap_or_default();
    assert_eq!(journal.lines().count(), 0, "{journal}");
}

/// One chat request through the recorder (`/v1/chat/completions`, the server's chat template).
fn chat(port: u16, messages: &serde_json::Value) {
    let body = serde_json::json!({"messages": messages, "max_tokens": 4, "ignore_eos": true,
        "temperature": 0});
    post(port, "/v1/chat/completions", &body);
}

/// A conversation of `turns` user and assistant turns and a last question; the user turn
/// `edit` rewritten (a client compacting its history).
fn conversation(turns: usize, edit: Option<usize>) -> serde_json::Value {
    let mut m = vec![serde_json::json!({"role": "system", "content": "You are terse."})];
    for i in 0..turns {
        let mut u: String = (0..150).map(|j| format!("u{i}w{j} ")).collect();
        if edit == Some(i) {
            u = format!("EDITED {u}");
        }
        let a: String = (0..100).map(|j| format!("a{i}w{j} ")).collect();
        m.push(serde_json::json!({"role": "user", "content": u}));
        m.push(serde_json::json!({"role": "assistant", "content": a}));
    }
    m.push(serde_json::json!({"role": "user", "content": "next"}));
    serde_json::Value::Array(m)
}

/// Qwen3.5's layers are partly recurrent: a chat history edited halfway back is read again
/// from the last context checkpoint before the edit. With Qwen3.5's own chat template the
/// server keeps one at each user message (at least `--checkpoint-min-step` apart); a
/// `/completion` of token ids keeps them only near the prompt's end unless it names the chat's
/// message delimiters. The trace holds them (read from the template) and the replay sends
/// them, so the replay re-reads what the live chat did (without them: 7,700 tokens re-read
/// where the live chat re-read 3,900).
#[test]
fn a_replayed_chat_keeps_the_checkpoints_of_the_live_chat() {
    let dir = tempfile::tempdir().unwrap();
    if !support::vocab() {
        return;
    }
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model");
    let args = "-c 12288 -np 1 -t 1 --checkpoint-min-step 256";
    let template = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/templates/Qwen3.5-4B.jinja")
        .display()
        .to_string();
    let mut live: Vec<&str> = args.split(' ').collect();
    live.extend(["--chat-template-file", &template]);
    let client = |port: u16| {
        chat(port, &conversation(6, None));
        chat(port, &conversation(6, Some(3)));
    };
    let Some(trace) = record_session(dir.path(), &model, "tiny-qwen35moe.gguf", &live, client)
    else {
        return;
    };
    let header = &lines(&trace)[0];
    assert_eq!(
        header["server"]["message_delimiters"][3]["delimiter"], "<|im_start|>user",
        "{header}"
    );
    let rec = recorded(&trace);
    assert_eq!(rec.len(), 2);
    assert_eq!(rec[1]["endpoint"], "/v1/chat/completions");
    // Live, a checkpoint at a user message before the edit served a good part of the prompt.
    let live = rec[1]["timings"]["cache_n"].as_u64().unwrap();
    assert!(
        live > 1000,
        "no checkpoint served the edited chat live: {}",
        rec[1]["timings"]
    );
    let v = compare(dir.path(), &model, args, &trace, &["EDITED", "u3w7 "]);
    assert_replayed_as_recorded(&v, &rec);
}

/// Claude Code's traffic (issue 52): `/v1/messages` sent by the real `anthropic` client (a
/// system prompt as a string and as blocks, a tool, a tool_use answered by a tool_result,
/// `messages.create` and `messages.stream`) and one `/v1/responses` request of the `openai`
/// client, recorded through `qtune record`, shown and replayed. Each recorded prompt has the
/// length the server itself counts (`count_tokens`, the answer's usage).
#[test]
fn claude_code_messages_and_responses_are_recorded_and_replayed() {
    let clients = Command::new("python3")
        .args(["-c", "import anthropic, openai"])
        .output();
    if !clients.is_ok_and(|o| o.status.success()) {
        support::require::missing("python3 with the anthropic and openai packages");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(model) = support::smollm2() else {
        return;
    };
    let args = "-c 8192 -np 1 -t 1";
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/record-anthropic.py");
    let mut seen = serde_json::Value::Null;
    let client = |port: u16| {
        let o = Command::new("python3")
            .arg(&script)
            .arg(format!("http://127.0.0.1:{port}"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", output_text(&o));
        seen = serde_json::from_slice(&o.stdout).unwrap();
    };
    let server_args: Vec<&str> = args.split(' ').collect();
    let Some(trace) = record_session(dir.path(), &model, "smollm2.gguf", &server_args, client)
    else {
        return;
    };
    let err = std::fs::read_to_string(dir.path().join("record.err")).unwrap();
    assert!(err.contains("recorded 4 generation requests"), "{err}");
    assert!(!err.contains("warning"), "{err}");
    let rec = recorded(&trace);
    assert_eq!(rec.len(), 4, "{rec:?}");
    for (r, name) in rec.iter().zip(["create", "stream", "later", "responses"]) {
        let c = &seen[name];
        let what = format!("{name}: recorded {r}, the client saw {c}");
        let endpoint = if name == "responses" {
            "/v1/responses"
        } else {
            "/v1/messages"
        };
        assert_eq!(r["endpoint"], endpoint, "{what}");
        assert_eq!(r["outcome"], "ok", "{what}");
        assert_eq!(r["stream"], c["stream"], "{what}");
        assert!(r.get("note").is_none(), "{what}");
        let len = r["prompt_tokens"].as_array().expect(&what).len() as u64;
        if let Some(counted) = c["counted"].as_u64() {
            // The server's own conversion, template and tokenizer count the same prompt.
            assert_eq!(len, counted, "{what}");
        } else {
            assert_eq!(len, c["input_tokens"].as_u64().unwrap(), "{what}");
        }
        assert_eq!(r["n_generated"], c["output_tokens"], "{what}");
        assert_eq!(r["max_tokens"], 8, "{what}");
        // The answer's text, streamed or not, read from the Anthropic and Responses events
        // and tokenized by the server (issue 54): about as many tokens as were generated.
        let answer = r["answer_tokens"].as_array().expect(&what).len() as u64;
        assert!((1..=10).contains(&answer), "{what}");
    }
    assert!(seen["stream"]["events"].as_u64().unwrap() > 3, "{seen}");
    // The third turn's prompt extends the second's conversation: trace show links them.
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["trace", "show", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["summary"]["requests"], 4, "{v}");
    assert_eq!(v["summary"]["complete"], true, "{v}");
    assert_eq!(v["requests"][2]["parent"], 2, "{v}");
    let shared = common_prefix(&rec[2], &rec[1]);
    assert!(
        shared * 10 >= rec[1]["prompt_tokens"].as_array().unwrap().len() as u64 * 9,
        "turn 3 shares {shared} tokens with turn 2"
    );
    // Replayed in each launch with the recorded prompts and lengths; the third turn finds
    // the second's prompt in the cache.
    let private = ["terse coding agent", "main.py", "read_file"];
    let v = compare(dir.path(), &model, args, &trace, &private);
    for l in v["rounds"][0]["launches"].as_array().unwrap() {
        assert_eq!(l["outcome"], "ok", "{l}");
        let reps = l["replay"]["requests"].as_array().unwrap();
        assert_eq!(reps.len(), 4, "{l}");
        for (got, want) in reps.iter().zip(&rec) {
            let len = want["prompt_tokens"].as_array().unwrap().len() as u64;
            assert_eq!(got["prompt_tokens"].as_u64(), Some(len), "{got} {want}");
            assert_eq!(got["generated"], want["n_generated"], "{got} {want}");
        }
        assert!(
            reps[2]["cache_n"].as_u64().unwrap() >= shared.saturating_sub(8),
            "{l}"
        );
    }
}
