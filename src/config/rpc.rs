//! RPC workers in the vocabulary every stage shares: a worker's address, the head's `--rpc`
//! list and the `-ot` rules that place routed experts on a worker's device.

use crate::config::BlockSet;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The port `ggml-rpc-server` listens on by default.
pub const DEFAULT_PORT: u16 = 50052;

/// One worker as the head names it: `host:port` (`[v6]:port` for an IPv6 address).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Worker {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl std::str::FromStr for Worker {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad = || {
            format!(
                "'{}' is not a worker address: give host:port, e.g. 192.168.1.20:{DEFAULT_PORT}",
                crate::escape::one_line(s)
            )
        };
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, p) = rest.split_once("]:").ok_or_else(bad)?;
            (h, p)
        } else {
            let (h, p) = s.rsplit_once(':').ok_or_else(bad)?;
            if h.contains(':') {
                return Err(bad());
            }
            (h, p)
        };
        let port: u16 = port.parse().map_err(|_| bad())?;
        let host_ok = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'));
        if !host_ok || port == 0 {
            return Err(bad());
        }
        Ok(Worker {
            host: host.to_string(),
            port,
        })
    }
}

/// The most workers one `--rpc` names: llama.cpp places a model on at most 16 devices
/// (`llama_max_devices()`), and every worker lends one at least.
pub const MAX_WORKERS: usize = 16;

/// `host:port,host:port`, in the order given; duplicates are an error (llama.cpp would
/// register the same devices twice), and so are more than [`MAX_WORKERS`].
pub fn parse_workers(list: &str) -> Result<Vec<Worker>, String> {
    let mut out: Vec<Worker> = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if out.len() == MAX_WORKERS {
            return Err(format!(
                "--rpc names more than {MAX_WORKERS} workers: llama.cpp places a model on at \
                 most 16 devices"
            ));
        }
        let w: Worker = part.parse()?;
        if out.contains(&w) {
            return Err(format!("worker {w} is named twice in --rpc"));
        }
        out.push(w);
    }
    if out.is_empty() {
        return Err("--rpc names no worker: give host:port[,host:port...]".into());
    }
    Ok(out)
}

/// The head's `--rpc` value.
pub fn rpc_arg(workers: &[Worker]) -> String {
    workers
        .iter()
        .map(|w| w.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The buffer type llama.cpp gives device `device` of a worker, as `-ot` rules name it:
/// `RPC0[192.168.1.20:50052]` (`--list-devices` instead numbers every worker's devices in one
/// row, `RPC0`, `RPC1`, with the address as the description).
pub fn device_name(w: &Worker, device: u32) -> String {
    format!("RPC{device}[{w}]")
}

/// Routed experts placed on one worker's device whatever the device of their layer
/// (`-ot blk\.(N|M)\.ffn_..._exps=RPC0[host:port]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RpcExperts {
    /// The device as llama.cpp names it, e.g. `RPC0[192.168.1.20:50052]`.
    pub device: String,
    /// Blocks whose routed experts (every projection) go to that device.
    pub blocks: BlockSet,
}

/// llama.cpp's routed-expert tensor pattern after the block number (as in
/// [`crate::config::CpuExperts`]'s rules).
const EXPS_PATTERN: &str = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps";

impl RpcExperts {
    /// The `-ot` value (None for an empty block set).
    pub fn override_rule(&self) -> Option<String> {
        (!self.blocks.is_empty()).then(|| {
            format!(
                r"blk\.({}){EXPS_PATTERN}={}",
                self.blocks.regex_alternation(),
                self.device
            )
        })
    }

    /// Read back a rule [`Self::override_rule`] renders; `None` when the rule names no RPC
    /// device.
    pub fn from_rule(rule: &str) -> Option<Result<Self, String>> {
        let (body, dev) = rule.rsplit_once('=')?;
        if !(dev.starts_with("RPC") && dev.ends_with(']') && dev.contains('[')) {
            return None;
        }
        let blocks = body
            .strip_prefix(r"blk\.(")
            .and_then(|b| b.strip_suffix(EXPS_PATTERN))
            .and_then(|b| b.strip_suffix(')'))
            .and_then(BlockSet::from_alternation);
        Some(
            blocks
                .map(|blocks| RpcExperts {
                    device: dev.to_string(),
                    blocks,
                })
                .ok_or_else(|| {
                    let rule = crate::escape::excerpt(rule, 80);
                    format!(
                        "{} '{rule}' is not an expert placement qtune renders (blk\\.(N|M)\\.ffn_..._exps=RPCn[host:port])",
                        crate::config::Flag::OverrideTensor
                    )
                }),
        )
    }
}
