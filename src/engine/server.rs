//! A server binary of any engine: run it, check it is a `llama-server` that knows every flag
//! qtune passes to its engine, and read its version and devices. Where each engine's server is
//! found and how it is built is the engine's own (`llama_cpp::server`, `ik_llama::server`),
//! over the paths and the search order they share ([`CacheLayout`], [`locate_in`]).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::config::EngineKind;

/// Where a server came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env,
    /// `QTUNE_IK_SERVER`.
    IkEnv,
    Path,
    Cache,
}

impl Source {
    pub fn describe(self) -> &'static str {
        match self {
            Source::Flag => "--server",
            Source::Env => "QTUNE_LLAMA_SERVER",
            Source::IkEnv => "QTUNE_IK_SERVER",
            Source::Path => "PATH",
            Source::Cache => "qtune's cache",
        }
    }
}

/// Where one engine keeps its pinned build in qtune's cache, `~/.cache/qtune/<folder>/`: the
/// extracted source in `src-<tag>/`, each flavour's build in `<tag>-cpu/` or `<tag>-cuda/`, its
/// server in that folder's `bin/`, and the stamp written once a build succeeded beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLayout {
    /// The engine's folder in qtune's cache (`llama.cpp`, `ik_llama.cpp`).
    pub folder: &'static str,
    /// The pinned source's tag in folder names (`b11434`, `0.1.5`).
    pub tag: &'static str,
}

impl CacheLayout {
    /// `~/.cache/qtune/<folder>`.
    pub fn dir(&self) -> PathBuf {
        crate::util::cache_dir().join(self.folder)
    }

    /// The extracted pinned source tree.
    pub fn source_dir(&self) -> PathBuf {
        self.dir().join(format!("src-{}", self.tag))
    }

    /// The build directory of a flavour (`cuda`: the CUDA build); binaries land in its `bin/`.
    pub fn build_dir(&self, cuda: bool) -> PathBuf {
        let flavour = if cuda { "cuda" } else { "cpu" };
        self.dir().join(format!("{}-{flavour}", self.tag))
    }

    /// The cached server of a flavour (may not exist).
    pub fn cached_server(&self, cuda: bool) -> PathBuf {
        self.build_dir(cuda).join("bin").join("llama-server")
    }

    /// Written once the build of a flavour succeeded.
    pub fn stamp(&self, cuda: bool) -> PathBuf {
        self.build_dir(cuda).join("qtune-built")
    }
}

/// The path the environment variable `var` names, where it names one (an empty value names
/// none).
pub fn named_in(var: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(var).filter(|p| !p.is_empty())
}

/// Which server an engine would use, without checking it: `explicit` (`--server`), then the
/// one its variable `env` names (`source`: how to say so), then `on_path` on PATH where the
/// engine looks there, then the first cached flavour `cached` finds (the CUDA build first).
pub fn locate_in(
    explicit: Option<&Path>,
    (env, source): (&str, Source),
    on_path: Option<&str>,
    cached: impl Fn(bool) -> Option<PathBuf>,
) -> Option<(PathBuf, Source)> {
    if let Some(p) = explicit {
        return Some((p.to_path_buf(), Source::Flag));
    }
    if let Some(p) = named_in(env) {
        return Some((PathBuf::from(p), source));
    }
    if let Some(p) = on_path.and_then(find_on_path) {
        return Some((p, Source::Path));
    }
    [true, false]
        .into_iter()
        .find_map(cached)
        .map(|p| (p, Source::Cache))
}

/// A server version as llama.cpp names its releases: `version: 11434 (abcdef0)` (the first
/// line of `--version`) reads `b11434`, the tag of that build. A version in another shape is
/// shown without its `version: ` prefix; an empty or `unknown` one reads `unknown version`.
pub fn short_version(raw: &str) -> String {
    let rest = raw.trim().strip_prefix("version:").unwrap_or(raw).trim();
    let first = rest.split_whitespace().next().unwrap_or("");
    if !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()) {
        return format!("b{first}");
    }
    if first.len() > 1 && first.starts_with('b') && first[1..].bytes().all(|b| b.is_ascii_digit()) {
        return first.to_string();
    }
    if rest.is_empty() || rest == "unknown" {
        return "unknown version".to_string();
    }
    rest.to_string()
}

/// A checked `llama-server`.
#[derive(Debug, Clone)]
pub struct ServerBinary {
    pub path: PathBuf,
    pub source: Source,
    /// First line of `--version`, e.g. "version: 0.6.0-dev (build 0, commit unknown)".
    pub version: String,
    /// The devices `--list-devices` names (e.g. "CUDA0: NVIDIA H100 80GB HBM3 (81079 MiB,
    /// 80577 MiB free)"): empty for a CPU-only build, None where the server cannot list them.
    pub devices: Option<Vec<String>>,
    /// Which engine it is ([`identify`], from its `--help`).
    pub engine: EngineKind,
}

impl ServerBinary {
    /// Its version in words: the release tag for llama.cpp (`b11434`); qtune's build of
    /// ik_llama.cpp has no build number, and reads as its source package
    /// (`ik-llama-cpp-python 0.1.5`).
    pub fn version_text(&self) -> String {
        super::of(self.engine).version_text(&self.version)
    }

    /// Its backend in words: the devices it lists, or "CPU only".
    pub fn backend(&self) -> String {
        match &self.devices {
            None => "devices unknown (no --list-devices)".into(),
            Some(d) if d.is_empty() => "CPU only (a build without a GPU backend)".into(),
            Some(d) => d.join("; "),
        }
    }
}

/// The devices of `llama-server --list-devices` output: the lines under "Available devices:",
/// "(none)" read as none. None when the header is missing.
pub fn parse_devices(out: &str) -> Option<Vec<String>> {
    let mut lines = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("Available devices"));
    lines.next()?;
    Some(
        lines
            .map(str::trim)
            .take_while(|l| !l.is_empty())
            .filter(|l| *l != "(none)")
            .map(crate::escape::one_line)
            .collect(),
    )
}

pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    which::which(name).ok()
}

/// Run `cmd` with a timeout, returning (success, stdout+stderr).
pub(crate) fn run_captured(
    cmd: &mut Command,
    timeout: Duration,
) -> std::io::Result<(bool, String)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = std::io::Read::read_to_end(o, &mut s);
        }
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = std::io::Read::read_to_end(e, &mut s);
        }
        s
    });
    let status = match wait_timeout::ChildExt::wait_timeout(&mut child, timeout)? {
        Some(st) => Some(st),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    };
    let mut text = String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned();
    text.push_str(&String::from_utf8_lossy(&t_err.join().unwrap_or_default()));
    Ok((status.is_some_and(|s| s.success()), text))
}

/// What `server --rpc WORKERS --list-devices` prints (stdout and stderr): with RPC, one `RPCn`
/// device per worker device; a build without RPC rejects `--rpc`.
pub fn list_devices_with_rpc(server: &Path, workers: &[String]) -> std::io::Result<String> {
    run_captured(
        Command::new(server)
            .arg("--rpc")
            .arg(workers.join(","))
            .arg("--list-devices"),
        Duration::from_secs(60),
    )
    .map(|(_, text)| text)
}

/// Check that `path` runs as llama-server and knows every flag qtune passes.
pub fn check(path: &Path, source: Source) -> Result<ServerBinary> {
    let from = source.describe();
    if !path.exists() {
        bail!(
            "llama-server not found at {} (from {from}); run 'qtune server build' or pass --server PATH",
            path.display()
        );
    }
    if path.is_dir() {
        bail!(
            "{} (from {from}) is a directory, not a llama-server binary",
            path.display()
        );
    }
    let (ok, help) = run_captured(Command::new(path).arg("--help"), Duration::from_secs(30))
        .with_context(|| {
            format!(
                "cannot run {} (from {from}); is it an executable llama-server?",
                path.display()
            )
        })?;
    if !ok && !help.contains("--ctx-size") {
        let first = help
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no output");
        bail!(
            "{} (from {from}) does not behave like llama-server: '--help' failed: {first}",
            path.display()
        );
    }
    let engine = identify(&help);
    let missing: Vec<&str> = super::of(engine)
        .required_flags()
        .iter()
        .copied()
        .filter(|f| !help_has_flag(&help, f))
        .collect();
    if !missing.is_empty() {
        let build = super::of(engine).build_command();
        bail!(
            "{} (from {from}) lacks {}: it is not {}'s llama-server or is too old; build the pinned one with '{build}'",
            path.display(),
            missing.join(", "),
            engine
        );
    }
    let version = run_captured(Command::new(path).arg("--version"), Duration::from_secs(30))
        .map(|(_, out)| {
            out.lines()
                .find(|l| l.starts_with("version:"))
                .unwrap_or("version: unknown")
                .trim()
                .to_string()
        })
        .unwrap_or_else(|_| "version: unknown".to_string());
    let version = super::of(engine).pinned_version(&version, path);
    // Only a server whose help names the flag is asked (anything else might start serving).
    let devices = help_has_flag(&help, "--list-devices")
        .then(|| {
            run_captured(
                Command::new(path).arg("--list-devices"),
                Duration::from_secs(60),
            )
            .ok()
            .filter(|(ok, _)| *ok)
            .and_then(|(_, out)| parse_devices(&out))
        })
        .flatten();
    Ok(ServerBinary {
        path: path.to_path_buf(),
        source,
        version,
        devices,
        engine,
    })
}

/// Which engine a `llama-server` is, from its `--help`: the first engine other than the
/// default that recognizes it ([`super::Engine::recognizes`]), else the default (llama.cpp).
pub fn identify(help: &str) -> EngineKind {
    EngineKind::ALL
        .into_iter()
        .filter(|k| !k.is_default())
        .find(|k| super::of(*k).recognizes(help))
        .unwrap_or_default()
}

/// A flag appears in `--help` as a whole word (followed by ',', ' ', '=' or end of line).
pub(crate) fn help_has_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        let before_ok = i == 0 || {
            let b = help.as_bytes()[i - 1];
            b == b' ' || b == b',' || b == b'\n' || b == b'\t'
        };
        let after = help.as_bytes().get(i + flag.len()).copied();
        let after_ok = matches!(after, None | Some(b' ' | b',' | b'=' | b'\n' | b'\t'));
        before_ok && after_ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two engines' caches: one layout each, the server and stamp in its flavour's folder.
    #[test]
    fn each_engine_caches_its_build_in_its_own_folder() {
        let ik = crate::engine::ik_llama::server::CACHE;
        let base = crate::util::cache_dir();
        assert_eq!(ik.source_dir(), base.join("ik_llama.cpp/src-0.1.5"));
        assert_eq!(
            ik.cached_server(true),
            base.join("ik_llama.cpp/0.1.5-cuda/bin/llama-server")
        );
        assert_eq!(
            ik.stamp(false),
            base.join("ik_llama.cpp/0.1.5-cpu/qtune-built")
        );
        let llama = crate::engine::llama_cpp::server::CACHE;
        assert_eq!(llama.build_dir(false), base.join("llama.cpp/b11434-cpu"));
    }

    /// `--server`, then the engine's variable, then PATH where the engine looks there, then
    /// the cache's CUDA build before its CPU one.
    #[test]
    fn a_server_is_located_in_order() {
        let var = "QTUNE_TEST_LOCATE_IN_UNSET";
        let both = |cuda: bool| Some(PathBuf::from(if cuda { "/c/cuda" } else { "/c/cpu" }));
        let cpu_only = |cuda: bool| (!cuda).then(|| PathBuf::from("/c/cpu"));
        let at = |e: Option<&Path>, c: &dyn Fn(bool) -> Option<PathBuf>| {
            locate_in(e, (var, Source::IkEnv), None, c)
        };
        assert_eq!(
            at(Some(Path::new("/x")), &both),
            Some((PathBuf::from("/x"), Source::Flag))
        );
        assert_eq!(
            at(None, &both),
            Some((PathBuf::from("/c/cuda"), Source::Cache))
        );
        assert_eq!(
            at(None, &cpu_only),
            Some((PathBuf::from("/c/cpu"), Source::Cache))
        );
        assert_eq!(at(None, &|_| None), None);
        // A name PATH lacks is passed over.
        let none = locate_in(None, (var, Source::Env), Some("qtune-no-such-bin"), |_| {
            None
        });
        assert_eq!(none, None);
    }
}
