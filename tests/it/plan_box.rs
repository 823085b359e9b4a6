//! `qtune plan --box NAME|FILE --shape NAME --quant A,B`: a plan for a box described rather
//! than probed, and models not downloaded. The real binary runs on this GPU-less machine: every
//! catalog box plans without a GPU present, bad box files get one-line errors, the JSON has the
//! per-quant predictions, and docs/results.md's table of the seeds is what the code predicts now.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

fn qtune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn plan_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["plan"];
    all.extend_from_slice(args);
    all.push("--json");
    let o = qtune(&all);
    assert!(o.status.success(), "{}", support::output_text(&o));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", support::output_text(&o)))
}

/// The one-line error of a failed run.
fn one_line_error(o: &Output) -> String {
    assert!(!o.status.success(), "{}", support::output_text(o));
    let err = String::from_utf8_lossy(&o.stderr).trim().to_string();
    assert!(
        err.starts_with("qtune: error: "),
        "{}",
        support::output_text(o)
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn every_catalog_box_plans_without_a_gpu() {
    let list = qtune(&["plan", "--list-boxes"]);
    assert!(list.status.success(), "{}", support::output_text(&list));
    let listed = String::from_utf8_lossy(&list.stdout).to_string();
    for id in qtune::plan::boxes::CATALOG.iter().map(|c| c.id) {
        assert!(listed.contains(id), "{id} listed: {listed}");
        let p = plan_json(&[
            "--box",
            id,
            "--shape",
            "qwen3.5-35b-a3b",
            "--quant",
            "q4_k_m",
        ]);
        assert_eq!(p["box"], id);
        let q = &p["quants"][0];
        assert_eq!(q["fits"], true, "{id}: {q}");
        let tg = q["generation"]["tps"].as_f64().unwrap();
        assert!(tg > 1.0 && tg < 1000.0, "{id}: {tg}");
        assert_eq!(p["recommended"], "Q4_K_M", "{id}");
    }
    // A card with more memory and bandwidth generates faster than a smaller, slower one.
    let tg = |id: &str| {
        plan_json(&[
            "--box",
            id,
            "--shape",
            "qwen3.5-35b-a3b",
            "--quant",
            "q4_k_m",
        ])["quants"][0]["generation"]["tps"]
            .as_f64()
            .unwrap()
    };
    assert!(tg("rtx-5090") > tg("rtx-5080-16gb"));
    assert!(tg("rtx-5080-16gb") > tg("rtx-3060-12gb"));
}

#[test]
fn the_json_has_each_quants_predictions_and_the_command_to_start_with() {
    let p = plan_json(&[
        "--box",
        "rtx-5080-16gb",
        "--shape",
        "qwen3.5-35b-a3b",
        "--quant",
        "q4_k_m,mxfp4_moe",
    ]);
    assert_eq!(p["ctx"], 32768);
    assert_eq!(p["workload"], "chat");
    let quants = p["quants"].as_array().unwrap();
    assert_eq!(
        quants
            .iter()
            .map(|q| q["quant"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["Q4_K_M", "MXFP4_MOE"]
    );
    for q in quants {
        assert_eq!(q["fits"], true, "{q}");
        for k in ["generation", "prompt"] {
            let e = &q[k];
            let (t, lo, hi) = (
                e["tps"].as_f64().unwrap(),
                e["low"].as_f64().unwrap(),
                e["high"].as_f64().unwrap(),
            );
            assert!(lo < t && t < hi, "{k}: {e}");
        }
        // 16 GiB holds part of a 20 GB model: some experts on the CPU, some on the GPU.
        let experts = q["experts"].as_str().unwrap();
        assert!(
            experts.contains("of 40 blocks' experts on the CPU"),
            "{experts}"
        );
        let names: Vec<&str> = q["per_workload"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["workload"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["chat", "agent-shapes", "long-doc"]);
        for w in q["per_workload"].as_array().unwrap() {
            let (s, lo, hi) = (
                w["request_s"].as_f64().unwrap(),
                w["low_s"].as_f64().unwrap(),
                w["high_s"].as_f64().unwrap(),
            );
            assert!(lo < s && s < hi && s > 0.0, "{w}");
        }
        assert_eq!(q["command"][0], "llama-server");
    }
    // The published quality is cited; MXFP4 weights are flagged as outside the speed model's fit.
    assert_eq!(quants[0]["quality"]["mean_kld"], 0.0282);
    assert!(quants[0]["quality"]["source"]
        .as_str()
        .unwrap()
        .contains("seed 002"));
    assert_eq!(quants[0]["extrapolated"], false);
    assert_eq!(quants[1]["extrapolated"], true);
    // The recommendation is the speed model's own weight types; its command is that quant's.
    assert_eq!(p["recommended"], "Q4_K_M");
    assert_eq!(p["command"], quants[0]["command"]);
    assert!(
        p["why"].as_str().unwrap().contains("MXFP4_MOE"),
        "{}",
        p["why"]
    );
}

#[test]
fn unknown_quants_boxes_and_shapes_are_one_line_errors() {
    let e = one_line_error(&qtune(&[
        "plan",
        "--box",
        "rtx-5080-16gb",
        "--shape",
        "qwen3.5-35b-a3b",
        "--quant",
        "q4_k_m,ud-q4_k_xl",
    ]));
    assert!(
        e.contains("ud-q4_k_xl") && e.contains("q4_k_m, q4_k_l, mxfp4_moe, q8_0"),
        "{e}"
    );
    // A quant without a known recipe: plan its downloaded header instead (tests/it/plan_header.rs).
    assert!(
        e.contains("curl -L -r 0-16777215 URL -o head.gguf")
            && e.contains("qtune plan -m head.gguf"),
        "{e}"
    );
    for q in ["q4_k_s", "iq4_xs", "q3_k_m"] {
        let e = one_line_error(&qtune(&[
            "plan",
            "--box",
            "rtx-5080-16gb",
            "--shape",
            "qwen3.5-35b-a3b",
            "--quant",
            q,
        ]));
        assert!(e.contains(q) && e.contains("-m head.gguf"), "{e}");
    }
    let e = one_line_error(&qtune(&[
        "plan",
        "--box",
        "rtx-9090",
        "--shape",
        "qwen3.5-35b-a3b",
        "--quant",
        "q4_k_m",
    ]));
    assert!(e.contains("rtx-5090") && e.contains("--list-boxes"), "{e}");
    let e = one_line_error(&qtune(&[
        "plan", "--box", "rtx-3090", "--shape", "llama-9t", "--quant", "q4_k_m",
    ]));
    assert!(e.contains("qwen3.5-35b-a3b"), "{e}");
}

/// A box file with `gpus` and `host` as given.
fn box_file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

const HOST: &str = "host:\n  logical_cores: 16\n  physical_cores: 8\n  ram_total_mib: 65536\n";

fn gpu(vram: &str, bw: &str) -> String {
    format!("gpus:\n- name: Some Card\n  vram_total_mib: {vram}\n  mem_bandwidth_gbs: {bw}\n  pcie: {{gen_max: 4, width_max: 16}}\n")
}

#[test]
fn bad_box_files_get_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |file: &str| {
        qtune(&[
            "plan",
            "--box",
            file,
            "--shape",
            "qwen3.5-35b-a3b",
            "--quant",
            "q4_k_m",
        ])
    };
    let many: String = (0..17)
        .map(|i| format!("- {{name: Card {i}, vram_total_mib: 24576, mem_bandwidth_gbs: 936}}\n"))
        .collect();
    let million = {
        let mut s = String::from("gpus:\n");
        let line = "- {name: C, vram_total_mib: 24576, mem_bandwidth_gbs: 936}\n";
        s.reserve(line.len() * 1_000_000);
        for _ in 0..1_000_000 {
            s.push_str(line);
        }
        s + HOST
    };
    let cases: Vec<(&str, String, &str)> = vec![
        ("zero-vram.yaml", gpu("0", "936") + HOST, "vram_total_mib is 0"),
        ("negative-vram.yaml", gpu("-16", "936") + HOST, "not a box description"),
        (
            "negative-bandwidth.yaml",
            gpu("24576", "-936") + HOST,
            "mem_bandwidth_gbs is -936",
        ),
        ("nan-bandwidth.yaml", gpu("24576", ".nan") + HOST, "mem_bandwidth_gbs is NaN"),
        ("seventeen-cards.yaml", format!("gpus:\n{many}{HOST}"), "17 GPUs"),
        ("million-cards.yaml", million, "at most 262144 bytes"),
        (
            "zero-ram.yaml",
            gpu("24576", "936") + "host:\n  logical_cores: 16\n  ram_total_mib: 0\n",
            "ram_total_mib is 0",
        ),
        (
            "zero-host-bandwidth.yaml",
            gpu("24576", "936") + HOST + "  mem_bandwidth_gbs: 0\n",
            "host: mem_bandwidth_gbs is 0",
        ),
        (
            "bad-pcie.yaml",
            "gpus:\n- {name: X, vram_total_mib: 1024, mem_bandwidth_gbs: 100, pcie: {width_max: 3}}\n"
                .to_string()
                + HOST,
            "pcie.width_max is 3",
        ),
        (
            "unknown-card.yaml",
            "gpus:\n- {name: Mystery Accelerator, vram_total_mib: 1024}\n".to_string() + HOST,
            "no mem_bandwidth_gbs",
        ),
        ("not-yaml.yaml", "gpus: [[[\n".into(), "not a box description"),
    ];
    for (name, text, want) in cases {
        let f = box_file(d, name, &text);
        let e = one_line_error(&run(&f));
        assert!(e.contains(want), "{name}: {e}");
        if want != "not a box description" {
            assert!(e.contains(&f), "{name} names its file: {e}");
        }
    }
    // Overrides of the host are checked the same way.
    let e = one_line_error(&qtune(&[
        "plan",
        "--box",
        "rtx-3090",
        "--host-bw-gbs",
        "-3",
        "--shape",
        "qwen3.5-35b-a3b",
        "--quant",
        "q4_k_m",
    ]));
    assert!(e.contains("mem_bandwidth_gbs is -3"), "{e}");
}

#[test]
fn a_box_file_plans_and_hw_yaml_writes_one() {
    let dir = tempfile::tempdir().unwrap();
    // A hand-written file: only what the plan needs; a known card's bandwidth by name.
    let f = box_file(
        dir.path(),
        "two-3090s.yaml",
        &format!(
            "gpus:\n- {{name: NVIDIA GeForce RTX 3090, vram_total_mib: 24576}}\n- {{name: NVIDIA GeForce RTX 3090, vram_total_mib: 24576}}\n{HOST}  mem_bandwidth_gbs: 50\n"
        ),
    );
    let p = plan_json(&["--box", &f, "--shape", "qwen3.5-35b-a3b", "--quant", "q8_0"]);
    assert!(p["box_summary"]
        .as_str()
        .unwrap()
        .contains("RTX 3090 (24,576 MiB total"));
    assert_eq!(p["quants"][0]["fits"], true);
    assert!(p["speed_note"]
        .as_str()
        .unwrap()
        .contains("host 50.0 GB/s (as described)"));
    // What `qtune hw --yaml` writes for this (GPU-less) machine is a box file.
    let o = qtune(&["hw", "--yaml", "--no-bandwidth"]);
    assert!(o.status.success(), "{}", support::output_text(&o));
    let f = box_file(dir.path(), "this.yaml", &String::from_utf8_lossy(&o.stdout));
    let p = plan_json(&["--box", &f, "--shape", "qwen3-30b-a3b", "--quant", "q4_k_m"]);
    assert_eq!(p["quants"][0]["experts"], "all on the CPU (no GPU)");
    assert!(p["quants"][0]["generation"]["tps"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_seed_table_in_docs_results_is_what_the_code_predicts_now() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let csv = std::fs::read_to_string(root.join("docs/seed-speeds.csv")).unwrap();
    let want = qtune::plan::seeds::table(&csv).unwrap();
    let doc = std::fs::read_to_string(root.join("docs/results.md")).unwrap();
    let (begin, end) = ("<!-- seed-table:begin -->\n", "<!-- seed-table:end -->");
    let start = doc
        .find(begin)
        .expect("docs/results.md has the seed table's begin marker")
        + begin.len();
    let stop = doc[start..].find(end).expect("and its end marker") + start;
    assert_eq!(
        doc[start..stop].trim(),
        want.trim(),
        "docs/results.md's seed table is stale: regenerate it with `cargo run --example seed_table`"
    );
    // Every row cites a seed file's line and names a catalog box and a known quant.
    for row in qtune::plan::seeds::parse_rows(&csv).unwrap() {
        assert!(row.cite.starts_with("00"), "{}", row.cite);
        assert!(qtune::plan::boxes::catalog_card(&row.box_id).is_some());
        qtune::model::synth::SynthFtype::parse(&row.quant).unwrap();
    }
}

/// POST `body` to `path` of the server on `port`; the raw HTTP response.
fn post(port: u16, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    r
}

#[test]
fn the_new_quant_recipes_are_files_the_real_server_loads_and_runs() {
    let Some(server) = support::real_server() else {
        return;
    };
    if !support::vocab() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // (--ftype, the file type the server names, a tensor type the recipe must hold)
    for (ftype, file_type, has_type) in [
        ("q4_k_l", "Q4_K - Medium", "type q8_0"),
        ("mxfp4_moe", "MXFP4 MoE", "type mxfp4"),
    ] {
        let model = dir.path().join(format!("tiny-{ftype}.gguf"));
        let m = model.display().to_string();
        let o = qtune(&["synth", &m, "--shape", "tiny-qwen35moe", "--ftype", ftype]);
        assert!(o.status.success(), "{}", support::output_text(&o));
        let port = support::free_port();
        let log_path = dir.path().join(format!("{ftype}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut child = Command::new(&server)
            .args([
                "-m",
                &m,
                "-c",
                "512",
                "-np",
                "1",
                // One thread: the suite runs two tests at once on two cores.
                "-t",
                "1",
                "-lv",
                "4",
                "--host",
                "127.0.0.1",
            ])
            .args(["--port", &port.to_string()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        let mut up = false;
        while std::time::Instant::now() < deadline {
            if support::health_ok(port) {
                up = true;
                break;
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        let reply = if up {
            post(port, "/completion", r#"{"prompt":"Hello","n_predict":4}"#)
        } else {
            String::new()
        };
        let _ = child.kill();
        let _ = child.wait();
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        assert!(up, "{ftype}: the server did not come up:\n{text}");
        assert!(
            reply.starts_with("HTTP/1.1 200") && reply.contains("\"content\""),
            "{ftype}: {reply}"
        );
        assert!(
            text.contains(file_type),
            "{ftype}: file type {file_type}:\n{text}"
        );
        assert!(text.contains(has_type), "{ftype}: {has_type}:\n{text}");
    }
}

/// A trace of one request with these prompt and answer tokens (a header that says nothing of
/// the server, as a trace may).
fn answer_trace(dir: &Path, name: &str, prompt: &[u32], answer: &[u32]) -> String {
    let header = r#"{"type":"header","format":"qtune-trace","version":1,"qtune_version":"0","started_at":"2026-11-28T00:00:00Z","upstream":"http://127.0.0.1:8080"}"#;
    let req = serde_json::json!({"type": "request", "id": 1, "endpoint": "/completion",
        "stream": false, "arrived_ms": 0.0, "first_byte_ms": null, "ended_ms": 1.0,
        "status": 200, "outcome": "ok", "prompt_tokens": prompt,
        "n_generated": answer.len(), "max_tokens": null, "timings": null,
        "answer_tokens": answer});
    let p = dir.join(name);
    std::fs::write(&p, format!("{header}\n{req}\n")).unwrap();
    p.display().to_string()
}

/// Issue 54: `plan --box B --workload FILE.jsonl` predicts ngram-mod from the trace's answers
/// on box B, and adds `--spec-type ngram-mod` to the command only where it pays. The token
/// streams are made up: this checks the wiring (the drafter's counts against the real
/// server's are tests/it/spec_predict.rs's, on SmolLM2's own answers).
#[test]
fn a_trace_with_answers_adds_speculation_to_the_plan_only_where_it_pays() {
    let dir = tempfile::tempdir().unwrap();
    // A 300-token run the answer re-emits whole; and an answer of new tokens.
    let run: Vec<u32> = (1000..1300).collect();
    let mut prompt = vec![1, 2, 3];
    prompt.extend(&run);
    prompt.extend([4, 5, 6]);
    let repeats = answer_trace(dir.path(), "repeats.jsonl", &prompt, &run);
    let fresh: Vec<u32> = (5000..5300).collect();
    let new = answer_trace(dir.path(), "new.jsonl", &prompt, &fresh);
    let base = [
        "--box",
        "rtx-4090",
        "--shape",
        "qwen3.5-35b-a3b",
        "--quant",
        "q4_k_m",
        "--workload",
    ];
    let mut args: Vec<&str> = base.to_vec();
    args.push(&repeats);
    let v = plan_json(&args);
    let cmd: Vec<&str> = v["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        cmd.windows(2).any(|w| w == ["--spec-type", "ngram-mod"]),
        "{v}"
    );
    let s = &v["speculation"];
    assert!(s["accepted"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["accepted"], s["drafted"], "{s}");
    let mut args: Vec<&str> = base.to_vec();
    args.push(&new);
    let mut all = vec!["plan"];
    all.extend_from_slice(&args);
    let o = qtune(&all);
    let text = support::output_text(&o);
    assert!(o.status.success(), "{text}");
    assert!(!text.contains("--spec-type"), "{text}");
    assert!(
        text.contains("nothing would be drafted, so it cannot pay"),
        "{text}"
    );
    assert!(
        text.contains("so the command leaves speculative decoding off"),
        "{text}"
    );
}
