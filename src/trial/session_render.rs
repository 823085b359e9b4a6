//! `--workload agent` (or `agent-session`), `chat-session` and `subagents-session`: the
//! built-in sessions of real text ([`crate::traffic::session`]), rendered through the model's own chat template by a
//! short-lived llama-server (nothing offloaded, the model memory-mapped), written as a trace
//! and then replayed in every launch like a recorded one ([`crate::traffic::plan`]).
//!
//! The trace holds Python's standard-library text, not the user's; it is kept in qtune's data
//! folder (`traces/`) under a name that says what it was rendered for, so a second tune of the
//! same model and context (and a resume) replays the same tokens without rendering again.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Is `name` one of the built-in sessions (`agent` is the agent session)?
pub fn is_session(name: &str) -> bool {
    crate::workloads::session_name(name).is_some()
}

/// The trace of the built-in session `name` for `model` at context `ctx`: the kept one when
/// it exists, else rendered by a short-lived `server`.
pub fn trace_for(name: &str, server: &Path, model: &Path, ctx: u32) -> Result<PathBuf> {
    // `agent` and `agent-session` are one session: one trace, named by its full name.
    let name = crate::workloads::session_name(name).unwrap_or(name);
    let kind = match name {
        "agent-session" => crate::traffic::session::Kind::Agent,
        "chat-session" => crate::traffic::session::Kind::Chat,
        "subagents-session" => crate::traffic::session::Kind::Subagents,
        other => bail!("unknown built-in session '{other}': give agent-session, chat-session or subagents-session"),
    };
    let meta = std::fs::metadata(model)
        .with_context(|| format!("cannot read the model {}", model.display()))?;
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let stem: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    // One folder per model file, context and qtune: the file's name is the workload's name.
    let dir = crate::util::data_dir().join("traces").join(format!(
        "built-in-{stem}-{}b-ctx{ctx}-qtune{}",
        meta.len(),
        env!("CARGO_PKG_VERSION")
    ));
    let out = dir.join(format!("{name}.jsonl"));
    if out.is_file() && crate::traffic::trace::read(&out).is_ok() {
        return Ok(out);
    }
    let depth = match kind.share() {
        1 => format!("{ctx} tokens deep"),
        n => format!("each sub-agent {} tokens deep", u64::from(ctx) / n),
    };
    eprintln!(
        "qtune: rendering the built-in {name} ({depth}) through the model's chat template (once per model and context)"
    );
    let started = Instant::now();
    let dir_src = crate::traffic::session::stdlib_dir()?;
    let sources = crate::traffic::session::load_sources(&dir_src)?;
    let what = format!(
        "the standard library of {}",
        dir_src.file_name().map_or("Python".into(), |n| n
            .to_string_lossy()
            .replace("python", "Python "))
    );
    let port = super::process::free_port()?;
    // llama-server on the CPU, one slot, one thread: only its tokenizer and template are used.
    let config = crate::config::LaunchConfig {
        n_gpu_layers: Some(0),
        fit: Some(false),
        threads: Some(1),
        ..crate::config::LaunchConfig::baseline(ctx)
    };
    let mut argv = crate::engine::LaunchArgs::command(&config, server, model, "127.0.0.1", port);
    argv.push("--no-warmup".into());
    let (log, log_path) = create_render_log(&std::env::temp_dir())?;
    let mut proc = super::process::ServerProcess::spawn(&argv, &log, &[])?;
    let url = format!("http://127.0.0.1:{port}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let rendered = rt.block_on(async {
        let client = crate::traffic::upstream::client()?;
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            if proc.try_exit().is_some() {
                bail!(
                    "llama-server exited while loading the model to render the built-in session (its log: {})",
                    log_path.display()
                );
            }
            if let Ok(r) = client
                .get(format!("{url}/health"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
            {
                if r.status().is_success() {
                    break;
                }
            }
            if Instant::now() > deadline {
                bail!("llama-server did not load the model within 10 minutes to render the built-in session");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        crate::traffic::render::render(&client, &url, kind, Some(u64::from(ctx)), &sources, &what)
            .await
    });
    proc.stop(Duration::from_secs(5));
    let trace = rendered?;
    let _ = std::fs::remove_file(&log_path);
    let text = crate::traffic::render::to_jsonl(&trace)?;
    crate::traffic::trace::parse(text.as_bytes()).map_err(|e| {
        anyhow::anyhow!("the rendered session is not a valid trace ({e}): please report this")
    })?;
    // Rendered at the same time by another qtune: keep theirs.
    if out.exists() {
        return Ok(out);
    }
    let mut file = crate::traffic::proxy::create_trace_file(&out)?;
    use std::io::Write;
    if let Err(e) = file
        .write_all(text.as_bytes())
        .and_then(|_| file.sync_all())
    {
        let _ = std::fs::remove_file(&out);
        bail!("cannot write {}: {e}", out.display());
    }
    eprintln!(
        "qtune: {name}: {} requests, kept in {} ({:.0} s)",
        trace.requests.len(),
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(out)
}

/// The short-lived server's log in `dir`, the system's temporary folder: shared by every user,
/// so the log gets a new name of its own (`qtune-render-XXXXXX.log`, created with `O_EXCL`,
/// user-only), never a name another user could plant a link at. It is kept when the render
/// fails (the error names it) and removed when it succeeds.
fn create_render_log(dir: &Path) -> Result<(std::fs::File, PathBuf)> {
    tempfile::Builder::new()
        .prefix("qtune-render-")
        .suffix(".log")
        .tempfile_in(dir)
        .and_then(|t| t.keep().map_err(|e| e.error))
        .with_context(|| format!("cannot create the render's log in {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The render's log goes to the shared temporary folder: a link planted there under the
    /// name qtune would pick (`/tmp/qtune-render-<pid>.log -> ~/.bashrc`) is never written
    /// through; the log gets a name of its own.
    #[test]
    fn the_render_log_is_never_written_through_a_planted_link() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("bashrc");
        std::fs::write(&victim, "export KEEP=me\n").unwrap();
        let planted = dir
            .path()
            .join(format!("qtune-render-{}.log", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let (mut log, path) = create_render_log(dir.path()).unwrap();
        log.write_all(b"llama-server's log\n").unwrap();
        drop(log);
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "export KEEP=me\n"
        );
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "llama-server's log\n"
        );
        assert!(std::fs::symlink_metadata(&planted)
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
