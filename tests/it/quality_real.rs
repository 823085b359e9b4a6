//! The quality guard against the real pinned `llama-perplexity` and the real SmolLM2-135M:
//! q8_0 and q4_0 KV cost measurable accuracy, f16 against itself costs none, a space's floor
//! removes a KV type, and bad input is refused with one line. Quants against a reference file
//! (`--against`): Q8_0 and Q4_0 copies of the Q4_1 model ([`support::requant`]) scored against
//! it, the result cached and cited by `qtune plan`. Small on purpose (ctx 256, 2 chunks: 254
//! scored tokens a run) so each runs in about a minute on 2 cores.

use crate::support;
use support::require;

use qtune::config::KvType;
use qtune::model::ggml_type::GgmlType;
use qtune::model::gguf::GgufValue;
use qtune::quality::{self, Origin, QualityOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

/// llama-perplexity beside the real llama-server (`qtune server build` builds both).
fn perplexity() -> Option<PathBuf> {
    let server = require::or_skip(require::server(), "the real llama-server")?;
    let p = server.with_file_name("llama-perplexity");
    if p.is_file() {
        Some(p)
    } else {
        require::missing(&format!(
            "llama-perplexity next to {} (qtune server build)",
            server.display()
        ));
        None
    }
}

fn smollm2() -> Option<PathBuf> {
    require::or_skip(qtune::fixtures::smollm2(), "the SmolLM2-135M fixture")
}

/// A slice of the default text with a unique first line, so this run measures for real
/// instead of finding an earlier run's numbers in the cache.
fn unique_text(dir: &Path) -> Option<PathBuf> {
    let kjv = require::or_skip(quality::text::default_text(), "the default text (pip)")?;
    let full = std::fs::read_to_string(kjv).unwrap();
    let stamp = format!(
        "Test run {} at {:?}.\n",
        std::process::id(),
        std::time::SystemTime::now()
    );
    let p = dir.join("text.txt");
    std::fs::write(&p, stamp + &full[..12_000]).unwrap();
    Some(p)
}

fn kv(t: KvType) -> [KvType; 2] {
    [t, t]
}

#[test]
fn kv_types_cost_accuracy_f16_costs_none_and_the_floor_removes_one() {
    let (Some(bin), Some(model)) = (perplexity(), smollm2()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(text) = unique_text(dir.path()) else {
        return;
    };
    let mut opts = QualityOptions::new(
        &model,
        vec![kv(KvType::F16), kv(KvType::Q8_0), kv(KvType::Q4_0)],
        256,
    );
    opts.text = Some(text.clone());
    opts.chunks = Some(2);
    opts.perplexity = Some(bin.clone());
    let mut notes = Vec::new();
    let (r, origin) = quality::measure(&opts, &mut |l| notes.push(l)).unwrap();
    assert_eq!(origin, Origin::Measured);
    assert_eq!((r.ctx, r.chunks, r.tokens_scored), (256, 2, 254));
    // The disk the logits took was stated before the run, and is what the tool wrote.
    assert!(notes[0].contains("on disk"), "{notes:?}");
    assert_eq!(
        r.logits_bytes,
        quality::perplexity::logits_file_bytes(49_152, 256, 2)
    );
    assert!(r.reference_ppl.is_some_and(|p| p.is_finite() && p > 1.0));

    let f16 = r.get(kv(KvType::F16)).unwrap();
    assert!(f16.mean_kld.abs() < 1e-4, "{f16:?}");
    assert_eq!(f16.same_top1_pct, 100.0, "{f16:?}");
    let q8 = r.get(kv(KvType::Q8_0)).unwrap();
    let q4 = r.get(kv(KvType::Q4_0)).unwrap();
    for q in [q8, q4] {
        assert!(q.mean_kld.is_finite() && q.mean_kld > 1e-4, "{q:?}");
        assert!(q.kld_p99.is_finite() && q.kld_p99 >= q.mean_kld, "{q:?}");
        assert!(q.same_top1_pct < 100.0 && q.same_top1_pct > 50.0, "{q:?}");
    }
    assert!(
        q4.mean_kld > q8.mean_kld,
        "q4_0 loses more than q8_0: {q4:?} {q8:?}"
    );

    // Asked again: the cache answers, with the same numbers.
    let (again, origin) = quality::measure(&opts, &mut |_| {}).unwrap();
    assert_eq!(origin, Origin::Cached);
    assert_eq!(again.candidates, r.candidates);

    // A space with a floor between q8_0's and q4_0's agreement: q4_0 is not searched, and
    // the tune reuses the cached numbers rather than measuring again.
    let floor_top1 = (q8.same_top1_pct + q4.same_top1_pct) / 2.0;
    let yaml = format!(
        "name: floor\nvary:\n  kv_types: [[f16, f16], [q8_0, q8_0], [q4_0, q4_0]]\nfixed:\n  ctx: 256\nworkload:\n  prompt_tokens: 64\n  gen_tokens: 16\n  repetitions: 1\nquality:\n  min_top1_pct: {floor_top1}\n  text: {}\n  chunks: 2\n",
        text.display()
    );
    let mut space = qtune::space::parse(&yaml, "floor.yaml").unwrap();
    let mut notes = Vec::new();
    let gate = quality::floor::apply(
        &mut space,
        &model,
        Some(&bin.with_file_name("llama-server")),
        &mut |l| notes.push(l),
    )
    .unwrap()
    .expect("a floor was set");
    assert!(notes.iter().any(|l| l.contains("cached")), "{notes:?}");
    assert_eq!(
        space.vary.kv_types,
        vec![kv(KvType::F16), kv(KvType::Q8_0)],
        "q4_0 removed"
    );
    assert_eq!(gate.excluded, vec![kv(KvType::Q4_0)]);
    assert_eq!(
        gate.measured.len(),
        2,
        "f16/f16 is the reference, not measured"
    );
    let md = quality::floor::markdown(&gate);
    assert!(
        md.contains("| q4_0 |") && md.contains("below the floor"),
        "{md}"
    );

    // The same floor through a real `qtune tune`: measured once (here: found in the cache),
    // q4_0 never launched, and results.json and the report carry the numbers.
    let space_file = dir.path().join("floor.yaml");
    std::fs::write(
        &space_file,
        yaml.replace("repetitions: 1\n", "repetitions: 1\nbudget:\n  trials: 2\n  minutes: 5\n  confirm_top: 1\n  confirm_rounds: 1\n"),
    )
    .unwrap();
    let run = dir.path().join("run");
    let out = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(["tune", "--allow-dense", "--model"])
        .arg(&model)
        .arg("--space")
        .arg(&space_file)
        .arg("--server")
        .arg(bin.with_file_name("llama-server"))
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tune failed: {stderr}");
    assert!(
        stderr.contains("reusing the cached measurement"),
        "{stderr}"
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(
        results["quality"]["excluded"],
        serde_json::json!([["q4_0", "q4_0"]]),
        "{}",
        results["quality"]
    );
    assert_eq!(
        results["space"]["vary"]["kv_types"],
        serde_json::json!([["f16", "f16"], ["q8_0", "q8_0"]])
    );
    let trials = results["trials"].as_array().unwrap();
    assert!(!trials.is_empty());
    for t in trials {
        assert_ne!(
            t["config"]["cache_type_k"], "q4_0",
            "q4_0 was launched: {t}"
        );
    }
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(
        report.contains("## Quality floor") && report.contains("| q4_0 |"),
        "{report}"
    );

    // A floor nothing meets but f16: refused only if f16 is not in the space either.
    let yaml_all = yaml
        .replace("[[f16, f16], ", "[")
        .replace(&format!("min_top1_pct: {floor_top1}"), "min_top1_pct: 100");
    let mut space = qtune::space::parse(&yaml_all, "floor.yaml").unwrap();
    let e = quality::floor::apply(
        &mut space,
        &model,
        Some(&bin.with_file_name("llama-server")),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("every KV type of the space is below"), "{e}");
}

/// Run `qtune quality ARGS`; returns (exit ok, stdout, stderr).
fn qtune_quality(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qtune"));
    cmd.arg("quality").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The refusal is one line, `qtune: error: ...`, containing `what`.
fn assert_refused(r: (bool, String, String), what: &str) {
    let (ok, _, err) = r;
    assert!(!ok, "must fail: {err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("qtune: error:"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(what), "expected '{what}' in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_inputs_are_refused_with_one_line() {
    let (Some(bin), Some(model)) = (perplexity(), smollm2()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = model.to_str().unwrap();
    let b = bin.to_str().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let base = |text: &str| -> Vec<String> {
        [
            "-m",
            m,
            "--perplexity",
            b,
            "--ctx",
            "256",
            "--chunks",
            "2",
            "--text",
            text,
        ]
        .map(String::from)
        .to_vec()
    };
    let run = |args: Vec<String>| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        qtune_quality(&a, &[])
    };

    let empty = write("empty.txt", b"\n \n");
    assert_refused(run(base(&empty)), "is empty");
    let binary = write("model-copy.bin", &std::fs::read(&model).unwrap()[..4096]);
    assert_refused(run(base(&binary)), "not plain text");
    let tiny = write("tiny.txt", b"In the beginning.");
    assert_refused(run(base(&tiny)), "too short");
    // Long enough to pass the byte check, shorter than two chunks once tokenized: the real
    // llama-perplexity says how many tokens it has, and qtune refuses with that number.
    let short = write(
        "short.txt",
        "And God said, Let there be light. ".repeat(20).as_bytes(),
    );
    assert_refused(run(base(&short)), "shorter than two chunks");

    // No llama-perplexity: an explicit path that is not there, and a server without one.
    let ok_text = write("ok.txt", "word ".repeat(2000).as_bytes());
    let mut args = base(&ok_text);
    args[3] = d.join("nope/llama-perplexity").display().to_string();
    assert_refused(run(args), "llama-perplexity not found");
    let lonely = d.join("bin");
    std::fs::create_dir_all(&lonely).unwrap();
    // Only looked for, never run: an empty file stands in for the server.
    std::fs::write(lonely.join("llama-server"), b"").unwrap();
    let server = lonely.join("llama-server").display().to_string();
    assert_refused(
        qtune_quality(
            &["-m", m, "--ctx", "256", "--text", &ok_text],
            &[
                ("QTUNE_LLAMA_SERVER", &server),
                ("QTUNE_LLAMA_PERPLEXITY", ""),
            ],
        ),
        "llama-perplexity not found next to",
    );

    // A synthetic random-weight model.
    if let Some(synthetic) = require::or_skip(
        qtune::fixtures::tiny_moe("tiny-qwen3moe"),
        "a tiny synthetic model",
    ) {
        assert_refused(
            run([
                "-m",
                synthetic.to_str().unwrap(),
                "--perplexity",
                b,
                "--text",
                &ok_text,
            ]
            .map(String::from)
            .to_vec()),
            "synthetic random-weight model",
        );
    }

    // A context too small to score 100 tokens.
    let mut args = base(&ok_text);
    args[5] = "128".into();
    assert_refused(run(args), "below 256");
}

/// The copies' halves: exact both ways, ties to even, as the writer of a Q8_0/Q4_0 block needs.
#[test]
fn requant_halves_round_trip_and_round_to_even() {
    use support::requant::{f16_to_f32, f32_to_f16};
    for h in [
        0u16, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x3555, 0x7bff, 0xbc00, 0x8001,
    ] {
        assert_eq!(f32_to_f16(f16_to_f32(h)), h, "{h:#x}");
    }
    assert_eq!(f16_to_f32(0x3c00), 1.0);
    assert_eq!(f16_to_f32(0xc000), -2.0);
    // 1 + 2^-11 is halfway between 1 and the next half: to even (1); 1 + 3 * 2^-11: up.
    assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
    assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
}

/// `qtune ARGS` with qtune's cache in `cache`; returns (exit ok, stdout, stderr).
fn qtune_in(cache: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args(args)
        .env("QTUNE_CACHE_DIR", cache)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn quants_are_scored_against_a_reference_file_and_plan_cites_it() {
    let (Some(bin), Some(model)) = (perplexity(), smollm2()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(text) = unique_text(dir.path()) else {
        return;
    };
    let cache = dir.path().join("cache");
    let q8 = dir.path().join("SmolLM2-135M-Instruct.Q8_0.gguf");
    let q4 = dir.path().join("SmolLM2-135M-Instruct.Q4_0.gguf");
    support::requant::requantize(&model, &q8, GgmlType::Q8_0, &[]);
    support::requant::requantize(&model, &q4, GgmlType::Q4_0, &[]);
    let (q8s, q4s, ms) = (
        q8.to_str().unwrap(),
        q4.to_str().unwrap(),
        model.to_str().unwrap(),
    );
    let args = [
        "quality",
        "-m",
        q8s,
        "-m",
        q4s,
        "--against",
        ms,
        "--perplexity",
        bin.to_str().unwrap(),
        "--ctx",
        "256",
        "--chunks",
        "2",
        "--text",
        text.to_str().unwrap(),
    ];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let (ok, out, err) = qtune_in(&cache, &json_args);
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["reference_file_type"], "Q4_1", "{r}");
    assert_eq!(r["kv"], serde_json::json!(["f16", "f16"]));
    assert_eq!(
        (r["ctx"].as_u64(), r["chunks"].as_u64()),
        (Some(256), Some(2))
    );
    assert_eq!(r["tokens_scored"], 254);
    let ref_ppl = r["reference_ppl"].as_f64().unwrap();
    assert!(ref_ppl.is_finite() && ref_ppl > 1.0, "{r}");
    let quants = r["quants"].as_array().unwrap();
    assert_eq!(quants.len(), 2, "{r}");
    let (a, b) = (&quants[0], &quants[1]);
    assert_eq!(
        (a["file_type"].as_str(), b["file_type"].as_str()),
        (Some("Q8_0"), Some("Q4_0"))
    );
    let f = |q: &serde_json::Value, k: &str| q[k].as_f64().unwrap_or(f64::NAN);
    // The Q8_0 copy is near-lossless, the Q4_0 copy is not (measured here: about 0.01 and
    // 0.66 nats, 93-97 % and 68-69 % same top-1; an F16 copy, lossless, scored 0.005 and 97.6 %:
    // the floor of this tiny model's CPU kernels, so "near" is all that can be asserted).
    assert!(f(a, "mean_kld") >= 0.0 && f(a, "mean_kld") < 0.05, "{a}");
    assert!(
        f(b, "mean_kld") > 5.0 * f(a, "mean_kld") && f(b, "mean_kld") > 0.1,
        "{r}"
    );
    assert!(f(a, "same_top1_pct") > f(b, "same_top1_pct"), "{r}");
    assert!(
        f(a, "same_top1_pct") > 85.0 && f(a, "same_top1_pct") <= 100.0,
        "{a}"
    );
    for q in [a, b] {
        assert!(f(q, "kld_p99") >= f(q, "mean_kld"), "{q}");
        assert!(f(q, "ppl").is_finite() && f(q, "ppl") > 1.0, "{q}");
    }
    assert!(
        (f(a, "ppl") / ref_ppl - 1.0).abs() < (f(b, "ppl") / ref_ppl - 1.0).abs(),
        "the Q8_0 copy's perplexity is the closer to the original's: {r}"
    );

    // Asked again: the cache answers, with the same numbers, in a table.
    let (ok, table, err) = qtune_in(&cache, &args);
    assert!(ok && err.contains("from the cache"), "{err}");
    assert!(
        table.contains("against Q4_1 (SmolLM2-135M-Instruct.Q4_1.gguf)"),
        "{table}"
    );
    let q4_line = table.lines().find(|l| l.starts_with("Q4_0 (")).unwrap();
    assert!(
        q4_line.contains(&format!("{:.6}", f(b, "mean_kld"))),
        "{table}"
    );

    // `qtune plan -m` cites the measurement (read from the cache, nothing run): this box's
    // plan and a described box's table.
    let (ok, out, err) = qtune_in(&cache, &["plan", "-m", q4s, "--no-profile", "--json"]);
    assert!(ok, "{err}");
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        p["quality"]["mean_kld"].as_f64(),
        Some(f(b, "mean_kld")),
        "{p}"
    );
    assert_eq!(
        p["quality"]["reference"],
        "Q4_1 (SmolLM2-135M-Instruct.Q4_1.gguf)"
    );
    let source = p["quality"]["source"].as_str().unwrap();
    assert!(
        source.starts_with("measured by qtune quality on this box, 2 chunks of ctx 256"),
        "{source}"
    );
    let (ok, _, err) = qtune_in(&cache, &["plan", "-m", q4s, "--no-profile"]);
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!(
            "quality: mean KLD {} vs Q4_1 (SmolLM2-135M-Instruct.Q4_1.gguf)",
            f(b, "mean_kld")
        )) && err.contains("measured by qtune quality on this box"),
        "{err}"
    );
    let (ok, out, err) = qtune_in(
        &cache,
        &["plan", "-m", q8s, "--box", "rtx-5080-16gb", "--json"],
    );
    assert!(ok, "{err}");
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        p["quants"][0]["quality"]["mean_kld"].as_f64(),
        Some(f(a, "mean_kld")),
        "{p}"
    );
    let (ok, _, err) = qtune_in(&cache, &["plan", "-m", q8s, "--box", "rtx-5080-16gb"]);
    assert!(ok && err.contains("(measured vs Q4_1)"), "{err}");

    // The reference itself was never scored as a quant: its plan cites nothing, as before.
    let (ok, out, err) = qtune_in(&cache, &["plan", "-m", ms, "--no-profile", "--json"]);
    assert!(ok, "{err}");
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(p.get("quality").is_none(), "{p}");
    // A file cut after its header (the header-only route) plans as before, citing nothing:
    // the weights a measurement is keyed by are not there.
    let head = dir.path().join("head.gguf");
    let bytes = std::fs::read(&q4).unwrap();
    std::fs::write(&head, &bytes[..8 << 20]).unwrap();
    let (ok, out, err) = qtune_in(
        &cache,
        &[
            "plan",
            "-m",
            head.to_str().unwrap(),
            "--box",
            "rtx-5080-16gb",
            "--json",
        ],
    );
    assert!(ok, "{err}");
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(p["quants"][0].get("quality").is_none(), "{p}");

    // The copies are models the real llama-server loads and serves, not only llama-perplexity.
    for (copy, link) in [(&q8, "served-q8_0.gguf"), (&q4, "served-q4_0.gguf")] {
        let served = support::record::start_server(dir.path(), copy, link, &["-c", "256"]);
        assert!(served.is_some(), "{link}");
    }
}

/// Refused before anything runs: another vocabulary, the reference as its own quant, a copy of
/// it, several models without --against.
#[test]
fn against_refuses_what_cannot_be_compared_with_one_line() {
    let Some(model) = smollm2() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let m = model.to_str().unwrap();
    let refused = |args: &[&str], what: &str| {
        let (ok, out, err) = qtune_in(&cache, args);
        assert_refused((ok, out, err), what);
    };
    if let Some(other) = require::or_skip(
        qtune::fixtures::tiny_moe("tiny-qwen3moe"),
        "a tiny synthetic model",
    ) {
        let o = other.to_str().unwrap();
        refused(
            &["quality", "-m", o, "--against", m],
            "different vocabularies",
        );
        refused(
            &["quality", "-m", m, "--against", o],
            "49152 tokens, tokenizer gpt2",
        );
    }
    // Same size of vocabulary, another tokenizer.
    let llama_tok = dir.path().join("other-tokenizer.gguf");
    support::requant::requantize(
        &model,
        &llama_tok,
        GgmlType::Q4_0,
        &[("tokenizer.ggml.model", GgufValue::String("llama".into()))],
    );
    refused(
        &["quality", "-m", llama_tok.to_str().unwrap(), "--against", m],
        "tokenizer llama) and --against",
    );
    refused(
        &["quality", "-m", m, "--against", m],
        "is the --against file itself",
    );
    let link = dir.path().join("link.gguf");
    std::os::unix::fs::symlink(&model, &link).unwrap();
    refused(
        &["quality", "-m", link.to_str().unwrap(), "--against", m],
        "is the --against file itself",
    );
    let copy = dir.path().join("copy.gguf");
    std::fs::copy(&model, &copy).unwrap();
    refused(
        &[
            "quality",
            "-m",
            copy.to_str().unwrap(),
            "--against",
            m,
            "--text",
            "/nonexistent",
        ],
        "holds the same weights as --against",
    );
    refused(
        &["quality", "-m", m, "-m", copy.to_str().unwrap()],
        "several are scored only --against",
    );
    // A context past the model's trained one (8192), or a chunk count llama-perplexity cannot
    // take, is refused before any text is read or anything runs (issue 48).
    let c = copy.to_str().unwrap();
    for (extra, what) in [
        (
            ["--ctx", "65536"],
            "past the model's trained context of 8192 tokens",
        ),
        (["--chunks", "0"], "--chunks 0 scores nothing"),
        (
            ["--chunks", "4294967295"],
            "more than llama-perplexity counts",
        ),
    ] {
        let mut against = vec!["quality", "-m", c, "--against", m, "--text", "/nonexistent"];
        against.extend(extra);
        refused(&against, what);
        let mut kv = vec!["quality", "-m", m, "--text", "/nonexistent"];
        kv.extend(extra);
        refused(&kv, what);
    }
    assert!(!cache.join("quality").join("against").exists());
}

/// Text from outside reaches the terminal as data (issue 48): a reference whose GGUF name
/// holds terminal escapes, then a cache entry tampered to hold more, are printed by
/// `qtune quality --against` and cited by `qtune plan` without one control character.
#[test]
fn against_prints_names_and_cached_strings_without_control_characters() {
    let (Some(bin), Some(model)) = (perplexity(), smollm2()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(text) = unique_text(dir.path()) else {
        return;
    };
    let cache = dir.path().join("cache");
    let reference = dir.path().join("ref.gguf");
    let quant = dir.path().join("q4\u{1b}[2Jcopy.gguf");
    let name = GgufValue::String("Smol\u{1b}]0;pwned\u{7}LM\u{1b}[31m".into());
    support::requant::requantize(
        &model,
        &reference,
        GgmlType::Q8_0,
        &[("general.name", name)],
    );
    support::requant::requantize(&model, &quant, GgmlType::Q4_0, &[]);
    let (rs, qs) = (reference.to_str().unwrap(), quant.to_str().unwrap());
    let args = [
        "quality",
        "-m",
        qs,
        "--against",
        rs,
        "--perplexity",
        bin.to_str().unwrap(),
        "--ctx",
        "256",
        "--chunks",
        "2",
        "--text",
        text.to_str().unwrap(),
    ];
    let clean = |what: &str, s: &str| {
        assert!(
            !s.chars().any(|c| c.is_control() && c != '\n'),
            "{what} holds a control character: {s:?}"
        );
    };
    let (ok, out, err) = qtune_in(&cache, &args);
    assert!(ok, "{err}");
    clean("the measured table", &out);
    clean("the progress lines", &err);
    assert!(out.contains("Smol") && out.contains("pwned"), "{out}");

    // The cache entry, tampered: its strings are shown as data, by quality and by plan.
    let entry = std::fs::read_dir(cache.join("quality").join("against"))
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .unwrap();
    let mut r: serde_json::Value = serde_json::from_slice(&std::fs::read(&entry).unwrap()).unwrap();
    r["quants"][0]["file_type"] = "Q4_0\u{1b}[2J\r".into();
    r["quants"][0]["measured_at"] = "2026\u{1b}[31m-11-26T10:00:00+00:00".into();
    r["reference_file"] = "ref\u{1b}[1m.gguf".into();
    r["text"]["name"] = "kjv\u{9b}31m.txt".into();
    std::fs::write(&entry, serde_json::to_vec(&r).unwrap()).unwrap();
    let (ok, out, err) = qtune_in(&cache, &args);
    assert!(ok && err.contains("from the cache"), "{err}");
    clean("the cached table", &out);
    clean("the cached run's lines", &err);
    let (ok, out, err) = qtune_in(&cache, &["plan", "-m", qs, "--no-profile"]);
    assert!(ok && err.contains("measured by qtune quality"), "{err}");
    clean("plan's text", &err);
    clean("plan's command", &out);

    // A number no measurement gives (a negative KL divergence): the entry is not cited.
    r["quants"][0]["mean_kld"] = (-1.5).into();
    std::fs::write(&entry, serde_json::to_vec(&r).unwrap()).unwrap();
    let (ok, out, err) = qtune_in(&cache, &["plan", "-m", qs, "--no-profile", "--json"]);
    assert!(ok, "{err}");
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(p.get("quality").is_none(), "{p}");
}
