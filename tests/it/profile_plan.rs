//! `qtune plan`: a config for this box from a profile, without trials. The planning logic runs
//! on hand-made boxes (a 16 GiB and a 24 GiB card) with real model layouts: the tiny synthetic
//! MoE and the full Qwen3.5-35B-A3B shape (header-only sparse file). The real binary runs on
//! this GPU-less machine, and `qtune tune --from-profile` starts a real (CPU) tune from one.

use crate::support;
use qtune::engine::LaunchArgs;
use support::hardware::FakeBox;
use support::require;

use qtune::config::{KvType, LaunchConfig};
use qtune::hardware::HardwareProfile;
use qtune::model::ModelLayout;
use qtune::plan::{plan, plan_fit_target_mib, Confidence};
use qtune::profile::{from_tune, to_yaml, Profile};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CARD_16: &str = "NVIDIA GeForce RTX 4080";
const CARD_24: &str = "NVIDIA GeForce RTX 4090";

fn gpu_box(name: &str, free_mib: u64) -> HardwareProfile {
    FakeBox::new()
        .gpu(name, free_mib + 400, free_mib)
        .pcie_gen(4)
        .compute_capability(8, 9)
        .driver("570.86", "12.8")
        .build()
}

fn cpu_box() -> HardwareProfile {
    FakeBox::new().driver("570.86", "12.8").build()
}

/// The full Qwen3.5-35B-A3B Q4_K_M layout, from a header-only sparse file in `dir`.
fn full_shape(dir: &Path) -> (PathBuf, ModelLayout) {
    use qtune::model::synth;
    let path = dir.join("qwen3.5-35b-a3b-q4_k_m.gguf");
    synth::write_sparse_header(
        &path,
        &synth::shape_by_name("qwen3.5-35b-a3b").unwrap(),
        synth::SynthFtype::parse("q4_k_m").unwrap(),
        &synth::default_vocab_dir(),
    )
    .unwrap();
    let layout = qtune::model::load(&path).unwrap();
    assert!(layout.is_moe() && layout.n_blocks == 40, "{layout:?}");
    (path, layout)
}

fn tiny() -> PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").unwrap()
}

/// A profile of `layout` exported from a (hand-made) tune on a card with `free_mib` free,
/// whose winner used all 16 physical cores, q8_0 KV and `--n-cpu-moe ncmoe`.
fn profile_from(layout: &ModelLayout, card: &str, free_mib: u64, winner: LaunchConfig) -> Profile {
    let mut r = qtune::run::sample::gpu_result(
        Path::new("/opt/llama/llama-server"),
        Path::new("/models/m.gguf"),
    );
    r.model = layout.clone();
    r.inputs.hardware.fingerprint = "00000000000000aa".into();
    r.inputs.hardware.gpus[0].name = card.into();
    r.inputs.hardware.gpus[0].vram_free_mib = free_mib;
    r.inputs.free_vram_at_start_mib = free_mib;
    r.inputs.headroom_mib = 512;
    r.inputs.vram_budget_mib = Some(free_mib - 512);
    let w = r.winner.as_mut().unwrap();
    w.config = winner;
    from_tune(&r, Some("test profile")).unwrap()
}

fn winner_24(ncmoe: u32) -> LaunchConfig {
    LaunchConfig {
        n_gpu_layers: Some(999),
        n_cpu_moe: Some(ncmoe),
        fit: Some(false),
        threads: Some(16), // the sample host's physical cores
        batch: Some(2048),
        ubatch: Some(512),
        cache_type_k: KvType::Q8_0,
        cache_type_v: KvType::Q8_0,
        flash_attn: qtune::config::FlashAttn::On,
        ..LaunchConfig::baseline(32768)
    }
}

#[test]
fn a_16_gib_card_keeps_more_experts_on_the_cpu_than_a_24_gib_card() {
    if !support::vocab() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, full) = full_shape(dir.path());
    let tiny = qtune::model::load(&tiny()).unwrap();
    for (layout, ctx) in [(&full, 32768), (&tiny, 4096)] {
        let p16 = plan(layout, &gpu_box(CARD_16, 16_384), None, ctx, 512);
        let p24 = plan(layout, &gpu_box(CARD_24, 24_576), None, ctx, 512);
        for (p, free) in [(&p16, 16_384u64), (&p24, 24_576)] {
            assert!(p.fits);
            assert_eq!(p.confidence, Confidence::Low);
            assert_eq!(p.budget_mib, Some(free - 512));
            assert!(
                p.predicted_gpu_mib <= plan_fit_target_mib((free - 512) as f64),
                "{} > the plan's share of {}",
                p.predicted_gpu_mib,
                free - 512
            );
            assert_eq!(p.config.n_gpu_layers, Some(999));
            assert_eq!(p.config.fit, Some(false));
            assert!(
                p.reasons
                    .iter()
                    .any(|r| r.contains("the CUDA context and a margin")),
                "{:?}",
                p.reasons
            );
        }
        if layout.n_blocks == 40 {
            // About 20 GiB of weights: too much for 16 GiB, not for 24 GiB.
            let (n16, n24) = (p16.config.n_cpu_moe.unwrap(), p24.config.n_cpu_moe.unwrap());
            assert!(n16 > n24 && n16 > 0, "16 GiB: {n16}, 24 GiB: {n24}");
        } else {
            // The tiny model fits whole on either card.
            assert_eq!(p16.config.n_cpu_moe, Some(0));
        }
    }
}

#[test]
fn a_24_gib_profile_adapted_to_a_16_gib_box_is_medium_and_keeps_its_kv_type() {
    if !support::vocab() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, full) = full_shape(dir.path());
    let on_24 = plan(&full, &gpu_box(CARD_24, 24_576), None, 32768, 512);
    let profile = profile_from(
        &full,
        CARD_24,
        24_576,
        winner_24(on_24.config.n_cpu_moe.unwrap()),
    );

    let same_box = plan(&full, &gpu_box(CARD_24, 24_576), Some(&profile), 32768, 512);
    assert_eq!(
        same_box.confidence,
        Confidence::High,
        "{:?}",
        same_box.reasons
    );

    let small = plan(&full, &gpu_box(CARD_16, 16_384), Some(&profile), 32768, 512);
    assert_eq!(small.confidence, Confidence::Medium, "{:?}", small.reasons);
    assert_eq!(small.from_profile.as_deref(), Some("test profile"));
    assert_eq!(small.config.cache_type_k, KvType::Q8_0);
    assert_eq!(small.config.cache_type_v, KvType::Q8_0);
    assert_eq!(
        (small.config.batch, small.config.ubatch),
        (Some(2048), Some(512))
    );
    // 16 threads were all of the profile box's physical cores: all 8 of this box's.
    assert_eq!(small.config.threads, Some(8));
    assert!(small.config.n_cpu_moe > profile.winner.config.n_cpu_moe);
    assert!(small.predicted_gpu_mib <= plan_fit_target_mib(15_872.0));
    assert!(
        small.reasons.iter().any(|r| r.contains(CARD_24)),
        "{:?}",
        small.reasons
    );

    // Same card, but half the VRAM free (another process): still re-planned, Medium.
    let busy = plan(&full, &gpu_box(CARD_24, 12_000), Some(&profile), 32768, 512);
    assert_eq!(busy.confidence, Confidence::Medium);

    // No GPU: the profile's threads/KV, no placement flags.
    let cpu = plan(&full, &cpu_box(), Some(&profile), 32768, 512);
    assert!(cpu.config.is_auto_placement());
    assert_eq!(cpu.config.cache_type_k, KvType::Q8_0);
    assert_eq!(cpu.budget_mib, None);
    let args = cpu.config.server_args();
    assert!(
        !args
            .iter()
            .any(|a| a == "-ngl" || a == "--n-cpu-moe" || a == "--fit"),
        "{args:?}"
    );
}

fn qtune(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qtune"))
        .current_dir(cwd)
        .env("QTUNE_DATA_DIR", cwd)
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn real_binary_prints_the_command_last_without_a_gpu() {
    if !support::vocab() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny();
    let o = qtune(
        dir.path(),
        &["plan", "--model", model.to_str().unwrap(), "--ctx", "4096"],
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{err}");
    let last = out.lines().last().expect("a command on stdout");
    assert!(last.contains("llama-server"), "{last}");
    assert!(last.contains(&format!("-m {}", model.display())), "{last}");
    assert!(
        last.contains("-c 4096") && last.ends_with("--host 127.0.0.1 --port 8080"),
        "{last}"
    );
    if !qtune::hardware::probe(false).has_gpu() {
        assert!(
            !last.contains("-ngl") && !last.contains("--n-cpu-moe"),
            "{last}"
        );
        assert!(err.contains("no GPU"), "{err}");
    }
    assert!(err.contains("confidence: low"), "{err}");
    assert!(err.contains("predicted speed"), "{err}");
    assert!(
        out.contains("# qtune plan: predicted, not measured: tg "),
        "{out}"
    );

    // --json: the same plan with its predictions, machine-readable, and the command.
    let o = qtune(
        dir.path(),
        &[
            "plan",
            "--model",
            model.to_str().unwrap(),
            "--ctx",
            "4096",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let tg = &j["speed"]["prediction"]["tg"];
    assert!(tg["low"].as_f64().unwrap() < tg["tps"].as_f64().unwrap());
    assert!(tg["tps"].as_f64().unwrap() < tg["high"].as_f64().unwrap());
    assert!(j["speed"]["prediction"]["pp"]["tps"].as_f64().unwrap() > 0.0);
    assert_eq!(j["config"]["ctx"], 4096);
    assert!(j["command"][0].as_str().unwrap().contains("llama-server"));
    assert_eq!(j["note"], "a plan: predicted, not measured");
}

#[test]
fn real_binary_picks_the_matching_profile_from_profiles_dir() {
    if !support::vocab() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (model, full) = full_shape(dir.path());
    let profiles = dir.path().join("profiles");
    std::fs::create_dir(&profiles).unwrap();
    let mut good = profile_from(&full, CARD_24, 24_576, winner_24(10));
    // Its winner measured with a wide spread: the plan uses it, and says so.
    good.winner.tg.spread_pct = 60.0;
    let mut other = good.clone();
    other.name = "another model".into();
    other.model.fingerprint = "ffff".into();
    other.model.n_blocks = 48;
    other.winner.config.cache_type_k = KvType::Q4_0;
    std::fs::write(profiles.join("a.yaml"), to_yaml(&other).unwrap()).unwrap();
    std::fs::write(profiles.join("b.yaml"), to_yaml(&good).unwrap()).unwrap();
    std::fs::write(profiles.join("broken.yaml"), "schema: [").unwrap();

    let o = qtune(dir.path(), &["plan", "--model", model.to_str().unwrap()]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{err}");
    // The profile it chose, from where and why; what it was tuned for; its spread.
    assert!(err.contains("profile: test profile ("), "{err}");
    assert!(err.contains("b.yaml: the closest match of "), "{err}");
    assert!(
        err.contains("profile 'test profile' was tuned for "),
        "{err}"
    );
    assert!(
        err.contains("profile 'test profile''s winner spread 60 % between its measurements"),
        "{err}"
    );
    assert!(
        err.contains("confidence: medium") || err.contains("confidence: high"),
        "{err}"
    );
    assert!(
        out.lines().last().unwrap().contains("-ctk q8_0 -ctv q8_0"),
        "{out}"
    );

    // An explicit profile by name; a missing one is one line and a failure.
    let o = qtune(
        dir.path(),
        &[
            "plan",
            "--model",
            model.to_str().unwrap(),
            "--profile",
            "another model",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("confidence: low"));
    assert!(
        text(&o.stderr).contains("profile: another model (given with --profile)"),
        "{}",
        text(&o.stderr)
    );
    assert!(text(&o.stdout).contains("-ctk q4_0"));
    let o = qtune(
        dir.path(),
        &[
            "plan",
            "--model",
            model.to_str().unwrap(),
            "--profile",
            "nope",
        ],
    );
    assert!(!o.status.success());
    assert!(o.stdout.is_empty());
    assert_eq!(
        text(&o.stderr).trim().lines().count(),
        1,
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn tune_starts_from_a_profile() {
    let Some(server) = require::or_skip(require::server(), "the real llama-server") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let model = tiny();
    let layout = qtune::model::load(&model).unwrap();
    let winner = LaunchConfig {
        threads: Some(1),
        batch: Some(512),
        ubatch: Some(128),
        cache_type_k: KvType::Q8_0,
        cache_type_v: KvType::Q8_0,
        ..LaunchConfig::baseline(2048)
    };
    let p = profile_from(&layout, CARD_16, 16_384, winner.clone());
    let pfile = dir.path().join("p.yaml");
    std::fs::write(&pfile, to_yaml(&p).unwrap()).unwrap();
    let run = dir.path().join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .args([
            "tune",
            "--model",
            model.to_str().unwrap(),
            "--server",
            server.to_str().unwrap(),
        ])
        .args([
            "--space",
            "demo",
            "--budget-trials",
            "2",
            "--from-profile",
            pfile.to_str().unwrap(),
        ])
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let run_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let expect = serde_json::to_value(qtune::search::strategy::base_of(&winner)).unwrap();
    assert_eq!(run_json["start"], expect, "{run_json}");
    // The first config after the baseline is the profile's starting point.
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    let searched: Vec<&serde_json::Value> = results["trials"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["role"] != "baseline")
        .collect();
    let first = &searched.first().expect("a search trial")["config"];
    assert_eq!(first["threads"], 1, "{first}");
    assert_eq!(first["cache_type_k"], "q8_0", "{first}");
    assert_eq!(
        (first["batch"].clone(), first["ubatch"].clone()),
        (512.into(), 128.into()),
        "{first}"
    );
}
