//! What a trial's log says of its RPC workers: one unreachable at load, one that dropped
//! mid-run, and which of the head's `--rpc` list no longer answers.

use crate::config::rpc::Worker;

/// The worker a log names as unreachable (`Failed to connect to HOST:PORT`, llama.cpp's
/// message when a worker is down at load).
pub fn unreachable_in_log(log: &str) -> Option<String> {
    log.lines().find_map(|l| {
        let rest = l.split("Failed to connect to ").nth(1)?;
        let w = rest.split_whitespace().next()?.trim();
        (!w.is_empty()).then(|| w.to_string())
    })
}

/// llama.cpp's line when a worker dropped mid-run (the head aborts).
pub const WORKER_DROPPED: &str = "Remote RPC server crashed or returned malformed response";

/// Name the worker(s) of a trial's `--rpc` list that no longer accept a connection in a
/// worker-lost message ("an RPC worker (of A, B) dropped" becomes "RPC worker B dropped").
pub fn name_lost_worker(message: &mut String, log: &str) {
    let workers = workers_in_header(log);
    let prefix = format!("an RPC worker (of {})", workers.join(", "));
    if workers.is_empty() || !message.starts_with(&prefix) {
        return;
    }
    let dead: Vec<&String> = workers
        .iter()
        .filter(|w| {
            w.parse::<Worker>()
                .map(|w| !crate::hardware::rpc::reachable(&w))
                .unwrap_or(false)
        })
        .collect();
    let named = match dead.as_slice() {
        [] => format!(
            "an RPC worker (of {}; all answer again now)",
            workers.join(", ")
        ),
        [one] => format!("RPC worker {one}"),
        many => format!(
            "RPC workers {}",
            many.iter()
                .map(|w| w.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    *message = format!("{named}{}", &message[prefix.len()..]);
}

/// The `--rpc` list in a trial log's header line (the command).
pub fn workers_in_header(log: &str) -> Vec<String> {
    let Some(header) = log.lines().find(|l| l.starts_with(super::LOG_HEADER)) else {
        return Vec::new();
    };
    let words: Vec<&str> = header.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == "--rpc")
        .map(|w| {
            w[1].trim_matches('\'')
                .split(',')
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}
