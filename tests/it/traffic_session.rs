//! `qtune trace session` for real: the built-in agent and chat sessions rendered through the
//! pinned CPU llama-server's own template and tokenizer, on SmolLM2-135M and on the hybrid
//! tiny-qwen35moe. Checks what a replay relies on: depths that grow to near the context, one
//! fan-out of 2-4 requests at once, a later turn that diverges from the one before it (prefix
//! links), text that really comes from Python's standard library (detokenized), and the same
//! tokens when rendered twice. Never asserts a speed.

use crate::support;
use support::{free_port, health_ok, output_text};

use qtune::traffic::trace::{self, prefix_links, Trace};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Kills (and reaps) a child when the test ends, however it ends.
struct Reap(Child);
impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A context per slot of 8,192 tokens, two slots.
const CTX: u64 = 8192;

fn start_server(model: &Path, dir: &Path, template: Option<&Path>) -> (Reap, u16) {
    let server = support::real_server().expect("checked by the caller");
    let port = free_port();
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let child = Command::new(server)
        .arg("-m")
        .arg(model)
        .args(["-c", &(2 * CTX).to_string(), "-np", "2", "-t", "1"])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(template.map_or(Vec::new(), |t| vec![Path::new("--chat-template-file"), t]))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let child = Reap(child);
    let deadline = Instant::now() + Duration::from_secs(300);
    while !health_ok(port) {
        assert!(
            Instant::now() < deadline,
            "llama-server not ready after 300 s:\n{}",
            std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    (child, port)
}

/// `qtune trace session KIND --server ... --out DIR/NAME`, which must succeed; its trace.
fn session(port: u16, kind: &str, dir: &Path, name: &str) -> (PathBuf, Trace) {
    let out = dir.join(name);
    let o = support::qtune()
        .args(["trace", "session", kind, "--server"])
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("built-in {kind} session")), "{err}");
    (out.clone(), trace::read(&out).unwrap())
}

fn prompts(t: &Trace) -> Vec<&[u32]> {
    t.requests
        .iter()
        .map(|r| {
            r.prompt_tokens
                .as_deref()
                .expect("every request has its tokens")
        })
        .collect()
}

/// The server's text for some tokens.
fn detokenize(port: u16, tokens: &[u32]) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let v: serde_json::Value = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}/detokenize"))
            .json(&serde_json::json!({ "tokens": tokens }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["content"].as_str().unwrap().to_string()
    })
}

/// Lines (over 30 characters) of the session's standard-library files found in `text`.
fn stdlib_lines_in(text: &str) -> usize {
    let dir = qtune::traffic::session::stdlib_dir().unwrap();
    qtune::traffic::session::load_sources(&dir)
        .unwrap()
        .iter()
        .flat_map(|s| {
            s.text
                .lines()
                .filter(|l| l.trim().len() > 30)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|l| text.contains(l.as_str()))
        .count()
}

/// Everything the agent session must show, on one model (with another chat template).
fn check_agent(model: &Path, template: Option<&Path>, label: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_server(model, dir.path(), template);
    let (path, t) = session(port, "agent", dir.path(), "agent.jsonl");
    let (_, again) = session(port, "agent", dir.path(), "again.jsonl");
    let p = prompts(&t);
    assert_eq!(p, prompts(&again), "{label}: rendered twice, other tokens");
    assert_eq!(t.header.model.n_ctx, Some(CTX), "{label}");

    // Depths grow from a short first turn to near the context.
    let depth = |i: usize| p[i].len() as u64 + t.requests[i].n_generated.unwrap();
    let deepest = (0..p.len()).map(depth).max().unwrap();
    assert!(deepest <= CTX, "{label}: {deepest} > {CTX}");
    assert!(deepest * 10 >= CTX * 9, "{label}: only {deepest} of {CTX}");
    assert!(
        (p[0].len() as u64) * 4 < CTX,
        "{label}: the first turn is {}",
        p[0].len()
    );
    assert!(p.len() >= 10, "{label}: {} requests", p.len());

    // One fan-out: 2-4 requests arriving at once, each overlapping all the others.
    let mut at: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for r in &t.requests {
        at.entry(r.arrived_ms as u64).or_default().push(r.id);
    }
    let groups: Vec<&Vec<u64>> = at.values().filter(|g| g.len() > 1).collect();
    assert!(!groups.is_empty(), "{label}: no fan-out");
    for g in &groups {
        assert!(
            (2..=4).contains(&g.len()),
            "{label}: a group of {}",
            g.len()
        );
        for id in *g {
            let r = &t.requests[*id as usize - 1];
            let others: Vec<u64> = g.iter().copied().filter(|o| o != id).collect();
            assert_eq!(r.overlapped, others, "{label}: request {id}");
        }
    }

    // A later turn of the main agent diverges from the turn before it before that one's end.
    let opt: Vec<Option<&[u32]>> = p.iter().map(|x| Some(*x)).collect();
    let links = prefix_links(&opt);
    let main: Vec<usize> = (0..p.len())
        .filter(|&i| t.requests[i].overlapped.is_empty())
        .collect();
    let diverged: Vec<usize> = main
        .windows(2)
        .filter(|w| trace::common_prefix(p[w[0]], p[w[1]]) < p[w[0]].len())
        .map(|w| w[1])
        .collect();
    assert!(
        !diverged.is_empty(),
        "{label}: every turn extends the one before"
    );
    let i = diverged[0];
    let (parent, n) = links[i].expect("a diverging turn still shares the system prompt");
    assert!(
        n < p[parent].len() && n > 200,
        "{label}: request {} shares {n} of {}",
        i + 1,
        p[parent].len()
    );

    // The text is the standard library's, and the tool calls survived the template.
    let text = detokenize(port, p[p.len() - 1]);
    let lines = stdlib_lines_in(&text);
    assert!(
        lines >= 40,
        "{label}: {lines} standard-library lines in the deepest prompt"
    );
    for needle in [
        "read_file",
        "run_tests",
        "test session starts",
        "@@ -",
        "<think>",
    ] {
        assert!(
            text.contains(needle),
            "{label}: no {needle} in the deepest prompt"
        );
    }
    // How the tool calls were written: by a template that knows tools (Qwen3.5's XML), else by
    // qtune into the text (JSON in <tool_call>, as Hermes-style templates write them).
    let native = "<function=edit_file>";
    let inlined = "\"name\":\"edit_file\"";
    match template {
        Some(_) => assert!(text.contains(native) && !text.contains(inlined), "{label}"),
        None => assert!(text.contains(inlined) && !text.contains(native), "{label}"),
    }
    // Thinking only on the turns after the last user message: one in the last turn, and the
    // generation prompt's own where the template adds one (Qwen3.5's does).
    let thoughts = text.matches("<think>").count();
    assert!(
        (1..=2).contains(&thoughts),
        "{label}: {thoughts} thoughts in the deepest prompt"
    );

    let o = support::qtune()
        .args(["trace", "show"])
        .arg(&path)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(shown.contains("the built-in agent session"), "{shown}");
    assert!(shown.contains("at most "), "{shown}");
}

#[test]
fn the_agent_session_renders_on_smollm2_and_chat_too() {
    let (Some(_), Some(model)) = (support::real_server(), support::smollm2()) else {
        return;
    };
    check_agent(&model, None, "SmolLM2");

    // The chat: real code, turns that only grow, to near the context.
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_server(&model, dir.path(), None);
    let (_, t) = session(port, "chat", dir.path(), "chat.jsonl");
    let p = prompts(&t);
    assert!(p.len() >= 4, "{} turns", p.len());
    assert!(
        p.windows(2).all(|w| w[1].starts_with(w[0])),
        "a chat only grows"
    );
    assert!(t.requests.iter().all(|r| r.overlapped.is_empty()));
    let last = p[p.len() - 1].len() as u64 + t.requests.last().unwrap().n_generated.unwrap();
    assert!(last <= CTX && last * 10 >= CTX * 9, "{last}");
    let text = detokenize(port, p[p.len() - 1]);
    assert!(stdlib_lines_in(&text) >= 40, "{text}");

    // Deeper than a slot, or over an existing trace: one line, and no file written or changed.
    let refused = |extra: &[&str], out: &Path| {
        let o = support::qtune()
            .args(["trace", "session", "chat", "--server"])
            .arg(format!("http://127.0.0.1:{port}"))
            .args(extra)
            .arg("--out")
            .arg(out)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{}", output_text(&o));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(err.lines().count(), 1, "{err}");
        err
    };
    let deep = dir.path().join("deep.jsonl");
    let err = refused(&["--ctx", "100000"], &deep);
    assert!(
        err.contains("more than the server's context per slot (8192 tokens)"),
        "{err}"
    );
    assert!(!deep.exists());
    let chat = dir.path().join("chat.jsonl");
    let before = std::fs::read(&chat).unwrap();
    let err = refused(&[], &chat);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read(&chat).unwrap(), before);
}

#[test]
fn the_agent_session_renders_on_tiny_qwen35moe() {
    if support::real_server().is_none() || !support::vocab() {
        return;
    }
    let Some(model) = support::require::or_skip(
        qtune::fixtures::tiny_moe("tiny-qwen35moe"),
        "the tiny-qwen35moe model",
    ) else {
        return;
    };
    check_agent(&model, None, "tiny-qwen35moe");
    let qwen35 =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/templates/Qwen3.5-4B.jinja");
    check_agent(
        &model,
        Some(&qwen35),
        "tiny-qwen35moe with Qwen3.5's template",
    );
}

#[test]
fn a_session_needs_python_and_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.jsonl");
    let o = support::qtune()
        .env("QTUNE_PYTHON", "/nonexistent/python3")
        .args([
            "trace",
            "session",
            "agent",
            "--server",
            "http://127.0.0.1:9",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.starts_with("qtune: error: "), "{err}");
    assert!(err.contains("install Python 3"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let port = free_port();
    let o = support::qtune()
        .args(["trace", "session", "chat", "--server"])
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("cannot reach the llama-server"), "{err}");
    assert!(!out.exists(), "a failed session leaves no file");
}
