//! The real llama-servers a test started, found by a path that only its servers carry in their
//! argv (a model symlinked into the test's temporary directory).
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Pids of live (not zombie) llama-server processes whose command line mentions `needle`.
pub fn servers_mentioning(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|s| s == "Z" || s == "X");
        if !zombie && cmd.contains(needle) && cmd.contains("llama-server") {
            out.push(pid);
        }
    }
    out
}

/// Wait up to 10 s for every llama-server mentioning `needle` to end; panic naming `what` and
/// the pids still running after that.
pub fn assert_none_left(needle: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = servers_mentioning(needle);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: llama-server left running: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
