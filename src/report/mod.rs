//! What the user takes away from a tune: the Markdown report with Pareto plots, the launch
//! script, all written into the run directory.
//!
//! Each output renders in memory behind one trait ([`Output`]); [`write_all`] then writes every
//! file atomically, so an error never leaves a half-written report.

pub mod document;
pub mod engines;
pub mod markdown;
pub mod plots;
pub mod race;
pub mod script;
mod script_override;
mod script_record;
pub mod slots;
pub mod summary;

use crate::run::TuneResult;
use anyhow::{Context, Result};
pub use document::verdict_json;
use std::path::{Path, PathBuf};

/// One rendered file, named relative to the run directory.
pub struct OutFile {
    pub name: String,
    pub bytes: Vec<u8>,
    /// Written with mode 755 (scripts).
    pub executable: bool,
}

/// One kind of output of a finished tune.
pub trait Output {
    fn render(&self, result: &TuneResult) -> Result<Vec<OutFile>>;
}

/// `report.md`.
pub struct MarkdownReport;

impl Output for MarkdownReport {
    fn render(&self, r: &TuneResult) -> Result<Vec<OutFile>> {
        Ok(vec![OutFile {
            name: "report.md".into(),
            bytes: markdown::render(r, &plots::available(r)).into_bytes(),
            executable: false,
        }])
    }
}

/// `plot-*.svg` and `plot-*.png`.
pub struct Plots;

impl Output for Plots {
    fn render(&self, r: &TuneResult) -> Result<Vec<OutFile>> {
        let mut out = Vec::new();
        for p in plots::render_all(r)? {
            out.push(OutFile {
                name: format!("{}.svg", p.stem),
                bytes: p.svg.into_bytes(),
                executable: false,
            });
            out.push(OutFile {
                name: format!("{}.png", p.stem),
                bytes: p.png,
                executable: false,
            });
        }
        Ok(out)
    }
}

/// `launch.sh` (only when the run has a winner), for the host and port the tune was asked for.
pub struct LaunchScript;

impl Output for LaunchScript {
    fn render(&self, r: &TuneResult) -> Result<Vec<OutFile>> {
        if r.winner.is_none() {
            return Ok(Vec::new());
        }
        Ok(vec![OutFile {
            name: "launch.sh".into(),
            bytes: script::launch_script(r, &r.inputs.host, r.inputs.port)?.into_bytes(),
            executable: true,
        }])
    }
}

/// Write one file atomically (a new file renamed into place: a link there is replaced, never
/// written through), mode 755 when executable.
fn write_file(path: &Path, bytes: &[u8], executable: bool) -> Result<()> {
    let mode = if executable { 0o755 } else { 0o644 };
    crate::util::write_atomic_mode(path, bytes, mode)
}

/// Write (or re-write) the report, plots and launch script for a finished tune. Everything is
/// rendered first; then each file is written atomically, `report.md` last.
pub fn write_all(run_dir: &Path, result: &TuneResult) -> anyhow::Result<()> {
    let outputs: [&dyn Output; 3] = [&Plots, &LaunchScript, &MarkdownReport];
    let mut files = Vec::new();
    for o in outputs {
        files.extend(o.render(result)?);
    }
    // A link planted where a file goes (report.md -> ~/.bashrc) is refused, naming it; so is
    // a folder another user could plant one in.
    crate::run::check_run_folder(run_dir)?;
    let stale: Vec<String> = plots::PLOTS
        .iter()
        .flat_map(|(stem, _)| ["svg", "png"].map(|ext| format!("{stem}.{ext}")))
        .collect();
    crate::run::check_not_links(
        run_dir,
        files
            .iter()
            .map(|f| f.name.as_str())
            .chain(stale.iter().map(|s| s.as_str())),
    )?;
    for f in files {
        write_file(&run_dir.join(&f.name), &f.bytes, f.executable)?;
    }
    // A plot left out for lack of data must not linger from an earlier rendering.
    let kept = plots::available(result);
    for (stem, _) in plots::PLOTS.iter().filter(|p| !kept.contains(p)) {
        for ext in ["svg", "png"] {
            let stale = run_dir.join(format!("{stem}.{ext}"));
            if stale.is_file() {
                std::fs::remove_file(&stale)
                    .with_context(|| format!("cannot remove {}", stale.display()))?;
            }
        }
    }
    Ok(())
}

/// What `qtune script` writes next to the launch script.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScriptExtras {
    /// A systemd unit (`OUT.service`).
    pub systemd: bool,
    /// A docker compose file (`OUT.compose.yaml`).
    pub compose: bool,
}

/// Write a launch script for a run's winner to `out` (mode 755) and, as `extras` asks, a
/// systemd unit (`OUT.service`) and a docker compose file (`OUT.compose.yaml`) next to it.
/// Returns the files written.
pub fn write_script(
    result: &TuneResult,
    out: &Path,
    host: &str,
    port: u16,
    extras: ScriptExtras,
) -> Result<Vec<PathBuf>> {
    let systemd = extras.systemd;
    if result.winner.is_none() {
        anyhow::bail!(
            "the run has no winner (every configuration failed; see its report.md): nothing to launch"
        );
    }
    crate::run::schema::check_host("--host", host)?;
    // `--systemd --out x.service` names the unit: the script beside it is x.sh.
    let unit_named = systemd && out.extension().is_some_and(|e| e == "service");
    let script_path = if unit_named {
        out.with_extension("sh")
    } else {
        out.to_path_buf()
    };
    let out = script_path.as_path();
    // Otherwise the unit is named after the model (`qtune-STEM.service`, beside the script),
    // the name its install line gives it too: two tuned models get two units.
    let unit_path = if unit_named {
        out.with_extension("service")
    } else {
        out.with_file_name(crate::escape::systemd_unit_name(&model_stem(result)))
    };
    let compose_path = {
        let mut p = out.as_os_str().to_owned();
        p.push(".compose.yaml");
        PathBuf::from(p)
    };
    // Every path this writes is a new one or a regular file (never a link, a device or a
    // folder), checked before anything is written.
    crate::util::check_out_file(out)?;
    if systemd {
        crate::util::check_out_file(&unit_path)?;
    }
    if extras.compose {
        crate::util::check_out_file(&compose_path)?;
    }
    // Everything is rendered before the first file is written: a unit systemd would refuse
    // (a quote in the script's path) leaves nothing behind.
    let text = script::launch_script(result, host, port)?;
    let unit = if systemd {
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let abs_dir = std::fs::canonicalize(dir)
            .with_context(|| format!("cannot resolve {}", dir.display()))?;
        let abs = abs_dir.join(out.file_name().unwrap_or_default());
        let unit_abs = abs_dir.join(unit_path.file_name().unwrap_or_default());
        Some(script::systemd_unit(result, &abs, &unit_abs)?)
    } else {
        None
    };
    let compose = if extras.compose {
        Some(script::compose_file(result, host, port)?)
    } else {
        None
    };
    write_file(out, text.as_bytes(), true)?;
    let mut written = vec![out.to_path_buf()];
    if let Some(unit) = unit {
        write_file(&unit_path, unit.as_bytes(), false)?;
        written.push(unit_path);
    }
    if let Some(compose) = compose {
        write_file(&compose_path, compose.as_bytes(), false)?;
        written.push(compose_path);
    }
    Ok(written)
}

/// The model's file name without `.gguf`.
pub fn model_stem(r: &crate::run::TuneResult) -> String {
    r.inputs
        .model_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| r.model.arch.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::LaunchArgs;
    use crate::run::sample;

    fn paths() -> (PathBuf, PathBuf) {
        (
            PathBuf::from("/opt/llama.cpp/bin/llama-server"),
            PathBuf::from("/models/Qwen3-30B-A3B-Q4_K_M.gguf"),
        )
    }

    #[test]
    fn write_all_writes_every_file_and_a_script_only_with_a_winner() {
        let (srv, model) = paths();
        let dir = tempfile::tempdir().unwrap();
        let r = sample::gpu_result(&srv, &model);
        write_all(dir.path(), &r).unwrap();
        if let Some(out) = std::env::var_os("QTUNE_REPORT_PREVIEW") {
            let out = PathBuf::from(out);
            write_all(&out.join("gpu"), &r).unwrap();
            write_all(&out.join("cpu"), &sample::cpu_result(&srv, &model)).unwrap();
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "launch.sh",
                "plot-ncmoe.png",
                "plot-ncmoe.svg",
                "plot-tg-pp.png",
                "plot-tg-pp.svg",
                "plot-vram.png",
                "plot-vram.svg",
                "report.md"
            ]
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("launch.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);

        let dir = tempfile::tempdir().unwrap();
        let mut r = sample::cpu_result(&srv, &model);
        r.winner = None;
        write_all(dir.path(), &r).unwrap();
        assert!(dir.path().join("report.md").is_file());
        assert!(!dir.path().join("launch.sh").exists());
    }

    #[test]
    fn launch_sh_honours_the_tunes_host_and_port() {
        let (srv, model) = paths();
        let dir = tempfile::tempdir().unwrap();
        let mut r = sample::gpu_result(&srv, &model);
        r.inputs.host = "0.0.0.0".into();
        r.inputs.port = 9137;
        // As a tune with --host 0.0.0.0 --port 9137 renders its winner's command.
        let w = r.winner.as_mut().unwrap();
        w.command = w.config.command(&srv, &model, "0.0.0.0", 9137);
        write_all(dir.path(), &r).unwrap();
        let script = std::fs::read_to_string(dir.path().join("launch.sh")).unwrap();
        assert!(script.contains("DEFAULT_HOST=0.0.0.0\n"), "{script}");
        assert!(script.contains("DEFAULT_PORT=9137\n"), "{script}");
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert!(
            !md.contains("--port 8080"),
            "the report uses the tune's port"
        );
    }
}
