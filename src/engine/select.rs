//! Which engines a tune races (`qtune tune --engine llama|ik|both`, issue 56): each engine's
//! server found and checked on its own, and what a run records of each (its path and version)
//! so that `--resume` launches the same binaries.
//!
//! Without `--engine`, a tune races both engines where both servers are found, else the one
//! found, and says in one line how to get the second. A server the user names (`--server`,
//! or `QTUNE_LLAMA_SERVER`) is tuned alone unless `--engine both` asks for the race: a named
//! server is a choice, and a tune of it behaves as it did before there were two engines.

use super::{EngineKind, ServerBinary};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// `--engine`: one engine, or both raced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineChoice {
    One(EngineKind),
    Both,
}

impl std::str::FromStr for EngineChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "both" | "all" => Ok(EngineChoice::Both),
            "llama" => Ok(EngineChoice::One(EngineKind::LlamaCpp)),
            other => other
                .parse()
                .map(EngineChoice::One)
                .map_err(|_| format!("unknown engine '{other}': use llama, ik or both")),
        }
    }
}

/// An engine's server as a run records it: which engine, where, which version, its size.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EngineServer {
    pub engine: EngineKind,
    pub path: PathBuf,
    pub version: String,
    #[serde(default)]
    pub bytes: Option<u64>,
}

impl EngineServer {
    /// A checked server, as recorded.
    pub fn of(s: &ServerBinary) -> Result<EngineServer> {
        let path = std::path::absolute(&s.path)?;
        Ok(EngineServer {
            engine: s.engine,
            bytes: std::fs::metadata(&path).ok().map(|m| m.len()),
            path,
            version: s.version.clone(),
        })
    }

    /// The recorded server checked again before a resumed tune launches it: the same engine,
    /// version and size, else one line saying what changed.
    pub fn verify(&self) -> Result<()> {
        let now = super::server::check(&self.path, super::server::Source::Flag)?;
        if now.engine != self.engine {
            bail!(
                "the {} server {} is now {}'s",
                self.engine,
                self.path.display(),
                now.engine
            );
        }
        let was = super::of(self.engine).pinned_version(&self.version, &self.path);
        let bytes = std::fs::metadata(&self.path).ok().map(|m| m.len());
        if now.version != was || (self.bytes.is_some() && bytes != self.bytes) {
            bail!(
                "the {} server {} changed since the tune started (it was {}, now {}): restore it, or start a new tune",
                self.engine,
                self.path.display(),
                super::server::short_version(&self.version),
                super::server::short_version(&now.version)
            );
        }
        Ok(())
    }
}

/// The servers a tune launches, the first one's engine first (every config of the search
/// but the other engines' own is for it), and the note the banner says (how to get the
/// engine that was not found; none when nothing is missing or one engine was asked for).
#[derive(Debug, Clone)]
pub struct Selected {
    pub servers: Vec<ServerBinary>,
    pub note: Option<String>,
}

/// The servers of `choice` (None: both where found, see the module's note). `explicit`:
/// `--server`; `named`: whether a server was named (`--server` or `QTUNE_LLAMA_SERVER`);
/// `llama`: how llama.cpp's server is obtained (found, or built where none is).
pub fn select(
    choice: Option<EngineChoice>,
    explicit: Option<&Path>,
    named: bool,
    llama: &dyn Fn(Option<&Path>) -> Result<ServerBinary>,
) -> Result<Selected> {
    let explicit_engine = match explicit {
        Some(p) => Some(super::server::check(p, super::server::Source::Flag)?),
        None => None,
    };
    let resolve = |kind: EngineKind| -> Result<ServerBinary> {
        match &explicit_engine {
            Some(s) if s.engine == kind => Ok(s.clone()),
            // --server names the other engine's: this one from its usual places.
            Some(_) => resolve_usual(kind, llama),
            None => match kind {
                EngineKind::LlamaCpp => llama(None),
                k => super::of(k).resolve(None),
            },
        }
    };
    match choice {
        Some(EngineChoice::One(kind)) => {
            if let Some(s) = explicit_engine.as_ref().filter(|s| s.engine != kind) {
                bail!(
                    "--server {} is {}'s llama-server, not {}'s: drop --engine, or name {}'s server",
                    s.path.display(),
                    s.engine,
                    kind,
                    kind
                );
            }
            Ok(Selected {
                servers: vec![resolve(kind)?],
                note: None,
            })
        }
        Some(EngineChoice::Both) => {
            let mut servers = Vec::new();
            for kind in EngineKind::ALL {
                servers.push(
                    resolve(kind).map_err(|e| {
                        e.context(format!("--engine both needs {kind}'s server too"))
                    })?,
                );
            }
            Ok(Selected {
                servers,
                note: None,
            })
        }
        None if named => {
            let s = match explicit_engine {
                Some(s) => s,
                None => llama(None)?,
            };
            Ok(Selected {
                servers: vec![s],
                note: None,
            })
        }
        None => {
            let first = llama(None)?;
            let mut servers = vec![first];
            let mut missing = Vec::new();
            for kind in EngineKind::ALL.into_iter().skip(1) {
                match super::of(kind).resolve(None) {
                    Ok(s) => servers.push(s),
                    Err(_) => missing.push(kind),
                }
            }
            let note = (!missing.is_empty()).then(|| {
                let how: Vec<String> = missing
                    .iter()
                    .map(|k| format!("`{}`", super::of(*k).build_command()))
                    .collect();
                format!(
                    "engine: llama.cpp only; to race {} too, build it with {}",
                    missing
                        .iter()
                        .map(|k| k.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                    how.join(", ")
                )
            });
            Ok(Selected { servers, note })
        }
    }
}

/// `kind`'s server from its usual places (not `--server`).
fn resolve_usual(
    kind: EngineKind,
    llama: &dyn Fn(Option<&Path>) -> Result<ServerBinary>,
) -> Result<ServerBinary> {
    match kind {
        EngineKind::LlamaCpp => {
            let s = llama(None)?;
            if s.engine != kind {
                bail!(
                    "{} is {}'s llama-server, not llama.cpp's; set QTUNE_LLAMA_SERVER to llama.cpp's",
                    s.path.display(),
                    s.engine
                );
            }
            Ok(s)
        }
        k => super::of(k).resolve(None),
    }
}

/// The server that launches configs of `engine`: the recorded one of that engine, else the
/// tune's own (`primary`).
pub fn server_for<'a>(
    engine: EngineKind,
    primary: &'a Path,
    others: &'a [EngineServer],
) -> &'a Path {
    others
        .iter()
        .find(|s| s.engine == engine)
        .map_or(primary, |s| s.path.as_path())
}

/// The version of the server that launches configs of `engine` (see [`server_for`]).
pub fn version_for<'a>(
    engine: EngineKind,
    primary: &'a str,
    others: &'a [EngineServer],
) -> &'a str {
    others
        .iter()
        .find(|s| s.engine == engine)
        .map_or(primary, |s| s.version.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_reads_llama_ik_and_both() {
        assert_eq!(
            "llama".parse::<EngineChoice>(),
            Ok(EngineChoice::One(EngineKind::LlamaCpp))
        );
        assert_eq!(
            "ik".parse::<EngineChoice>(),
            Ok(EngineChoice::One(EngineKind::IkLlama))
        );
        assert_eq!("both".parse::<EngineChoice>(), Ok(EngineChoice::Both));
        let e = "vllm".parse::<EngineChoice>().unwrap_err();
        assert!(e.contains("llama, ik or both"), "{e}");
    }

    #[test]
    fn each_engine_launches_its_own_server() {
        let others = vec![EngineServer {
            engine: EngineKind::IkLlama,
            path: PathBuf::from("/ik/llama-server"),
            version: "v".into(),
            bytes: None,
        }];
        let p = Path::new("/llama/llama-server");
        assert_eq!(server_for(EngineKind::LlamaCpp, p, &others), p);
        assert_eq!(
            server_for(EngineKind::IkLlama, p, &others),
            Path::new("/ik/llama-server")
        );
        assert_eq!(server_for(EngineKind::IkLlama, p, &[]), p);
    }
}
