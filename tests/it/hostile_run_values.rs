//! Issue 33, "a command in a run directory": a run directory is input (it travels between
//! people). A line break plus a command in `results.json`'s version or timestamp is refused
//! by `qtune report` and `qtune script` with one line naming the field; values that are legal
//! but hostile (`$(...)`, backticks, quotes in paths and names) are quoted, and the generated
//! `launch.sh`, run with a stub server, runs nothing else. The unit gains no line.

use crate::support;
use support::output_text as text;
use support::qtune_without_server as qtune;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture_journal() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe/journal.jsonl")
}

fn tiny() -> PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model")
}

fn one_line_failure(o: &Output) -> String {
    assert!(!o.status.success(), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(err.trim_end().lines().count(), 1, "{}", text(o));
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// A finished replayed tune (no server) of a copy of the tiny model at `model`.
fn finished_run(model: &Path, run: &Path) {
    std::fs::copy(tiny(), model).unwrap();
    let o = qtune()
        .arg("tune")
        .arg("--replay")
        .arg(fixture_journal())
        .args(["--space", "quick", "--model"])
        .arg(model)
        .arg("--out")
        .arg(run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(run.join("results.json").is_file());
}

fn edit(run: &Path, f: impl FnOnce(&mut Value)) {
    let p = run.join("results.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

const INJECT: &str = "\ntouch PWNED\n";

#[test]
fn a_line_break_and_a_command_in_results_json_are_refused_by_report_and_script() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    finished_run(&tmp.path().join("m.gguf"), &run);
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 6] = [
        ("qtune_version", |v| {
            v["qtune_version"] = format!("0.1.0{INJECT}").into()
        }),
        ("started_at", |v| {
            v["started_at"] = format!("2026-01-01T00:00:00Z{INJECT}").into()
        }),
        ("finished_at", |v| v["finished_at"] = "yesterday".into()),
        ("host", |v| v["host"] = "0.0.0.0;touch PWNED".into()),
        ("model_path", |v| {
            v["model_path"] = format!("/m{INJECT}.gguf").into()
        }),
        ("server_version", |v| {
            v["server_version"] = format!("b1{INJECT}").into()
        }),
    ];
    let pristine = std::fs::read(run.join("results.json")).unwrap();
    for (field, f) in cases {
        std::fs::write(run.join("results.json"), &pristine).unwrap();
        std::fs::remove_file(run.join("launch.sh")).ok();
        edit(&run, f);
        let o = qtune().arg("report").arg(&run).output().unwrap();
        let err = one_line_failure(&o);
        assert!(err.contains(field), "{field}: {err}");
        assert!(err.contains("not a valid qtune result"), "{err}");
        assert!(!run.join("launch.sh").exists(), "{field}");
        let out = tmp.path().join("launch.sh");
        let o = qtune()
            .args(["script", "--systemd", "--from"])
            .arg(&run)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = one_line_failure(&o);
        assert!(err.contains(field), "{field}: {err}");
        assert!(!out.exists(), "{field}");
        assert!(support::systemd_units(tmp.path()).is_empty(), "{field}");
    }
    assert!(!tmp.path().join("PWNED").exists());
    assert!(!run.join("PWNED").exists());
}

#[test]
fn hostile_but_legal_values_are_quoted_and_the_script_runs_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let evil = "$(touch PWNED) `touch PWNED` 'q' \"dq\" ; touch PWNED";
    let dir = tmp.path().join(format!("d {evil}"));
    std::fs::create_dir(&dir).unwrap();
    let model = dir.join(format!("m {evil}.gguf"));
    let run = tmp.path().join("run");
    finished_run(&model, &run);
    // A stub server beside the model (its name hostile too) that exits with 7 at once.
    let srv = dir.join(format!("llama-server {evil}"));
    std::fs::write(&srv, "#!/bin/sh\nexit 7\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&srv, std::fs::Permissions::from_mode(0o755)).unwrap();
    edit(&run, |v| {
        v["server_path"] = srv.display().to_string().into();
        v["model"]["name"] = format!("Name {evil}").into();
    });
    let o = qtune().arg("report").arg(&run).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = tmp.path().join(format!("out {evil}.sh"));
    // systemd cannot run a script whose path holds a quote (issue 48): that unit is refused
    // in one line and nothing is written; the script alone is fine.
    let o = qtune()
        .args(["script", "--systemd", "--from"])
        .arg(&run)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = one_line_failure(&o);
    assert!(err.contains("systemd refuses"), "{err}");
    assert!(!out.exists());
    let o = qtune()
        .args(["script", "--from"])
        .arg(&run)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    for script in [run.join("launch.sh"), out.clone()] {
        let n = Command::new("bash")
            .arg("-n")
            .arg(&script)
            .output()
            .unwrap();
        assert!(n.status.success(), "{}", text(&n));
        let o = Command::new("bash")
            .arg(&script)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("exited (status 7)"),
            "{}",
            text(&o)
        );
    }
    // The unit of a script at a path systemd can run, hostile to a shell all the same.
    let out = tmp
        .path()
        .join("unit $(touch PWNED) `touch PWNED` ; touch PWNED.sh");
    let o = qtune()
        .args(["script", "--systemd", "--from"])
        .arg(&run)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // The unit is named after the model, its hostile name made safe for systemd and a shell.
    let units = support::systemd_units(tmp.path());
    assert_eq!(units.len(), 1, "{units:?}");
    let unit_name = units[0].file_name().unwrap().to_str().unwrap();
    assert_eq!(
        unit_name,
        "qtune-m-touch-PWNED-touch-PWNED-q-dq-touch-PWNED.service"
    );
    let unit = std::fs::read_to_string(&units[0]).unwrap();
    assert!(
        unit.contains(&format!("systemctl enable --now {unit_name}\n")),
        "{unit}"
    );
    let exec: Vec<&str> = unit
        .lines()
        .filter(|l| l.starts_with("ExecStart="))
        .collect();
    assert_eq!(exec.len(), 1, "{unit}");
    assert!(
        unit.lines()
            .all(|l| !l.starts_with("touch") && !l.ends_with('\\')),
        "{unit}"
    );
    for d in [tmp.path(), &dir, &run] {
        assert!(!d.join("PWNED").exists(), "{}", d.display());
    }
}

#[test]
fn every_committed_run_passes_the_schema() {
    // The committed GPU evidence: results.json files, gzipped under docs/evidence/.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/evidence");
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    let mut stack = vec![root];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .file_name()
                .is_some_and(|f| f == "results.json" || f == "results.json.gz")
            {
                let text = if p.extension().is_some_and(|x| x == "gz") {
                    use std::io::Read;
                    let mut s = String::new();
                    flate2::read::GzDecoder::new(std::fs::File::open(&p).unwrap())
                        .read_to_string(&mut s)
                        .unwrap();
                    s
                } else {
                    std::fs::read_to_string(&p).unwrap()
                };
                let file = tmp.path().join("results.json");
                std::fs::write(&file, text).unwrap();
                qtune::run::read_result(&file).unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
                n += 1;
            }
        }
    }
    assert!(n >= 60, "only {n} committed results found");
}

/// Issue 53: the race's reason (`race.outcome.reason`, and an arm's) is text from the results
/// file like any other: report.md escapes it (no tag, link or code span starts in it) and the
/// terminal summary shows no escape sequence of it. It reached report.md raw.
#[test]
fn the_race_reason_is_escaped_in_report_md() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    finished_run(&tmp.path().join("m.gguf"), &run);
    let hostile = "<img src=x onerror=alert(1)> [click](http://evil.example) \u{1b}[2J";
    let mut had_race = false;
    edit(&run, |v| {
        if v["race"].is_object() {
            had_race = true;
            v["race"]["outcome"]["reason"] = hostile.into();
        }
    });
    assert!(had_race, "the replayed tune has a race");
    let o = qtune().arg("report").arg(&run).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(md.contains("onerror=alert(1)"), "the reason is shown: {md}");
    for live in ["<img", "[click](", "\u{1b}"] {
        assert!(!md.contains(live), "{live:?} raw in report.md:\n{md}");
    }
    assert!(!text(&o).contains('\u{1b}'), "{}", text(&o));
}

/// Issue 53: resuming with the same `--space` the tune started with is accepted (it said the
/// space "is not the space this tune started with": the run's space has its mixes resolved);
/// another space is still refused.
#[test]
fn resuming_with_the_same_space_is_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    finished_run(&tmp.path().join("m.gguf"), &run);
    let resume = |space: &str| {
        qtune()
            .args(["tune", "--resume"])
            .arg(&run)
            .arg("--replay")
            .arg(fixture_journal())
            .args(["--space", space])
            .output()
            .unwrap()
    };
    let o = resume("quick");
    assert!(!text(&o).contains("is not the space"), "{}", text(&o));
    assert!(o.status.success(), "{}", text(&o));
    let err = one_line_failure(&resume("demo"));
    assert!(err.contains("--space demo is not the space"), "{err}");
}

/// Issue 53: a server that daemonizes a helper (out of its process group) outlives a
/// SIGKILLed tune; `--resume` finds it from the run's record of its last server, stops it and
/// names it. It ran on unnoticed.
#[test]
fn resume_stops_what_a_sigkilled_tunes_server_left_running() {
    use std::time::{Duration, Instant};
    use support::trial::{alive, fake_server};
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let pidfile = tmp.path().join("daemon.pid");
    let mut tune = qtune()
        .args(["tune", "--space", "demo", "--model"])
        .arg(tiny())
        .arg("--server")
        .arg(fake_server())
        .arg("--out")
        .arg(&run)
        .env("QTUNE_ALLOW_BUSY", "1")
        .env("FAKE_DAEMON", &pidfile)
        .env("FAKE_MODE", "slow-ok")
        .env("FAKE_DELAY_S", "60")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let pid: u32 = loop {
        let text = std::fs::read_to_string(&pidfile).unwrap_or_default();
        if let Ok(p) = text.trim().parse() {
            break p;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no daemon");
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(300));
    tune.kill().unwrap(); // SIGKILL: no handler of qtune's runs
    tune.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let survived = alive(pid);
    let o = qtune()
        .args(["tune", "--resume"])
        .arg(&run)
        .arg("--server")
        .arg(fake_server())
        .args(["--space", "quick"]) // refused after the check: the test needs no more
        .output()
        .unwrap();
    let gone = !alive(pid);
    if !gone {
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    }
    assert!(
        survived,
        "the daemonized helper died with the tune: nothing to find"
    );
    let all = text(&o);
    assert!(
        gone,
        "--resume left the daemonized helper {pid} running: {all}"
    );
    assert!(
        all.contains("outlived the qtune") && all.contains(&pid.to_string()),
        "{all}"
    );
}
