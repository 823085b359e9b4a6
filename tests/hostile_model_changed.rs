//! Issue 33: a model replaced, truncated or deleted mid-tune stops the tune before the next
//! launch, with one line that says so and how to continue; no trial is charged to it. The
//! fake server appends a byte to its model when it starts (FAKE_CHANGE_MODEL).

use std::path::{Path, PathBuf};
use std::process::Command;

fn fake_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-llama-server")
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
    let run = tmp.path().join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env_remove("QTUNE_LOG")
        .args(["tune", "--space", "demo", "--model"])
        .arg(&model)
        .arg("--server")
        .arg(fake_server())
        .arg("--out")
        .arg(&run)
        .env("FAKE_CHANGE_MODEL", "1")
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
}
