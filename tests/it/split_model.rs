//! A model split in parts (`NAME-00001-of-00003.gguf`, as every upload past a hub's 50 GB
//! file limit comes): qtune reads every part, so the weights it plans and places are the whole
//! model's, and the real llama-server runs the model from its first part.

use crate::support;
use support::{qtune, require, servers};

use std::path::Path;

fn tiny() -> Option<std::path::PathBuf> {
    require::tiny_qwen3moe()
}

fn plan_ram(model: &Path) -> String {
    let o = qtune().args(["plan", "-m"]).arg(model).output().unwrap();
    let out = support::output_text(&o);
    assert!(o.status.success(), "{out}");
    out.lines()
        .find(|l| l.contains("predicted host RAM"))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string()
}

/// Planned from its first part, a model in three parts needs what the whole file needs (the
/// first part alone held a third of the weights, and was all qtune counted); its second part,
/// or a first part whose others are gone, is refused in one line that says what to give.
#[test]
fn a_split_model_is_planned_as_the_whole_model() {
    let Some(model) = tiny() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let first = support::split::split(&model, dir.path(), "tiny", 3);
    assert_eq!(plan_ram(&first), plan_ram(&model));

    let second = dir.path().join("tiny-00002-of-00003.gguf");
    let o = qtune().args(["plan", "-m"]).arg(&second).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("part 2 of a model split in 3 files: give its first part")
            && err.contains("tiny-00001-of-00003.gguf"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    std::fs::remove_file(dir.path().join("tiny-00003-of-00003.gguf")).unwrap();
    let o = qtune().args(["plan", "-m"]).arg(&first).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("tiny-00003-of-00003.gguf is missing"), "{err}");
}

/// The real llama-server runs a split model from its first part under qtune: two launches of
/// it, the second with its last block's experts (in the last part) on the CPU, are compared.
#[test]
fn a_split_model_is_compared_on_the_real_server() {
    let Some(server) = require::or_skip(require::server(), "the real CPU llama-server") else {
        return;
    };
    let Some(model) = tiny() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let first = support::split::split(&model, dir.path(), "compare-split", 3);
    let a = format!("llama-server -m {} -c 512 -np 1 -t 1", first.display());
    let b = format!("{a} --n-cpu-moe 1");
    let o = qtune()
        .env("QTUNE_LLAMA_SERVER", &server)
        .args(["compare", &a, &b, "--rounds", "2", "--prompt-tokens", "16"])
        .args(["--gen-tokens", "4", "--repetitions", "1", "--out"])
        .arg(dir.path().join("cmp"))
        .output()
        .unwrap();
    let out = support::output_text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("2 of 2 rounds"), "{out}");
    servers::assert_none_left(&first.display().to_string(), "after the compare");
}
