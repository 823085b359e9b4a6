//! Commands that work on a finished run or on profiles: `report`, `script`, `profile ...`
//! and `plan`.

use crate::engine::LaunchArgs;
use crate::escape::{terminal, terminal_lines, terminal_path};
use crate::profile::{self, Profile};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// `qtune report DIR`: re-render the report of a run directory.
pub fn report(dir: &Path) -> Result<()> {
    let (dir, result) = crate::run::read_result(dir)?;
    crate::report::write_all(&dir, &result)?;
    println!("{}", terminal_path(&dir.join("report.md")));
    Ok(())
}

/// `qtune script --from DIR`: write a launch script (and optionally a systemd unit).
pub fn script(
    from: &Path,
    out: &Path,
    host: &str,
    port: u16,
    extras: crate::report::ScriptExtras,
) -> Result<()> {
    crate::app::outcome::host_check(host)?;
    crate::app::outcome::port_check(port)?;
    let (dir, result) = crate::run::read_result(from)?;
    if result.winner.is_none() {
        bail!(
            "the run in {} has no winner (every configuration failed; see its report.md): nothing to launch",
            dir.display()
        );
    }
    for path in crate::report::write_script(&result, out, host, port, extras)? {
        println!("{}", terminal_path(&path));
    }
    Ok(())
}

/// `qtune profile export DIR --out FILE`.
pub fn profile_export(run_dir: &Path, out: &Path) -> Result<()> {
    let (_, r) = crate::run::read_result(run_dir)?;
    let p = profile::from_tune(&r, None)?;
    crate::util::check_out_file(out)?;
    crate::util::write_atomic(out, profile::to_yaml(&p)?.as_bytes())?;
    for w in profile::export_warnings(&r) {
        eprintln!("qtune: warning: {}", terminal(&w));
    }
    println!(
        "exported profile '{}' ({} measured configs) to {}",
        terminal(&p.name),
        p.front.len(),
        terminal_path(out)
    );
    Ok(())
}

/// `qtune profile import FILE`: validate and copy into `<data dir>/profiles/`.
pub fn profile_import(file: &Path) -> Result<()> {
    let (dest, new) = profile::import_into(file, &crate::util::profiles_dir())?;
    if new {
        println!("imported profile into {}", terminal_path(&dest));
    } else {
        println!(
            "{} is already imported (same content)",
            terminal_path(&dest)
        );
    }
    Ok(())
}

/// `qtune profile list`.
pub fn profile_list() -> Result<()> {
    let dir = crate::util::profiles_dir();
    let entries = profile::load_all(&dir);
    eprintln!(
        "profiles in {} (add one with 'qtune profile import FILE'), then the built-in ones:",
        terminal_path(&dir)
    );
    print!("{}", terminal_lines(&profile::list_text(&entries)));
    Ok(())
}

/// `qtune profile show NAME|FILE`.
pub fn profile_show(name: &str) -> Result<()> {
    let (path, p) = profile::find_profile(name, &crate::util::profiles_dir())?;
    println!("# {}", terminal_path(&path));
    print!("{}", terminal_lines(&profile::show_text(&p)));
    Ok(())
}

/// `qtune plan --model M [--profile P]`: propose a config for this box without trials.
pub fn plan(
    model: &Path,
    profile_path: Option<&Path>,
    use_profiles: bool,
    ctx: Option<u32>,
    headroom_mib: u64,
    json: bool,
) -> Result<()> {
    if let Some(ctx) = ctx.filter(|c| !(256..=1 << 20).contains(c)) {
        bail!(
            "--ctx {ctx} is outside 256..=1048576 (the context the server would be started with)"
        );
    }
    let src = crate::model::header::load_for_plan(model)?;
    let layout = src.layout;
    // Host read bandwidth is an input of the speed prediction (about two seconds).
    let hw = crate::hardware::probe(true);
    let dir = crate::util::profiles_dir();
    let (chosen, why): (Option<Profile>, Option<String>) = match profile_path {
        Some(p) => (
            Some(profile::resolve_profile(p)?.1),
            Some("given with --profile".into()),
        ),
        None if !use_profiles => (None, None),
        None => {
            let all: Vec<(PathBuf, Profile)> = profile::load_all(&dir)
                .into_iter()
                .filter_map(|(path, r)| r.ok().map(|p| (path, p)))
                .collect();
            let profiles: Vec<Profile> = all.iter().map(|(_, p)| p.clone()).collect();
            let best = crate::plan::best_profile(&layout, &hw, headroom_mib, &profiles).cloned();
            let why = best.as_ref().map(|b| {
                let from = all
                    .iter()
                    .find(|(_, p)| p == b)
                    .map(|(path, _)| path.display().to_string())
                    .unwrap_or_default();
                format!(
                    "{from}: the closest match of {} profiles (the same model first, then the same \
                     GPU, then the nearest VRAM budget); --profile FILE picks another, \
                     --no-profile none",
                    all.len()
                )
            });
            (best, why)
        }
    };
    // One context rule: --ctx, else the profile's (a profile keeps its context), else what
    // `qtune tune` would use here; never 0 nor past the model's trained context.
    let ctx = match (ctx, chosen.as_ref()) {
        (Some(c), _) => super::preflight::check_ctx(c, true, &layout)?.0,
        (None, Some(p)) => super::preflight::check_ctx(p.space.ctx, false, &layout)?.0,
        (None, None) => super::preflight::default_ctx(&hw, &layout),
    };
    super::preflight::check_headroom(&hw, headroom_mib)?;
    super::preflight::check_fits(&layout, &hw, ctx, headroom_mib)?;
    let mut plan = crate::plan::plan(&layout, &hw, chosen.as_ref(), ctx, headroom_mib);
    plan.profile_chosen = why;
    match &src.header_only {
        Some(h) => plan.reasons.push(h.text(&src.command_path)),
        // Only a whole file has the weights a measurement is keyed by.
        None => plan.quality = crate::plan::known_quality::for_file(model, &layout),
    }
    eprint!(
        "{}",
        crate::util::fit(&terminal_lines(&crate::plan::plan_text(&plan, model)))
    );
    if !plan.fits {
        bail!(
            "no placement fits this GPU's budget of {}: free VRAM, lower --ctx or use a smaller quantization",
            plan.budget_mib
                .map_or("-".into(), |b| crate::util::fmt_mib(b as f64))
        );
    }
    let server = crate::engine::binary::locate(None)
        .map(|(p, _)| p)
        .unwrap_or_else(|| PathBuf::from("llama-server"));
    let argv = plan.config.command(
        &server,
        &src.command_path,
        crate::run::DEFAULT_HOST,
        crate::run::DEFAULT_PORT,
    );
    if json {
        #[derive(serde::Serialize)]
        struct PlanJson<'a> {
            #[serde(flatten)]
            plan: &'a crate::plan::Plan,
            command: &'a [String],
            note: &'static str,
        }
        let out = PlanJson {
            plan: &plan,
            command: &argv,
            note: "a plan: predicted, not measured",
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    if let Some(sp) = &plan.speed {
        println!(
            "# qtune plan: predicted, not measured: tg {}, pp {}",
            sp.prediction.tg.text(),
            sp.prediction.pp.text()
        );
    }
    println!("{}", crate::config::shell_line(&argv));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::sample;

    fn paths() -> (PathBuf, PathBuf) {
        (
            PathBuf::from("/opt/llama.cpp/bin/llama-server"),
            PathBuf::from("/models/Qwen3-30B-A3B-Q4_K_M.gguf"),
        )
    }

    #[test]
    fn cmd_report_round_trips_results_json_and_explains_bad_input() {
        let (srv, model) = paths();
        let dir = tempfile::tempdir().unwrap();
        let e = report(dir.path()).unwrap_err();
        assert!(format!("{e:#}").contains("no results.json"), "{e:#}");

        let r = sample::gpu_result(&srv, &model);
        let json = serde_json::to_string_pretty(&r).unwrap();
        std::fs::write(dir.path().join("results.json"), &json[..json.len() / 2]).unwrap();
        let e = report(dir.path()).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("not a valid qtune result"), "{msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");

        std::fs::write(dir.path().join("results.json"), &json).unwrap();
        report(dir.path()).unwrap();
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
        let both = crate::report::ScriptExtras {
            systemd: true,
            compose: true,
        };
        script(dir.path(), &out, "0.0.0.0", 9123, both).unwrap();
        let s = std::fs::read_to_string(&out).unwrap();
        assert!(s.contains("DEFAULT_PORT=9123\n"));
        // Named after the model, not after the script.
        assert!(!dir.path().join("my launch.sh.service").exists());
        let unit =
            std::fs::read_to_string(dir.path().join("qtune-Qwen3-30B-A3B-Q4_K_M.service")).unwrap();
        assert!(unit.contains("Restart=on-failure"));
        assert!(unit.contains(&format!(
            "ExecStart=\"{}\"",
            std::fs::canonicalize(&out).unwrap().display()
        )));
        let compose =
            std::fs::read_to_string(dir.path().join("my launch.sh.compose.yaml")).unwrap();
        let v: serde_yaml::Value = serde_yaml::from_str(&compose).unwrap();
        let svc = &v["services"]["llama-server"];
        assert_eq!(
            svc["image"].as_str(),
            crate::engine::Engine::server_image(&crate::engine::LlamaCpp, true).as_deref()
        );
        assert_eq!(svc["ports"][0]["published"].as_str(), Some("9123"));
        assert_eq!(svc["ports"][0]["host_ip"].as_str(), Some("0.0.0.0"));
        assert_eq!(
            svc["volumes"][0]["source"].as_str(),
            Some(model.display().to_string().as_str())
        );
        assert!(compose.contains("other machines can reach it"), "{compose}");
        assert_eq!(
            svc["deploy"]["resources"]["reservations"]["devices"][0]["driver"],
            "nvidia"
        );

        r.winner = None;
        std::fs::write(
            dir.path().join("results.json"),
            serde_json::to_string(&r).unwrap(),
        )
        .unwrap();
        let e = script(
            dir.path(),
            &dir.path().join("x.sh"),
            "127.0.0.1",
            8080,
            Default::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no winner"), "{e}");
        assert!(!dir.path().join("x.sh").exists());
    }
}
