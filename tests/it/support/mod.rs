//! Helpers shared by the integration tests: `tests/it/main.rs` declares this module once and
//! each test file says `use crate::support;` and uses the parts it needs (the two test binaries
//! of their own in tests/ declare it with `#[path = "it/support/mod.rs"] mod support;`).
//!
//! - [`require`]: one rule for what a test needs from outside the repository (the real
//!   llama-server, a model fixture): SKIP on a plain `cargo test`, a failure under
//!   `QTUNE_REQUIRE_SERVER=1` (scripts/test.sh) or CI. [`real_server`] and [`smollm2`] apply it.
//! - [`servers`]: the real llama-servers a test started, found by their argv.
//! - [`evidence`]: the GPU evidence under docs/evidence/.
//! - [`hardware`]: hand-made hardware profiles.
//! - [`trial`], [`multigpu`], [`profile`]: helpers of the trial, two-GPU and profile tests.
//! - [`record`]: a real llama-server with `qtune record` in front (traffic tests).
//! - [`requant`]: Q8_0 and Q4_0 copies of a Q4_1 model (quality tests).
//! - [`split`]: a model split in parts as `llama-gguf-split` writes it.
//! - [`replay`]: the speed model against the GPU evidence (tests/it/speed_replay.rs and
//!   `cargo run --example refit`).
//! - [`qtune`] and [`qtune_without_server`]: the real binary, as most tests start it.
#![allow(dead_code)]

pub mod evidence;
pub mod hardware;
pub mod layouts;
pub mod multigpu;
pub mod profile;
pub mod record;
pub mod replay;
pub mod requant;
pub mod require;
pub mod servers;
pub mod split;
pub mod trial;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The real CPU llama-server (`$QTUNE_LLAMA_SERVER`, else the pinned build in qtune's cache),
/// or None after saying SKIP (a failure under scripts/test.sh or CI).
pub fn real_server() -> Option<PathBuf> {
    require::or_skip(require::server(), "the real CPU llama-server")
}

/// The SmolLM2-135M model fixture (`qtune synth --test-models` prepares it), or None after saying SKIP
/// (a failure under scripts/test.sh or CI).
pub fn smollm2() -> Option<PathBuf> {
    require::or_skip(qtune::fixtures::smollm2(), "the SmolLM2-135M fixture")
}

/// True when the synthetic models' tokenizer files are there; else false after saying SKIP (a
/// failure under scripts/test.sh or CI). Every synthetic model and shape layout needs them.
pub fn vocab() -> bool {
    require::or_skip(require::vocab(), "the synthetic models' tokenizer files").is_some()
}

/// A free loopback port (bind port 0, read it, release it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// True when a server on `port` of 127.0.0.1 answers `GET /health` with 200.
pub fn health_ok(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200")
}

/// A finished command's status, stdout and stderr, for an assertion's message.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Printed text as its logical lines: qtune wraps what it prints at 100 columns, each
/// continuation indented two spaces past the line it continues; such lines are joined back
/// (one space between). A line indented two past the one before it is taken for a
/// continuation, so a block's first indented line joins its heading: fine for `contains`.
#[allow(dead_code)]
pub fn unwrapped(text: &str) -> Vec<String> {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out: Vec<String> = Vec::new();
    let mut lead = 0usize;
    for l in text.lines() {
        match out.last_mut() {
            Some(last) if !l.trim().is_empty() && indent(l) == lead + 2 => {
                last.push(' ');
                last.push_str(l.trim());
            }
            _ => {
                lead = indent(l);
                out.push(l.to_string());
            }
        }
    }
    out
}

/// `text` with every run of whitespace as one space: what a `contains` check reads when the
/// phrase may be wrapped at 100 columns. Where a measured number sits earlier on the line, its
/// width moves the wrap from one run to the next, so a phrase checked on the raw text passes or
/// fails by luck (CI: "over the\n    replay's wall time").
#[allow(dead_code)]
pub fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The real qtune binary, without the caller's `QTUNE_LOG` (its log lines would mix into the
/// output a test reads).
pub fn qtune() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qtune"));
    c.env_remove("QTUNE_LOG");
    c
}

/// [`qtune`] with no llama-server to find and no standard input: replays, and commands that
/// must fail before any launch.
pub fn qtune_without_server() -> Command {
    let mut c = qtune();
    c.env("QTUNE_LLAMA_SERVER", "/nonexistent/llama-server")
        .stdin(Stdio::null());
    c
}

/// The systemd units (`*.service`) in `dir`, sorted: `script --systemd` names its unit after
/// the model (`qtune-STEM.service`), so a test finds it here rather than guessing the stem.
pub fn systemd_units(dir: &Path) -> Vec<PathBuf> {
    let mut units: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "service"))
                .collect()
        })
        .unwrap_or_default();
    units.sort();
    units
}
