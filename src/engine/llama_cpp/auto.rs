//! The server a command uses when the user named none (`qtune demo`, `qtune tune` without
//! `--server`): the one found on `QTUNE_LLAMA_SERVER`, `PATH` or in qtune's cache, else the
//! pinned one, built into the cache once. On a box where NVML sees a GPU that build is CUDA's,
//! and a CPU-only build found on `PATH` or in the cache is passed over for it (issue 52: the
//! README's first path built the CPU server on a GPU box and then refused it). What the build
//! needs (the CUDA toolkit) is checked before anything is built, and the first line says what it
//! builds, why and about how long it takes.

use super::server::{build, locate};
use crate::engine::server::{check, ServerBinary, Source};
use crate::hardware::HardwareProfile;
use anyhow::{bail, Result};
use std::path::Path;

/// Core-seconds a build of the pinned tree takes: the CPU build ran 70 s on 16 cores and about
/// 10 minutes on 2; the CUDA build (one architecture) 273-297 s on 16 cores (the GPU machine,
/// docs/results.md). A linear estimate: what a box with fewer cores should expect, roughly.
const CPU_BUILD_CORE_S: f64 = 1_150.0;
const CUDA_BUILD_CORE_S: f64 = 4_600.0;

/// What a command without `--server` does about its server.
#[derive(Debug)]
pub enum Plan {
    /// Use this one.
    Use(ServerBinary),
    /// Build the pinned one (`cuda`: with CUDA), after saying `note` (why one found is passed
    /// over) when there is one.
    Build { cuda: bool, note: Option<String> },
}

/// The GPU a build is for: NVML's first card (None without one, or with `QTUNE_NO_GPU=1`,
/// which the hardware probe already applies).
fn gpu_name(hw: &HardwareProfile) -> Option<String> {
    hw.gpus.first().map(|g| crate::escape::one_line(&g.name))
}

/// Decide from the server found (if any) and the box. A server named by
/// `QTUNE_LLAMA_SERVER` is the user's choice and always used (a CPU-only one on a GPU box is
/// then refused by the tune's backend check, with the way out); one found on `PATH` or in the
/// cache that lists no GPU device, on a box with a GPU, is passed over for the CUDA build.
pub fn plan_from(found: Option<ServerBinary>, hw: &HardwareProfile) -> Plan {
    let gpu = gpu_name(hw);
    match found {
        Some(s) => {
            let cpu_only = s.devices.as_ref().is_some_and(|d| d.is_empty());
            match (&gpu, cpu_only, s.source) {
                (Some(g), true, Source::Path | Source::Cache) => Plan::Build {
                    cuda: true,
                    note: Some(format!(
                        "qtune: {} ({}) is a CPU-only build and this box has a GPU ({g}): using the pinned CUDA build instead",
                        crate::escape::terminal_path(&s.path),
                        s.source.describe()
                    )),
                },
                _ => Plan::Use(s),
            }
        }
        None => Plan::Build {
            cuda: gpu.is_some(),
            note: None,
        },
    }
}

pub use crate::engine::build::find_nvcc;

/// About how long a build takes on `cores`, in words ("about 5 minutes").
fn estimate(cuda: bool, cores: u32) -> String {
    let work = if cuda {
        CUDA_BUILD_CORE_S
    } else {
        CPU_BUILD_CORE_S
    };
    let min = (work / f64::from(cores.max(1)) / 60.0).max(1.0).round();
    format!(
        "about {} on {}",
        crate::util::minutes(min),
        crate::util::count(u64::from(cores), "core", "cores")
    )
}

/// The line said before a build: what is built, why, and about how long it takes. A CUDA build
/// without the CUDA toolkit is an error naming what to install, before anything is built.
pub fn build_line(cuda: bool, hw: &HardwareProfile, nvcc: Option<&Path>) -> Result<String> {
    let dir = super::server::llama_cpp_dir();
    let cores = hw.host.logical_cores;
    if !cuda {
        return Ok(format!(
            "qtune: no llama-server found; building the pinned llama.cpp (CPU) into {}, once: {}",
            dir.display(),
            estimate(false, cores)
        ));
    }
    let gpu = gpu_name(hw).unwrap_or_else(|| "an NVIDIA GPU".into());
    let Some(nvcc) = nvcc else {
        bail!(
            "this box has a GPU ({gpu}), so qtune builds llama-server with CUDA, which needs the CUDA toolkit: \
             nvcc is not on PATH (nor CUDACXX, nor /usr/local/cuda/bin). Install the CUDA toolkit \
             (Ubuntu/Debian: apt-get install nvidia-cuda-toolkit) and run this again; or pass --server PATH, \
             or set QTUNE_NO_GPU=1 to use the CPU alone"
        );
    };
    Ok(format!(
        "qtune: this box has a GPU ({gpu}): building the pinned llama.cpp with CUDA ({}) into {}, once: {}",
        nvcc.display(),
        dir.display(),
        estimate(true, cores)
    ))
}

/// The server a command uses when none was named: found, or built (with CUDA where the box has
/// a GPU). `say` gets the progress lines.
pub fn resolve_or_build(explicit: Option<&Path>, say: &dyn Fn(&str)) -> Result<ServerBinary> {
    if explicit.is_some() {
        return super::server::resolve(explicit);
    }
    let found = match locate(None) {
        Some((p, s)) => Some(check(&p, s)?),
        None => None,
    };
    let hw = crate::hardware::probe(false);
    let (cuda, note) = match plan_from(found, &hw) {
        Plan::Use(s) => return Ok(s),
        Plan::Build { cuda, note } => (cuda, note),
    };
    if let Some(n) = note {
        say(&n);
    }
    let nvcc = find_nvcc();
    let already = super::server::is_built(&super::server::build_dir(cuda).join("bin"));
    if !already {
        say(&build_line(cuda, &hw, nvcc.as_deref())?);
    }
    // The build says its own time when it ends ("qtune: built llama-server in 292 s").
    let path = build(cuda, say)?;
    check(&path, Source::Cache)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_estimates_scale_with_cores() {
        assert_eq!(estimate(true, 16), "about 5 minutes on 16 cores");
        assert_eq!(estimate(false, 2), "about 10 minutes on 2 cores");
        assert_eq!(estimate(false, 64), "about 1 minute on 64 cores");
    }
}
