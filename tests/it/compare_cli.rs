//! `qtune compare` end to end: the real binary, the real CPU llama-server, SmolLM2, a tiny
//! workload and 2 rounds. Asserts what it prints and writes, never a measured speed.

use crate::support;
use support::qtune;
use support::require;
use support::servers;

use std::path::{Path, PathBuf};

#[test]
fn compare_runs_interleaved_rounds_and_prints_no_interval_from_two_rounds() {
    let Some(server) = require::or_skip(require::server(), "the real CPU llama-server") else {
        return;
    };
    let Some(model) = require::or_skip(qtune::fixtures::smollm2(), "the SmolLM2 fixture") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // A unique model path: this test's servers carry it in their argv.
    let m: PathBuf = dir.path().join("compare-smollm2.gguf");
    std::os::unix::fs::symlink(&model, &m).unwrap();
    let out_dir = dir.path().join("cmp");
    // -t 1 both: on a busy 2-core box, -t 2 collapses (llama.cpp's threads spin) into a ratio
    // past 1000x, which is (rightly) printed as a broken measurement.
    let a = format!("llama-server -m {} -c 512 -np 1 -t 1", m.display());
    let b = format!("llama-server -m {} -c 512 -np 1 -t 1 -ub 256", m.display());
    let out = qtune()
        .env("QTUNE_LLAMA_SERVER", &server)
        .args(["compare", &a, &b, "--rounds", "2", "--prompt-tokens", "16"])
        .args(["--gen-tokens", "4", "--repetitions", "1", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    // The whole path: another checkout's run of this test uses the same file name.
    servers::assert_none_left(&m.display().to_string(), "after the compare");

    // The per-round table, in A B B A order, and B's paired intervals against A.
    assert!(
        stdout.contains("2 of 2 rounds (in turn A B, then B A,"),
        "{stdout}"
    );
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("1  A B") || l.trim_start().starts_with("2  B A"))
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    let gen = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("B  generation "))
        .unwrap_or_else(|| panic!("{stdout}"));
    // Two rounds support no claim: no interval is printed anywhere, and nothing is decided.
    assert!(
        gen.contains("undecided, too few rounds to tell (2 rounds; 3 needed)")
            || gen.contains("an implausible ratio"),
        "{gen}"
    );
    assert!(
        !stdout.contains(" % ["),
        "an interval from 2 rounds:\n{stdout}"
    );
    assert!(
        !stdout.contains("CI "),
        "an interval from 2 rounds:\n{stdout}"
    );
    // The space's workload (chat) is the verdict, undecided; the others follow it.
    assert!(
        stdout.contains("prompt ") && stdout.contains("verdict on chat (time per request"),
        "{stdout}"
    );
    assert!(
        stdout.contains("B ran ") && stdout.contains("than A (undecided: too few rounds to tell"),
        "{stdout}"
    );
    assert!(stdout.contains("peak VRAM: A "), "{stdout}");

    // compare.json holds every launch, each journaled with its log.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("compare.json")).unwrap())
            .unwrap();
    let rounds = json["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2);
    for r in rounds {
        let launches = r["launches"].as_array().unwrap();
        assert_eq!(launches.len(), 2);
        for l in launches {
            assert_eq!(l["outcome"], "ok", "{l}");
            assert!(l["gen_tps"].as_f64().unwrap() > 0.0);
        }
    }
    assert_eq!(json["commands"][1]["config"]["ubatch"], 256);
    let v = &json["against_first"][0]["verdict"];
    assert_eq!(v["gen"]["rounds"], 2);
    assert!(v["gen"]["lo_log"].as_f64().unwrap() <= v["gen"]["hi_log"].as_f64().unwrap());
    assert_eq!(v["decision"], "undecided", "no claim from 2 rounds: {v}");
    let journal = std::fs::read_to_string(out_dir.join("journal.jsonl")).unwrap();
    assert_eq!(journal.lines().count(), 4, "{journal}");
    assert!(Path::new(&out_dir.join("logs")).is_dir());
}

/// `compare --workload agent-shapes`: the verdict is its time per request; chat and long-doc,
/// measured in the same rounds, follow under "measured, not raced"; no generation-first
/// "verdict:" line contradicts it; 2 rounds print no interval.
#[test]
fn compare_with_a_workload_gives_that_workloads_verdict_and_the_others_below() {
    let Some(server) = require::or_skip(require::server(), "the real CPU llama-server") else {
        return;
    };
    let Some(model) = require::or_skip(qtune::fixtures::smollm2(), "the SmolLM2 fixture") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let m: PathBuf = dir.path().join("compare-workload-smollm2.gguf");
    std::os::unix::fs::symlink(&model, &m).unwrap();
    let a = format!("llama-server -m {} -c 1024 -np 1 -t 1", m.display());
    let b = format!("llama-server -m {} -c 1024 -np 1 -t 1 -ub 256", m.display());
    let out = qtune()
        .env("QTUNE_LLAMA_SERVER", &server)
        .args([
            "compare",
            &a,
            &b,
            "--rounds",
            "2",
            "--workload",
            "agent-shapes",
        ])
        .args(["--prompt-tokens", "16", "--gen-tokens", "4"])
        .args(["--repetitions", "1", "--out"])
        .arg(dir.path().join("cmp"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    servers::assert_none_left(&m.display().to_string(), "after the compare");
    let lines: Vec<&str> = stdout.lines().collect();
    let at = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?}:\n{stdout}"))
    };
    let verdict = at("verdict on agent-shapes (time per request, medians): A ");
    assert!(
        lines[verdict + 1].starts_with("  B ran ")
            && lines[verdict + 1].contains("than A (undecided: "),
        "{stdout}"
    );
    let others = at("measured, not raced (the other workloads, same rounds; not the verdict):");
    assert!(verdict < others, "{stdout}");
    for w in ["chat", "long-doc"] {
        let i = at(&format!("  {w} (time per request, medians): A "));
        assert!(i > others, "{w} under measured, not raced:\n{stdout}");
    }
    assert!(
        !stdout.contains("  agent-shapes (time per request"),
        "{stdout}"
    );
    // No generation-first verdict beside agent's, and no interval from 2 rounds.
    assert!(!stdout.contains("verdict: "), "{stdout}");
    assert!(
        !stdout.contains("CI ") && !stdout.contains(" % ["),
        "{stdout}"
    );
}

#[test]
fn a_command_with_an_unknown_flag_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = qtune()
        .args([
            "compare",
            "llama-server -m m.gguf -c 4096 -np 1",
            "llama-server -m m.gguf -c 4096 -np 1 --mlock",
            "--out",
        ])
        .arg(dir.path().join("x"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("qtune: error: command B: unknown flag '--mlock'"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("x").exists(),
        "nothing written for bad input"
    );

    let out = qtune()
        .args(["compare", "llama-server -m m.gguf -c 4096 -np 1"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "one command is not a comparison");
}
