//! Shared helpers of the trial tests.
#![allow(dead_code)]

use qtune::config::LaunchConfig;
use qtune::space::Workload;
use std::path::{Path, PathBuf};

/// The real CPU llama-server: `$QTUNE_LLAMA_SERVER`, else the pinned CPU build in the cache.
pub fn real_server() -> PathBuf {
    if let Some(p) = std::env::var_os("QTUNE_LLAMA_SERVER").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let p = qtune::server::cached_server(false);
    assert!(
        p.is_file(),
        "no llama-server at {} (set QTUNE_LLAMA_SERVER or run `qtune server build`)",
        p.display()
    );
    p
}

pub fn fake_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-llama-server")
}

pub fn smollm2() -> PathBuf {
    qtune::fixtures::smollm2().expect("SmolLM2 fixture")
}

/// A tiny workload: 2 cores, keep it short.
pub fn tiny_workload() -> Workload {
    Workload {
        prompt_tokens: 32,
        gen_tokens: 8,
        repetitions: 2,
        warmup: true,
        context_depth: None,
        mix: None,
        mixes: Vec::new(),
    }
}

pub fn cpu_config() -> LaunchConfig {
    LaunchConfig {
        threads: Some(2),
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
