//! The launch script, run for real: `qtune script` writes it from a results.json, a clean shell
//! (`env -i`) runs it with the real CPU llama-server and SmolLM2 at a path full of shell
//! metacharacters; an OpenAI-compatible request gets an answer; SIGTERM stops script and
//! server. Faults the real server cannot produce (a GPU taken by another process) use a fake
//! `nvidia-smi`. The script's own arguments (`--port N --alias x --api-key-file F`) are
//! checked with the real `openai` Python client: it lists model `x`, chats and streams.
//! Without the real server (or python3 with openai) a plain `cargo test` says SKIP;
//! scripts/test.sh (QTUNE_REQUIRE_SERVER=1) fails instead.

use crate::support;
use qtune::engine::LaunchArgs;
use support::{free_port, real_server, require, servers};

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A directory whose name needs every kind of shell quoting.
fn hostile_dir(root: &Path) -> PathBuf {
    let d = root.join("my models").join("it's $HOME `x`");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Write `result` as a run directory's results.json and have the real `qtune script` turn it
/// into `launch.sh`.
fn write_script(root: &Path, result: &qtune::run::TuneResult, port: u16) -> PathBuf {
    let run = root.join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("results.json"),
        serde_json::to_string_pretty(result).unwrap(),
    )
    .unwrap();
    let out = root.join("launch dir").join("launch.sh");
    let st = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["script", "--from"])
        .arg(&run)
        .arg("--out")
        .arg(&out)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "qtune script failed: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    out
}

/// The script, run in a clean environment, in its own process group (killed on drop).
struct Script {
    child: Child,
    log: PathBuf,
}

impl Script {
    fn start(script: &Path, home: &Path, path_env: &str) -> Script {
        Self::start_with(script, &[], home, path_env)
    }

    fn start_with(script: &Path, args: &[&str], home: &Path, path_env: &str) -> Script {
        let log = home.join("script.log");
        let f = std::fs::File::create(&log).unwrap();
        let mut child = Command::new("/usr/bin/env");
        child
            .arg("-i")
            .arg(format!("PATH={path_env}"))
            .arg(format!("HOME={}", home.display()))
            .arg("bash")
            .arg(script)
            .args(args)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .process_group(0);
        // A shell cannot trap a signal that was ignored when it started, and a test run from a
        // background job (`nohup scripts/test.sh &`) inherits SIGINT ignored: start the script
        // as a terminal would, with SIGINT and SIGTERM at their defaults, so the test judges
        // the script's traps and not how the test run was started.
        // SAFETY: only async-signal-safe calls (signal) between fork and exec.
        unsafe {
            child.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
                Ok(())
            });
        }
        let child = child.spawn().unwrap();
        Script { child, log }
    }

    fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    fn wait_timeout(&mut self, t: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < t {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        // Whatever happened, nothing of the group survives the test.
        unsafe {
            libc::killpg(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

fn curl(args: &[&str]) -> (bool, String) {
    let o = Command::new("curl").args(args).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn script_serves_the_winner_from_a_hostile_path_and_stops_cleanly_on_sigterm() {
    serve_request_and_stop(libc::SIGTERM, 143);
}

#[test]
fn sigint_to_the_script_stops_the_server_too() {
    serve_request_and_stop(libc::SIGINT, 130);
}

fn serve_request_and_stop(signal: i32, want_code: i32) {
    let (Some(server), Some(smollm2)) = (support::real_server(), support::smollm2()) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let model_dir = hostile_dir(tmp.path());
    let model = model_dir.join("SmolLM2 135M.gguf");
    std::fs::copy(smollm2, &model).unwrap();
    let port = free_port();
    let result = qtune::run::sample::cpu_result(&server, &model);
    let script = write_script(tmp.path(), &result, port);
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.starts_with("#!/usr/bin/env bash\n"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&script).unwrap().permissions().mode() & 0o777,
        0o755
    );

    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut run = Script::start(&script, &home, "/usr/bin:/bin");

    // Up within two minutes: the script says so once /health answers.
    let start = Instant::now();
    while !run.log().contains("launch.sh: ready:") {
        if let Some(st) = run.child.try_wait().unwrap() {
            panic!("script exited early ({st}):\n{}", run.log());
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "not ready after 120 s:\n{}",
            run.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let url = format!("http://127.0.0.1:{port}");
    // The server runs with the winner's flags and the quoted model path.
    let servers = servers::servers_mentioning(&model.display().to_string());
    assert_eq!(servers.len(), 1, "one llama-server expected: {servers:?}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", servers[0])).unwrap();
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let mut want =
        result
            .winner
            .as_ref()
            .unwrap()
            .config
            .command(&server, &model, "127.0.0.1", port);
    want.extend(["--alias".to_string(), "sample-llama".to_string()]);
    assert_eq!(argv, want);

    // A plain OpenAI-compatible request.
    let body = r#"{"messages":[{"role":"user","content":"Say hello."}],"max_tokens":8}"#;
    let (ok, out) = curl(&[
        "-sS",
        "--max-time",
        "120",
        "-H",
        "Content-Type: application/json",
        "-d",
        body,
        &format!("{url}/v1/chat/completions"),
    ]);
    assert!(ok, "request failed: {out}\n{}", run.log());
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let msg = &v["choices"][0]["message"];
    assert!(msg.is_object(), "no choices[0].message in {out}");
    assert!(msg["content"].is_string(), "no content in {out}");

    // The signal to the script alone: it stops the server and exits; nothing remains.
    unsafe {
        libc::kill(run.child.id() as i32, signal);
    }
    let st = run
        .wait_timeout(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("script still running 30 s after the signal:\n{}", run.log()));
    eprintln!("--- launch.sh output ---\n{}", run.log());
    assert_eq!(st.code(), Some(want_code), "{}", run.log());
    assert!(
        run.log()
            .contains(&format!("starting: {}", qtune::config::shell_line(&want))),
        "the script shows the exact, quoted command"
    );
    assert!(run.log().contains("stopping llama-server"), "{}", run.log());
    servers::assert_none_left(&model.display().to_string(), "after the signal");
    assert!(!curl(&["-sS", "--max-time", "2", &format!("{url}/health")]).0);
}

#[test]
fn missing_model_or_server_exits_nonzero_with_a_clear_message() {
    let Some(server) = support::real_server() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let model = hostile_dir(tmp.path()).join("gone.gguf");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();

    let result = qtune::run::sample::cpu_result(&server, &model);
    let script = write_script(tmp.path(), &result, free_port());
    let mut run = Script::start(&script, &home, "/usr/bin:/bin");
    let st = run.wait_timeout(Duration::from_secs(20)).expect("exits");
    assert_eq!(st.code(), Some(1), "{}", run.log());
    assert!(
        run.log()
            .contains(&format!("model file not found: {}", model.display())),
        "{}",
        run.log()
    );
    drop(run);

    std::fs::write(&model, b"not really a model").unwrap();
    let result = qtune::run::sample::cpu_result(Path::new("/nonexistent/llama-server"), &model);
    let script = write_script(tmp.path(), &result, free_port());
    let mut run = Script::start(&script, &home, "/usr/bin:/bin");
    let st = run.wait_timeout(Duration::from_secs(20)).expect("exits");
    assert_eq!(st.code(), Some(1), "{}", run.log());
    assert!(run
        .log()
        .contains("llama-server not found or not executable"));
}

#[test]
fn gpu_script_refuses_when_another_process_took_the_vram() {
    let Some(server) = support::real_server() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let model = hostile_dir(tmp.path()).join("m.gguf");
    std::fs::write(&model, b"placeholder: the script stops before loading it").unwrap();
    let home = tmp.path().join("home");
    let bin = tmp.path().join("fakebin");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    // A fake nvidia-smi: two GPUs with 1,000 and 2,000 MiB free (the winner needs 14,935).
    let smi = bin.join("nvidia-smi");
    std::fs::write(&smi, "#!/bin/sh\necho 1000\necho 2000\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();

    let result = qtune::run::sample::gpu_result(&server, &model);
    let script = write_script(tmp.path(), &result, free_port());
    let path_env = format!("{}:/usr/bin:/bin", bin.display());
    let mut run = Script::start(&script, &home, &path_env);
    let st = run.wait_timeout(Duration::from_secs(20)).expect("exits");
    assert_eq!(st.code(), Some(1), "{}", run.log());
    let log = run.log();
    assert!(
        log.contains("only 3000 MiB of VRAM free; this config needs 14935 MiB"),
        "{log}"
    );
    assert!(log.contains("another process holds the GPU"), "{log}");
    assert!(servers::servers_mentioning(&model.display().to_string()).is_empty());
    drop(run);

    // Without nvidia-smi the check is skipped (said so) and the server starts; this one dies
    // on the placeholder model, and the script reports that instead of waiting forever.
    let mut run = Script::start(&script, &home, "/usr/bin:/bin");
    let st = run.wait_timeout(Duration::from_secs(60)).expect("exits");
    let log = run.log();
    assert_eq!(st.code(), Some(1), "{log}");
    assert!(
        log.contains("nvidia-smi not found: skipping the free-VRAM check"),
        "{log}"
    );
    assert!(log.contains("exited (status"), "{log}");
    assert!(log.contains("before it was ready"), "{log}");
}

/// The real `openai` client against the script's server: lists the models, chats, streams.
const OPENAI_CHECK: &str = r#"
import sys, openai
base, key, model = sys.argv[1], sys.argv[2], sys.argv[3]
c = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=120)
print("models:", ",".join(m.id for m in c.models.list().data))
msgs = [{"role": "user", "content": "Say hello."}]
r = c.chat.completions.create(model=model, messages=msgs, max_tokens=8)
print("chat:", repr(r.choices[0].message.content))
n = 0
text = ""
for chunk in c.chat.completions.create(model=model, messages=msgs, max_tokens=8, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        n += 1
        text += chunk.choices[0].delta.content
print("stream chunks:", n, repr(text))
try:
    openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).chat.completions.create(
        model=model, messages=msgs, max_tokens=1)
    print("wrong key: accepted")
except openai.AuthenticationError:
    print("wrong key: refused")
"#;

/// Python 3 with the `openai` package, or None after SKIP (a failure under scripts/test.sh).
fn python_with_openai() -> Option<&'static str> {
    let ok = Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Some("python3")
    } else {
        require::missing("python3 with the openai package (pip install openai)");
        None
    }
}

#[test]
fn launch_sh_port_alias_and_key_reach_the_openai_client() {
    let Some(server) = real_server() else { return };
    let Some(python) = python_with_openai() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let model = hostile_dir(tmp.path()).join("SmolLM2 135M.gguf");
    std::fs::copy(qtune::fixtures::smollm2().unwrap(), &model).unwrap();
    let key = tmp.path().join("api key");
    std::fs::write(&key, "s3cret-key\n").unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // The script is written for the default port; its arguments move it.
    let result = qtune::run::sample::cpu_result(&server, &model);
    let script = write_script(tmp.path(), &result, 8080);
    let port = free_port();
    let key_arg = key.display().to_string();
    let port_arg = port.to_string();
    let mut run = Script::start_with(
        &script,
        &[
            "--port",
            &port_arg,
            "--alias",
            "x",
            "--api-key-file",
            &key_arg,
            "-n",
            "16",
            "-c",
            "1024",
            "--threads",
            "1",
        ],
        &home,
        "/usr/bin:/bin",
    );
    let start = Instant::now();
    while !run.log().contains("launch.sh: ready:") {
        if let Some(st) = run.child.try_wait().unwrap() {
            panic!("script exited early ({st}):\n{}", run.log());
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "not ready after 120 s:\n{}",
            run.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        run.log()
            .contains(&format!("ready: http://127.0.0.1:{port} ")),
        "{}",
        run.log()
    );
    assert!(!run.log().contains("s3cret"), "the key is never printed");
    // A passed-on flag that replaces a tuned one is named, in either spelling, and still
    // reaches the server (it is serving); one that replaces nothing (-n) is not.
    let log = run.log();
    assert!(
        log.contains("launch.sh: note: -c 1024 overrides the tuned -c 2048\n"),
        "{log}"
    );
    assert!(
        log.contains("launch.sh: note: --threads 1 overrides the tuned -t 2\n"),
        "{log}"
    );
    assert!(!log.contains("note: -n"), "{log}");
    assert!(log.contains(" -n 16 -c 1024 --threads 1\n"), "{log}");
    let o = Command::new(python)
        .args(["-c", OPENAI_CHECK])
        .arg(format!("http://127.0.0.1:{port}/v1"))
        .arg("s3cret-key")
        .arg("x")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    eprintln!(
        "--- openai client ---\n{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "the client failed:\n{}", run.log());
    let line = |p: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(p))
            .unwrap_or_else(|| panic!("no {p:?} line in {out}"))
            .trim()
            .to_string()
    };
    assert_eq!(line("models:"), "x", "the alias, not the file path");
    assert!(line("chat:").len() > 2, "an answer: {out}");
    let chunks: usize = line("stream chunks:")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(chunks >= 2, "a stream of several chunks: {out}");
    assert_eq!(line("wrong key:"), "refused");
    unsafe {
        libc::kill(run.child.id() as i32, libc::SIGTERM);
    }
    let st = run.wait_timeout(Duration::from_secs(30)).expect("stops");
    assert_eq!(st.code(), Some(143), "{}", run.log());
    servers::assert_none_left(&model.display().to_string(), "after SIGTERM");
}

/// A finished replayed tune of the tiny model (no llama-server) in `root/run`.
fn replayed_run(root: &Path) -> PathBuf {
    let run = root.join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env_remove("QTUNE_LOG")
        .env("QTUNE_LLAMA_SERVER", "/nonexistent/llama-server")
        .arg("tune")
        .arg("--replay")
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/replay-tiny-moe/journal.jsonl"),
        )
        .args(["--space", "quick", "--model"])
        .arg(qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model"))
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", support::output_text(&o));
    run
}

/// Issue 48: `qtune script --systemd` into a folder whose path holds `$`, `%` and spaces
/// writes a unit `systemd-analyze verify` accepts (it finds the script at the path the
/// unit names: a doubled `$` would name another file); a path with a quote or a backslash,
/// which systemd refuses as an executable name, is refused in one line and nothing is
/// written (it used to exit 0 with a unit systemd rejects).
#[test]
fn systemd_units_verify_or_are_refused_in_one_line() {
    let Some(analyze) = require::or_skip(
        which("systemd-analyze").ok_or("not on PATH"),
        "systemd-analyze",
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = replayed_run(tmp.path());
    for name in ["dollar $HOME and $x", "percent 100%n", "plain"] {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
            .args(["script", "--systemd", "--from"])
            .arg(&run)
            .arg("--out")
            .arg(dir.join("launch.sh"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", support::output_text(&o));
        let v = Command::new(&analyze)
            .args(["verify", "--man=no"])
            .arg("qtune-tiny-qwen35moe-q4_k_m.service")
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            v.status.success() && v.stderr.is_empty(),
            "{name}: systemd-analyze verify: {}\n{}",
            support::output_text(&v),
            std::fs::read_to_string(dir.join("qtune-tiny-qwen35moe-q4_k_m.service")).unwrap()
        );
    }
    for name in ["it's", "say \"hi\"", "back\\slash"] {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
            .args(["script", "--systemd", "--from"])
            .arg(&run)
            .arg("--out")
            .arg(dir.join("launch.sh"))
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(1),
            "{name}: {}",
            support::output_text(&o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("systemd refuses"), "{err}");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "{name}: a file was written"
        );
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

/// Issue 48: `--port 0` gave a launch command and a launch.sh that refuses its own default
/// ("the port must be a number from 1 to 65535"). `tune` and `script` refuse it in one line.
#[test]
fn port_zero_is_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let run = replayed_run(tmp.path());
    let out = tmp.path().join("launch.sh");
    let script = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["script", "--port", "0", "--from"])
        .arg(&run)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let tune = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env("QTUNE_LLAMA_SERVER", "/nonexistent/llama-server")
        .arg("tune")
        .arg("--replay")
        .arg(run.join("journal.jsonl"))
        .args(["--space", "quick", "--port", "0", "--model"])
        .arg(qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model"))
        .arg("--out")
        .arg(tmp.path().join("run0"))
        .output()
        .unwrap();
    for (what, o) in [("script", &script), ("tune", &tune)] {
        assert_eq!(
            o.status.code(),
            Some(1),
            "{what}: {}",
            support::output_text(o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
        assert!(err.contains("--port 0"), "{what}: {err}");
    }
    assert!(!out.exists());
    assert!(!tmp.path().join("run0").exists());
}
