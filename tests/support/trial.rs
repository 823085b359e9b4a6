//! Helpers of the trial tests (trial_real, trial_faults, trial_interrupt).
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
