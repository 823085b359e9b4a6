//! What the user takes away from a tune: the Markdown report with Pareto plots, the launch
//! script, all written into the run directory.
//!
//! Each output renders in memory behind one trait ([`Output`]); [`write_all`] then writes every
//! file atomically, so an error never leaves a half-written report.

pub mod markdown;
pub mod pareto;
pub mod plots;
#[doc(hidden)]
pub mod sample;
pub mod script;

use crate::search::TuneResult;
use anyhow::{Context, Result};
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
            bytes: markdown::render(r, &plots::PLOTS).into_bytes(),
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

/// `launch.sh` (only when the run has a winner).
pub struct LaunchScript {
    pub host: String,
    pub port: u16,
}

impl Default for LaunchScript {
    fn default() -> Self {
        LaunchScript {
            host: markdown::DEFAULT_HOST.to_string(),
            port: markdown::DEFAULT_PORT,
        }
    }
}

impl Output for LaunchScript {
    fn render(&self, r: &TuneResult) -> Result<Vec<OutFile>> {
        if r.winner.is_none() {
            return Ok(Vec::new());
        }
        Ok(vec![OutFile {
            name: "launch.sh".into(),
            bytes: script::launch_script(r, &self.host, self.port)?.into_bytes(),
            executable: true,
        }])
    }
}

/// Write one file atomically, mode 755 when executable.
fn write_file(path: &Path, bytes: &[u8], executable: bool) -> Result<()> {
    crate::util::write_atomic(path, bytes)?;
    if executable {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", path.display()))?;
    }
    Ok(())
}

/// Write (or re-write) the report, plots and launch script for a finished tune. Everything is
/// rendered first; then each file is written atomically, `report.md` last.
pub fn write_all(run_dir: &Path, result: &crate::search::TuneResult) -> anyhow::Result<()> {
    let outputs: [&dyn Output; 3] = [&Plots, &LaunchScript::default(), &MarkdownReport];
    let mut files = Vec::new();
    for o in outputs {
        files.extend(o.render(result)?);
    }
    for f in files {
        write_file(&run_dir.join(&f.name), &f.bytes, f.executable)?;
    }
    Ok(())
}

/// Read `results.json` from a run directory (or the file itself).
pub fn load_result(dir_or_file: &Path) -> Result<(PathBuf, TuneResult)> {
    let (dir, file) = if dir_or_file.is_dir() {
        (dir_or_file.to_path_buf(), dir_or_file.join("results.json"))
    } else if dir_or_file.file_name().is_some_and(|n| n == "results.json") {
        let dir = dir_or_file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        (dir.to_path_buf(), dir_or_file.to_path_buf())
    } else {
        anyhow::bail!(
            "{} is not a run directory: pass the directory qtune tune wrote (it holds results.json)",
            dir_or_file.display()
        );
    };
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "no results.json in {}: is it a finished qtune run? (qtune tune writes it when a tune \
             ends; resume an interrupted one with qtune tune --resume DIR)",
            dir.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    let result: TuneResult = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a valid qtune result ({e}): was it edited, truncated, or written by another qtune version?",
            file.display()
        )
    })?;
    Ok((dir, result))
}

/// `qtune report DIR`: re-render the report of a run directory.
pub fn cmd_report(dir: &Path) -> anyhow::Result<()> {
    let (dir, result) = load_result(dir)?;
    write_all(&dir, &result)?;
    println!("{}", dir.join("report.md").display());
    Ok(())
}

/// `qtune script --from DIR`: write a launch script (and optionally a systemd unit).
pub fn cmd_script(
    from: &Path,
    out: &Path,
    host: &str,
    port: u16,
    systemd: bool,
) -> anyhow::Result<()> {
    let (dir, result) = load_result(from)?;
    if result.winner.is_none() {
        anyhow::bail!(
            "the run in {} has no winner (every configuration failed; see its report.md): nothing to launch",
            dir.display()
        );
    }
    let text = script::launch_script(&result, host, port)?;
    write_file(out, text.as_bytes(), true)?;
    println!("{}", out.display());
    if systemd {
        let abs = std::fs::canonicalize(out)
            .with_context(|| format!("cannot resolve {}", out.display()))?;
        let mut unit_path = out.as_os_str().to_owned();
        unit_path.push(".service");
        let unit_path = PathBuf::from(unit_path);
        write_file(
            &unit_path,
            script::systemd_unit(&result, &abs).as_bytes(),
            false,
        )?;
        println!("{}", unit_path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn cmd_report_round_trips_results_json_and_explains_bad_input() {
        let (srv, model) = paths();
        let dir = tempfile::tempdir().unwrap();
        let e = cmd_report(dir.path()).unwrap_err();
        assert!(format!("{e:#}").contains("no results.json"), "{e:#}");

        let r = sample::gpu_result(&srv, &model);
        let json = serde_json::to_string_pretty(&r).unwrap();
        std::fs::write(dir.path().join("results.json"), &json[..json.len() / 2]).unwrap();
        let e = cmd_report(dir.path()).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("not a valid qtune result"), "{msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");

        std::fs::write(dir.path().join("results.json"), &json).unwrap();
        cmd_report(dir.path()).unwrap();
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert!(md.contains("--n-cpu-moe 11"));
    }

    #[test]
    fn cmd_script_writes_script_and_unit_and_refuses_without_winner() {
        let (srv, model) = paths();
        let dir = tempfile::tempdir().unwrap();
        let mut r = sample::gpu_result(&srv, &model);
        std::fs::write(
            dir.path().join("results.json"),
            serde_json::to_string(&r).unwrap(),
        )
        .unwrap();
        let out = dir.path().join("my launch.sh");
        cmd_script(dir.path(), &out, "0.0.0.0", 9123, true).unwrap();
        let s = std::fs::read_to_string(&out).unwrap();
        assert!(s.contains("--port 9123"));
        let unit = std::fs::read_to_string(dir.path().join("my launch.sh.service")).unwrap();
        assert!(unit.contains("Restart=on-failure"));
        assert!(unit.contains(&format!(
            "ExecStart=\"{}\"",
            std::fs::canonicalize(&out).unwrap().display()
        )));

        r.winner = None;
        std::fs::write(
            dir.path().join("results.json"),
            serde_json::to_string(&r).unwrap(),
        )
        .unwrap();
        let e = cmd_script(
            dir.path(),
            &dir.path().join("x.sh"),
            "127.0.0.1",
            8080,
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("no winner"), "{e}");
        assert!(!dir.path().join("x.sh").exists());
    }
}
