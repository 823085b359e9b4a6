//! The network term of an RPC placement: what a token's pass costs on the links to the
//! workers (`--rpc`), from each link as `qtune hw --rpc` measured it (write rate, round trip).
//!
//! A token's pass starts on the head (its embedding), runs every block's layer and then its
//! routed experts, each where the placement puts them (the head, or a worker's device), then
//! the output layer, and ends on the head (sampling). Each change of place is one crossing:
//! the activations (`n_embd` f32 per token) go one way, and half a round trip is paid (the
//! head sends a visit's input and graph without waiting, and waits once for its output:
//! one round trip per visit, two crossings). The crossing back from an output layer on a
//! worker carries one row of logits (`n_vocab` f32) instead. Worker to worker goes through
//! the head: a crossing on each link. Prefill moves a micro-batch's activations per crossing
//! and the logits of its last token. The workers' own compute is predicted as the head's
//! (same devices: the stand-in for two boxes with one GPU each).

use crate::config::LaunchConfig;
use crate::model::ModelLayout;
use serde::{Deserialize, Serialize};

/// One worker's link, as measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcLink {
    /// `host:port`, as `--rpc` names it.
    pub address: String,
    /// Bytes the link carries per second, MB/s (the protocol write's).
    pub rate_mb_s: f64,
    /// One protocol round trip, ms.
    pub round_trip_ms: f64,
    /// Devices the worker lends (llama.cpp numbers every worker's devices first).
    pub devices: u32,
}

impl super::SpeedBox {
    /// The same box with the links to `workers` as `qtune hw --rpc` measured them.
    pub fn with_links(mut self, workers: &[crate::hardware::rpc::WorkerInfo]) -> Self {
        self.rpc_links = workers
            .iter()
            .map(|w| RpcLink {
                address: w.address.clone(),
                rate_mb_s: w.write_mb_s,
                round_trip_ms: w.round_trip_ms,
                devices: w.devices.len().max(1) as u32,
            })
            .collect();
        if let Some(l) = self.rpc_links.first() {
            self.sources.push(format!(
                "RPC link {:.0} MB/s, {:.2} ms round trip (measured)",
                l.rate_mb_s, l.round_trip_ms
            ));
        }
        self
    }
}

/// Where one step of a token's pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Head,
    /// The worker at this index of `--rpc`.
    Worker(usize),
}

/// The places a token's pass visits, in order: the head, then each block's layer and its
/// routed experts, the output layer, the head. `None` when the config names no measured link
/// (no `--rpc`, or a worker not in `links`).
pub fn route(layout: &ModelLayout, cfg: &LaunchConfig, links: &[RpcLink]) -> Option<Vec<Place>> {
    if cfg.rpc.is_empty() {
        return None;
    }
    let worker_of_addr = |a: &str| links.iter().position(|l| l.address == a);
    // The head's device list: every worker's devices (in --rpc order), then the local GPUs
    // (at most as many as -ts names past the workers').
    let mut devices: Vec<Place> = Vec::new();
    for a in &cfg.rpc {
        let w = worker_of_addr(a)?;
        devices.extend(std::iter::repeat_n(
            Place::Worker(w),
            links[w].devices.max(1) as usize,
        ));
    }
    let local = cfg.tensor_split.len().saturating_sub(devices.len());
    devices.extend(std::iter::repeat_n(Place::Head, local));
    let nb = layout.n_blocks;
    let weights: Vec<f64> = if cfg.tensor_split.is_empty() {
        vec![1.0; devices.len()]
    } else {
        (0..devices.len())
            .map(|i| f64::from(cfg.tensor_split.get(i).copied().unwrap_or(0)))
            .collect()
    };
    let ngl = cfg.n_gpu_layers.unwrap_or(nb + 1);
    let layer = crate::model::memory::layer_devices(nb, ngl, &weights);
    let at = |d: Option<u32>| d.map_or(Place::Head, |d| devices[d as usize]);
    let host = super::host_expert_bytes(layout, cfg, true);
    let mut out = vec![Place::Head];
    for il in 0..nb {
        let l = at(layer[il as usize]);
        out.push(l);
        let named_rpc = cfg.rpc_experts.iter().find(|r| r.blocks.contains(il));
        let experts = if let Some(r) = named_rpc {
            let addr = r.device.split_once('[')?.1.strip_suffix(']')?;
            Place::Worker(worker_of_addr(addr)?)
        } else if cfg.gpu_experts.iter().any(|g| g.blocks.contains(il))
            || host.get(il as usize).copied().unwrap_or(0) > 0
        {
            Place::Head
        } else {
            l
        };
        out.push(experts);
    }
    out.push(at(layer[nb as usize]));
    out.push(Place::Head);
    Some(out)
}

/// What the links cost a placement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkCost {
    /// Crossings of one token's pass (each link crossed counts once).
    pub crossings: u32,
    /// Per generated token, ms.
    pub decode_ms: f64,
    /// Per prefill micro-batch of `ubatch` tokens, ms.
    pub prefill_ub_ms: f64,
}

/// The cost of `route` on `links` for `ubatch`-token micro-batches: per crossing,
/// `bytes / rate + round trip / 2`, with `n_embd * 4` bytes per token (a row of logits,
/// `n_vocab * 4`, on the way back from an output layer on a worker).
pub fn cost(layout: &ModelLayout, route: &[Place], links: &[RpcLink], ubatch: u32) -> NetworkCost {
    let act = f64::from(layout.n_embd) * 4.0;
    let logits = f64::from(layout.n_vocab) * 4.0;
    let mut c = NetworkCost::default();
    let mut cross = |w: usize, tok_bytes: f64, ub_bytes: f64| {
        let Some(l) = links.get(w) else { return };
        let rate = l.rate_mb_s.max(1e-3) * 1e6;
        let half_rtt = l.round_trip_ms.max(0.0) / 2.0;
        c.crossings += 1;
        c.decode_ms += tok_bytes / rate * 1e3 + half_rtt;
        c.prefill_ub_ms += ub_bytes / rate * 1e3 + half_rtt;
    };
    let last = route.len().saturating_sub(1);
    for (i, pair) in route.windows(2).enumerate() {
        let back_from_output = i + 1 == last;
        let (tok, ub) = if back_from_output {
            (logits, logits)
        } else {
            (act, act * f64::from(ubatch.max(1)))
        };
        match (pair[0], pair[1]) {
            (a, b) if a == b => {}
            (Place::Worker(a), Place::Worker(b)) => {
                cross(a, tok, ub);
                cross(b, tok, ub);
            }
            (Place::Worker(w), Place::Head) | (Place::Head, Place::Worker(w)) => cross(w, tok, ub),
            (Place::Head, Place::Head) => {}
        }
    }
    c
}

/// The network cost of `cfg` over `links`; `None` without `--rpc` or measured links.
pub fn network(
    layout: &ModelLayout,
    cfg: &LaunchConfig,
    links: &[RpcLink],
    ubatch: u32,
) -> Option<NetworkCost> {
    route(layout, cfg, links).map(|r| cost(layout, &r, links, ubatch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{rpc::RpcExperts, BlockSet};

    fn layout() -> ModelLayout {
        let mut l = ModelLayout::uniform(4, 8, 1 << 20, 1 << 20);
        l.n_embd = 2048;
        l.n_vocab = 1000;
        l
    }

    fn link(addr: &str) -> RpcLink {
        // 1 Gbit/s: 125 MB/s; 0.2 ms round trip.
        RpcLink {
            address: addr.into(),
            rate_mb_s: 125.0,
            round_trip_ms: 0.2,
            devices: 1,
        }
    }

    fn over(rpc: &[&str]) -> LaunchConfig {
        let mut c = LaunchConfig::baseline(1024);
        c.rpc = rpc.iter().map(|s| s.to_string()).collect();
        c.n_gpu_layers = Some(999);
        c
    }

    #[test]
    fn everything_on_one_worker_crosses_twice_with_logits_coming_back() {
        let l = layout();
        let links = [link("w:1")];
        let c = over(&["w:1"]);
        let r = route(&l, &c, &links).unwrap();
        assert_eq!(r.first(), Some(&Place::Head));
        assert!(
            r[1..r.len() - 1].iter().all(|p| *p == Place::Worker(0)),
            "{r:?}"
        );
        let n = cost(&l, &r, &links, 512);
        assert_eq!(n.crossings, 2);
        // In: 8192 B at 125 MB/s = 0.065536 ms + 0.1; out: 4000 B logits = 0.032 ms + 0.1.
        assert!(
            (n.decode_ms - (0.065536 + 0.1 + 0.032 + 0.1)).abs() < 1e-9,
            "{n:?}"
        );
        // Prefill: 512 tokens' activations in (33.554432 ms at this rate), one logits row out.
        assert!(
            (n.prefill_ub_ms - (512.0 * 8192.0 / 125e3 + 0.1 + 0.032 + 0.1)).abs() < 1e-9,
            "{n:?}"
        );
    }

    #[test]
    fn experts_on_the_head_cpu_cross_twice_per_block() {
        let l = layout();
        let links = [link("w:1")];
        let mut c = over(&["w:1"]);
        c.n_cpu_moe = Some(4);
        let n = network(&l, &c, &links, 512).unwrap();
        // Head -> (layer on w, experts on head) x 4 -> output on w -> head: 4 * 2 + 2.
        assert_eq!(n.crossings, 10);
        let ten_rtts_half = 10.0 * 0.1;
        assert!(
            n.decode_ms > ten_rtts_half && n.decode_ms < ten_rtts_half + 1.0,
            "{n:?}"
        );
    }

    #[test]
    fn a_layer_split_crosses_at_the_boundary_and_worker_to_worker_goes_through_the_head() {
        let l = layout();
        let links = [link("a:1"), link("b:1")];
        let mut c = over(&["a:1", "b:1"]);
        c.tensor_split = vec![1, 1];
        // Head -> a (the first blocks) -> b (the rest, output) -> head: 1 + 2 + 1.
        let n = network(&l, &c, &links, 1).unwrap();
        assert_eq!(n.crossings, 4);
        // The head's own GPU takes the last layers: head -> a -> head GPU -> head, and the
        // output layer on the head brings no logits over a link.
        let mut h = over(&["a:1"]);
        h.tensor_split = vec![1, 1];
        let n = network(&l, &h, &links[..1], 1).unwrap();
        assert_eq!(n.crossings, 2);
        assert!((n.decode_ms - 2.0 * (0.065536 + 0.1)).abs() < 1e-9, "{n:?}");
        // Experts named on a worker: two more crossings per block whose layer is elsewhere.
        let mut e = h.clone();
        e.tensor_split = vec![0, 1];
        e.rpc_experts = vec![RpcExperts {
            device: "RPC0[a:1]".into(),
            blocks: BlockSet::first(4),
        }];
        assert_eq!(network(&l, &e, &links[..1], 1).unwrap().crossings, 8);
        // No --rpc, or a worker that was not measured: no term.
        assert!(network(&l, &LaunchConfig::baseline(1024), &links, 1).is_none());
        assert!(network(&l, &over(&["c:1"]), &links, 1).is_none());
    }

    #[test]
    fn a_slower_link_costs_more_per_token_at_the_same_crossings() {
        let l = layout();
        let c = over(&["w:1"]);
        let fast = network(&l, &c, &[link("w:1")], 512).unwrap();
        let mut slow = link("w:1");
        slow.rate_mb_s = 12.5; // 0.1 Gbit/s
        let slow = network(&l, &c, &[slow], 512).unwrap();
        assert_eq!(fast.crossings, slow.crossings);
        assert!(
            slow.prefill_ub_ms > 9.0 * fast.prefill_ub_ms,
            "{fast:?} {slow:?}"
        );
    }

    /// `speed::predict` charges the term to an RPC config (decode and each micro-batch) once
    /// the box carries the measured links, and to nothing else.
    #[test]
    fn predict_charges_the_links_to_a_config_over_workers_only() {
        let l = layout();
        let k = &super::super::FITTED;
        let bare = super::super::tests::gpu_box();
        let mut slow = link("w:1");
        slow.rate_mb_s = 12.5;
        let linked = super::super::SpeedBox {
            rpc_links: vec![slow.clone()],
            ..bare.clone()
        };
        let mut c = over(&["w:1"]);
        c.fit = Some(false);
        let p = |sb, c: &LaunchConfig| super::super::predict(&l, c, sb, true, 2048, k).unwrap();
        let (without, with) = (p(&bare, &c), p(&linked, &c));
        let n = network(&l, &c, &[slow], with.prefill.ubatch).unwrap();
        assert_eq!(without.decode.network_ms, 0.0);
        assert!((with.decode.network_ms - n.decode_ms).abs() < 1e-12);
        assert!((with.prefill.network_ms - n.prefill_ub_ms).abs() < 1e-12);
        assert!(with.tg.tps < without.tg.tps && with.pp.tps < without.pp.tps);
        let local = LaunchConfig {
            rpc: Vec::new(),
            ..c.clone()
        };
        assert_eq!(p(&linked, &local), p(&bare, &local));
    }
}
