//! `qtune rpc serve`, `qtune server path --rpc-server`, and the workers of `qtune hw --rpc`
//! and `qtune tune --rpc`.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where the worker binary is: `--rpc-server`, `QTUNE_RPC_SERVER`, next to the llama-server
/// qtune uses (`qtune server build` puts both in one `bin/`), or `PATH`.
pub fn find_rpc_server(explicit: Option<&Path>, server: Option<&Path>) -> Result<PathBuf> {
    let name = crate::engine::binary::RPC_SERVER;
    if let Some(p) = explicit {
        return check_file(p, "--rpc-server");
    }
    if let Some(p) = std::env::var_os("QTUNE_RPC_SERVER").filter(|p| !p.is_empty()) {
        return check_file(Path::new(&p), "QTUNE_RPC_SERVER");
    }
    let near =
        crate::engine::binary::locate(server).and_then(|(p, _)| p.parent().map(|d| d.join(name)));
    if let Some(p) = near.as_ref().filter(|p| p.is_file()) {
        return Ok(p.clone());
    }
    if let Ok(p) = which::which(name) {
        return Ok(p);
    }
    bail!(
        "no {name} found ({}on PATH): run 'qtune server build', which builds it next to llama-server (a cache built before RPC support is rebuilt), or pass --rpc-server PATH",
        near.map_or(String::new(), |p| format!(
            "not at {}, ",
            crate::escape::terminal_path(&p)
        ))
    )
}

fn check_file(p: &Path, from: &str) -> Result<PathBuf> {
    if !p.is_file() {
        bail!(
            "{} (from {from}) is not a file: point it at ggml-rpc-server, or run 'qtune server build'",
            crate::escape::terminal_path(p)
        );
    }
    Ok(p.to_path_buf())
}

/// `qtune server path --rpc-server`.
pub fn rpc_server_path(server: Option<PathBuf>) -> Result<()> {
    let p = find_rpc_server(None, server.as_deref())?;
    println!("{}", crate::escape::terminal_path(&p));
    Ok(())
}

/// What `qtune rpc serve` was asked (the command line's flags, as the CLI parsed them).
#[derive(Debug, Clone)]
pub struct Serve {
    /// `--listen HOST:PORT`, which replaces host and port.
    pub listen: Option<String>,
    pub host: String,
    pub port: u16,
    pub device: Vec<String>,
    pub threads: Option<u32>,
    pub no_cache: bool,
    pub allow_public: bool,
    pub rpc_server: Option<PathBuf>,
    pub dry_run: bool,
}

/// `qtune rpc serve`: check the address, print the worker's command and the head's `--rpc`,
/// then become the worker (exec: signals reach it directly, a service manager stops it).
pub fn serve(mut a: Serve) -> Result<()> {
    if let Some(l) = &a.listen {
        let w: crate::config::rpc::Worker = l
            .parse()
            .map_err(|e: String| anyhow::anyhow!("--listen: {e}"))?;
        (a.host, a.port) = (w.host, w.port);
    }
    let warning = crate::rpc::bind_policy(&a.host, a.allow_public).map_err(anyhow::Error::msg)?;
    if a.threads == Some(0) {
        bail!("--threads 0 is not a thread count: give 1 or more, or leave it out");
    }
    if a.port == 0 {
        bail!("--port 0 is not a port the head can name: give one, e.g. 50052");
    }
    let bin = find_rpc_server(a.rpc_server.as_deref(), None)?;
    let opts = crate::rpc::ServeOptions {
        host: a.host.clone(),
        port: a.port,
        devices: a
            .device
            .iter()
            .map(|d| d.trim().to_string())
            .filter(|d| !d.is_empty())
            .collect(),
        threads: a.threads,
        cache: !a.no_cache,
    };
    let argv = crate::rpc::serve_argv(&bin.display().to_string(), &opts);
    if let Some(w) = warning {
        eprintln!("qtune: warning: {w}");
    }
    let wildcard = matches!(a.host.as_str(), "0.0.0.0" | "::" | "[::]");
    let head = if wildcard {
        format!("--rpc THIS_BOX_ADDRESS:{}", a.port)
    } else {
        format!(
            "--rpc {}",
            crate::rpc::Worker {
                host: a.host.clone(),
                port: a.port
            }
        )
    };
    eprintln!(
        "qtune: worker: {}",
        crate::escape::terminal(&crate::config::shell_line(&argv))
    );
    eprintln!(
        "qtune: on the head box: qtune hw {head} (check the link), then qtune tune --model M.gguf {head}"
    );
    // The last stdout line: what the head's llama-server takes.
    println!("{}", crate::escape::terminal(&head));
    if a.dry_run {
        return Ok(());
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
    Err(err).with_context(|| format!("cannot run {}", crate::escape::terminal_path(&bin)))
}

/// Measure every worker of `--rpc LIST` (devices, memory, link); an unreachable one is an
/// error in the list. The workers are probed at once, each in a thread (N dead workers cost
/// one answer limit, not N one after the other); their link speeds are measured one at a
/// time all the same ([`crate::rpc::probe::measure`]).
pub fn measure_workers(list: &str) -> Result<Vec<Result<crate::rpc::probe::WorkerInfo, String>>> {
    let workers = crate::rpc::parse_workers(list).map_err(anyhow::Error::msg)?;
    Ok(std::thread::scope(|s| {
        let probes: Vec<_> = workers
            .iter()
            .map(|w| s.spawn(move || crate::rpc::probe::measure(w)))
            .collect();
        probes
            .into_iter()
            .zip(&workers)
            .map(|(p, w)| {
                p.join()
                    .unwrap_or_else(|_| Err(format!("worker {w}: its probe failed")))
            })
            .collect()
    }))
}

/// Whether `server` uses the workers: `llama-server --rpc LIST --list-devices` lists one
/// `RPCn` device per worker device (a build without RPC rejects `--rpc`).
pub fn check_head(server: &Path, workers: &[crate::rpc::probe::WorkerInfo]) -> Result<()> {
    let text =
        crate::engine::server::list_devices_with_rpc(server, &crate::rpc::addresses(workers))
            .with_context(|| format!("cannot run {}", crate::escape::terminal_path(server)))?;
    let listed = crate::engine::binary::parse_devices(&text).unwrap_or_default();
    let rpc = listed.iter().filter(|l| l.starts_with("RPC")).count();
    let want: usize = workers.iter().map(|w| w.devices.len()).sum();
    if rpc != want {
        bail!(
            "{} lists {rpc} RPC devices with --rpc, not the workers' {want}: a build without RPC (or another llama.cpp than the workers'); run 'qtune server build', which builds with RPC",
            crate::escape::terminal_path(server)
        );
    }
    Ok(())
}

/// The workers of `qtune tune --rpc`: every one measured and listed by the head's server, or
/// one clear error.
pub fn tune_workers(list: &str, server: &Path) -> Result<Vec<crate::rpc::probe::WorkerInfo>> {
    let mut out = Vec::new();
    for w in measure_workers(list)? {
        out.push(w.map_err(|e| anyhow::anyhow!("--rpc: {e}"))?);
    }
    check_head(server, &out)?;
    Ok(out)
}

/// `qtune rpc link`: check the addresses and the rate, bind, say what to point the head at,
/// then forward until stopped.
pub fn link(
    listen: &str,
    to: &str,
    gbit: f64,
    delay_ms: f64,
    stats: Option<PathBuf>,
) -> Result<()> {
    let l: crate::rpc::Worker = listen
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--listen: {e}"))?;
    let t: crate::rpc::Worker = to
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--to: {e}"))?;
    if l == t {
        bail!("--listen and --to are both {l}: the link would forward to itself");
    }
    let spec = crate::rpc::link::LinkSpec::new(gbit, delay_ms).map_err(anyhow::Error::msg)?;
    if let Some(w) = crate::rpc::bind_policy(&l.host, false).map_err(anyhow::Error::msg)? {
        eprintln!("qtune: warning: {w}");
    }
    let listener = std::net::TcpListener::bind((l.host.as_str(), l.port))
        .with_context(|| format!("cannot listen on {l}"))?;
    eprintln!(
        "qtune: link {l} -> {t}: {gbit} Gbit/s each way ({:.1} MB/s, {} KiB burst), \
         +{delay_ms} ms one way\nqtune: on the head: --rpc {l}",
        spec.rate_bytes_s / 1e6,
        spec.burst_bytes >> 10
    );
    crate::rpc::link::run(listener, t.to_string(), spec, stats).map_err(anyhow::Error::msg)
}
