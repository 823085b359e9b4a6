//! Issue 33, "hangs and runaway memory": every file qtune reads is opened as a regular file,
//! without blocking, with a size bound. A named pipe or `/dev/zero` in place of a run
//! directory's `results.json`, `run.json`, journal or checkpoint, or given to
//! `quality --text`, fails within seconds with one line, instead of blocking forever or
//! growing to gigabytes.

use crate::support;
use support::output_text as text;
use support::qtune_without_server as qtune;
use support::require;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn fixture_journal() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe/journal.jsonl")
}

fn tiny() -> PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model")
}

/// Run `c`, killing it after 10 s: it must have ended by itself, with a non-zero status and
/// one line on stderr.
fn fails_fast_with_one_line(mut c: Command, what: &str) -> String {
    let t0 = Instant::now();
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("{what}: still running after 10 s\n{}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success(), "{what}: {}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {}", text(&o));
    assert!(!err.contains("panicked"), "{what}: {err}");
    err
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// A finished replayed tune, then an interrupted one (it has a checkpoint to resume from).
fn runs(root: &Path) -> (PathBuf, PathBuf) {
    let model = root.join("m.gguf");
    std::fs::copy(tiny(), &model).unwrap();
    let finished = root.join("finished");
    let o = qtune()
        .arg("tune")
        .arg("--replay")
        .arg(fixture_journal())
        .args(["--space", "quick", "--model"])
        .arg(&model)
        .arg("--out")
        .arg(&finished)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let interrupted = root.join("interrupted");
    let o = qtune()
        .arg("tune")
        .arg("--replay")
        .arg(fixture_journal())
        .args([
            "--replay-interrupt-after",
            "3",
            "--space",
            "quick",
            "--model",
        ])
        .arg(&model)
        .arg("--out")
        .arg(&interrupted)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    (finished, interrupted)
}

/// Replace `dir/name` with a named pipe or a link to /dev/zero.
fn replace(dir: &Path, name: &str, with: &str) {
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    match with {
        "fifo" => mkfifo(&p),
        _ => std::os::unix::fs::symlink("/dev/zero", &p).unwrap(),
    }
}

#[test]
fn pipes_and_devices_in_a_run_directory_fail_fast() {
    let tmp = tempfile::tempdir().unwrap();
    let (finished, interrupted) = runs(tmp.path());
    let pristine = |d: &Path| {
        let copy = tmp
            .path()
            .join(format!("copy-{}", d.file_name().unwrap().to_string_lossy()));
        let _ = std::fs::remove_dir_all(&copy);
        let o = Command::new("cp")
            .arg("-a")
            .arg(d)
            .arg(&copy)
            .output()
            .unwrap();
        assert!(o.status.success());
        copy
    };
    let mut cases = 0;
    for with in ["fifo", "zero"] {
        for name in ["results.json", "run.json"] {
            for cmd in ["report", "script"] {
                let run = pristine(&finished);
                replace(&run, name, with);
                let mut c = qtune();
                if cmd == "report" {
                    c.arg("report").arg(&run);
                } else {
                    c.args(["script", "--from"])
                        .arg(&run)
                        .arg("--out")
                        .arg(tmp.path().join("l.sh"));
                }
                if name == "run.json" {
                    // report and script read results.json alone: a broken run.json is no
                    // concern of theirs; make sure they still work and do not touch it.
                    let o = c.output().unwrap();
                    assert!(o.status.success(), "{cmd} with {with} {name}: {}", text(&o));
                    cases += 1;
                    continue;
                }
                let err = fails_fast_with_one_line(c, &format!("{cmd} with {with} {name}"));
                assert!(err.contains("not a regular file"), "{err}");
                cases += 1;
            }
        }
        for name in [
            "run.json",
            "journal.jsonl",
            "checkpoint.json",
            ".qtune.lock",
        ] {
            let run = pristine(&interrupted);
            replace(&run, name, with);
            let mut c = qtune();
            c.arg("tune")
                .arg("--replay")
                .arg(fixture_journal())
                .arg("--resume")
                .arg(&run);
            let err = fails_fast_with_one_line(c, &format!("--resume with {with} {name}"));
            assert!(
                err.contains("not a regular file") || err.contains("not a qtune run directory"),
                "{name}: {err}"
            );
            cases += 1;
        }
    }
    eprintln!("{cases} cases");
}

#[test]
fn quality_text_from_a_pipe_or_a_device_fails_fast() {
    // A real (small) model: quality refuses synthetic ones before it looks at the text.
    let Some(model) = require::or_skip(qtune::fixtures::smollm2(), "the SmolLM2 fixture") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("text.fifo");
    mkfifo(&fifo);
    for t in [fifo.as_path(), Path::new("/dev/zero"), tmp.path()] {
        let mut c = qtune();
        c.args(["quality", "--model"])
            .arg(&model)
            .arg("--text")
            .arg(t);
        let err = fails_fast_with_one_line(c, &format!("quality --text {}", t.display()));
        assert!(
            err.contains("not a regular file") || err.contains("is a directory"),
            "{err}"
        );
    }
}
