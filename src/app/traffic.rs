//! `qtune record` and `qtune trace show`: wiring and printing for [`crate::traffic`].

use crate::traffic::{proxy, show, trace};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where a trace goes when `--out` is not given: `<data dir>/traces/<UTC time>.jsonl`.
pub fn default_trace_path() -> PathBuf {
    crate::util::data_dir().join("traces").join(format!(
        "{}.jsonl",
        chrono::Utc::now().format("%Y%m%d-%H%M%S")
    ))
}

/// `--upstream`: an `http://host:port` URL without a trailing slash.
fn upstream_url(u: &str) -> Result<String> {
    let u = u.trim().trim_end_matches('/');
    if u.starts_with("https://") {
        bail!("--upstream {u}: https is not supported; give the llama-server's plain http:// address (e.g. http://127.0.0.1:8081)");
    }
    let rest = u.strip_prefix("http://").unwrap_or(u);
    if rest.is_empty() || rest.contains(['/', '?', '#', ' ']) {
        bail!("--upstream {u}: give the llama-server's address as http://HOST:PORT (e.g. http://127.0.0.1:8081)");
    }
    Ok(format!("http://{rest}"))
}

/// `--listen HOST:PORT`: the one address the proxy binds.
fn listen_addr(l: &str) -> Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<std::net::SocketAddr> = l
        .to_socket_addrs()
        .with_context(|| format!("--listen {l}: give HOST:PORT, e.g. 127.0.0.1:8080"))?
        .collect();
    addrs
        .first()
        .copied()
        .with_context(|| format!("--listen {l}: the host has no address"))
}

/// `qtune record`.
pub fn record(upstream: &str, listen: &str, out: Option<PathBuf>) -> Result<()> {
    let upstream = upstream_url(upstream)?;
    let listen = listen_addr(listen)?;
    if !listen.ip().is_loopback() {
        eprintln!(
            "qtune: warning: --listen {listen} is not loopback: other machines can reach the proxy, \
             and what they send is recorded too"
        );
    }
    if let Ok(up) = listen_addr(upstream.trim_start_matches("http://")) {
        if up.port() == listen.port() && (up.ip() == listen.ip() || listen.ip().is_unspecified()) {
            bail!("--listen {listen} is the upstream's own address: the proxy would forward to itself; give the llama-server another port");
        }
    }
    let out = out.unwrap_or_else(default_trace_path);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        let client = proxy::client()?;
        let header = proxy::upstream_header(&client, &upstream).await?;
        let file = proxy::create_trace_file(&out)?;
        let opts = proxy::RecordOptions {
            upstream: upstream.clone(),
            listen,
            out: out.clone(),
        };
        let (tx, rx) = tokio::sync::watch::channel(0u32);
        use tokio::signal::unix::{signal, SignalKind};
        let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
        let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = int.recv() => {},
                    _ = term.recv() => {},
                }
                tx.send_modify(|n| *n += 1);
                if *tx.borrow() == 1 {
                    eprintln!(
                        "qtune: stopping: finishing the requests in flight (up to {} s; \
                         Ctrl-C again to stop now)",
                        proxy::DRAIN.as_secs()
                    );
                }
            }
        });
        let (mut r1, mut r2) = (rx.clone(), rx);
        let stop = async move {
            let _ = r1.wait_for(|n| *n >= 1).await;
        };
        let stop_now = async move {
            let _ = r2.wait_for(|n| *n >= 2).await;
        };
        let s = proxy::run(&opts, file, header, client, stop, stop_now, |addr| {
            eprintln!(
                "qtune: recording: clients use http://{addr} (forwarded to {upstream}); the trace \
                 {} holds their prompts (user-only). Ctrl-C stops.",
                out.display()
            );
        })
        .await?;
        eprintln!(
            "qtune: recorded {} generation request{}{} to {} ({} other request{} forwarded)",
            s.requests,
            if s.requests == 1 { "" } else { "s" },
            if s.interrupted > 0 {
                format!(" ({} interrupted)", s.interrupted)
            } else {
                String::new()
            },
            out.display(),
            s.other_requests,
            if s.other_requests == 1 { "" } else { "s" },
        );
        println!("{}", out.display());
        Ok(())
    })
}

/// `qtune trace show`.
pub fn trace_show(path: &Path, json: bool) -> Result<()> {
    let t = trace::read(path)?;
    let shown = show::analyse(&t);
    if json {
        let v = serde_json::json!({
            "trace": path.display().to_string(),
            "header": t.header,
            "summary": shown.summary,
            "requests": shown.requests,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", show::render(&t, &shown, &path.display().to_string()));
    }
    Ok(())
}
