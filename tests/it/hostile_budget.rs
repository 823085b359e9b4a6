//! Issue 33, "hangs": a config skipped before launching (predicted not to fit host RAM)
//! costs budget and is never proposed again, so a search whose every config (the baseline
//! included) is refused ends at once instead of proposing it thousands of times.

use crate::support;
use qtune::engine::LaunchArgs;

use qtune::search::run_search;
use qtune::search::strategy::SearchContext;
use qtune::trial::replay::{ReplayAnswer, ReplayRunner};
use qtune::trial::{OutcomeKind, TrialOutcome};
use std::time::{Duration, Instant};

fn context(budget_mib: f64) -> SearchContext {
    support::layouts::one_gpu_context(qtune::space::load("default").unwrap(), budget_mib)
}

fn no_config_skipped_twice(history: &[TrialOutcome]) {
    let skipped: Vec<&TrialOutcome> = history
        .iter()
        .filter(|o| o.kind == OutcomeKind::Skipped)
        .collect();
    for (i, a) in skipped.iter().enumerate() {
        for b in &skipped[i + 1..] {
            assert!(
                !(a.config == b.config && a.role == b.role),
                "{} skipped twice",
                a.config.label()
            );
        }
    }
}

#[test]
fn a_baseline_that_cannot_fit_ends_the_search_within_its_budget() {
    for has_gpu in [true, false] {
        let mut ctx = context(15_800.0);
        ctx.has_gpu = has_gpu;
        ctx.gpu_moe = has_gpu;
        if !has_gpu {
            ctx.budget_mib = None;
            ctx.space = qtune::space::load("cpu-only").unwrap();
        }
        // Nothing fits in 1 MiB of host RAM: every config is refused before it launches.
        ctx.ram_available_mib = Some(1.0);
        let runner = ReplayRunner::from_fn(|_| ReplayAnswer::Ok {
            gen_tps: 10.0,
            prompt_tps: 100.0,
            peak_vram_mib: None,
        });
        let t0 = Instant::now();
        let search = run_search(ctx.clone(), Box::new(runner), Vec::new(), None).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        assert!(!search.history.is_empty());
        assert!(
            search
                .history
                .iter()
                .all(|o| o.kind == OutcomeKind::Skipped),
            "nothing launched"
        );
        assert!(
            search.history.len() as u32 <= ctx.space.budget.trials,
            "{} outcomes for a budget of {}",
            search.history.len(),
            ctx.space.budget.trials
        );
        assert!(search.launches() <= ctx.space.budget.trials);
        no_config_skipped_twice(&search.history);
    }
}

fn tiny() -> std::path::PathBuf {
    qtune::fixtures::tiny_moe("tiny-qwen35moe").expect("the tiny MoE model")
}

fn fake_server() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-llama-server")
}

/// A tune of `budget_minutes` against the fake server in `mode` (with `space`, a space file
/// or name): it must end within the budget plus 30 s, with a one-line error or a result.
fn tune_ends_in_time(mode: &str, space: &str, budget_minutes: &str) -> std::process::Output {
    let tmp = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env_remove("QTUNE_LOG")
        .args(["tune", "--space", space, "--budget-minutes", budget_minutes])
        .arg("--model")
        .arg(tiny())
        .arg("--server")
        .arg(fake_server())
        .arg("--out")
        .arg(tmp.path().join("run"))
        .env("FAKE_MODE", mode)
        .env("FAKE_DELAY_S", "1")
        .output()
        .unwrap();
    let took = t0.elapsed();
    let budget = Duration::from_secs_f64(budget_minutes.parse::<f64>().unwrap() * 60.0);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        took <= budget + Duration::from_secs(30),
        "{mode}: a {budget:?} budget took {took:?}:\n{all}"
    );
    assert!(!all.contains("panicked"), "{all}");
    eprintln!("{mode}: {took:?} for a {budget:?} budget");
    o
}

/// The load timeout (60 s + 15 s per GiB) is capped by what the budget leaves: a server that
/// never becomes healthy (and ignores SIGTERM) cannot hold a 15 s tune for a minute.
#[test]
fn a_server_that_never_loads_cannot_overrun_the_minutes_budget() {
    let o = tune_ends_in_time("hang-load", "demo", "0.25");
    assert!(!o.status.success());
    // The budget ended the load: said so, never "loads too slowly".
    let all = String::from_utf8_lossy(&o.stderr);
    assert!(all.contains("budget-ended"), "{all}");
    assert!(!all.contains("loads too slowly"), "{all}");
}

/// A workload of 10,000 repetitions (the most a space may ask for) against a server that answers each request after a
/// second: the measurement stops at the budget's wall.
#[test]
fn ten_thousand_slow_repetitions_cannot_overrun_the_minutes_budget() {
    let dir = tempfile::tempdir().unwrap();
    let space = dir.path().join("reps.yaml");
    let demo = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("search-spaces/demo.yaml"),
    )
    .unwrap();
    // Whatever repetitions the demo space asks for (the test once replaced a line the space
    // no longer had, and measured nothing slow).
    let reps = demo
        .lines()
        .find(|l| l.trim_start().starts_with("repetitions:"))
        .expect("the demo space's repetitions");
    std::fs::write(
        &space,
        demo.replace(reps, "  repetitions: 10000")
            .replace("name: demo", "name: reps"),
    )
    .unwrap();
    let o = tune_ends_in_time("slow-ok", space.to_str().unwrap(), "0.25");
    // The budget's end cut the measurement: a launch the budget ended, never a config "far
    // too slow" (issue 56's GPU tune read its last launch that way).
    let all = String::from_utf8_lossy(&o.stderr);
    assert!(all.contains("budget-ended"), "{all}");
    assert!(all.contains("minutes budget ran out"), "{all}");
    assert!(!all.contains("far too slow"), "{all}");
}
