//! llama.cpp's RPC workers: a second box lends its devices to the head's `llama-server`
//! through `ggml-rpc-server` (`--rpc host:port,...` on the head). This module holds what both
//! sides share: worker addresses and how public they are, the worker's command line, the
//! head's RPC devices and the placements over them. [`probe`] talks to a worker over the RPC
//! protocol (devices, memory, link latency and bandwidth).

pub mod link;

pub use crate::config::rpc::*;
pub use crate::engine::llama_cpp::rpc_worker::{serve_argv, ServeOptions};
pub use crate::hardware::rpc as probe;
pub use crate::hardware::rpc::{addresses, head_devices, HeadDevices};
pub use crate::trial::rpc_log::*;

use crate::config::{BlockSet, LaunchConfig};
use std::net::{IpAddr, ToSocketAddrs};

/// How reachable an address a worker binds to is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// This box only (127.0.0.0/8, ::1).
    Loopback,
    /// A private or link-local network (10/8, 172.16/12, 192.168/16, 100.64/10, 169.254/16,
    /// fc00::/7, fe80::/10).
    Private,
    /// Anything else, the wildcard addresses (every interface) included.
    Public,
}

fn ip_exposure(ip: IpAddr) -> Exposure {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4.is_loopback() {
                Exposure::Loopback
            } else if v4.is_private() || v4.is_link_local() || (o[0] == 100 && (o[1] & 0xc0) == 64)
            {
                Exposure::Private
            } else {
                Exposure::Public
            }
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if v6.is_loopback() {
                Exposure::Loopback
            } else if let Some(v4) = v6.to_ipv4_mapped() {
                ip_exposure(IpAddr::V4(v4))
            } else if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfe80 {
                Exposure::Private
            } else {
                Exposure::Public
            }
        }
    }
}

/// How exposed a worker bound to `host` is: an IP address by its range, a name by every
/// address it resolves to (the most exposed wins). A name that does not resolve is an error.
pub fn exposure(host: &str) -> Result<Exposure, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ip_exposure(ip));
    }
    let addrs: Vec<IpAddr> = (host, 0)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{host}': {e}"))?
        .map(|a| a.ip())
        .collect();
    if addrs.is_empty() {
        return Err(format!("'{host}' resolves to no address"));
    }
    Ok(addrs
        .into_iter()
        .map(ip_exposure)
        .max_by_key(|e| match e {
            Exposure::Loopback => 0,
            Exposure::Private => 1,
            Exposure::Public => 2,
        })
        .expect("not empty"))
}

/// Whether a worker may bind to `host`, and the warning to print when it may: loopback is
/// quiet, a private network warns, a public address (or every interface) is refused unless
/// `allow_public`.
pub fn bind_policy(host: &str, allow_public: bool) -> Result<Option<String>, String> {
    let unauth = "rpc-server has no authentication: anyone who can reach this port can use this box's devices and memory and send it data to compute";
    match exposure(host)? {
        Exposure::Loopback => Ok(None),
        Exposure::Private => Ok(Some(format!(
            "{host} is on a private network: {unauth}; bind it only where every machine on that network is yours"
        ))),
        Exposure::Public if allow_public => Ok(Some(format!(
            "{host} is a public address (or every interface), bound because of --allow-public: {unauth}; put it behind a firewall or a VPN"
        ))),
        Exposure::Public => Err(format!(
            "refusing to bind the worker to {host}: it is a public address (or every interface) and {unauth}; bind a private address (e.g. 192.168.x.y, 10.x.y.z or a VPN's), or pass --allow-public if a firewall guards it"
        )),
    }
}

/// The `qtune rpc serve` line that starts the same worker on its box (what the head's launch
/// script and unit tell the user to run there).
pub fn serve_command_line(w: &Worker) -> String {
    format!(
        "qtune rpc serve --listen {}",
        crate::escape::shell_quote(&w.to_string())
    )
}

/// The commands that start a config's workers, one per worker: `ADDR: qtune rpc serve ...`
/// and the bare `ggml-rpc-server` line it runs. Empty without workers.
pub fn worker_commands(c: &LaunchConfig) -> Vec<String> {
    c.rpc
        .iter()
        .filter_map(|a| a.parse::<Worker>().ok())
        .map(|w| {
            let bare = serve_argv(
                crate::engine::binary::RPC_SERVER,
                &ServeOptions {
                    host: w.host.clone(),
                    port: w.port,
                    devices: Vec::new(),
                    threads: None,
                    cache: true,
                },
            );
            format!(
                "{w}: {} (or: {})",
                serve_command_line(&w),
                crate::config::shell_line(&bare)
            )
        })
        .collect()
}

/// The launch script's RPC block: each worker's command as a comment, and a check that every
/// worker answers before llama-server starts (llama.cpp aborts on a missing one). Empty
/// without workers.
pub fn script_block(c: &LaunchConfig) -> String {
    use std::fmt::Write as _;
    let cmds = worker_commands(c);
    if cmds.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# RPC workers (--rpc): start each on its box before this script. They have no\n# authentication: bind them to loopback or a private network only."
    );
    for l in &cmds {
        let _ = writeln!(s, "#   {}", crate::escape::one_line(l));
    }
    let quoted: Vec<String> = c
        .rpc
        .iter()
        .map(|a| crate::escape::shell_quote(a))
        .collect();
    let _ = writeln!(s, "for RPC_WORKER in {}; do", quoted.join(" "));
    s.push_str(
        r#"  RPC_HOST=${RPC_WORKER%:*}; RPC_HOST=${RPC_HOST#[}; RPC_HOST=${RPC_HOST%]}
  if ! (exec 3<>"/dev/tcp/$RPC_HOST/${RPC_WORKER##*:}") 2>/dev/null; then
    echo "launch.sh: RPC worker $RPC_WORKER does not answer: start it on its box (qtune rpc serve --listen $RPC_WORKER)" >&2
    exit 1
  fi
done

"#,
    );
    s
}

/// The placements a tune tries over the workers, from the best config so far (which already
/// carries `--rpc`): the layers split evenly over every device by `-ts`; split by the devices'
/// free memory (when that differs); the layers over the devices with every block's routed
/// experts on the head's CPU (`-ot ...=CPU`); and, with two devices or more, the layers on the
/// first device and every routed expert on the last (`-ot ...=RPCn[...]`). Each turns the
/// server's auto-fit off (it refuses overrides) and offloads every layer (`-ngl 999`).
pub fn placements(best: &LaunchConfig, devices: &HeadDevices, n_blocks: u32) -> Vec<LaunchConfig> {
    let n_dev = devices.remote.len() + devices.local_gpus;
    if best.rpc.is_empty() || n_dev == 0 || n_blocks == 0 {
        return Vec::new();
    }
    let placed = |ts: Vec<u32>| {
        let mut c = best.clone();
        c.n_gpu_layers = Some(999);
        c.n_cpu_moe = None;
        c.cpu_experts = None;
        c.gpu_experts = Vec::new();
        c.rpc_experts = Vec::new();
        c.fit = Some(false);
        c.fit_target_mib = Vec::new();
        c.tensor_split = ts;
        c
    };
    let even = vec![1; n_dev];
    let mut out = vec![placed(even.clone())];
    // By free memory (local GPUs' share unknown here: the mean of the workers').
    let frees: Vec<u64> = devices.remote.iter().filter_map(|(_, f)| *f).collect();
    if frees.len() == devices.remote.len() && !frees.is_empty() {
        let mean = frees.iter().sum::<u64>() / frees.len() as u64;
        let mut by_free: Vec<u64> = frees.clone();
        by_free.extend(std::iter::repeat_n(mean, devices.local_gpus));
        let unit = (by_free.iter().copied().max().unwrap_or(1) / 16).max(1);
        let ts: Vec<u32> = by_free.iter().map(|f| ((f / unit) as u32).max(1)).collect();
        if ts.iter().collect::<std::collections::BTreeSet<_>>().len() > 1 {
            out.push(placed(ts));
        }
    }
    let mut cpu = placed(even.clone());
    cpu.cpu_experts = Some(crate::config::CpuExperts::first(n_blocks));
    out.push(cpu);
    if n_dev >= 2 && !devices.remote.is_empty() {
        let mut ts = vec![0; n_dev];
        ts[0] = 1;
        let mut split = placed(ts);
        let last = &devices.remote[devices.remote.len() - 1].0;
        split.rpc_experts = vec![RpcExperts {
            device: last.clone(),
            blocks: BlockSet::first(n_blocks),
        }];
        out.push(split);
    }
    out
}

/// Why `cfg` would not fit a worker: the memory model's share of each device (the workers'
/// first, then the local GPUs', as llama.cpp orders them) against each worker device's free
/// memory as measured, less `headroom_mib`. `None` when every worker device holds its share
/// (or its free memory was not measured).
pub fn worker_overflow(
    layout: &crate::model::ModelLayout,
    cfg: &LaunchConfig,
    devices: &HeadDevices,
    headroom_mib: u64,
) -> Option<String> {
    let mean = {
        let f: Vec<u64> = devices.remote.iter().filter_map(|(_, f)| *f).collect();
        f.iter().sum::<u64>() as f64 / f.len().max(1) as f64
    };
    let mut free: Vec<f64> = devices
        .remote
        .iter()
        .map(|(_, f)| f.map_or(mean, |f| f as f64))
        .collect();
    free.extend(std::iter::repeat_n(mean, devices.local_gpus));
    let p = crate::model::memory::predict_devices(layout, cfg, &free);
    // One device in all: the model's GPU share is that device's.
    let shares: Vec<(usize, f64)> = if p.gpu_devices.is_empty() {
        vec![(0, p.gpu_mib)]
    } else {
        p.gpu_devices
            .iter()
            .map(|d| (d.device as usize, d.total_mib))
            .collect()
    };
    shares.into_iter().find_map(|(i, need)| {
        let (name, free) = devices.remote.get(i)?;
        let budget = free.map(|f| f.saturating_sub(headroom_mib) as f64)?;
        (need > budget).then(|| {
            format!(
                "{name} would hold {need:.0} MiB, more than its {budget:.0} MiB ({} MiB free less \
                 {headroom_mib} MiB headroom)",
                budget as u64 + headroom_mib
            )
        })
    })
}

/// [`placements`] less those a worker's free memory cannot hold ([`worker_overflow`]): what
/// the search launches.
pub fn placements_within(
    best: &LaunchConfig,
    devices: &HeadDevices,
    layout: &crate::model::ModelLayout,
    headroom_mib: u64,
) -> Vec<LaunchConfig> {
    placements(best, devices, layout.n_blocks)
        .into_iter()
        .filter(
            |c| match worker_overflow(layout, c, devices, headroom_mib) {
                Some(why) => {
                    tracing::info!("RPC placement not tried: {why}");
                    false
                }
                None => true,
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::LaunchArgs;

    #[test]
    fn worker_addresses_parse_and_print_back() {
        let w: Worker = "192.168.1.20:50052".parse().unwrap();
        assert_eq!(w.to_string(), "192.168.1.20:50052");
        let v6: Worker = "[fd00::2]:50052".parse().unwrap();
        assert_eq!(v6.host, "fd00::2");
        assert_eq!(v6.to_string(), "[fd00::2]:50052");
        for bad in [
            "box",
            "box:",
            ":50052",
            "box:0",
            "box:99999",
            "a b:1",
            "fd00::2:1",
        ] {
            let e = bad.parse::<Worker>().unwrap_err();
            assert!(e.contains("host:port"), "{bad}: {e}");
        }
        assert_eq!(
            rpc_arg(&parse_workers("127.0.0.1:50052, 127.0.0.1:50053").unwrap()),
            "127.0.0.1:50052,127.0.0.1:50053"
        );
        assert!(parse_workers("a:1,a:1").unwrap_err().contains("twice"));
        assert!(parse_workers(" , ").unwrap_err().contains("no worker"));
        let many: Vec<String> = (0..17).map(|i| format!("10.0.0.{i}:50052")).collect();
        assert!(parse_workers(&many[..16].join(",")).is_ok());
        assert!(parse_workers(&many.join(","))
            .unwrap_err()
            .contains("more than 16 workers"));
    }

    #[test]
    fn a_public_bind_is_refused_a_private_one_warned_loopback_quiet() {
        assert_eq!(bind_policy("127.0.0.1", false), Ok(None));
        assert_eq!(bind_policy("::1", false), Ok(None));
        for private in [
            "192.168.1.20",
            "10.0.0.5",
            "172.20.1.1",
            "100.100.1.1",
            "fd12::1",
        ] {
            let w = bind_policy(private, false).unwrap().unwrap();
            assert!(w.contains("no authentication"), "{private}: {w}");
        }
        for public in ["0.0.0.0", "::", "8.8.8.8", "172.32.0.1", "2001:db8::1"] {
            let e = bind_policy(public, false).unwrap_err();
            assert!(e.contains("--allow-public"), "{public}: {e}");
            let w = bind_policy(public, true).unwrap().unwrap();
            assert!(w.contains("public"), "{public}: {w}");
        }
    }

    #[test]
    fn the_worker_command_has_its_address_devices_threads_and_cache() {
        let o = ServeOptions {
            host: "192.168.1.20".into(),
            port: 50052,
            devices: vec!["CUDA0".into(), "CPU".into()],
            threads: Some(8),
            cache: true,
        };
        assert_eq!(
            serve_argv("ggml-rpc-server", &o).join(" "),
            "ggml-rpc-server -H 192.168.1.20 -p 50052 -d CUDA0,CPU -t 8 -c"
        );
    }

    #[test]
    fn expert_rules_on_a_worker_render_and_read_back() {
        let w: Worker = "127.0.0.1:50053".parse().unwrap();
        let e = RpcExperts {
            device: device_name(&w, 0),
            blocks: BlockSet::first(12),
        };
        let rule = e.override_rule().unwrap();
        assert_eq!(
            rule,
            r"blk\.([0-9]|1[0-1])\.ffn_(up|down|gate|gate_up)_(ch|)exps=RPC0[127.0.0.1:50053]"
        );
        assert_eq!(RpcExperts::from_rule(&rule), Some(Ok(e)));
        assert_eq!(RpcExperts::from_rule(r"blk\.(1)\.ffn_x=CPU"), None);
        assert!(RpcExperts::from_rule("junk=RPC0[a:1]").unwrap().is_err());
    }

    #[test]
    fn placements_split_layers_over_the_workers_and_move_experts() {
        let mut best = LaunchConfig::baseline(4096);
        best.rpc = vec!["127.0.0.1:50052".into(), "127.0.0.1:50053".into()];
        let devices = HeadDevices {
            remote: vec![
                ("RPC0[127.0.0.1:50052]".into(), Some(8000)),
                ("RPC0[127.0.0.1:50053]".into(), Some(4000)),
            ],
            local_gpus: 0,
        };
        let p = placements(&best, &devices, 8);
        let args: Vec<String> = p.iter().map(|c| c.server_args().join(" ")).collect();
        assert_eq!(args.len(), 4, "{args:#?}");
        assert!(
            args[0].starts_with(
                "-c 4096 -np 1 --rpc 127.0.0.1:50052,127.0.0.1:50053 -ngl 999 -ts 1,1"
            ),
            "{}",
            args[0]
        );
        assert!(args[1].contains("-ts 16,8"), "{}", args[1]);
        assert!(
            args[2].contains("-ts 1,1") && args[2].contains("=CPU"),
            "{}",
            args[2]
        );
        assert!(
            args[3].contains("-ts 1,0") && args[3].contains("=RPC0[127.0.0.1:50053]"),
            "{}",
            args[3]
        );
        for a in &args {
            assert!(a.contains("--fit off"), "{a}");
        }
        // Without workers there is nothing to place.
        assert!(placements(&LaunchConfig::baseline(4096), &devices, 8).is_empty());
    }

    /// Each worker's free memory is its budget: a placement that puts more on a worker than
    /// it has free (less the headroom) is not launched; one that fits is.
    #[test]
    fn a_placement_past_a_workers_free_memory_is_not_tried() {
        // 8 blocks of 256 MiB routed experts and 16 MiB of the rest each: 2176 MiB in all.
        let l = crate::model::ModelLayout::uniform(8, 8, 256 << 20, 16 << 20);
        let mut best = LaunchConfig::baseline(1024);
        best.rpc = vec!["127.0.0.1:50052".into()];
        let names = |free: u64| HeadDevices {
            remote: vec![("RPC0[127.0.0.1:50052]".into(), Some(free))],
            local_gpus: 0,
        };
        let all = placements(&best, &names(1000), 8);
        assert_eq!(
            all.len(),
            2,
            "the whole model, and its experts on the head's CPU"
        );
        // 1000 MiB free less 64 of headroom: the experts on the head's CPU (about 350 MiB on
        // the worker) fit, the whole model (about 2300 MiB) does not.
        let kept = placements_within(&best, &names(1000), &l, 64);
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(kept[0].cpu_experts.is_some(), "{:?}", kept[0]);
        let why = worker_overflow(&l, &all[0], &names(1000), 64).unwrap();
        assert!(
            why.contains("RPC0[127.0.0.1:50052] would hold") && why.contains("its 936 MiB"),
            "{why}"
        );
        // A worker with room for everything keeps both; one with too little keeps none.
        assert_eq!(placements_within(&best, &names(4000), &l, 64).len(), 2);
        assert!(placements_within(&best, &names(300), &l, 64).is_empty());
    }

    /// What `qtune compare` reads back: `--rpc` and the expert rules on a worker's device.
    #[test]
    fn a_command_over_workers_reads_back_as_the_same_config() {
        let mut c = LaunchConfig::baseline(2048);
        c.rpc = vec!["127.0.0.1:50052".into(), "127.0.0.1:50053".into()];
        c.n_gpu_layers = Some(999);
        c.tensor_split = vec![1, 0];
        c.fit = Some(false);
        c.rpc_experts = vec![RpcExperts {
            device: "RPC0[127.0.0.1:50053]".into(),
            blocks: BlockSet::first(4),
        }];
        let argv = c.command(
            std::path::Path::new("/srv/llama-server"),
            std::path::Path::new("/m.gguf"),
            "127.0.0.1",
            8080,
        );
        let rpc_at = argv.iter().position(|a| a == "--rpc").unwrap();
        let ot_at = argv.iter().position(|a| a == "-ot").unwrap();
        assert!(rpc_at < ot_at, "--rpc before any -ot: {argv:?}");
        let back = crate::engine::parse_command(&argv).unwrap();
        assert_eq!(back.config, c);
        let bad = crate::engine::parse_command(
            &["llama-server", "-c", "1", "-np", "1", "--rpc", "nowhere"].map(String::from),
        )
        .unwrap_err();
        assert!(bad.contains("host:port"), "{bad}");
    }

    #[test]
    fn a_dropped_or_unreachable_worker_is_found_in_the_log() {
        let log =
            "# qtune: llama-server -m m.gguf --rpc 127.0.0.1:50052,127.0.0.1:50053 --port 1\n\
                   /x/ggml-rpc.cpp:547: Failed to connect to 127.0.0.1:50053\n";
        assert_eq!(unreachable_in_log(log).as_deref(), Some("127.0.0.1:50053"));
        assert_eq!(
            workers_in_header(log),
            vec!["127.0.0.1:50052".to_string(), "127.0.0.1:50053".to_string()]
        );
    }
}
