//! The search's logic on replayed landscapes (no server launched): does it find the known
//! optimum, within budget, never crowning a failed config, whatever the prediction's error?
//! The real llama-server path of the search is covered by tests/tune_cli.rs.

use crate::support;

use qtune::config::{KvType, LaunchConfig};
use qtune::engine::LaunchArgs;
use qtune::search::run_search;
use qtune::search::strategy::SearchContext;
use qtune::trial::replay::{ReplayAnswer, ReplayRunner};
use qtune::trial::{OutcomeKind, TrialRole};

/// The default space under the generation-first objective with the default as the only
/// baseline: the search logic these tests pin down (the workload objective and the second
/// baseline are tests/it/workload_replay.rs's).
fn generation_first(mut space: qtune::space::SearchSpace) -> qtune::space::SearchSpace {
    space.objective.metric = qtune::objective::Metric::Gen;
    space.objective.second_baseline = false;
    space
}

fn context(budget_mib: f64) -> SearchContext {
    support::layouts::one_gpu_context(
        generation_first(qtune::space::load("default").unwrap()),
        budget_mib,
    )
}

/// The replayed box: the true boundary is the prediction's plus `offset`; fewer CPU experts are
/// faster; q8_0 KV is 4 % faster; ubatch 2048 doubles prompt speed; 8 threads are 10 % slower.
fn landscape(ctx: &SearchContext, offset: i64) -> ReplayRunner {
    ReplayRunner::from_fn(landscape_fn(ctx, offset))
}

fn landscape_fn(ctx: &SearchContext, offset: i64) -> impl FnMut(&LaunchConfig) -> ReplayAnswer {
    let ctx = ctx.clone();
    move |c: &LaunchConfig| {
        let Some(n) = c.n_cpu_moe else {
            // The baseline: the server's own auto-fit, slower than a tuned placement.
            return ReplayAnswer::Ok {
                gen_tps: 40.0,
                prompt_tps: 300.0,
                peak_vram_mib: Some(14_000),
            };
        };
        let base = qtune::search::strategy::base_of(c);
        let predicted = ctx.predicted_fit(&base, 0.0).expect("fits somewhere") as i64;
        let boundary = (predicted + offset).clamp(0, 40);
        if (n as i64) < boundary {
            return ReplayAnswer::Fail(if n as i64 == boundary - 1 {
                OutcomeKind::OomRuntime
            } else {
                OutcomeKind::OomLoad
            });
        }
        let mut tg = 70.0 - 1.5 * (n as f64 - boundary as f64);
        if c.cache_type_k == KvType::Q8_0 {
            tg *= 1.04;
        }
        if c.threads == Some(8) {
            tg *= 0.9;
        }
        let pp = if c.ubatch.unwrap_or(512) >= 2048 {
            900.0
        } else {
            450.0
        };
        ReplayAnswer::Ok {
            gen_tps: tg,
            prompt_tps: pp,
            peak_vram_mib: Some(15_000),
        }
    }
}

/// The true optimum's --n-cpu-moe for the winner's flags.
fn true_boundary(ctx: &SearchContext, c: &LaunchConfig, offset: i64) -> u32 {
    let base = qtune::search::strategy::base_of(c);
    (ctx.predicted_fit(&base, 0.0).unwrap() as i64 + offset).clamp(0, 40) as u32
}

fn check(offset: i64) {
    let ctx = context(15_800.0);
    let search = run_search(
        ctx.clone(),
        Box::new(landscape(&ctx, offset)),
        Vec::new(),
        None,
    )
    .unwrap();
    let h = &search.history;
    assert_eq!(
        h[0].role,
        TrialRole::Baseline,
        "the baseline is measured first"
    );
    let searched = h.iter().filter(|o| o.role == TrialRole::Search).count() as u32;
    assert!(
        searched <= ctx.space.budget.trials,
        "{searched} search trials"
    );
    let (best, _) = search
        .ranked_candidates(&ctx)
        .into_iter()
        .next()
        .expect("a candidate");
    assert_eq!(best.cache_type_k, KvType::Q8_0, "q8_0 is faster here");
    assert_eq!(best.threads, Some(16), "physical cores beat 8 threads here");
    assert_eq!(
        best.n_cpu_moe,
        Some(true_boundary(&ctx, &best, offset)),
        "the winner sits on the true boundary (prediction offset {offset})"
    );
    assert!(
        h.iter()
            .any(|o| o.role == TrialRole::Confirm && o.config.n_cpu_moe.is_none()),
        "the baseline is re-measured in the confirmation"
    );
    for o in h.iter().filter(|o| !o.kind.is_ok()) {
        assert_ne!(
            Some(&o.config),
            Some(&best),
            "a failed config never ranks first"
        );
    }
}

#[test]
fn finds_the_boundary_when_the_prediction_is_right() {
    check(0);
}

#[test]
fn finds_the_boundary_when_the_prediction_is_pessimistic() {
    check(-3);
}

#[test]
fn finds_the_boundary_when_the_prediction_is_optimistic() {
    check(2);
}

#[test]
fn every_config_failing_gives_no_candidate_and_stays_in_budget() {
    let ctx = context(15_800.0);
    let runner = ReplayRunner::from_fn(|_| ReplayAnswer::Fail(OutcomeKind::Crash));
    let search = run_search(ctx.clone(), Box::new(runner), Vec::new(), None).unwrap();
    assert!(search.ranked_candidates(&ctx).is_empty());
    assert!(search.search_trials <= ctx.space.budget.trials);
}

#[test]
fn a_replayed_journal_is_not_run_again() {
    // Resume: the trials of a first (killed) session are replayed from the journal, not re-run.
    let ctx = context(15_800.0);
    let full = run_search(ctx.clone(), Box::new(landscape(&ctx, 0)), Vec::new(), None).unwrap();
    let done: Vec<_> = full.history[..5].to_vec();
    let counting = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let mut inner = landscape_fn(&ctx, 0);
    let c2 = counting.clone();
    let runner = ReplayRunner::from_fn(move |c| {
        c2.set(c2.get() + 1);
        inner(c)
    });
    let resumed = run_search(ctx.clone(), Box::new(runner), done, None).unwrap();
    assert_eq!(resumed.history.len(), full.history.len());
    assert_eq!(
        counting.get() as usize,
        full.history.len() - 5,
        "only the trials after the journal ran"
    );
    let cfgs = |s: &qtune::search::strategy::QtuneSearch| {
        s.history
            .iter()
            .map(|o| o.config.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        cfgs(&resumed),
        cfgs(&full),
        "the resumed tune takes the same path"
    );
}

#[test]
fn re_measuring_ties_never_exceeds_the_trial_budget() {
    // Every config measures the same: every comparison is a tie and asks for re-measurement.
    for trials in 1..=8 {
        let mut ctx = context(15_800.0);
        ctx.space.budget.trials = trials;
        let flat = ReplayRunner::from_fn(|c: &LaunchConfig| ReplayAnswer::Ok {
            gen_tps: 50.0,
            prompt_tps: 500.0,
            peak_vram_mib: Some(if c.n_cpu_moe.is_some() {
                15_000
            } else {
                14_000
            }),
        });
        let search = run_search(ctx.clone(), Box::new(flat), Vec::new(), None).unwrap();
        assert!(
            search.search_trials <= trials,
            "{} search trials for a budget of {trials}",
            search.search_trials
        );
    }
}

/// Issue 13: a config whose pinned experts (`--load-mode none`) would not fit in the available
/// host RAM is never launched: it is recorded as skipped, with the reason, and the runner never
/// sees it. The baseline (memory-mapped) still runs.
#[test]
fn pinned_experts_over_the_available_ram_are_never_launched() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let mut ctx = context(15_800.0);
    assert_eq!(
        ctx.space.load_modes()[0],
        qtune::config::LoadMode::None,
        "the default space starts with pinned experts"
    );
    // Far less than the GBs of experts any fitting placement pins in RAM.
    ctx.ram_available_mib = Some(2_000.0);
    let launched = Arc::new(AtomicUsize::new(0));
    let seen = launched.clone();
    let mut inner = landscape_fn(&ctx, 0);
    let runner = ReplayRunner::from_fn(move |c: &LaunchConfig| {
        seen.fetch_add(1, Ordering::SeqCst);
        inner(c)
    });
    let search = run_search(ctx.clone(), Box::new(runner), Vec::new(), None).unwrap();
    let searched: Vec<_> = search
        .history
        .iter()
        .filter(|o| o.role == TrialRole::Search)
        .collect();
    assert!(!searched.is_empty());
    for o in &searched {
        assert_eq!(o.kind, OutcomeKind::Skipped, "{}", o.config.label());
        assert!(o.message.contains("would swap"), "{}", o.message);
    }
    let baselines = search
        .history
        .iter()
        .filter(|o| o.role == TrialRole::Baseline)
        .count();
    assert_eq!(launched.load(Ordering::SeqCst), baselines);
    assert!(search.ranked_candidates(&ctx).is_empty());

    // With the RAM to hold them, the same search launches its configs.
    ctx.ram_available_mib = Some(1_000_000.0);
    let search = run_search(ctx.clone(), Box::new(landscape(&ctx, 0)), Vec::new(), None).unwrap();
    assert!(search
        .history
        .iter()
        .any(|o| o.role == TrialRole::Search && o.kind == OutcomeKind::Ok));
}

/// Issue 13: the search measures the space's variants of its best config (the other load mode,
/// the placement styles filled to the budget, `--fit on --fit-target <headroom>`, and
/// `--no-op-offload`); the race decides. On a box where fit's own placement is the fastest, it
/// wins, over seeded noise, within the default space's 20 launches.
#[test]
fn the_fit_candidate_wins_where_it_is_best_within_twenty_launches() {
    let ctx = context(15_800.0);
    let mut launches = Vec::new();
    for seed in 1..=8u64 {
        let mut inner = landscape_fn(&ctx, 0);
        let runner = ReplayRunner::from_fn(move |c: &LaunchConfig| {
            if c.is_fit_placement() {
                ReplayAnswer::Ok {
                    gen_tps: 90.0,
                    prompt_tps: 950.0,
                    peak_vram_mib: Some(15_000),
                }
            } else {
                inner(c)
            }
        })
        .with_noise(3.0, seed);
        let search = run_search(ctx.clone(), Box::new(runner), Vec::new(), None).unwrap();
        let h = &search.history;
        let n = search.launches();
        assert!(n <= ctx.space.budget.trials, "seed {seed}: {n} launches");
        launches.push(n);
        let tried = |f: &dyn Fn(&LaunchConfig) -> bool| {
            h.iter()
                .any(|o| o.role == TrialRole::Search && f(&o.config))
        };
        assert!(tried(&|c| c.is_fit_placement()
            && c.fit_target_mib
                == [512 + qtune::placement::FIT_OVERSHOOT_MIB]));
        assert!(tried(
            &|c| c.load_mode == qtune::config::LoadMode::Auto && c.n_cpu_moe.is_some()
        ));
        let race = search
            .race_outcome(&ctx)
            .map(|outcome| qtune::run::RaceReport {
                candidates: search.race_candidates.clone(),
                outcome,
            });
        assert!(race.is_some(), "seed {seed}: the race ran");
        let mut warnings = Vec::new();
        let (_, winner) = qtune::search::verdict::decide(
            &ctx,
            h,
            Some(15_800),
            &|c: &LaunchConfig| c.server_args(),
            &mut warnings,
            race.as_ref(),
        );
        let w = winner.expect("a winner");
        assert!(
            w.config.is_fit_placement(),
            "seed {seed}: {} won ({warnings:?})",
            w.config.label()
        );
        let g = w.gen_vs_baseline.expect("the winner carries its interval");
        assert!(g.interval_pct().unwrap().0 > 0.0, "{g}");
    }
    println!("launches per default-space tune over 8 seeds: {launches:?}");
}

/// Issue 12: the box's launch-to-launch noise is measured at the start (the baseline twice,
/// back to back, before any search launch), and the race is sized from it. Two launches give
/// σ one degree of freedom, so sizing pools it with a prior (2 % per launch, as 4 degrees of
/// freedom): a probe that reads the box quiet (0.5 %) no longer talks the race into two
/// candidates of 3 rounds each (issue 13's run 4 read 0.7 % and then paired at 4 %). The
/// budget affords one candidate in every seed, quiet or noisy, and a noisier probe asks for
/// more rounds.
#[test]
fn the_noise_is_measured_first_and_sizes_the_race() {
    let ctx = context(15_800.0);
    let mut rounds_at = Vec::new();
    for (noise_pct, want_raced, min_seeds) in [(0.5, 1usize, 20usize), (15.0, 1usize, 12usize)] {
        let mut hits = 0;
        let mut rounds = Vec::new();
        for seed in 1..=20u64 {
            let runner = landscape(&ctx, 0).with_noise(noise_pct, seed);
            let search = run_search(ctx.clone(), Box::new(runner), Vec::new(), None).unwrap();
            let h = &search.history;
            assert_eq!(h[0].role, TrialRole::Baseline);
            assert_eq!(
                h[1].role,
                TrialRole::Baseline,
                "the second launch re-measures the baseline"
            );
            assert_eq!(h[1].config, h[0].config);
            assert!(h[2..].iter().all(|o| o.role != TrialRole::Baseline));
            assert!(search.launches() <= ctx.space.budget.trials);
            let outcome = search.race_outcome(&ctx).expect("a race");
            let noise = outcome.noise.expect("the probe measured the noise");
            assert_eq!(noise.df, 1);
            rounds.push(noise.rounds_to_resolve);
            let raced = outcome
                .candidates
                .iter()
                .filter(|c| !matches!(c.status, qtune::stats::race::ArmStatus::NotRaced { .. }))
                .count();
            hits += usize::from(raced == want_raced);
        }
        println!(
            "replayed noise {noise_pct} %: {hits} of 20 seeds raced {want_raced} candidate(s)"
        );
        assert!(hits >= min_seeds, "noise {noise_pct} %: {hits} of 20");
        rounds.sort_unstable();
        rounds_at.push(rounds[rounds.len() / 2]);
    }
    println!("median rounds to decide, quiet then noisy probe: {rounds_at:?}");
    assert!(rounds_at[1] > rounds_at[0], "{rounds_at:?}");
}

/// Issue 13 (GPU run, 24 GiB cards): where the whole model fits on the card, no expert sits on
/// the CPU, so load mode, placement and fit's candidate change nothing; the launches go to what
/// measurement must decide there: the KV type (f16 against q8_0) and the ubatch, f16 first.
#[test]
fn where_the_whole_model_fits_the_kv_type_and_ubatch_are_measured_not_the_placements() {
    let ctx = context(40_000.0);
    let search = run_search(ctx.clone(), Box::new(landscape(&ctx, 0)), Vec::new(), None).unwrap();
    let h = &search.history;
    let searched: Vec<&LaunchConfig> = h
        .iter()
        .filter(|o| o.role == TrialRole::Search)
        .map(|o| &o.config)
        .collect();
    for c in &searched {
        println!("{}", c.label());
        assert_eq!(c.n_cpu_moe.unwrap_or(0), 0, "{}", c.label());
        assert!(
            c.cpu_experts.is_none() && !c.is_fit_placement(),
            "{}",
            c.label()
        );
        assert_eq!(c.load_mode, ctx.space.load_modes()[0], "{}", c.label());
    }
    // The space lists q8_0 first, but f16 (the server's default, free where everything fits)
    // is where the search starts: the ubatch sizes are measured with it, q8_0 once after.
    let first_q8 = searched
        .iter()
        .position(|c| c.cache_type_k == KvType::Q8_0)
        .expect("q8_0 KV was measured");
    assert!(
        first_q8 >= 3,
        "q8_0 came before the ubatch sizes: {first_q8}"
    );
    assert!(searched[..first_q8]
        .iter()
        .all(|c| c.cache_type_k == KvType::F16));
    let ubatches: std::collections::BTreeSet<Option<u32>> =
        searched.iter().map(|c| c.ubatch).collect();
    assert!(ubatches.len() >= 3, "{ubatches:?}");
    assert!(search.launches() <= ctx.space.budget.trials);
}

/// Issue 14: the tune uses the speed model. The variants of the best config (other load mode,
/// filled placements, fit's, `--no-op-offload`) are launched in the order of their predicted
/// generation speed, so a budget that runs short leaves out the ones the model rates lower.
#[test]
fn variants_are_launched_in_the_order_the_speed_model_predicts() {
    use qtune::model::speed::{predict, FITTED};
    let sb = h100_box();
    let mut ctx = context(15_800.0);
    ctx.speed = Some(sb.clone());
    let search = run_search(ctx.clone(), Box::new(landscape(&ctx, 0)), Vec::new(), None).unwrap();
    assert!(search.launches() <= ctx.space.budget.trials);
    let variants: Vec<&LaunchConfig> = search
        .history
        .iter()
        .filter(|o| o.role == TrialRole::Search)
        .map(|o| &o.config)
        .filter(|c| {
            c.cpu_experts.is_some()
                || c.is_fit_placement()
                || c.load_mode != ctx.space.load_modes()[0]
                || !c.op_offload
        })
        .collect();
    assert!(variants.len() >= 2, "{} variants", variants.len());
    let tg: Vec<Option<f64>> = variants
        .iter()
        .map(|c| {
            predict(
                &ctx.layout,
                c,
                &sb,
                true,
                ctx.space.workload.prompt_tokens,
                &FITTED,
            )
            .map(|p| p.tg.tps)
        })
        .collect();
    for (c, t) in variants.iter().zip(&tg) {
        println!(
            "{:>8} {}",
            t.map_or("-".into(), |t| format!("{t:.1}")),
            c.label()
        );
    }
    // Predicted ones first, in non-increasing order; unpredictable ones (fit's) after.
    let predicted: Vec<f64> = tg.iter().map_while(|t| *t).collect();
    assert!(tg[predicted.len()..].iter().all(|t| t.is_none()), "{tg:?}");
    assert!(predicted.windows(2).all(|w| w[0] >= w[1]), "{predicted:?}");
}

/// Issue 13 (24 GiB runs): with every weight on the GPU, `-t 16` and `-t 8` twins of one config
/// run the same kernels on the card (run 3 on the 30B raced both, 3 rounds each). The race keeps
/// only the better-ranked twin, so its launches go to more rounds of one comparison. Twins are
/// only those: with experts on the CPU, threads run the experts' decode and stay distinct.
#[test]
fn thread_twins_are_only_configs_held_whole_on_the_gpu_that_differ_in_threads() {
    use qtune::search::strategy::thread_twins_on_gpu as twins;
    let ctx = context(40_000.0);
    let whole = LaunchConfig {
        threads: Some(16),
        batch: Some(4096),
        ubatch: Some(4096),
        ..LaunchConfig::baseline(32768)
    }
    .with_experts_on_cpu(0);
    let t8 = LaunchConfig {
        threads: Some(8),
        ..whole.clone()
    };
    assert!(twins(&whole, &t8, &ctx));
    assert!(twins(&t8, &whole, &ctx));
    assert!(!twins(&whole, &whole, &ctx), "a config is not its own twin");
    let other_ub = LaunchConfig {
        ubatch: Some(2048),
        ..t8.clone()
    };
    assert!(!twins(&whole, &other_ub, &ctx), "ubatch differs too");
    let cpu = whole.clone().with_experts_on_cpu(4);
    let cpu8 = LaunchConfig {
        threads: Some(8),
        ..cpu.clone()
    };
    assert!(
        !twins(&cpu, &cpu8, &ctx),
        "experts on the CPU: threads matter"
    );
    let no_gpu = SearchContext {
        has_gpu: false,
        ..ctx.clone()
    };
    assert!(!twins(&whole, &t8, &no_gpu), "CPU-only: threads matter");
}

/// The H100's speed box the GPU runs measured (NVML bandwidth, PCIe 5.0 x16, host read rate).
fn h100_box() -> qtune::model::speed::SpeedBox {
    qtune::model::speed::SpeedBox {
        gpu_bw_gbs: Some(3352.0),
        pcie_gbs: Some(63.0),
        host_bw_gbs: 100.0,
        physical_cores: 16,
        host_bw_share_by_threads: Vec::new(),
        sources: Vec::new(),
        rpc_links: Vec::new(),
    }
}

/// Issue 14 (run 6's 16 GiB tunes never launched the config the plan proposed, which a later
/// re-measurement put ahead of `--fit` on both axes): the speed model's pick is launched right
/// after the baseline's two launches, and it is the best-predicted of the space's batch/KV pairs
/// and placement styles by the plan's rule. When its single launch reads within the box's
/// launch noise of the screening's leader, the race takes it first and says why; when it reads
/// clearly slower, the measured leader is raced.
#[test]
fn the_speed_models_pick_is_launched_first_and_raced_unless_measured_clearly_slower() {
    use qtune::model::speed::{predict, FITTED, PICK_TIE_PCT};
    let mut ctx = context(15_800.0);
    ctx.speed = Some(h100_box());
    // The pick on this box, from what the baseline's launches measured (nothing itemized in
    // this replay: its trials report no buffers).
    let pick = qtune::search::pick::model_pick(&ctx, 0.0).expect("a pick on a known GPU");
    println!("the model's pick: {}", pick.label());
    assert!(
        pick.cpu_experts.is_some() || pick.n_cpu_moe.is_some(),
        "a 15.8 GiB budget puts experts on the CPU: {}",
        pick.label()
    );
    let tg_of = |c: &LaunchConfig| {
        predict(
            &ctx.layout,
            c,
            &h100_box(),
            true,
            ctx.space.workload.prompt_tokens,
            &FITTED,
        )
        .map(|p| p.tg.tps)
    };
    let pick_tg = tg_of(&pick).expect("the pick is predictable");
    for (factor, raced_first) in [(0.92, true), (0.70, false)] {
        let ctx2 = ctx.clone();
        let p2 = pick.clone();
        let mut land = landscape_fn(&ctx2, 0);
        let mut baselines = 0;
        // The pick measures `factor` of the best the landscape offers (q8_0 at its boundary,
        // 72.8 tok/s), with the largest prompt speed of all. The baseline's two launches read
        // 10 % apart: a noisy box (launch σ 3.8 % pooled with the prior, a band of ±10.1 %).
        let runner = ReplayRunner::from_fn(move |c: &LaunchConfig| {
            if c.n_cpu_moe.is_none() && c.cpu_experts.is_none() && !c.is_fit_placement() {
                baselines += 1;
                return ReplayAnswer::Ok {
                    gen_tps: if baselines == 2 { 36.0 } else { 40.0 },
                    prompt_tps: 300.0,
                    peak_vram_mib: Some(14_000),
                };
            }
            if c == &p2 {
                ReplayAnswer::Ok {
                    gen_tps: 72.8 * factor,
                    prompt_tps: 1_200.0,
                    peak_vram_mib: Some(15_000),
                }
            } else {
                land(c)
            }
        });
        let search = run_search(ctx.clone(), Box::new(runner), Vec::new(), None).unwrap();
        let h = &search.history;
        assert_eq!(
            (h[0].role, h[1].role),
            (TrialRole::Baseline, TrialRole::Baseline)
        );
        assert_eq!(h[2].role, TrialRole::Search);
        assert_eq!(h[2].config, pick, "the pick is the first search launch");
        assert_eq!(search.model_pick.as_ref(), Some(&pick));
        // Nothing the tune launched that the memory prediction fits in the budget is
        // predicted faster in generation beyond the pick's tie (the boundary's check one block
        // below the prediction is faster, and predicted not to fit).
        for o in h.iter().filter(|o| {
            o.role == TrialRole::Search
                && qtune::model::memory::predict(&ctx.layout, &o.config, true).gpu_mib <= 15_800.0
        }) {
            if let Some(t) = tg_of(&o.config) {
                assert!(
                    t <= pick_tg * (1.0 + PICK_TIE_PCT / 100.0) + 1e-9,
                    "{} predicted {t:.1} against the pick's {pick_tg:.1}",
                    o.config.label()
                );
            }
        }
        assert!(search.launches() <= ctx.space.budget.trials);
        let first = search.race_candidates.first().expect("a race");
        let note = search
            .warnings
            .iter()
            .find(|w| w.contains("speed model's pick"));
        println!(
            "pick at {factor}: raced first {}; note: {note:?}",
            first.label()
        );
        if raced_first {
            assert_eq!(first, &pick, "within the noise the model's ranking decides");
            assert!(
                note.is_some_and(|n| n.contains("-8.0 %") && n.contains("±10.1 %")),
                "{note:?}"
            );
        } else {
            assert_ne!(first, &pick, "30 % slower is not noise");
            assert!(note.is_none(), "{note:?}");
        }
    }
}

/// ik_llama.cpp raced beside llama.cpp (issue 56) where ik's buffers are larger: the search's
/// best config, translated to ik, runs out of memory at llama.cpp's boundary. ik's own
/// boundary is then found (one more CPU block at a time) before its own levers are measured,
/// and none of them is launched on a placement ik could not hold.
#[test]
fn another_engine_that_needs_more_room_is_placed_at_its_own_boundary() {
    use qtune::config::EngineKind;
    let mut ctx = context(15_800.0);
    ctx.space.fixed.also_engines = vec![EngineKind::IkLlama];
    ctx.space.budget.trials = 30;
    ctx.space.budget.minutes = 60.0;
    // ik holds two blocks' experts fewer on the GPU than llama.cpp.
    const IK_EXTRA: u32 = 2;
    let llama = ctx.clone();
    let mut on_llama = landscape_fn(&llama, 0);
    let runner = ReplayRunner::from_fn(move |c: &LaunchConfig| {
        if c.engine != EngineKind::IkLlama {
            return on_llama(c);
        }
        let Some(n) = c.n_cpu_moe else {
            return ReplayAnswer::Ok {
                gen_tps: 38.0,
                prompt_tps: 280.0,
                peak_vram_mib: Some(14_000),
            };
        };
        let as_llama = LaunchConfig {
            engine: EngineKind::LlamaCpp,
            engine_opts: Default::default(),
            ..c.clone()
        };
        if n < true_boundary(&llama, &as_llama, 0) + IK_EXTRA {
            return ReplayAnswer::Fail(OutcomeKind::OomLoad);
        }
        ReplayAnswer::Ok {
            gen_tps: 80.0,
            prompt_tps: 900.0,
            peak_vram_mib: Some(15_000),
        }
    });
    let search = run_search(ctx.clone(), Box::new(runner), Vec::new(), None).unwrap();
    let ik: Vec<_> = search
        .history
        .iter()
        .filter(|o| o.role == TrialRole::Search && o.config.engine == EngineKind::IkLlama)
        .collect();
    for o in &ik {
        println!(
            "{} {} {}",
            o.kind.as_str(),
            o.config.n_cpu_moe.unwrap_or(0),
            o.config.label()
        );
    }
    let first = ik.first().expect("the best config was tried on ik");
    let n = first.config.n_cpu_moe.expect("an explicit placement");
    assert!(
        first.kind.is_memory_failure(),
        "at llama.cpp's boundary ik runs out of memory"
    );
    let ran = ik
        .iter()
        .find(|o| o.kind.is_ok())
        .expect("ik ran at its own boundary");
    assert_eq!(ran.config.n_cpu_moe, Some(n + IK_EXTRA));
    assert!(
        ik.iter()
            .filter(|o| o.config.engine_opts != Default::default())
            .all(|o| o.config.n_cpu_moe == Some(n + IK_EXTRA)),
        "ik's own levers only on the placement it holds"
    );
    assert!(
        ik.iter()
            .any(|o| o.config.engine_opts != Default::default() && o.kind.is_ok()),
        "ik's own levers measured"
    );
}

/// A search on the 16 GiB landscape that races ik_llama.cpp beside llama.cpp (its auto-fit
/// baseline too), every ik launch ending as `kind`; ik's variants are reserved for before its
/// baselines run.
fn raced_with_ik_failing(
    kind: OutcomeKind,
) -> (SearchContext, qtune::search::strategy::QtuneSearch) {
    use qtune::config::EngineKind;
    let mut ctx = context(15_800.0);
    ctx.space.fixed.also_engines = vec![EngineKind::IkLlama];
    ctx.space.objective.second_baseline = true;
    ctx.space.budget.trials = 30;
    ctx.space.budget.minutes = 60.0;
    assert!(
        qtune::search::engines::variant_count(&ctx, &[]) > 0,
        "before its baselines ran, ik's variants are reserved for"
    );
    let mut on_llama = landscape_fn(&ctx.clone(), 0);
    let runner = ReplayRunner::from_fn(move |c: &LaunchConfig| {
        if c.engine == EngineKind::IkLlama {
            return ReplayAnswer::Fail(kind);
        }
        on_llama(c)
    });
    let search = run_search(ctx.clone(), Box::new(runner), Vec::new(), None).unwrap();
    (ctx, search)
}

/// ik_llama.cpp raced beside llama.cpp on a model it cannot load (issue 56, ik 0.1.5 on
/// Qwen3.5-35B): both its baselines crash, so no other ik config is launched, the variant
/// reserve holds no launch for it, and the line saying so names how its first baseline failed.
#[test]
fn an_engine_whose_baselines_all_crash_is_not_tried_further() {
    use qtune::config::EngineKind;
    use qtune::search::engines;
    let (ctx, search) = raced_with_ik_failing(OutcomeKind::Crash);
    let ik: Vec<_> = search
        .history
        .iter()
        .filter(|o| o.config.engine == EngineKind::IkLlama)
        .collect();
    assert_eq!(ik.len(), 2, "ik's two baselines, and nothing else on ik");
    assert!(ik.iter().all(|o| o.role == TrialRole::SecondBaseline));
    assert_eq!(engines::variant_count(&ctx, &search.history), 0);
    let lines: Vec<String> = engines::dropped(&ctx, &search.history)
        .iter()
        .map(|d| d.line())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with(
            "ik_llama.cpp: not tried further: both its baselines failed without running out of \
             memory (crash: "
        ),
        "{lines:?}"
    );
    let note = engines::baseline_note(&ctx, &search.history, false).unwrap();
    assert!(
        note.contains("ik_llama.cpp not measured (its baselines failed)"),
        "{note}"
    );
    // With a recommendation, its verdict's line for ik says it (report::engines).
    let note = engines::baseline_note(&ctx, &search.history, true).unwrap();
    assert!(!note.contains("ik_llama.cpp"), "{note}");
}

/// An engine whose baselines the minutes budget cut (issue 56's third GPU lease: ik's
/// `--fit` baseline was still measuring when 8 minutes ran out) is no failed engine: it is not
/// dropped, its variants stay reserved for, and the note says the budget ended first.
#[test]
fn an_engine_whose_baselines_the_budget_cut_is_not_dropped() {
    use qtune::config::EngineKind;
    use qtune::search::engines;
    let (ctx, search) = raced_with_ik_failing(OutcomeKind::BudgetEnded);
    let ik_baselines = search
        .history
        .iter()
        .filter(|o| o.config.engine == EngineKind::IkLlama && o.role == TrialRole::SecondBaseline)
        .count();
    assert_eq!(ik_baselines, 2, "both ik baselines launched");
    assert!(engines::dropped(&ctx, &search.history).is_empty());
    assert!(!engines::is_dropped(
        &ctx,
        &search.history,
        EngineKind::IkLlama
    ));
    let note = engines::baseline_note(&ctx, &search.history, false).unwrap();
    assert!(
        note.contains("ik_llama.cpp not measured (the minutes budget ended first)"),
        "{note}"
    );
}
