//! Issue 33: a model replaced, truncated or deleted mid-tune stops the tune before the next
//! launch, with one line that says so and how to continue; no trial is charged to it. The
//! fake server appends a byte to its model when it starts (FAKE_CHANGE_MODEL).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

fn fake_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-llama-server")
}

/// A tune of `model` on the fake server, which appends a byte to `change` ("1": its -m file)
/// when it starts: the tune's stderr, after checking it stopped after the baseline alone.
fn tune_that_changes(model: &Path, change: &str, run: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env_remove("QTUNE_LOG")
        .args(["tune", "--space", "demo", "--model"])
        .arg(model)
        .arg("--server")
        .arg(fake_server())
        .arg("--out")
        .arg(run)
        .env("FAKE_CHANGE_MODEL", change)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{err}");
    let last = err.trim_end().lines().last().unwrap();
    assert!(last.starts_with("qtune: error: "), "{err}");
    assert!(last.contains("changed since the tune started"), "{last}");
    assert!(last.contains("no trial was charged"), "{last}");
    assert!(
        last.contains(&format!("--resume {}", run.display())),
        "{last}"
    );
    // Only the baseline ran (before the change): nothing was charged to the changed model.
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    assert_eq!(journal.lines().count(), 1, "{journal}");
    assert!(journal.contains("\"kind\":\"ok\""), "{journal}");
    err
}

#[test]
fn a_model_changed_mid_tune_stops_it_with_one_line_and_a_resume_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("m.gguf");
    std::fs::copy(
        qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model"),
        &model,
    )
    .unwrap();
    tune_that_changes(&model, "1", &tmp.path().join("run"));
}

/// A split model's later part changed mid-tune is the model changed: the server loads it too.
#[test]
fn a_split_models_other_part_changed_mid_tune_stops_it() {
    let tmp = tempfile::tempdir().unwrap();
    let first = support::split::split(
        &qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model"),
        tmp.path(),
        "m",
        2,
    );
    let second = tmp.path().join("m-00002-of-00002.gguf");
    tune_that_changes(
        &first,
        &second.display().to_string(),
        &tmp.path().join("run"),
    );
}
