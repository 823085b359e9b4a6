//! Helpers of the trial tests (trial_real, trial_faults, trial_hostile, trial_interrupt).
#![allow(dead_code)]

use qtune::config::LaunchConfig;
use qtune::space::Workload;
use std::path::{Path, PathBuf};

pub fn fake_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-llama-server")
}

/// A tiny workload: 2 cores, keep it short.
pub fn tiny_workload() -> Workload {
    Workload {
        prompt_tokens: 32,
        gen_tokens: 8,
        repetitions: 2,
        shape_repetitions: 1,
        warmup: true,
        context_depth: None,
        mix: None,
        mixes: Vec::new(),
        replay: None,
    }
}

/// One generation thread: two tests at once on two cores must not oversubscribe the box.
pub fn cpu_config() -> LaunchConfig {
    LaunchConfig {
        threads: Some(1),
        ..LaunchConfig::baseline(512)
    }
}

/// True while a process with this pid exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // state is the field after the ")" that closes the command name
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next())
                .unwrap_or("?");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// Pids of live processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) && alive(pid) {
                out.push(pid);
            }
        }
    }
    out
}

/// A runner on the fake server in `dir` (a stand-in `fake.gguf`, the run folder `run/`), with
/// `env` for the fake server and a fixed request timeout.
pub fn fake_runner(
    dir: &Path,
    env: &[(&str, &str)],
    request_timeout: std::time::Duration,
) -> qtune::trial::llama_runner::LlamaServerRunner {
    fake_runner_with(dir, env, tiny_workload(), request_timeout)
}

/// [`fake_runner`] with another workload.
pub fn fake_runner_with(
    dir: &Path,
    env: &[(&str, &str)],
    workload: Workload,
    request_timeout: std::time::Duration,
) -> qtune::trial::llama_runner::LlamaServerRunner {
    let model = dir.join("fake.gguf");
    std::fs::write(&model, b"GGUF").unwrap();
    let run_dir = dir.join("run");
    let journal = qtune::trial::journal::Journal::open(&run_dir).unwrap();
    qtune::trial::llama_runner::LlamaServerRunner::new(
        &fake_server(),
        &model,
        4,
        workload,
        &run_dir,
        journal,
        None,
        request_timeout,
    )
    .unwrap()
    .with_env(
        env.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}
