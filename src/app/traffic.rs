//! `qtune record` and `qtune trace show`: wiring and printing for [`crate::traffic`].

use crate::traffic::{proxy, render, session, show, speculate, trace, upstream};
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
fn upstream_url(given: &str) -> Result<String> {
    let given = given.trim().trim_end_matches('/');
    // Errors show it without any `user:password@` (they are kept for the requests only).
    let u = &upstream::without_credentials(given);
    if u.starts_with("https://") {
        bail!("--upstream {u}: https is not supported; give the llama-server's plain http:// address (e.g. http://127.0.0.1:8081)");
    }
    let rest = given.strip_prefix("http://").unwrap_or(given);
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
    // What is printed and stored: never its credentials.
    let shown = upstream::without_credentials(&upstream);
    let listen = listen_addr(listen)?;
    if !listen.ip().is_loopback() {
        eprintln!(
            "qtune: warning: --listen {listen} is not loopback: other machines can reach the proxy, \
             and what they send is recorded too"
        );
    }
    if let Ok(up) = listen_addr(shown.trim_start_matches("http://")) {
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
        let client = upstream::client()?;
        let header = upstream::upstream_header(&client, &upstream).await?;
        let file = proxy::create_trace_file(&out)?;
        let opts = proxy::RecordOptions {
            upstream: upstream.clone(),
            listen,
            out: out.clone(),
            held_bytes: proxy::MAX_HELD,
            limits: Default::default(),
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
                "qtune: recording: clients use http://{addr} (forwarded to {shown}); the trace \
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
        if s.unrecorded > 0 {
            eprintln!(
                "qtune: warning: {} generation-looking request{} forwarded unrecorded (paths \
                 above)",
                s.unrecorded,
                if s.unrecorded == 1 { " was" } else { "s were" },
            );
        }
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
            "speculation": speculate::predict(&t, speculate::NgramMod::default()),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", show::render(&t, &shown, &path.display().to_string()));
        for l in speculate::predict(&t, speculate::NgramMod::default()).lines() {
            println!("{l}");
        }
    }
    Ok(())
}

/// `qtune trace session`: build the built-in session and render it through `server` into a
/// trace file.
pub fn trace_session(
    kind: &str,
    server: &str,
    ctx: Option<u64>,
    out: Option<PathBuf>,
    answers: bool,
) -> Result<()> {
    let kind = match kind {
        "agent" => session::Kind::Agent,
        "chat" => session::Kind::Chat,
        "subagents" => session::Kind::Subagents,
        k => bail!("unknown session '{k}': give agent, chat or subagents"),
    };
    let url = upstream_url(server)
        .map_err(|e| anyhow::anyhow!("{}", e.to_string().replace("--upstream", "--server")))?;
    let dir = session::stdlib_dir()?;
    let sources = session::load_sources(&dir)?;
    let what = format!(
        "the standard library of {}",
        dir.file_name().map_or("Python".into(), |n| n
            .to_string_lossy()
            .replace("python", "Python "))
    );
    let out = out.unwrap_or_else(|| {
        crate::util::data_dir().join("traces").join(format!(
            "session-{}-{}.jsonl",
            kind.name(),
            chrono::Utc::now().format("%Y%m%d-%H%M%S")
        ))
    });
    if out.exists() {
        bail!(
            "{} already exists: qtune never writes over a trace; give another --out",
            out.display()
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let t = rt.block_on(async {
        let client = upstream::client()?;
        let mut t = render::render(&client, &url, kind, ctx, &sources, &what).await?;
        if answers {
            eprintln!(
                "qtune: asking {url} for the greedy answer of each of {} requests",
                t.requests.len()
            );
            crate::traffic::answers::greedy(&client, &url, &mut t).await?;
        }
        anyhow::Ok(t)
    })?;
    let text = render::to_jsonl(&t)?;
    // What replay will read must pass its checks.
    trace::parse(text.as_bytes()).map_err(|e| {
        anyhow::anyhow!("the rendered session is not a valid trace ({e}): please report this")
    })?;
    let mut file = proxy::create_trace_file(&out)?;
    use std::io::Write;
    if let Err(e) = file
        .write_all(text.as_bytes())
        .and_then(|_| file.sync_all())
    {
        let _ = std::fs::remove_file(&out);
        bail!("cannot write the trace {}: {e}", out.display());
    }
    let deepest = t
        .requests
        .iter()
        .filter_map(|r| r.prompt_tokens.as_ref().map(Vec::len))
        .max()
        .unwrap_or(0);
    eprintln!(
        "qtune: wrote {}: {}; {} requests, the deepest {} prompt tokens ('qtune trace show' \
         summarises it)",
        out.display(),
        t.header.scripted.as_deref().unwrap_or("the session"),
        t.requests.len(),
        crate::util::fmt_thousands(deepest as f64),
    );
    println!("{}", out.display());
    Ok(())
}
