use super::*;
use crate::config::LaunchConfig;

pub(crate) fn layout() -> ModelLayout {
    ModelLayout {
        n_experts_used: 8,
        output_bytes: 200 << 20,
        ..ModelLayout::uniform(40, 128, 400 << 20, 20 << 20)
    }
}

pub(crate) fn gpu_box() -> SpeedBox {
    SpeedBox {
        gpu_bw_gbs: Some(1000.0),
        pcie_gbs: Some(pcie_gbs(4, 16)),
        host_bw_gbs: 60.0,
        physical_cores: 8,
        host_bw_share_by_threads: Vec::new(),
        sources: Vec::new(),
        rpc_links: Vec::new(),
    }
}

pub(crate) fn placed(n: u32) -> LaunchConfig {
    LaunchConfig::baseline(8192).with_experts_on_cpu(n)
}

#[test]
fn nvml_clock_and_bus_width_give_the_datasheet_bandwidth() {
    let h100 = crate::hardware::memory_bandwidth_gbs(Some(2619), Some(5120)).unwrap();
    assert!((h100 - 3352.0).abs() < 1.0, "{h100}");
    let rtx4090 = crate::hardware::memory_bandwidth_gbs(Some(10501), Some(384)).unwrap();
    assert!((rtx4090 - 1008.0).abs() < 1.0, "{rtx4090}");
    assert_eq!(crate::hardware::memory_bandwidth_gbs(None, Some(384)), None);
    assert_eq!(gpu_bandwidth_by_name("NVIDIA H100 80GB HBM3"), Some(3350.0));
    assert_eq!(
        gpu_bandwidth_by_name("NVIDIA GeForce RTX 4090"),
        Some(1008.0)
    );
    assert_eq!(gpu_bandwidth_by_name("Some Future GPU"), None);
}

#[test]
fn more_experts_on_the_cpu_is_slower_and_pinned_prefill_is_faster() {
    let l = layout();
    let sb = gpu_box();
    let p = |c: &LaunchConfig| predict(&l, c, &sb, true, 2048, &FITTED).unwrap();
    let (a, b) = (p(&placed(5)), p(&placed(20)));
    assert!(a.tg.tps > b.tg.tps && a.pp.tps > b.pp.tps);
    assert!(b.decode.cpu_experts_ms > a.decode.cpu_experts_ms);
    assert!(a.tg.low < a.tg.tps && a.tg.tps < a.tg.high);
    assert!(a.tg_bound_tps > a.tg.tps);
    let mut pinned = placed(20);
    pinned.load_mode = crate::config::LoadMode::None;
    assert!(p(&pinned).pp.tps > b.pp.tps);
    assert_eq!(p(&pinned).tg, b.tg);
    // Fewer threads: slower generation.
    let mut four = placed(20);
    four.threads = Some(4);
    assert!(p(&four).tg.tps < b.tg.tps);
    // A bigger micro-batch amortizes the copies.
    let mut big = placed(20);
    big.batch = Some(2048);
    big.ubatch = Some(2048);
    assert!(p(&big).pp.tps > b.pp.tps);
    assert_eq!(p(&big).prefill.ubatch, 2048);
}

#[test]
fn quantized_kv_recurrent_blocks_and_synthetic_routing_cost_what_the_fit_says() {
    let sb = gpu_box();
    let p = |l: &ModelLayout, c: &LaunchConfig| predict(l, c, &sb, true, 2048, &FITTED).unwrap();
    let l = layout();
    // Same placement, q8_0 vs f16 KV: fewer bytes, but the dequantization costs more.
    let mut f16 = placed(0);
    f16.cache_type_k = crate::config::KvType::F16;
    f16.cache_type_v = crate::config::KvType::F16;
    let mut q8 = f16.clone();
    q8.cache_type_k = crate::config::KvType::Q8_0;
    q8.cache_type_v = crate::config::KvType::Q8_0;
    assert!(token_bytes(&l, &q8, true, 2112).gpu_kv_quant > 0.0);
    assert_eq!(token_bytes(&l, &f16, true, 2112).gpu_kv_quant, 0.0);
    assert!(p(&l, &f16).tg.tps > p(&l, &q8).tg.tps);
    // Recurrent blocks (no KV, a state) carry their own overhead.
    let mut hybrid = layout();
    for il in 0..30 {
        hybrid.kv_blocks[il] = false;
        hybrid.recurrent_state_bytes[il] = 1 << 20;
    }
    assert_eq!(
        token_bytes(&hybrid, &f16, true, 2112).gpu_recurrent_blocks,
        30
    );
    let d = p(&hybrid, &f16).decode.overhead_ms;
    let want = 10.0 * FITTED.block_overhead_ms + 30.0 * FITTED.recurrent_block_overhead_ms;
    assert!((d - want).abs() < 1e-9, "{d} vs {want}");
    // A synthetic model copies only part of its CPU experts per micro-batch, by architecture.
    let mut synth = layout();
    synth.name = Some("Qwen3-30B-A3B (qtune synthetic, random weights)".into());
    for block in [0, 20, 39] {
        assert_eq!(synthetic_touch(&l, &FITTED, block), 1.0, "a real model");
    }
    assert_eq!(
        synthetic_touch(&synth, &FITTED, 0),
        FITTED.synthetic_touch_qwen3moe[0]
    );
    synth.arch = "qwen35moe".into();
    assert_eq!(
        synthetic_touch(&synth, &FITTED, 0),
        FITTED.synthetic_touch_qwen35moe[0]
    );
    let mut off = placed(20);
    off.load_mode = crate::config::LoadMode::None;
    assert!(p(&synth, &off).prefill.copy_ms < p(&l, &off).prefill.copy_ms);
}

#[test]
fn a_synthetic_models_touch_follows_depth_a_real_models_does_not() {
    let l = layout();
    let mut synth = layout();
    synth.name = Some("Qwen3-30B-A3B (qtune synthetic, random weights)".into());
    let k = SpeedConstants {
        synthetic_touch_qwen3moe: [0.6, 0.1, 1.0],
        synthetic_touch_qwen35moe: [0.05, 0.2, 1.0],
        ..FITTED
    };
    let t = |l: &ModelLayout, b: u32| synthetic_touch(l, &k, b);
    assert_eq!(t(&synth, 0), 0.6);
    assert!((t(&synth, 39) - 0.1).abs() < 1e-12);
    assert!((t(&synth, 13) - (0.6 - 0.5 * 13.0 / 39.0)).abs() < 1e-12);
    assert!(t(&synth, 10) > t(&synth, 30), "deeper blocks copy less");
    for b in 0..40 {
        assert_eq!(t(&l, b), 1.0, "a real model copies every CPU expert");
    }
    // Another architecture has its own line; an extrapolation stays within (0, 1].
    synth.arch = "qwen35moe".into();
    assert_eq!(t(&synth, 0), 0.05);
    assert!(t(&synth, 39) > t(&synth, 0));
    let steep = SpeedConstants {
        synthetic_touch_qwen35moe: [1.5, -0.5, 1.0],
        ..k
    };
    // A power above 1: flat over the first blocks, steep over the last.
    let curved = SpeedConstants {
        synthetic_touch_qwen35moe: [0.05, 0.45, 8.0],
        ..k
    };
    let c = |b: u32| synthetic_touch(&synth, &curved, b);
    assert!(c(19) < 0.052 && c(19) > 0.05, "{}", c(19));
    assert!((c(39) - 0.45).abs() < 1e-12);
    assert!(c(35) - c(30) > c(10) - c(0));
    assert_eq!(synthetic_touch(&synth, &steep, 0), 1.0);
    assert_eq!(synthetic_touch(&synth, &steep, 39), MIN_TOUCH);
    // Copied bytes sum each CPU block's bytes times its touch: the same bytes deeper in a
    // synthetic qwen3moe copy less, in a real model the same.
    let n = l.blocks.len();
    let mut first = vec![0u64; n];
    let mut last = vec![0u64; n];
    first[..4].fill(1 << 30);
    last[n - 4..].fill(1 << 30);
    synth.arch = "qwen3moe".into();
    assert!(copied_expert_bytes(&synth, &last, &k) < copied_expert_bytes(&synth, &first, &k));
    assert_eq!(
        copied_expert_bytes(&l, &last, &k),
        copied_expert_bytes(&l, &first, &k)
    );
    // Through the model: last-block placements prefill faster on the synthetic model.
    let sb = gpu_box();
    let mut head = placed(4);
    head.load_mode = crate::config::LoadMode::None;
    let mut tail = head.clone();
    tail.n_cpu_moe = None;
    tail.cpu_experts = Some(crate::config::CpuExperts::last(4, 40));
    let pp = |l: &ModelLayout, c: &LaunchConfig| predict(l, c, &sb, true, 2048, &k).unwrap().pp.tps;
    assert!(pp(&synth, &tail) > pp(&synth, &head));
    assert!((pp(&l, &tail) / pp(&l, &head) - 1.0).abs() < 0.02);
}

#[test]
fn no_prediction_for_an_unknown_gpu_or_fit_placement_but_cpu_only_works() {
    let l = layout();
    let mut unknown = gpu_box();
    unknown.gpu_bw_gbs = None;
    assert!(predict(&l, &placed(5), &unknown, true, 2048, &FITTED).is_none());
    let fit = LaunchConfig::baseline(8192);
    assert!(predict(&l, &fit, &gpu_box(), true, 2048, &FITTED).is_none());
    let cpu = predict(&l, &fit, &unknown, false, 2048, &FITTED).unwrap();
    assert!(cpu.tg.tps > 0.0 && cpu.tg.tps.is_finite());
    assert!(cpu.pp.tps > 0.0 && cpu.pp.tps.is_finite());
    assert_eq!(cpu.decode.gpu_ms, 0.0);
}

#[test]
fn the_pick_takes_prompt_among_generation_ties_and_prefers_plain_placement() {
    let p = |primary, secondary, plain| {
        Some(PickInput {
            primary,
            secondary,
            plain,
        })
    };
    // 100 and 98 tie at 3 %; 90 does not: the faster prompt of the tied wins.
    let r = pick(
        &[
            p(100.0, 4_000.0, true),
            p(98.0, 8_000.0, false),
            p(90.0, 12_000.0, true),
        ],
        3.0,
    )
    .unwrap();
    assert_eq!((r.win, r.fastest, r.tied), (1, 0, 2));
    // A plain placement tied in both with an `-ot` winner is kept instead.
    let r = pick(&[p(99.0, 7_900.0, true), p(100.0, 8_000.0, false)], 3.0).unwrap();
    assert_eq!(r.win, 0);
    // What does not fit (None) is out; nothing left: no pick.
    let r = pick(&[None, p(50.0, 1_000.0, true)], 3.0).unwrap();
    assert_eq!(r.win, 1);
    assert_eq!(pick(&[None, None], 3.0), None);
}

#[test]
fn measured_thread_scaling_replaces_the_fitted_exponent() {
    let mut sb = gpu_box();
    assert!((sb.thread_share(4, &FITTED) - 0.5).abs() < 1e-9);
    assert_eq!(sb.thread_share(16, &FITTED), 1.0);
    sb.host_bw_share_by_threads = vec![(1, 0.2), (2, 0.5), (4, 0.9)];
    assert!((sb.thread_share(4, &FITTED) - 0.9).abs() < 1e-9);
    assert!((sb.thread_share(3, &FITTED) - 0.7).abs() < 1e-9);
    assert!((sb.thread_share(6, &FITTED) - 0.95).abs() < 1e-9);
    assert_eq!(sb.thread_share(8, &FITTED), 1.0);
}
