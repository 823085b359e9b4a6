//! ik_llama.cpp as a second engine (issue 44, CPU): its server found, checked and told apart
//! from llama.cpp's, its build's refusals, and real `compare` and `tune` runs on it (the real
//! CPU ik_llama.cpp server that `qtune server build --engine ik` builds, tiny models). Asserts
//! what qtune prints and writes, never a measured speed.

use crate::support;
use support::qtune;
use support::require;
use support::servers;

use std::path::{Path, PathBuf};

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The model under a unique path (a symlink inside `dir`): this test's servers carry it.
fn model_in(dir: &Path, model: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::os::unix::fs::symlink(model, &p).unwrap();
    p
}

/// `server check` names each engine; `server path --engine ik` finds ik's and refuses
/// llama.cpp's in its place.
#[test]
fn server_check_names_the_engine_and_ik_is_told_from_llama_cpp() {
    let Some(ik) = require::or_skip(require::ik_server(), "the real CPU ik_llama.cpp server")
    else {
        return;
    };
    let Some(llama) = require::or_skip(require::server(), "the real CPU llama-server") else {
        return;
    };
    for (server, engine, flags) in [
        (&ik, "ik_llama.cpp", "--n-cpu-moe --fit-margin -ctk -ub"),
        (&llama, "llama.cpp", "--n-cpu-moe --fit -ctk -ub"),
    ] {
        let out = qtune()
            .args(["server", "check", "--server"])
            .arg(server)
            .output()
            .unwrap();
        let text = support::output_text(&out);
        assert!(out.status.success(), "{text}");
        assert!(
            text.contains(&format!("(from --server): {engine} "))
                && text.contains(&format!("; has {flags}")),
            "{text}"
        );
    }

    let out = qtune()
        .env("QTUNE_IK_SERVER", &ik)
        .args(["server", "path", "--engine", "ik"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", support::output_text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        ik.display().to_string()
    );
    let out = qtune()
        .env("QTUNE_IK_SERVER", &llama)
        .args(["server", "path", "--engine", "ik"])
        .output()
        .unwrap();
    let text = support::output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("(from QTUNE_IK_SERVER) is llama.cpp's llama-server, not ik_llama.cpp's")
            && text.contains("qtune server build --engine ik"),
        "{text}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim().lines().count(),
        1,
        "{text}"
    );
}

/// A build that never finished does not count: a server in the cache without the stamp a
/// finished build writes is not found; `--cuda` and a missing compiler are refused in one
/// line, before anything is downloaded or written.
#[test]
fn an_unfinished_ik_build_is_not_a_server_and_the_build_refuses_clearly() {
    let home = tempfile::tempdir().unwrap();
    let cache = home.path().join("cache");
    let bin = cache.join("ik_llama.cpp").join("0.1.5-cpu").join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("llama-server"), b"half-linked").unwrap();
    let q = || {
        let mut c = qtune();
        c.env("QTUNE_CACHE_DIR", &cache)
            .env_remove("QTUNE_IK_SERVER")
            .env("HOME", home.path());
        c
    };
    let out = q()
        .args(["server", "path", "--engine", "ik"])
        .output()
        .unwrap();
    let text = support::output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("no ik_llama.cpp server found")
            && text.contains("run 'qtune server build --engine ik'"),
        "{text}"
    );

    let out = q()
        .args(["server", "build", "--engine", "ik", "--cuda"])
        .output()
        .unwrap();
    let text = support::output_text(&out);
    assert!(!out.status.success(), "{text}");
    // The CUDA build (issue 56) needs nvcc and a GPU NVML sees: without either (this box), one
    // line naming what is missing, before anything is downloaded or configured.
    assert!(
        text.contains("'nvcc' not found") || text.contains("--cuda needs an NVIDIA GPU"),
        "{text}"
    );
    assert!(
        !cache.join("ik_llama.cpp").join("0.1.5-cuda").exists(),
        "{text}"
    );

    // No compiler on PATH (an empty folder): one line naming what to install.
    let empty = home.path().join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let out = q()
        .env("PATH", &empty)
        .args(["server", "build", "--engine", "ik"])
        .output()
        .unwrap();
    let text = support::output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("'c++' not found: install a C++ compiler"),
        "{text}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim().lines().count(),
        1,
        "{text}"
    );
    assert!(!cache.join("src").exists(), "nothing downloaded");
    assert!(!cache
        .join("ik_llama.cpp")
        .join("0.1.5-cpu")
        .join("qtune-built")
        .exists());
}

/// `qtune compare` of two commands on the ik server: every launch measures, and the commands
/// are launched (and recorded) in ik's dialect.
#[test]
fn compare_runs_on_the_ik_server() {
    let Some(ik) = require::or_skip(require::ik_server(), "the real CPU ik_llama.cpp server")
    else {
        return;
    };
    let Some(model) = require::or_skip(qtune::fixtures::smollm2(), "the SmolLM2 fixture") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let m = model_in(dir.path(), &model, "ik-compare-smollm2.gguf");
    let out_dir = dir.path().join("cmp");
    let a = format!("llama-server -m {} -c 512 -np 1 -t 1", m.display());
    // ik's `-cuda` (its CUDA back end's run-time parameters, issue 56) is read back and
    // passed on; a CPU build parses it and runs.
    let b = format!(
        "llama-server -m {} -c 512 -np 1 -t 1 -ub 256 -cuda mmq-id-size=0",
        m.display()
    );
    let text = short_compare(
        &[&a, &b, "--server", &ik.display().to_string()],
        &out_dir,
        &m,
    );
    assert!(text.contains("-t 1  (ik_llama.cpp)"), "{text}");
    let j = json(&out_dir.join("compare.json"));
    for c in j["commands"].as_array().unwrap() {
        assert_eq!(c["config"]["engine"], "ik_llama.cpp", "{c}");
    }
    assert_eq!(
        j["commands"][1]["config"]["engine_opts"]["cuda_params"],
        "mmq-id-size=0"
    );
    for r in j["rounds"].as_array().unwrap() {
        for l in r["launches"].as_array().unwrap() {
            assert_eq!(l["outcome"], "ok", "{l}");
            assert!(l["gen_tps"].as_f64().unwrap() > 0.0, "{l}");
        }
    }
    assert_eq!(j["server_path"], ik.display().to_string());
}

/// The real ik server accepts `-ser 1,1` (smart expert reduction, issue 56) on the tiny MoE:
/// `qtune compare` of the command with and without it launches and measures both, the second
/// read and recorded with its expert reduction.
#[test]
fn the_ik_server_accepts_smart_expert_reduction() {
    let dir = tempfile::tempdir().unwrap();
    let Some(ik) = require::or_skip(require::ik_server(), "the real CPU ik_llama.cpp server")
    else {
        return;
    };
    let Some(model) = require::tiny_qwen3moe() else {
        return;
    };
    let m = model_in(dir.path(), &model, "ik-ser-tiny-qwen3moe.gguf");
    let out_dir = dir.path().join("cmp");
    let a = format!("llama-server -m {} -c 512 -np 1 -t 1", m.display());
    let b = format!("{a} -ser 1,1");
    short_compare(
        &[&a, &b, "--server", &ik.display().to_string()],
        &out_dir,
        &m,
    );
    let j = json(&out_dir.join("compare.json"));
    let commands = j["commands"].as_array().unwrap();
    assert_eq!(
        commands[1]["config"]["engine_opts"]["expert_reduction"], 1,
        "{}",
        commands[1]
    );
    for r in j["rounds"].as_array().unwrap() {
        for l in r["launches"].as_array().unwrap() {
            assert_eq!(l["outcome"], "ok", "{l}");
            assert!(l["gen_tps"].as_f64().unwrap() > 0.0, "{l}");
        }
    }
}

/// `qtune compare ARGS` of two rounds of one short request each, into `out_dir`; it must
/// succeed and leave no server of model `m` behind. Its output.
fn short_compare(args: &[&str], out_dir: &Path, m: &Path) -> String {
    let out = qtune()
        .env("QTUNE_ALLOW_BUSY", "1")
        .arg("compare")
        .args(args)
        .args([
            "--rounds",
            "2",
            "--prompt-tokens",
            "16",
            "--gen-tokens",
            "4",
        ])
        .args(["--repetitions", "1", "--out"])
        .arg(out_dir)
        .output()
        .unwrap();
    let text = support::output_text(&out);
    assert!(out.status.success(), "{text}");
    servers::assert_none_left(&m.display().to_string(), "after the compare");
    text
}

/// llama.cpp against ik_llama.cpp on one model: two commands naming two servers, each
/// launched by its own, in its own dialect.
#[test]
fn compare_runs_llama_cpp_against_ik() {
    let dir = tempfile::tempdir().unwrap();
    let Some((ik, llama, m)) = both_servers_and_smollm2(dir.path(), "ik-vs-llama-smollm2.gguf")
    else {
        return;
    };
    let out_dir = dir.path().join("cmp");
    let a = format!("{} -m {} -c 512 -np 1 -t 1", llama.display(), m.display());
    let b = format!("{} -m {} -c 512 -np 1 -t 1", ik.display(), m.display());
    let text = short_compare(&[&a, &b], &out_dir, &m);
    assert!(
        text.contains("-t 1  (llama.cpp)") && text.contains("-t 1  (ik_llama.cpp)"),
        "{text}"
    );
    let j = json(&out_dir.join("compare.json"));
    assert_eq!(j["server_path"], llama.display().to_string());
    assert_eq!(j["other_servers"][0]["engine"], "ik_llama.cpp");
    assert_eq!(j["other_servers"][0]["path"], ik.display().to_string());
    assert!(j["commands"][0]["config"].get("engine").is_none());
    assert_eq!(j["commands"][1]["config"]["engine"], "ik_llama.cpp");
    for r in j["rounds"].as_array().unwrap() {
        for l in r["launches"].as_array().unwrap() {
            assert_eq!(l["outcome"], "ok", "{l}");
        }
    }
    // Each launch's log names the binary that ran it.
    let logs: Vec<String> = std::fs::read_dir(out_dir.join("logs"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap_or_default())
        .collect();
    let by = |server: &Path| {
        logs.iter()
            .filter(|l| l.contains(&format!("{} -m ", server.display())))
            .count()
    };
    assert_eq!((by(&llama), by(&ik)), (2, 2), "{}", logs.join("\n----\n"));
}

/// A short `qtune tune` on the ik server with a tiny MoE model: every launch in ik's
/// dialect (no llama.cpp-only flag ever reaches it), the winner's launch script starts ik.
#[test]
fn a_short_tune_runs_on_the_ik_server() {
    let Some(ik) = require::or_skip(require::ik_server(), "the real CPU ik_llama.cpp server")
    else {
        return;
    };
    let Some(model) = require::tiny_qwen3moe() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let m = model_in(dir.path(), &model, "ik-tune-tiny-qwen3moe.gguf");
    let run = dir.path().join("run");
    // Run from the test's folder: ik's server writes `llama.log` into its working folder
    // unless told not to.
    let out = qtune()
        .current_dir(dir.path())
        .env("QTUNE_ALLOW_BUSY", "1")
        .args(["tune", "--allow-busy", "--server"])
        .arg(&ik)
        .arg("--model")
        .arg(&m)
        .args([
            "--space",
            "demo",
            "--budget-trials",
            "4",
            "--budget-minutes",
            "2",
        ])
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    let text = support::output_text(&out);
    assert!(out.status.success(), "{text}");
    servers::assert_none_left(&m.display().to_string(), "after the tune");
    assert!(text.contains("engine: ik_llama.cpp"), "{text}");
    assert!(!dir.path().join("llama.log").exists(), "ik wrote llama.log");
    // ik's answers have no cache_n: the held tokens' reuse is read from its token counts.
    assert!(!text.contains("the server reused 0 of the"), "{text}");
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    let trials: Vec<serde_json::Value> = journal
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(trials.len() >= 2, "{journal}");
    for t in &trials {
        assert_eq!(t["config"]["engine"], "ik_llama.cpp", "{t}");
        assert_eq!(t["kind"], "ok", "{t}");
    }
    // Its weights' buffer is read from its own log line.
    assert!(
        trials[0]["reported"]["model_mib"]["CPU"].as_f64().unwrap() > 0.0,
        "{}",
        trials[0]
    );
    let script = std::fs::read_to_string(run.join("launch.sh")).unwrap();
    assert!(script.contains(&ik.display().to_string()), "{script}");
    for llama_only in ["--fit off", "--fit on", "--load-mode", "-lv 4", "-kvu"] {
        assert!(!script.contains(llama_only), "{llama_only} in:\n{script}");
    }
    // No compose file: the official image is llama.cpp's. Refused in one line, nothing written.
    let serve = dir.path().join("serve.sh");
    let out = qtune()
        .args(["script", "--from"])
        .arg(&run)
        .arg("--out")
        .arg(&serve)
        .arg("--compose")
        .output()
        .unwrap();
    let text = support::output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("the winner runs on ik_llama.cpp, which has no official server image"),
        "{text}"
    );
    assert!(!serve.exists(), "{text}");

    // RPC workers need llama.cpp's server: qtune builds ik without RPC. One line, no run.
    let run2 = dir.path().join("run-rpc");
    let out = qtune()
        .args(["tune", "--server"])
        .arg(&ik)
        .arg("--model")
        .arg(&m)
        .args(["--rpc", "127.0.0.1:50052", "--out"])
        .arg(&run2)
        .output()
        .unwrap();
    let text = support::output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("--rpc needs llama.cpp's llama-server") && text.contains("without RPC"),
        "{text}"
    );
    assert!(!run2.exists(), "{text}");
}

/// Both CPU servers (ik_llama.cpp's, llama.cpp's) and the tiny MoE copied into `dir` as
/// `name`; None (the test skips, or fails under QTUNE_REQUIRE_SERVER) where one is missing.
fn both_servers_and_tiny_moe(dir: &Path, name: &str) -> Option<(PathBuf, PathBuf, PathBuf)> {
    both_servers_and(
        dir,
        name,
        qtune::fixtures::tiny_moe("tiny-qwen3moe"),
        "the tiny-qwen3moe test model (`qtune synth --test-models`)",
    )
}

/// [`both_servers_and_tiny_moe`] with SmolLM2 (real weights).
fn both_servers_and_smollm2(dir: &Path, name: &str) -> Option<(PathBuf, PathBuf, PathBuf)> {
    both_servers_and(dir, name, qtune::fixtures::smollm2(), "the SmolLM2 fixture")
}

fn both_servers_and(
    dir: &Path,
    name: &str,
    model: anyhow::Result<PathBuf>,
    what: &str,
) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let ik = require::or_skip(require::ik_server(), "the real CPU ik_llama.cpp server")?;
    let llama = require::or_skip(require::server(), "the real CPU llama-server")?;
    let model = require::or_skip(model, what)?;
    Some((ik, llama, model_in(dir, &model, name)))
}

/// `--engine both` (issue 56): a short tune launches on both engines, measures each engine's
/// baseline, tries the search's best on ik with ik's own lever (fused MoE off), says why its
/// other levers were skipped on a CPU box, records both servers, and the launch script starts
/// the server of the winner's engine.
#[test]
fn engine_both_races_llama_cpp_and_ik() {
    let dir = tempfile::tempdir().unwrap();
    let Some((ik, llama, m)) =
        both_servers_and_tiny_moe(dir.path(), "both-tune-tiny-qwen3moe.gguf")
    else {
        return;
    };
    let run = dir.path().join("run");
    let out = qtune()
        .current_dir(dir.path())
        .env("QTUNE_ALLOW_BUSY", "1")
        .env("QTUNE_IK_SERVER", &ik)
        .args(["tune", "--allow-busy", "--engine", "both", "--server"])
        .arg(&llama)
        .arg("--model")
        .arg(&m)
        .args([
            "--space",
            "demo",
            // 10 launches: on a loaded box the exploration re-measures a noisy config or two
            // before the ik variants (8 left no room for -no-fmoe in a fresh-clone run).
            "--budget-trials",
            "10",
            "--budget-minutes",
            "4",
        ])
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    let text = support::output_text(&out);
    assert!(out.status.success(), "{text}");
    servers::assert_none_left(&m.display().to_string(), "after the tune");
    assert!(text.contains("engine: ik_llama.cpp raced too"), "{text}");
    // ik's baseline is named by its engine in the header, not as llama.cpp's second one.
    assert!(
        text.contains("  ik_llama.cpp baseline (what you get without qtune): "),
        "{text}"
    );
    assert!(!text.contains("second baseline (what you get"), "{text}");
    assert!(
        text.contains("engines raced: generation llama.cpp "),
        "{text}"
    );
    assert!(text.contains("ik_llama.cpp's -rtr: not tried"), "{text}");
    assert!(
        support::flat(&text).contains(
            "-ser (smart expert reduction): not tried, qtune's build of ik-llama-cpp-python \
             0.1.5 parses it but does not apply it"
        ),
        "{text}"
    );
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    let trials: Vec<serde_json::Value> = journal
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let engine = |t: &serde_json::Value| {
        t["config"]["engine"]
            .as_str()
            .unwrap_or("llama.cpp")
            .to_string()
    };
    let baselines: Vec<String> = trials
        .iter()
        .filter(|t| t["role"].as_str().is_some_and(|r| r.contains("baseline")))
        .map(engine)
        .collect();
    assert!(
        baselines.iter().any(|e| e == "llama.cpp") && baselines.iter().any(|e| e == "ik_llama.cpp"),
        "{journal}"
    );
    let searched_on_ik = trials
        .iter()
        .filter(|t| t["role"] == "search" && engine(t) == "ik_llama.cpp")
        .count();
    assert!(searched_on_ik >= 1, "{journal}");
    assert!(
        trials
            .iter()
            .any(|t| t["config"]["engine_opts"]["no_fused_moe"] == true),
        "{journal}"
    );
    for t in trials.iter().filter(|t| engine(t) == "ik_llama.cpp") {
        assert_eq!(t["kind"], "ok", "{t}");
    }
    // Both servers recorded, each with its version (what --resume checks again).
    let inputs = json(&run.join("run.json"));
    assert_eq!(
        inputs["engine_servers"][0]["engine"], "ik_llama.cpp",
        "{inputs}"
    );
    assert_eq!(
        inputs["space"]["fixed"]["also_engines"][0], "ik_llama.cpp",
        "{inputs}"
    );
    // The launch script starts the winner's engine's server.
    let results = json(&run.join("results.json"));
    let winner = results["winner"]["config"]["engine"]
        .as_str()
        .unwrap_or("llama.cpp");
    let want = if winner == "ik_llama.cpp" {
        &ik
    } else {
        &llama
    };
    let script = std::fs::read_to_string(run.join("launch.sh")).unwrap();
    let server_line = script.lines().find(|l| l.starts_with("SERVER=")).unwrap();
    assert!(
        server_line.contains(&want.display().to_string()),
        "{winner}: {server_line}"
    );
}

/// `--dry-run --engine both` (issue 56) lists ik_llama.cpp's baselines among the first
/// launches, as the tune launches them after llama.cpp's: nothing is launched.
#[test]
fn a_dry_run_with_both_engines_lists_each_engines_baselines() {
    let dir = tempfile::tempdir().unwrap();
    let Some((ik, llama, m)) = both_servers_and_tiny_moe(dir.path(), "dry-both-tiny-qwen3moe.gguf")
    else {
        return;
    };
    // A dry run with both engines (and `more` arguments): its text, and its stdout.
    let dry = |more: &[&str]| {
        let out = qtune()
            .current_dir(dir.path())
            .env("QTUNE_ALLOW_BUSY", "1")
            .env("QTUNE_IK_SERVER", &ik)
            .args(["tune", "--dry-run", "--engine", "both"])
            .args(more)
            .arg("--server")
            .arg(&llama)
            .arg("--model")
            .arg(&m)
            .output()
            .unwrap();
        let text = support::output_text(&out);
        assert!(out.status.success(), "{text}");
        (text, String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (text, stdout) = dry(&[]);
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
    let ik_lines: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("baseline · ik_llama.cpp "))
        .collect();
    assert_eq!(ik_lines.len(), 1, "one ik baseline on a CPU box: {stdout}");
    assert!(
        ik_lines[0].contains("its server's default") && ik_lines[0].contains("both engines tuned"),
        "{stdout}"
    );
    // After llama.cpp's own baseline, before the search.
    let at = |needle: &str| lines.iter().position(|l| l.contains(needle));
    assert!(
        at("baseline · ik_llama.cpp ") > at("without qtune's flags: the reference"),
        "{stdout}"
    );
    assert!(!dir.path().join("run").exists());
    // No budget asked for: the space's grows by ik's baseline and its 3 variants, at the
    // space's pace, and the header says from what (issue 56: two engines' baselines of a
    // 30 GiB model spent an 8-minute budget on the GPU machine).
    let space = qtune::space::load("cpu-only").unwrap().budget;
    let t = space.trials + 4;
    let mins = qtune::util::minutes(space.minutes * f64::from(t) / f64::from(space.trials));
    assert!(
        stdout.contains(&format!("within {t} launches and {mins}:")),
        "{t} launches, {mins}: {stdout}"
    );
    assert!(
        support::flat(&text).contains(&format!(
            "(the space's {} and {}, plus ik_llama.cpp's baselines and variants; \
             --budget-minutes sets it;",
            space.trials,
            qtune::util::minutes(space.minutes)
        )),
        "{text}"
    );
    // A budget asked for is the budget.
    let (text, _) = dry(&["--budget-trials", "9"]);
    assert!(!text.contains("plus ik_llama.cpp's baselines"), "{text}");
    assert!(text.contains("budget: at most 9 launches"), "{text}");
}

/// A session replayed on the ik server is read in ik's answer dialect (issue 56's GPU tune):
/// its timings have no `cache_n`, and the replay once read every cached token as 0, so each
/// request "differed from the recorded length" and the prompt cache looked unused. Both
/// engines' launches now account for every prompt token, cached or read.
#[test]
fn a_replayed_session_counts_iks_cached_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let Some((ik, llama, m)) = both_servers_and_smollm2(dir.path(), "ik-session-smollm2.gguf")
    else {
        return;
    };
    let out_dir = dir.path().join("cmp");
    let out = qtune()
        .env("QTUNE_ALLOW_BUSY", "1")
        .env("QTUNE_DATA_DIR", dir.path().join("data"))
        .args([
            "compare",
            "--rounds",
            "1",
            "--workload",
            "agent-session",
            "--out",
        ])
        .arg(&out_dir)
        .arg(format!(
            "{} -m {} -c 2048 -np 1 -t 1",
            llama.display(),
            m.display()
        ))
        .arg(format!(
            "{} -m {} -c 2048 -np 1 -t 1",
            ik.display(),
            m.display()
        ))
        .output()
        .unwrap();
    let text = support::output_text(&out);
    assert!(out.status.success(), "{text}");
    servers::assert_none_left(&m.display().to_string(), "after the compare");
    assert!(!text.contains("prompt length differs"), "{text}");
    let j = json(&out_dir.join("compare.json"));
    let launches = j["rounds"][0]["launches"].as_array().unwrap();
    assert_eq!(launches.len(), 2, "{j}");
    for l in launches {
        assert_eq!(l["outcome"], "ok", "{l}");
        let reqs = l["replay"]["requests"].as_array().unwrap();
        let n = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap();
        for r in reqs {
            assert_eq!(
                n(r, "cache_n") + n(r, "prompt_n"),
                n(r, "prompt_tokens"),
                "command {}: {r}",
                l["command"]
            );
        }
        assert!(
            reqs.iter().any(|r| n(r, "cache_n") > 0),
            "command {}: the session's turns reuse the prompt cache: {l}",
            l["command"]
        );
    }
}
