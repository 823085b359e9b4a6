//! Two GPUs (issue 15): the layer split against what the first real two-GPU tune measured.
//!
//! tests/fixtures/gpu-x2/multi35-24-16-results.json(.gz): 2x H200 with ballasts (24 + 16 GiB free,
//! budgets 23,971 + 15,779 MiB), synthetic Qwen3.5-35B-A3B Q8_0, `--space default
//! --target-vram-headroom 512 --ctx 32768`. That tune split the layers 61/39 (by the budgets'
//! proportions) for every config: `-ub 512` peaked at [23,468, 13,604] (2.2 GiB idle on GPU 1),
//! and `-ub 2048` (trial 5) spilled on GPU 0 at [24,322, 14,350], 351 MiB over its budget while
//! GPU 1 had 1,429 MiB left; the search then moved block 25's experts to the CPU (12 % slower
//! generation) instead of moving a layer to GPU 1.
//!
//! The replayed box answers every config that tune ran as it measured it (medians and per-card
//! peaks), and any other config with its per-card prediction plus what the same card measured
//! beyond the prediction for the nearest measured config (same ubatch and KV, with or without
//! CPU experts): the per-layer weights are predicted to the byte, the error is in the compute
//! buffers and the CUDA context.

use crate::support;
use qtune::engine::LaunchArgs;

use qtune::config::LaunchConfig;
use qtune::run::{RunInputs, TuneResult};
use qtune::search::strategy::{QtuneSearch, SearchContext, TuneProblem};
use qtune::trial::replay::{ReplayAnswer, ReplayRunner};
use qtune::trial::{OutcomeKind, TrialOutcome, TrialRole};
use std::path::Path;
use support::multigpu::{assert_launch_budget, assert_ok_trials_within_each_card, replay_tune};

const FIXTURE: &str = "tests/fixtures/gpu-x2/multi35-24-16-results.json";

fn fixture() -> TuneResult {
    read(FIXTURE)
}

/// A fixture's results (stored gzipped: `FILE.json.gz`, named without the `.gz`).
fn read(fixture: &str) -> TuneResult {
    let path = format!("{}/{fixture}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&support::evidence::read(path)).unwrap()
}

/// The inputs the fixture's tune started from.
fn inputs(r: &TuneResult) -> RunInputs {
    let mut inputs = r.inputs.clone();
    // The fixture's tune ran with the default as its only baseline.
    inputs.space.objective.second_baseline = false;
    inputs.quality = None;
    inputs
}

fn context(r: &TuneResult) -> SearchContext {
    qtune::search::context(&inputs(r), &r.model, qtune::clock::system())
}

fn budgets(r: &TuneResult) -> Vec<u64> {
    r.inputs.gpu_budgets.iter().map(|g| g.budget_mib).collect()
}

/// Each card's peak minus its predicted buffers in a measured trial.
fn card_error(ctx: &SearchContext, t: &TrialOutcome) -> Vec<f64> {
    ctx.predict_cards(&t.config)
        .gpu_devices
        .iter()
        .map(|d| t.peak_vram_mib[d.device as usize] as f64 - d.total_mib)
        .collect()
}

/// The replayed box (see the module doc).
fn landscape(r: &TuneResult) -> ReplayRunner {
    let ctx = context(r);
    let measured: Vec<TrialOutcome> = r
        .trials
        .iter()
        .filter(|t| t.role == TrialRole::Search || t.role == TrialRole::Baseline)
        .cloned()
        .collect();
    let free: Vec<u64> = r.inputs.gpu_budgets.iter().map(|g| g.free_mib).collect();
    let answer = move |t: &TrialOutcome, peaks: Vec<u64>, cpu_blocks: f64| {
        let m = t.metrics.as_ref().expect("measured");
        // One block's experts on the CPU cost 9.5 % of generation, 5.7 % of prompt speed
        // (trials 4 and 5 of the fixture).
        ReplayAnswer::OkCards {
            gen_tps: m.gen_tps.median * (1.0 - 0.095 * cpu_blocks),
            prompt_tps: m.prompt_tps.median * (1.0 - 0.057 * cpu_blocks),
            peak_vram_mib: peaks,
        }
    };
    let runner = ReplayRunner::from_fn(move |c: &LaunchConfig| {
        if let Some(t) = measured.iter().find(|t| &t.config == c) {
            return answer(t, t.peak_vram_mib.clone(), 0.0);
        }
        if c.is_fit_placement() || c.is_auto_placement() {
            // Everything fits: fit places the model as the server's default does.
            let b = measured
                .iter()
                .find(|t| t.role == TrialRole::Baseline)
                .unwrap();
            return answer(b, b.peak_vram_mib.clone(), 0.0);
        }
        let n = ctx.cpu_blocks_of(c);
        let explicit = || measured.iter().filter(|t| t.config.n_gpu_layers.is_some());
        let same_kind = |t: &&TrialOutcome| (ctx.cpu_blocks_of(&t.config) > 0) == (n > 0);
        let reference = explicit()
            .filter(|t| t.config.base() == c.base())
            .min_by_key(|t| ctx.cpu_blocks_of(&t.config).abs_diff(n))
            .filter(same_kind)
            .or_else(|| {
                explicit()
                    .filter(|t| {
                        t.config.ubatch == c.ubatch && t.config.cache_type_k == c.cache_type_k
                    })
                    .find(same_kind)
            })
            .or_else(|| explicit().find(same_kind))
            .expect("a measured explicit placement");
        let error = card_error(&ctx, reference);
        let peaks: Vec<u64> = ctx
            .predict_cards(c)
            .gpu_devices
            .iter()
            .map(|d| (d.total_mib + error[d.device as usize]).round() as u64)
            .collect();
        if peaks.iter().zip(&free).any(|(p, f)| p > f) {
            return ReplayAnswer::Fail(OutcomeKind::OomLoad);
        }
        let more = n as f64 - ctx.cpu_blocks_of(&reference.config) as f64;
        answer(reference, peaks, more)
    });
    runner
        .with_noise(2.0, 11)
        .with_seconds_per_trial(10.0)
        .with_vram_budget(r.inputs.vram_budget_mib)
        .with_gpu_budgets(budgets(r))
}

/// The search resumed with `history` as its trials so far, run on the replayed box for
/// `launches` more launches (None: to the end of the tune).
fn resumed(r: &TuneResult, history: Vec<TrialOutcome>, launches: Option<u64>) -> QtuneSearch {
    let mut search = QtuneSearch::new();
    search.search_trials = history
        .iter()
        .filter(|t| t.role == TrialRole::Search)
        .count() as u32;
    let runner = landscape(r).with_first_id(history.len() as u32 + 1);
    search.history = history;
    let problem = TuneProblem::new(context(r), Box::new(runner), Vec::new(), None);
    let mut exec = argmin::core::Executor::new(problem, search);
    if let Some(n) = launches {
        exec = exec.configure(|state| state.max_iters(n));
    }
    exec.run().unwrap().solver().clone()
}

/// One line per trial, for `-- --nocapture`.
fn print_trial(o: &TrialOutcome) {
    println!(
        "#{} {:?} {} {} peaks {:?}",
        o.id,
        o.role,
        o.kind.as_str(),
        o.config.label(),
        o.peak_vram_mib
    );
}

#[test]
fn after_the_ubatch_2048_spill_the_layers_move_to_gpu1_before_any_expert_goes_to_the_cpu() {
    let r = fixture();
    let ctx = context(&r);
    let budgets = budgets(&r);
    let spilled = &r.trials[4];
    assert_eq!((spilled.id, spilled.kind), (5, OutcomeKind::Spill));
    assert_eq!(spilled.config.ubatch, Some(2048));
    assert_eq!(spilled.config.tensor_split, vec![61, 39]);
    assert_eq!(spilled.peak_vram_mib, vec![24_322, 14_350]);
    let excess = spilled.peak_vram_mib[0] - budgets[0];
    assert_eq!(excess, 351);

    // The search, resumed with the fixture's first five trials (the two baselines, -ub 512,
    // -ub 2048 with block 25's experts on the CPU, and -ub 2048 that spilled), goes on to the
    // end of the tune on the replayed box.
    let done = resumed(&r, r.trials[..5].to_vec(), None);
    let next = &done.history[5];
    for t in &done.history[5..] {
        print_trial(t);
    }

    // The next launch is -ub 2048 again, all experts on the GPU, the layers split further
    // toward GPU 1: not the ubatch's CPU-expert placement (trial 4) or another ubatch's.
    assert_eq!(next.role, TrialRole::Search);
    assert_eq!(
        next.config.base(),
        spilled.config.base(),
        "{}",
        next.config.label()
    );
    assert_eq!(next.config.cpu_experts, None, "{}", next.config.label());
    assert!(next.config.tensor_split[0] < 61, "{}", next.config.label());
    // It moves the 351 MiB GPU 0 was over, plus a margin, to GPU 1, and its prediction with
    // what each card measured beyond it fits both budgets.
    let before = ctx.predict_cards(&spilled.config);
    let after = ctx.predict_cards(&next.config);
    let moved = before.gpu_devices[0].total_mib - after.gpu_devices[0].total_mib;
    println!(
        "re-split: {} -> {} moves {moved:.0} MiB from GPU 0 to GPU 1",
        spilled.config.label(),
        next.config.label()
    );
    assert!(moved >= excess as f64 + 100.0, "{moved}");
    let error = card_error(&ctx, spilled);
    for d in &after.gpu_devices {
        let i = d.device as usize;
        let use_mib = d.total_mib + error[i];
        println!(
            "GPU {i}: predicted {:.0} + measured beyond it {:.0} = {use_mib:.0} MiB of {}",
            d.total_mib, error[i], budgets[i]
        );
        assert!(use_mib <= budgets[i] as f64, "GPU {i}: {use_mib:.0}");
    }
    // On the replayed box it runs within both cards' budgets.
    assert_eq!(next.kind, OutcomeKind::Ok, "{}", next.message);
    for (i, p) in next.peak_vram_mib.iter().enumerate() {
        assert!(*p <= budgets[i], "GPU {i}: {p}");
    }
    // The tune keeps the launch budget.
    assert_launch_budget(&done.history, &r.inputs.space);
}

#[test]
fn an_out_of_memory_on_one_card_is_re_split_too_and_two_full_cards_are_not() {
    let r = fixture();
    let ctx = context(&r);
    let spilled = &r.trials[4];
    let next_after = |kind: OutcomeKind, peaks: Vec<u64>| {
        let mut history = r.trials[..5].to_vec();
        history[4].kind = kind;
        history[4].peak_vram_mib = peaks;
        let done = resumed(&r, history, Some(1));
        done.history[5].config.clone()
    };
    // GPU 0 ran out of memory at its free VRAM (24,483 MiB): it needed at least that much; GPU
    // 1 had room. The same config goes again, a layer further toward GPU 1.
    let c = next_after(OutcomeKind::OomLoad, vec![24_470, 14_350]);
    println!("after an out-of-memory on GPU 0: {}", c.label());
    assert_eq!(c.base(), spilled.config.base(), "{}", c.label());
    assert_eq!(ctx.cpu_blocks_of(&c), 0, "{}", c.label());
    assert!(c.tensor_split[0] < 61, "{}", c.label());
    // GPU 1 ran out (at 16,280 of its 16,291 MiB free): it needed at least 2.6 GiB more than
    // predicted, so moving a layer onto it is no way out, and GPU 0 has no room for one more.
    let c = next_after(OutcomeKind::OomLoad, vec![23_500, 16_280]);
    println!("after an out-of-memory on GPU 1: {}", c.label());
    assert!(
        !(c.base() == spilled.config.base() && ctx.cpu_blocks_of(&c) == 0),
        "{}",
        c.label()
    );
    // Both cards over (the summed peak over the summed budgets): no split fits, so -ub 2048's
    // boundary stays at one block on the CPU and the search moves on.
    let c = next_after(OutcomeKind::Spill, vec![24_322, 15_900]);
    println!("after a spill on both cards: {}", c.label());
    assert!(
        !(c.base() == spilled.config.base() && ctx.cpu_blocks_of(&c) == 0),
        "{}",
        c.label()
    );
}

/// A whole tune on the replayed box, from its start.
fn tune(dir: &Path, r: &TuneResult) -> TuneResult {
    replay_tune(dir, &inputs(r), r.model.clone(), landscape(r))
}

#[test]
fn the_first_split_leaves_both_cards_room_and_ubatch_2048_runs_without_cpu_experts() {
    let r = fixture();
    let ctx = context(&r);
    let budgets = budgets(&r);
    let tmp = tempfile::tempdir().unwrap();
    let t = tune(tmp.path(), &r);
    for o in &t.trials {
        print_trial(o);
    }
    let explicit: Vec<&TrialOutcome> = t
        .trials
        .iter()
        .filter(|o| o.role == TrialRole::Search && o.config.n_gpu_layers == Some(999))
        .collect();
    // The first placement leaves each card about the same room: less than one layer (856 MiB
    // of Q8_0 weights) apart, where 61/39 left 503 MiB on GPU 0 and 2,175 on GPU 1.
    let first = explicit.first().expect("an explicit placement");
    assert_eq!(first.kind, OutcomeKind::Ok, "{}", first.message);
    let room: Vec<i64> = first
        .peak_vram_mib
        .iter()
        .zip(&budgets)
        .map(|(p, b)| *b as i64 - *p as i64)
        .collect();
    let layer_mib = r.model.blocks[0].total() as f64 / (1024.0 * 1024.0);
    assert!(
        ((room[0] - room[1]).abs() as f64) < layer_mib,
        "{}: room {room:?}",
        first.config.label()
    );
    // -ub 2048 runs with every expert on the GPU, within both budgets, before any placement of
    // it with experts on the CPU is launched.
    let ub2048 = |o: &&&TrialOutcome| o.config.ubatch == Some(2048);
    let whole = explicit
        .iter()
        .filter(ub2048)
        .position(|o| ctx.cpu_blocks_of(&o.config) == 0 && o.kind == OutcomeKind::Ok)
        .expect("-ub 2048 with every expert on the GPU ran ok");
    assert!(explicit
        .iter()
        .filter(ub2048)
        .take(whole)
        .all(|o| ctx.cpu_blocks_of(&o.config) == 0));
    // Each card within its own budget in every trial that ran ok; the launch budget holds.
    assert_ok_trials_within_each_card(&t.trials, &budgets);
    assert_launch_budget(&t.trials, &t.inputs.space);
}

#[test]
fn where_the_whole_model_fits_both_cards_every_config_keeps_its_experts_on_the_gpu() {
    // tests/fixtures/gpu-x2/multi30-16-12-results.json: Qwen3-30B-A3B Q4_K_M on 16 + 12 GiB,
    // every config of that tune ran with all experts on the GPUs.
    let r = read("tests/fixtures/gpu-x2/multi30-16-12-results.json");
    let ctx = context(&r);
    let budgets = budgets(&r);
    let tmp = tempfile::tempdir().unwrap();
    let t = tune(tmp.path(), &r);
    for o in &t.trials {
        print_trial(o);
        assert_eq!(
            o.kind,
            OutcomeKind::Ok,
            "{}: {}",
            o.config.label(),
            o.message
        );
        assert_eq!(ctx.cpu_blocks_of(&o.config), 0, "{}", o.config.label());
    }
    assert_ok_trials_within_each_card(&t.trials, &budgets);
    assert_launch_budget(&t.trials, &t.inputs.space);
}

/// tests/fixtures/gpu-x2/two35-12-8-results.json(.gz): the synthetic 35B Q4_K_M on two H200s
/// emulated at 12 + 8 GiB, the built-in agent session, `--budget-minutes 9` (20 launches). Its
/// one exploration launch spilled on GPU 0 by 59 MiB; the reserves for the race and the
/// variants then held the other 16 launches, the variants had nothing to vary but `-np 2` on
/// the reference, and the tune ended after 5 launches with no searched config run.
#[test]
fn a_first_placement_that_spills_does_not_end_the_exploration() {
    let r = read("tests/fixtures/gpu-x2/two35-12-8-results.json");
    let mut ctx = qtune::search::context(&r.inputs, &r.model, qtune::clock::system());
    // The trace's traits as that tune read them (its file is not kept): requests in flight at
    // once (so `-np 2` was the one lever) on a random-weight model.
    ctx.workload_traits.real_text = true;
    ctx.workload_traits.max_overlap = 2;
    ctx.workload_traits.synthetic = true;
    let history: Vec<TrialOutcome> = r.trials.iter().take(4).cloned().collect();
    assert_eq!(history[3].kind, OutcomeKind::Spill, "the fixture's trial 4");
    let mut search = QtuneSearch::new();
    search.search_trials = 1;
    search.history = history;
    let runner = landscape(&r).with_first_id(5);
    let problem = TuneProblem::new(ctx, Box::new(runner), Vec::new(), None);
    let s = argmin::core::Executor::new(problem, search)
        .run()
        .unwrap()
        .solver()
        .clone();
    s.history.iter().for_each(print_trial);
    let searched_ok = s
        .history
        .iter()
        .filter(|o| o.role == TrialRole::Search && o.kind.is_ok())
        .count();
    assert!(searched_ok >= 3, "{searched_ok} searched configs ran");
    assert!(
        s.history.len() >= 15,
        "the tune ended after {} of 20 launches",
        s.history.len()
    );
    // The first launch after the spill keeps the experts and moves the layers.
    assert_eq!(s.history[4].role, TrialRole::Search);
    assert_ne!(
        s.history[4].config.tensor_split,
        s.history[3].config.tensor_split
    );
}
