//! `qtune inspect` / `qtune synth` on bad input: exactly one line on stderr, non-zero exit,
//! no partial file left behind.

use crate::support;

use qtune::model::ggml_type::GgmlType;
use qtune::model::gguf::{self, GgufValue, TensorSpec};
use std::path::Path;
use std::process::Command;

fn qtune(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(args)
        .env_remove("QTUNE_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs qtune, expects failure with one stderr line containing `needle`.
fn fails_with_one_line(args: &[&str], needle: &str) {
    let (code, _out, err) = qtune(args);
    assert_ne!(code, 0, "{args:?} should fail");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?}: expected one stderr line, got:\n{err}"
    );
    assert!(
        lines[0].contains(needle),
        "{args:?}: '{}' does not mention '{needle}'",
        lines[0]
    );
    assert!(!err.contains("panicked"), "{err}");
}

fn small_gguf(path: &Path, arch: &str) {
    let md = vec![(
        "general.architecture".to_string(),
        GgufValue::String(arch.to_string()),
    )];
    let ts = vec![TensorSpec {
        name: "token_embd.weight".into(),
        dims: vec![64, 16],
        ggml_type: GgmlType::F32,
    }];
    let mut f = std::fs::File::create(path).unwrap();
    gguf::write_gguf(&mut f, &md, &ts, 32, |_, t, w| {
        w.write_all(&vec![0u8; t.bytes().unwrap() as usize])
    })
    .unwrap();
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn inspect_rejects_bad_files_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    let missing = d.join("nope.gguf");
    fails_with_one_line(&["inspect", missing.to_str().unwrap()], "not found");

    fails_with_one_line(&["inspect", d.to_str().unwrap()], "is a directory");

    let text = d.join("readme.gguf");
    std::fs::write(&text, "this is not a model\n").unwrap();
    fails_with_one_line(&["inspect", text.to_str().unwrap()], "not a GGUF file");

    let foo = d.join("foo.gguf");
    small_gguf(&foo, "foo-arch");
    fails_with_one_line(
        &["inspect", foo.to_str().unwrap()],
        "unsupported architecture 'foo-arch'",
    );

    // Truncated: a valid file cut in the tensor data, and one cut in the header.
    let good = d.join("good.gguf");
    small_gguf(&good, "llama");
    let bytes = std::fs::read(&good).unwrap();
    let cut = d.join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    fails_with_one_line(&["inspect", cut.to_str().unwrap()], "truncated");
    std::fs::write(&cut, &bytes[..30]).unwrap();
    fails_with_one_line(&["inspect", cut.to_str().unwrap()], "truncated");
}

#[test]
fn synth_rejects_bad_requests_without_leaving_files() {
    if !support::vocab() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("m.gguf");
    fails_with_one_line(
        &["synth", out.to_str().unwrap(), "--shape", "qwen9-1t"],
        "unknown shape 'qwen9-1t'",
    );
    fails_with_one_line(
        &[
            "synth",
            out.to_str().unwrap(),
            "--shape",
            "tiny-qwen3moe",
            "--ftype",
            "q1_z",
        ],
        "unknown --ftype",
    );
    assert!(files_in(d).is_empty());

    // Unwritable: the parent "directory" is a regular file.
    let blocker = d.join("file");
    std::fs::write(&blocker, "x").unwrap();
    let bad = blocker.join("m.gguf");
    fails_with_one_line(
        &["synth", bad.to_str().unwrap(), "--shape", "tiny-qwen3moe"],
        "cannot write",
    );
    // An output path that is a directory.
    let sub = d.join("sub");
    std::fs::create_dir(&sub).unwrap();
    fails_with_one_line(
        &["synth", sub.to_str().unwrap(), "--shape", "tiny-qwen3moe"],
        "is a directory",
    );
    assert_eq!(files_in(d), ["file", "sub"]);
    assert!(files_in(&sub).is_empty());
}

/// `--no-mtp` writes the Qwen3.5 layout without its MTP block (GGUFs made without it, the only
/// one ik_llama.cpp 0.1.5 loads: on the GPU machine it stopped at `blk.40.attn_qkv.weight`);
/// a shape without one is refused in one line.
#[test]
fn synth_leaves_the_mtp_block_out_where_asked() {
    if !support::vocab() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let read = |args: &[&str]| {
        let out = dir.path().join("m.gguf");
        let mut a = vec!["synth", out.to_str().unwrap(), "--shape", "tiny-qwen35moe"];
        a.extend_from_slice(args);
        let (code, _, err) = qtune(&a);
        assert_eq!(code, 0, "{err}");
        qtune::model::gguf::read(&out).unwrap()
    };
    let blocks = |g: &qtune::model::gguf::GgufFile| {
        let mtp = g
            .tensors
            .iter()
            .filter(|t| t.name.starts_with("blk.4."))
            .count();
        let nextn = g.tensors.iter().any(|t| t.name.contains("nextn"));
        (g.tensors.len(), mtp, nextn)
    };
    let with = read(&[]);
    let without = read(&["--no-mtp"]);
    let (n_with, mtp, nextn) = blocks(&with);
    assert!(mtp > 0 && nextn, "{n_with} tensors");
    let (n_without, mtp, nextn) = blocks(&without);
    assert_eq!((mtp, nextn), (0, false));
    assert_eq!(n_with - n_without, 20);
    let l = qtune::model::load(&dir.path().join("m.gguf")).unwrap();
    assert_eq!(l.n_blocks, 4);
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("q3.gguf");
    fails_with_one_line(
        &[
            "synth",
            out.to_str().unwrap(),
            "--shape",
            "tiny-qwen3moe",
            "--no-mtp",
        ],
        "--no-mtp: the shape tiny-qwen3moe has no MTP block",
    );
    assert!(files_in(d.path()).is_empty());
}

#[test]
fn synth_writes_a_loadable_tiny_model() {
    if !support::vocab() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.gguf");
    let (code, stdout, err) = qtune(&["synth", out.to_str().unwrap(), "--shape", "tiny-qwen35moe"]);
    assert_eq!(code, 0, "{err}");
    let size = std::fs::metadata(&out).unwrap().len();
    assert!(stdout.contains(&size.to_string()), "{stdout}");
    assert_eq!(files_in(dir.path()), ["t.gguf"]);
    let (code, stdout, err) = qtune(&["inspect", out.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["layout"]["arch"], "qwen35moe");
    assert_eq!(v["rows"].as_array().unwrap().len(), 5);
}
