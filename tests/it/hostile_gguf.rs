//! Issue 33, "runaway memory" in model headers: counts in a GGUF header (`block_count`,
//! `expert_count`, head counts, lengths) are checked against sane limits before anything is
//! sized by them. A header claiming 2^31 blocks or 2^31 experts fails `inspect` and `plan`
//! within seconds, with one line, instead of aborting on a 16 GiB allocation or predicting
//! 381,178,482 MiB.

use qtune::model::gguf::{self, GgufValue, TensorSpec};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tiny() -> PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model")
}

/// A copy of the tiny model with `key` set to `value` (zeroed tensor data: only the header
/// matters to inspect and plan).
fn with_value(dir: &Path, key: &str, value: GgufValue) -> PathBuf {
    let g = gguf::read(&tiny()).unwrap();
    let arch = g.get_str("general.architecture").unwrap().to_string();
    let full = key.replace("ARCH", &arch);
    let mut md = g.metadata.clone();
    match md.iter_mut().find(|(k, _)| *k == full) {
        Some((_, v)) => *v = value,
        None => md.push((full.clone(), value)),
    }
    let ts: Vec<TensorSpec> = g.tensors.iter().map(|t| t.spec()).collect();
    let p = dir.join(format!("{}.gguf", full.replace('.', "_")));
    let mut f = std::fs::File::create(&p).unwrap();
    gguf::write_gguf(&mut f, &md, &ts, g.alignment, |_, t, w| {
        w.write_all(&vec![0u8; t.bytes().unwrap() as usize])
    })
    .unwrap();
    p
}

/// Run qtune with a 10 s limit: it must fail by itself with one line on stderr.
fn fails_fast(args: &[&str], model: &Path) -> String {
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(args)
        .arg(model)
        .env_remove("QTUNE_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("{args:?} {}: still running after 10 s", model.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(!o.status.success(), "{args:?}: {out}{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(
        !err.contains("panicked") && !out.contains("381,178,482"),
        "{err}"
    );
    err
}

#[test]
fn absurd_header_counts_fail_fast_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("ARCH.block_count", GgufValue::U32(i32::MAX as u32)),
        ("ARCH.block_count", GgufValue::U64((1u64 << 32) + 8)),
        ("ARCH.expert_count", GgufValue::U32(1 << 31)),
        ("ARCH.expert_used_count", GgufValue::U32(1 << 20)),
        ("ARCH.embedding_length", GgufValue::U64(1 << 40)),
        ("ARCH.attention.head_count", GgufValue::U32(u32::MAX)),
        ("ARCH.attention.key_length", GgufValue::U32(1 << 30)),
        ("ARCH.context_length", GgufValue::U64(u64::MAX)),
        ("ARCH.ssm.inner_size", GgufValue::U64(1 << 40)),
    ];
    let mut n = 0;
    for (key, value) in cases {
        let m = with_value(dir.path(), key, value);
        for args in [&["inspect"][..], &["plan", "--model"]] {
            let err = fails_fast(args, &m);
            let short = key.trim_start_matches("ARCH.");
            assert!(
                err.contains(short) || err.contains("expert_count"),
                "{key}: {err}"
            );
            assert!(err.contains("corrupt"), "{key}: {err}");
            n += 1;
        }
    }
    eprintln!("{n} cases");
}

/// A tensor whose data offset is near 2^64: offset + size must not wrap past the file's end
/// (the proptest fuzz found it as a panic, "attempt to add with overflow").
#[test]
fn a_tensor_offset_near_the_top_of_u64_fails_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let src = tiny();
    let g = gguf::read(&src).unwrap();
    let mut bytes = std::fs::read(&src).unwrap();
    // The first tensor's info: its name (u64 length + bytes), n_dims (u32), the dims (u64 each),
    // the type (u32), then the offset (u64).
    let t = &g.tensors[0];
    let mut key = (t.name.len() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(t.name.as_bytes());
    let at = bytes
        .windows(key.len())
        .position(|w| w == key.as_slice())
        .expect("the first tensor's name in the header");
    let offset_at = at + key.len() + 4 + 8 * t.dims.len() + 4;
    // Aligned, as an offset must be, so only the sum can catch it.
    let huge = u64::MAX / g.alignment * g.alignment;
    bytes[offset_at..offset_at + 8].copy_from_slice(&huge.to_le_bytes());
    let m = dir.path().join("offset.gguf");
    std::fs::write(&m, &bytes).unwrap();
    let e = gguf::read(&m).unwrap_err().to_string();
    assert!(e.contains(&t.name), "{e}");
    for args in [&["inspect"][..], &["plan", "--model"]] {
        fails_fast(args, &m);
    }
}
