use super::*;
use crate::config::KvType;
use crate::engine::LaunchArgs;
use crate::hardware::{GpuInfo, PcieLink};

fn layout(n_experts: u32) -> ModelLayout {
    let experts = if n_experts > 0 { 400 << 20 } else { 0 };
    ModelLayout {
        file_bytes: 0,
        n_experts_used: n_experts.min(2),
        n_embd: 1024,
        n_head: 8,
        n_head_kv: 2,
        n_vocab: 1000,
        ctx_train: 32768,
        token_embd_bytes: 100 << 20,
        output_bytes: 100 << 20,
        tensor_bytes: 0,
        fingerprint: "00112233aabbccdd".into(),
        ..ModelLayout::uniform(24, n_experts, experts, 40 << 20)
    }
}

fn host(physical: u32, logical: u32) -> HostInfo {
    HostInfo {
        cpu_model: "test cpu".into(),
        physical_cores: Some(physical),
        logical_cores: logical,
        ram_total_mib: 65536,
        ram_available_mib: 60000,
        os: "test".into(),
        mem_bandwidth_gbs: None,
        mem_bandwidth_by_threads: Vec::new(),
    }
}

fn hw(gpu: Option<(&str, u64)>) -> HardwareProfile {
    HardwareProfile {
        gpus: gpu
            .into_iter()
            .map(|(name, free)| GpuInfo {
                index: 0,
                name: name.into(),
                uuid: "GPU-0".into(),
                vram_total_mib: free + 300,
                vram_free_mib: free,
                vram_used_mib: 300,
                pcie: PcieLink {
                    gen_current: None,
                    gen_max: None,
                    width_current: None,
                    width_max: None,
                },
                compute_capability: None,
                processes: Vec::new(),
                mem_bandwidth_gbs: None,
            })
            .collect(),
        no_gpu_reason: gpu.is_none().then(|| "test".to_string()),
        driver_version: None,
        cuda_version: None,
        host: host(8, 16),
        fingerprint: "abcdef0123456789".into(),
    }
}

/// The profile of the other test module, re-pointed at `layout(8)` on a 6 GiB card.
fn profile_for(l: &ModelLayout) -> Profile {
    let mut p = crate::profile::tests::profile();
    p.model.fingerprint = l.fingerprint.clone();
    p.model.arch = l.arch.clone();
    p.model.n_blocks = l.n_blocks;
    p.model.n_experts = l.n_experts;
    p.model.n_experts_used = l.n_experts_used;
    p.hardware.gpus[0].name = "Test GPU 6G".into();
    p.hardware.free_vram_at_start_mib = 6144;
    p.hardware.headroom_mib = 512;
    p.hardware.vram_budget_mib = Some(5632);
    p
}

#[test]
fn threads_scale_with_physical_cores_or_are_capped() {
    let mut ph = crate::profile::tests::profile().hardware;
    ph.physical_cores = Some(8);
    // All physical cores there: all physical cores here.
    assert_eq!(scale_threads(8, &ph, &host(16, 32)), 16);
    assert_eq!(scale_threads(8, &ph, &host(4, 8)), 4);
    // Any other count: kept, capped at our logical cores.
    assert_eq!(scale_threads(6, &ph, &host(16, 32)), 6);
    assert_eq!(scale_threads(12, &ph, &host(4, 8)), 8);
}

#[test]
fn same_model_same_card_same_budget_is_high_and_keeps_the_profile_choices() {
    let l = layout(8);
    let p = profile_for(&l);
    let plan = plan(&l, &hw(Some(("Test GPU 6G", 6144))), Some(&p), 8192, 512);
    assert_eq!(plan.confidence, Confidence::High, "{:?}", plan.reasons);
    assert_eq!(plan.config.cache_type_k, KvType::Q8_0);
    assert_eq!(plan.config.batch, Some(2048));
    assert_eq!(plan.config.threads, Some(8));
    assert_eq!(plan.config.n_gpu_layers, Some(999));
    assert_eq!(plan.config.fit, Some(false));
    assert!(plan.fits);
    assert!(plan.predicted_gpu_mib <= plan_fit_target_mib(5632.0));
    // One block fewer on the CPU would not fit the margin.
    let n = plan.config.n_cpu_moe.unwrap();
    assert!(n > 0);
    let one_less = LaunchConfig {
        n_cpu_moe: Some(n - 1),
        ..plan.config.clone()
    };
    assert!(
        crate::model::memory::predict(&l, &one_less, true).gpu_mib > plan_fit_target_mib(5632.0)
    );
    assert_eq!(plan.from_profile.as_deref(), Some(p.name.as_str()));
}

#[test]
fn a_noisy_profile_never_gives_high_confidence_and_another_ctx_is_a_warning() {
    let l = layout(8);
    let mut p = profile_for(&l);
    // The newcomer's case: the profile's winner measured with a 77 % spread.
    p.winner.tg.spread_pct = 77.0;
    let noisy = plan(&l, &hw(Some(("Test GPU 6G", 6144))), Some(&p), 8192, 512);
    assert_eq!(noisy.confidence, Confidence::Medium, "{:?}", noisy.reasons);
    assert!(
        noisy.reasons.iter().any(|r| r.contains("spread by 77 %")),
        "{:?}",
        noisy.reasons
    );
    assert!(
        !plan_text(&noisy, Path::new("m.gguf")).contains("confidence: high"),
        "{}",
        plan_text(&noisy, Path::new("m.gguf"))
    );
    // The profile keeps its context: planning at another one says so, as a warning.
    p.winner.tg.spread_pct = 4.0;
    assert_eq!(p.space.ctx, 8192);
    let same = plan(&l, &hw(Some(("Test GPU 6G", 6144))), Some(&p), 8192, 512);
    assert!(same.warnings.iter().all(|w| !w.contains("tuned at ctx")));
    let other = plan(&l, &hw(Some(("Test GPU 6G", 6144))), Some(&p), 32768, 512);
    let text = plan_text(&other, Path::new("m.gguf"));
    assert!(
        text.contains("warning: the profile was tuned at ctx 8192; this plan is for ctx 32768"),
        "{text}"
    );
}

#[test]
fn other_budget_or_card_is_medium_and_other_model_is_low() {
    let l = layout(8);
    let p = profile_for(&l);
    let bigger = plan(&l, &hw(Some(("Test GPU 6G", 8192))), Some(&p), 8192, 512);
    assert_eq!(bigger.confidence, Confidence::Medium);
    assert!(
        bigger.reasons.iter().any(|r| r.contains("10 %")),
        "{:?}",
        bigger.reasons
    );
    let other_card = plan(&l, &hw(Some(("Other GPU", 6144))), Some(&p), 8192, 512);
    assert_eq!(other_card.confidence, Confidence::Medium);
    let mut shape_only = p.clone();
    shape_only.model.fingerprint = "ffff".into();
    assert_eq!(model_match(&shape_only, &l), ModelMatch::Shape);
    let mut other = p.clone();
    other.model.n_blocks = 40;
    other.model.fingerprint = "eeee".into();
    assert_eq!(model_match(&other, &l), ModelMatch::Other);
    let low = plan(
        &l,
        &hw(Some(("Test GPU 6G", 6144))),
        Some(&other),
        8192,
        512,
    );
    assert_eq!(low.confidence, Confidence::Low);
}

#[test]
fn best_profile_prefers_fingerprint_then_card_then_budget() {
    let l = layout(8);
    let box_hw = hw(Some(("Test GPU 6G", 6144)));
    let exact = profile_for(&l);
    let mut shape = exact.clone();
    shape.name = "shape".into();
    shape.model.fingerprint = "ffff".into();
    let mut other_card = exact.clone();
    other_card.name = "other card".into();
    other_card.hardware.gpus[0].name = "Other GPU".into();
    let mut far = exact.clone();
    far.name = "far".into();
    far.hardware.vram_budget_mib = Some(20000);
    let mut other_model = exact.clone();
    other_model.name = "other model".into();
    other_model.model.arch = "llama".into();
    other_model.model.fingerprint = "eeee".into();

    let all = vec![
        other_model.clone(),
        shape.clone(),
        far.clone(),
        other_card.clone(),
        exact.clone(),
    ];
    let pick = |ps: &[Profile]| best_profile(&l, &box_hw, 512, ps).map(|p| p.name.clone());
    assert_eq!(pick(&all), Some(exact.name.clone()));
    assert_eq!(pick(&all[..4]), Some("far".to_string()));
    assert_eq!(
        pick(&[shape.clone(), other_card.clone()]),
        Some("other card".into())
    );
    assert_eq!(pick(&[other_model.clone(), shape]), Some("shape".into()));
    assert_eq!(pick(&[other_model]), None);
}

#[test]
fn no_gpu_or_dense_model_gets_no_placement_flags() {
    for (l, gpu) in [(layout(8), None), (layout(0), Some(("Test GPU 6G", 6144)))] {
        let plan = plan(&l, &hw(gpu), None, 4096, 512);
        assert_eq!(plan.confidence, Confidence::Low);
        assert!(plan.fits);
        assert!(plan.config.is_auto_placement(), "{:?}", plan.config);
        let args = plan.config.server_args();
        assert!(
            !args.iter().any(|a| a == "-ngl" || a == "--n-cpu-moe"),
            "{args:?}"
        );
        assert_eq!(plan.budget_mib, gpu.map(|(_, f)| f - 512));
        // No GPU: a CPU-only prediction, said to be rough. An unknown GPU with the
        // server's own placement: no prediction, and why.
        let text = plan_text(&plan, Path::new("m.gguf"));
        if gpu.is_none() {
            assert!(plan.speed.is_some(), "{text}");
            assert!(
                text.contains("predicted speed (a prediction, not a measurement): tg "),
                "{text}"
            );
            assert!(text.contains("CPU-only"), "{text}");
        } else {
            assert!(plan.speed.is_none(), "{text}");
            assert!(
                text.contains("predicted speed: none (no speed prediction: "),
                "{text}"
            );
        }
    }
}

#[test]
fn nothing_fits_is_reported_and_host_ram_is_checked() {
    let l = layout(8);
    let mut tiny_box = hw(Some(("Test GPU 6G", 700)));
    tiny_box.host.ram_available_mib = 100;
    let plan = plan(&l, &tiny_box, None, 8192, 512);
    assert!(!plan.fits);
    assert!(
        plan.warnings.iter().any(|w| w.contains("nothing fits")),
        "{:?}",
        plan.warnings
    );
    assert!(
        plan.warnings.iter().any(|w| w.contains("available RAM")),
        "{:?}",
        plan.warnings
    );
    let text = plan_text(&plan, Path::new("m.gguf"));
    assert!(text.contains("warning: nothing fits"), "{text}");
}

/// A card the speed model knows (by name), `free_mib` free.
fn known_card(free_mib: u64) -> HardwareProfile {
    hw(Some(("NVIDIA GeForce RTX 4090", free_mib)))
}

/// `cfg` with the default space's first batch/KV choices (-b 2048 -ub 512, q8_0), placed
/// on one card as the plan places: the fewest --n-cpu-moe that fits `budget_mib`.
fn first_choices(l: &ModelLayout, cfg: &LaunchConfig, budget_mib: f64) -> LaunchConfig {
    let mut c = LaunchConfig {
        batch: Some(2048),
        ubatch: Some(512),
        cache_type_k: KvType::Q8_0,
        cache_type_v: KvType::Q8_0,
        ..cfg.clone()
    };
    c.place_experts(0);
    let n = crate::model::memory::min_n_cpu_moe_that_fits(l, &c, plan_fit_target_mib(budget_mib));
    c.n_cpu_moe = n;
    c
}

fn predicted(l: &ModelLayout, hw: &HardwareProfile, c: &LaunchConfig) -> (f64, f64) {
    let (sp, note) = plan_speed(l, hw, c, None);
    let p = sp.unwrap_or_else(|| panic!("{note}")).prediction;
    (p.tg.tps, p.pp.tps)
}

#[test]
fn without_a_profile_a_model_that_fits_whole_gets_the_faster_prompt_at_tied_generation() {
    let l = layout(8);
    let card = known_card(24_576);
    let pl = plan(&l, &card, None, 8192, 512);
    assert!(pl.fits, "{:?}", pl.warnings);
    assert_eq!(pl.config.n_cpu_moe, Some(0), "the model fits whole");
    let first = first_choices(&l, &pl.config, 24_064.0);
    assert_eq!(first.n_cpu_moe, Some(0));
    let (tg, pp) = predicted(&l, &card, &pl.config);
    let (tg0, pp0) = predicted(&l, &card, &first);
    // Not the space's first choices: a larger micro-batch or f16 KV, because the model
    // predicts it faster in prompt at a generation speed within the tie band.
    assert!(
        pl.config.ubatch > Some(512) || pl.config.cache_type_k == KvType::F16,
        "{}",
        pl.config.label()
    );
    assert!(pp > pp0 * 1.05, "pp {pp:.0} vs the first choices' {pp0:.0}");
    assert!(
        tg >= tg0 * (1.0 - PLAN_TIE_PCT / 100.0),
        "tg {tg:.0} vs {tg0:.0}"
    );
    assert!(pl.predicted_gpu_mib <= plan_fit_target_mib(24_064.0));
    // What was compared, and why this one, is said.
    assert_eq!(pl.compared.len(), 8, "{:#?}", pl.compared);
    assert_eq!(pl.compared.iter().filter(|c| c.chosen).count(), 1);
    assert!(
        pl.reasons.iter().any(
            |r| r.contains("of the 8 batch/KV pairs of the 'default' space")
                && r.contains("the fastest in prompt")
        ),
        "{:?}",
        pl.reasons
    );
    let text = plan_text(&pl, Path::new("m.gguf"));
    assert!(
        text.contains("  compared (predicted, not measured"),
        "{text}"
    );
    // What the server gives with no flags is predicted next to it: every expert on this
    // card, the same generation as the plan's (a tie), less prompt speed than the plan's.
    let d = pl.server_default.as_ref().expect("one known GPU");
    assert_eq!(d.placement, "every expert on the GPU");
    assert!(
        d.prediction.pp.tps < pp,
        "{} vs {pp:.0}",
        d.prediction.pp.text()
    );
    assert!(d.prediction.pp.high > d.prediction.pp.tps * 1.4);
    assert!(text.contains("the server's default (no flags"), "{text}");
    // A profile's choices are kept: no comparison.
    let p = profile_for(&l);
    let from_profile = plan(&l, &card, Some(&p), 8192, 512);
    assert!(from_profile.compared.is_empty());
    assert_eq!(from_profile.config.ubatch, p.winner.config.ubatch);
    assert_eq!(
        from_profile.config.cache_type_k,
        p.winner.config.cache_type_k
    );
}

#[test]
fn without_a_profile_a_card_too_small_for_the_bigger_compute_buffer_keeps_what_fits() {
    let l = layout(8);
    // 2,800 MiB free: the experts all on the CPU, and room for -ub 2048's compute buffer
    // with q8_0 KV but not with f16 KV, nor for -ub 4096's.
    let card = known_card(2800);
    let pl = plan(&l, &card, None, 8192, 512);
    assert!(pl.fits, "{:?}", pl.warnings);
    assert!(pl.predicted_gpu_mib <= plan_fit_target_mib(2288.0));
    let fits: Vec<(String, bool)> = pl
        .compared
        .iter()
        .map(|c| (c.config.clone(), c.fits))
        .collect();
    assert!(
        fits.iter()
            .any(|(c, f)| !f && c.contains("-b 4096 -ub 4096")),
        "{fits:?}"
    );
    assert!(
        fits.iter()
            .any(|(c, f)| *f && c.contains("-b 2048 -ub 2048")),
        "{fits:?}"
    );
    let chosen = pl.compared.iter().find(|c| c.chosen).unwrap();
    assert!(
        chosen.fits && chosen.config == pl.config.label(),
        "{chosen:?}"
    );
    assert_eq!(
        (pl.config.ubatch, pl.config.cache_type_k),
        (Some(2048), KvType::Q8_0),
        "the faster prompt of what fits"
    );
    for c in pl.compared.iter().filter(|c| !c.fits) {
        assert!(c.tg_tps.is_none() && c.pp_tps.is_none(), "{c:?}");
    }
    let text = plan_text(&pl, Path::new("m.gguf"));
    assert!(
        text.contains(
            "-b 4096 -ub 4096 -ctk q8_0 -ctv q8_0 -fa on --fit off --load-mode none: does not fit"
        ),
        "{text}"
    );

    // 12,000 MiB free: -ub 2048 with f16 KV, and -ub 4096, need one more block's experts on
    // the CPU, which costs far more generation than the tie band: the plan keeps the
    // first choices' placement and takes the larger micro-batch only where it fits there.
    let card = known_card(12_000);
    let pl = plan(&l, &card, None, 8192, 512);
    let first = first_choices(&l, &pl.config, 11_488.0);
    assert_eq!(
        pl.config.n_cpu_moe,
        first.n_cpu_moe,
        "{}",
        pl.config.label()
    );
    assert!(
        pl.compared.iter().any(|c| !c.chosen
            && c.fits
            && c.tg_tps.unwrap() < 0.97 * predicted(&l, &card, &first).0),
        "{:#?}",
        pl.compared
    );
    assert!(pl.predicted_gpu_mib <= plan_fit_target_mib(11_488.0));
}

#[test]
fn a_box_with_two_cards_gets_its_split_predicted_again() {
    let l = layout(8);
    let mut two = hw(Some(("Test GPU 6G", 6144)));
    let mut second = two.gpus[0].clone();
    second.index = 1;
    second.name = "Test GPU 4G".into();
    second.vram_free_mib = 4096;
    two.gpus.push(second);
    // From a one-GPU profile of the same model: the split is this box's own.
    let p = profile_for(&l);
    let pl = plan(&l, &two, Some(&p), 8192, 512);
    assert!(pl.fits, "{pl:#?}");
    assert_eq!(pl.config.n_cpu_moe, None);
    assert_eq!(pl.budget_mib, Some(5632 + 3584));
    assert_eq!(pl.cards.len(), 2);
    // Each card's predicted VRAM within its budget less its CUDA context and margin.
    for (g, used) in &pl.cards {
        assert!(
            *used > 0.0 && *used <= plan_fit_target_mib(g.budget_mib as f64),
            "{g:?} {used}"
        );
    }
    // The split is the tune's balanced one: no other split (with its CPU blocks taken the
    // same way) leaves the fullest card more room, and with one CPU block fewer no split
    // fits at all.
    let cards = crate::run::gpu_budgets(&two, 512);
    let free: Vec<f64> = cards.iter().map(|g| g.free_mib as f64).collect();
    let context = vec![crate::model::cards::CARD_CONTEXT_MIB; 2];
    let room = |split: &[u32], n: u32| {
        let mut c = pl.config.clone();
        let blocks = crate::model::cards::cpu_fill(&l, &c, split, &cards, &context, n);
        c.place_on_gpus(split.to_vec(), blocks);
        let pred = crate::model::memory::predict_devices(&l, &c, &free);
        pred.gpu_devices
            .iter()
            .map(|d| {
                let b = cards[d.device as usize].budget_mib as f64;
                plan_fit_target_mib(b) - d.total_mib
            })
            .fold(f64::INFINITY, f64::min)
    };
    let n = pl
        .config
        .cpu_experts
        .as_ref()
        .map_or(0, |e| e.blocks.len() as u32);
    let split = pl.config.tensor_split.clone();
    let ours = room(&split, n);
    assert!(ours >= 0.0, "{ours}");
    for p0 in 5..=95u32 {
        let other = room(&[p0, 100 - p0], n);
        assert!(
            other <= ours + 1e-6,
            "-ts {p0},{} leaves {other:.0} MiB on the fullest card, -ts {split:?} {ours:.0}",
            100 - p0
        );
        if n > 0 {
            assert!(
                room(&[p0, 100 - p0], n - 1) < 0.0,
                "{p0} with {} CPU blocks",
                n - 1
            );
        }
    }
    let ts = format!("-ts {},{}: ", split[0], split[1]);
    assert!(
        pl.reasons
            .iter()
            .any(|r| r.starts_with(&ts) && r.contains("the fullest card the most room")),
        "{:?}",
        pl.reasons
    );
    // The reason is one sentence, without a run of spaces from a broken line continuation.
    for r in pl.reasons.iter().chain(&pl.warnings) {
        assert!(!r.contains("  "), "{r:?}");
    }
    assert!(
        pl.reasons.iter().any(|r| r.contains("had 1 GPU;")),
        "{:?}",
        pl.reasons
    );
    let text = plan_text(&pl, Path::new("m.gguf"));
    assert!(text.contains("CUDA1 Test GPU 4G: "), "{text}");
    // The same box with one card plans as before: --n-cpu-moe, no split.
    let one = plan(&l, &hw(Some(("Test GPU 6G", 6144))), Some(&p), 8192, 512);
    assert!(one.config.n_cpu_moe.is_some() && one.config.tensor_split.is_empty());
    assert!(one.cards.is_empty());
}
