//! The setup a run shares, a tune's or a comparison's: the server it launches (found and
//! checked, or built) and the workload it measures (the `--workload` asked for, a built-in
//! session rendered into a trace, its mixes or trace resolved at the context and checked
//! against the model, how long one of its requests may take). `qtune tune` and `qtune compare` both go through these, so they find
//! the same server and measure the same workload for the same words.
//!
//! The only part of `run/` that calls the stages doing work (the engine's server lookup and
//! build, a short-lived server rendering a session).

use crate::engine::binary::ServerBinary;
use crate::space::Workload;
use anyhow::Result;
use std::path::Path;

/// How a run gets its server when none is found: a tune builds the pinned one (`say` hears the
/// progress); a dry run and a comparison only look.
#[derive(Clone, Copy)]
pub enum FindServer<'a> {
    Look,
    OrBuild(&'a dyn Fn(&str)),
}

/// The server a run launches: `explicit` (`--server`, or a command's own binary), else the
/// usual search (QTUNE_LLAMA_SERVER, PATH, qtune's cache); checked (it runs and says its
/// version). One line when there is none.
pub fn server(explicit: Option<&Path>, find: FindServer<'_>) -> Result<ServerBinary> {
    match find {
        FindServer::Look => crate::engine::binary::resolve(explicit),
        FindServer::OrBuild(say) => crate::engine::binary::resolve_or_build(explicit, say),
    }
}

/// The server and model that render a built-in session, at the context the run uses.
#[derive(Clone, Copy)]
pub struct Renderer<'a> {
    pub server: &'a Path,
    pub model: &'a Path,
    pub ctx: u32,
}

/// `--workload asked` set on `workload`: a built-in mix or a trace file as named; a built-in
/// session rendered first (by `render`, or the kept trace) into the trace replayed in its
/// place. Without a renderer (a replayed journal) a session is refused in one line.
pub fn ask_workload(
    workload: &mut Workload,
    asked: &str,
    render: Option<Renderer<'_>>,
) -> Result<()> {
    workload.mix = Some(asked.to_string());
    if crate::trial::session_render::is_session(asked) {
        let Some(r) = render else {
            anyhow::bail!(
                "--workload {asked} is rendered by a real llama-server: it cannot be replayed from a journal"
            );
        };
        let path = crate::trial::session_render::trace_for(asked, r.server, r.model, r.ctx)?;
        workload.mix = Some(path.display().to_string());
    }
    Ok(())
}

/// The workload's mixes (the objective's first, then the other built-ins) or its trace,
/// resolved at context `ctx`; `say` hears the notes (a mix fitted to the context, what a trace
/// replays), then a trace is checked against the model's `n_vocab`. A workload with no mix
/// named measures the space's request shape alone.
pub fn resolve_workload(
    workload: &mut Workload,
    ctx: u32,
    n_vocab: u32,
    say: &mut dyn FnMut(&str),
) -> Result<()> {
    for note in workload.resolve(ctx)? {
        say(&note);
    }
    workload.check_vocab(n_vocab)?;
    Ok(())
}

/// How long one request of the workload may take: generous, since a slow box is not a
/// failure.
pub fn request_timeout(w: &Workload) -> std::time::Duration {
    let tokens = u64::from(w.prompt_tokens)
        + u64::from(w.gen_tokens)
        + u64::from(w.context_depth.unwrap_or(0));
    let tokens = tokens.max(crate::trial::workload::needed_ctx(w));
    std::time::Duration::from_secs(120 + tokens / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_without_a_server_to_render_it_is_refused_in_one_line() {
        let mut w = crate::space::load("demo").unwrap().workload;
        let e = ask_workload(&mut w, "agent-session", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be replayed from a journal"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        // A built-in mix is named as asked, and resolved: the objective's mix first.
        ask_workload(&mut w, "chat", None).unwrap();
        assert_eq!(w.mix.as_deref(), Some("chat"));
        let mut notes = Vec::new();
        resolve_workload(&mut w, 4096, 32_000, &mut |n| notes.push(n.to_string())).unwrap();
        assert_eq!(w.mixes.first().map(|m| m.name.as_str()), Some("chat"));
        assert!(w.mixes.len() > 1, "the other built-ins are measured too");
    }

    #[test]
    fn a_request_may_take_longer_for_a_longer_workload() {
        let mut w = crate::space::load("demo").unwrap().workload;
        let short = request_timeout(&w);
        assert!(short >= std::time::Duration::from_secs(120));
        w.prompt_tokens *= 100;
        assert!(request_timeout(&w) > short);
    }
}
