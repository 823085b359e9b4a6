//! The engines a tune races (`--engine`, issue 56), wired for the tune: each engine's server
//! found and checked ([`crate::engine::select`]), the others recorded in the run's inputs,
//! checked again on `--resume`, and handed to the trial runner.

use crate::engine::select::{select, EngineChoice, EngineServer};
use crate::engine::ServerBinary;
use crate::run::setup::FindServer;
use anyhow::Result;

/// The tune's own server (the first engine's), the other engines' as recorded, and the line
/// the banner says (how to get the engine not found).
pub struct TuneServers {
    pub primary: ServerBinary,
    pub others: Vec<EngineServer>,
    pub note: Option<String>,
}

/// Find and check the servers of `--engine` (`choice`), `--server` (`server`). `rpc`: the
/// tune has RPC workers, llama.cpp's (it races no other engine unless asked). `build`: a
/// missing llama.cpp server is built (a dry run builds nothing).
pub fn resolve(
    choice: Option<EngineChoice>,
    server: Option<&std::path::Path>,
    rpc: bool,
    build: bool,
) -> Result<TuneServers> {
    let named =
        server.is_some() || crate::engine::llama_cpp::server::named_in_env().is_some() || rpc;
    // llama.cpp's server as every run finds it (`run::setup::server`): built where missing,
    // unless this is a dry run.
    let llama = |explicit: Option<&std::path::Path>| {
        let find = if build {
            FindServer::OrBuild(&super::info::say)
        } else {
            FindServer::Look
        };
        crate::run::setup::server(explicit, find)
    };
    let sel = select(choice, server, named, &llama)?;
    let mut servers = sel.servers.into_iter();
    let primary = servers.next().expect("select returns a server");
    let others = servers
        .map(|s| EngineServer::of(&s))
        .collect::<Result<Vec<_>>>()?;
    Ok(TuneServers {
        primary,
        others,
        note: sel.note,
    })
}

/// `--resume`: the other engines' recorded servers, each the same binary as when the tune
/// started.
pub fn verify(dir: &std::path::Path, others: &[EngineServer]) -> Result<()> {
    for s in others {
        s.verify()
            .map_err(|e| anyhow::anyhow!("cannot resume {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// The trial runner with each other engine's server: a config launches its engine's binary.
pub fn with_servers(
    mut runner: crate::trial::llama_runner::LlamaServerRunner,
    others: &[EngineServer],
) -> crate::trial::llama_runner::LlamaServerRunner {
    for s in others {
        runner = runner.with_engine_server(s.engine, &s.path);
    }
    runner
}
