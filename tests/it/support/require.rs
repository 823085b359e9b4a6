//! One rule for tests that need something outside the repo (the real llama-server, a model
//! fixture): under `scripts/test.sh` (which sets `QTUNE_REQUIRE_SERVER=1`) or in CI (`CI` set),
//! a missing requirement fails the test; elsewhere (a quick `cargo test` on a new checkout) the
//! test says SKIP and why, and passes.
#![allow(dead_code)]

use std::path::PathBuf;

/// True when missing requirements must fail (scripts/test.sh or CI).
pub fn strict() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    set("QTUNE_REQUIRE_SERVER") || set("CI")
}

/// Report a missing requirement: panic when [`strict`], else print SKIP.
/// Call it and `return` from the test.
pub fn missing(what: &str) {
    if strict() {
        panic!("required for this test, and missing: {what} (scripts/test.sh prepares it)");
    }
    eprintln!("SKIP: {what} (scripts/test.sh prepares it and fails instead of skipping)");
}

/// The value, or `None` after [`missing`] (which panics under scripts/test.sh or CI).
pub fn or_skip<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            missing(&format!("{what}: {e}"));
            None
        }
    }
}

/// The real CPU llama-server: `$QTUNE_LLAMA_SERVER`, else the pinned CPU build in qtune's cache.
pub fn server() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("QTUNE_LLAMA_SERVER").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("QTUNE_LLAMA_SERVER={} is not a file", p.display()))
        };
    }
    let p = qtune::engine::binary::cached_server(false);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "no llama-server at {} (run `qtune server build` or set QTUNE_LLAMA_SERVER)",
            p.display()
        ))
    }
}

/// The tokenizer files the synthetic models are written with (`ggml-vocab-*.gguf` of the pinned
/// llama.cpp source, which `qtune server build` fetches; or `$QTUNE_VOCAB_DIR`).
pub fn vocab() -> Result<PathBuf, String> {
    let dir = qtune::model::synth::default_vocab_dir();
    for v in ["qwen35", "qwen2"] {
        let f = dir.join(format!("ggml-vocab-{v}.gguf"));
        if !f.is_file() {
            return Err(format!(
                "no tokenizer file {} (run `qtune server build`, or set QTUNE_VOCAB_DIR)",
                f.display()
            ));
        }
    }
    Ok(dir)
}

/// The real CPU ik_llama.cpp server: `$QTUNE_IK_SERVER`, else qtune's build of the pinned
/// source (`qtune server build --engine ik`, which scripts/test.sh runs).
pub fn ik_server() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("QTUNE_IK_SERVER").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("QTUNE_IK_SERVER={} is not a file", p.display()))
        };
    }
    if qtune::engine::binary::ik::is_built() {
        Ok(qtune::engine::binary::ik::cached_server())
    } else {
        Err(format!(
            "no ik_llama.cpp server at {} (run `qtune server build --engine ik` or set QTUNE_IK_SERVER)",
            qtune::engine::binary::ik::cached_server().display()
        ))
    }
}

/// The tiny synthetic Qwen3 MoE test model (`qtune synth --test-models` prepares it), or
/// `None` after [`missing`].
pub fn tiny_qwen3moe() -> Option<PathBuf> {
    or_skip(
        qtune::fixtures::tiny_moe("tiny-qwen3moe"),
        "the tiny-qwen3moe test model (`qtune synth --test-models`)",
    )
}
