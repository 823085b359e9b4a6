//! Issue 43: the box is read again before every launch, not only at the start. A tune whose
//! box gets busy mid-way records which launches ran on it (the journal and results.json) and
//! its verdict says so; and the confirmation race tells its watcher which round each launch
//! is, for the heartbeat. A replayed box on a manual clock and a scripted busy probe: the
//! probe is the only fake (the warning line itself is unit-tested in src/app/progress.rs;
//! tests/it/busy_box.rs has the start check against real busy loops).

use crate::support;

use qtune::app::progress::{BusyWatch, Progress, TuneBudget};
use qtune::config::LaunchConfig;
use qtune::hardware::busy::{Busy, Scripted};
use qtune::run::RunInputs;
use qtune::search::progress::{RaceStep, Watch};
use qtune::trial::replay::{ReplayAnswer, ReplayRunner};
use qtune::trial::TrialRole;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn inputs() -> RunInputs {
    let hw = support::hardware::FakeBox::new()
        .gpu("NVIDIA GeForce RTX 4090", 24_564, 23_000)
        .build();
    let mut space = qtune::space::load("default").unwrap();
    space.budget.trials = 24;
    RunInputs {
        model_path: PathBuf::from("Qwen3.5-35B-A3B-Q8_0.gguf"),
        server_path: PathBuf::from("llama-server"),
        server_version: "replayed box".into(),
        space,
        headroom_mib: 1024,
        vram_budget_mib: qtune::run::box_vram_budget_mib(&hw, 1024),
        gpu_budgets: qtune::run::gpu_budgets(&hw, 1024),
        free_vram_at_start_mib: hw.free_vram_mib(),
        hardware: hw,
        started_at: "2026-11-26T00:00:00Z".into(),
        host: "127.0.0.1".into(),
        port: 8080,
        start: None,
        quality: None,
        model_fingerprint: None,
        model_bytes: None,
        server_bytes: None,
        engine_servers: Vec::new(),
    }
}

/// Every config answers alike, a little faster with fewer CPU experts.
fn runner() -> ReplayRunner {
    ReplayRunner::from_fn(|c: &LaunchConfig| ReplayAnswer::Ok {
        gen_tps: 40.0 + f64::from(40 - c.n_cpu_moe.unwrap_or(40).min(40)) * 0.5,
        prompt_tps: 300.0,
        peak_vram_mib: Some(12_000),
    })
}

fn tune(
    dir: &std::path::Path,
    runner: ReplayRunner,
    watch: Arc<dyn Watch>,
) -> qtune::run::TuneResult {
    let inputs = inputs();
    let clock = qtune::clock::ManualClock::new();
    let runner = runner
        .with_journal(qtune::trial::journal::Journal::open(dir).unwrap())
        .with_clock(clock.clone());
    qtune::run::write_inputs(dir, &inputs).unwrap();
    qtune::search::tune(
        dir,
        &inputs,
        support::layouts::qwen35_like(),
        Box::new(runner),
        qtune::search::Resume {
            next_id: 1,
            ..Default::default()
        },
        Arc::new(clock),
        Some(watch),
    )
    .unwrap()
}

fn cores(others: f64) -> Busy {
    Busy {
        logical_cores: 2,
        others_cores: others,
        load_1m: Some(3.3),
        gpu_others: Vec::new(),
        gpu_idle: Vec::new(),
    }
}

#[test]
fn launches_on_a_box_that_got_busy_are_noted_in_the_journal_results_and_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let note = qtune::trial::phase::BusyNote::default();
    // Quiet for two launches, busy (both cores taken by others) for the next two, then quiet.
    let script = [cores(0.1), cores(0.1), cores(1.9), cores(1.9), cores(0.1)];
    let progress = Progress::new(
        TuneBudget {
            launches: 24,
            minutes: 60.0,
            launches_done: 0,
            elapsed_s: 0.0,
        },
        true,
    )
    .with_busy_watch(BusyWatch::new(
        Box::new(Scripted(script.into_iter().collect())),
        2,
        note.clone(),
    ));
    let result = tune(
        dir.path(),
        runner().with_busy_note(note),
        Arc::new(progress),
    );

    let journal = qtune::trial::journal::Journal::read(dir.path()).unwrap();
    let busy: Vec<u32> = journal
        .iter()
        .filter(|o| o.busy_box.is_some())
        .map(|o| o.id)
        .collect();
    assert_eq!(busy, vec![3, 4], "the journal marks the busy launches");
    assert_eq!(
        journal[2].busy_box.as_deref(),
        Some("other processes used 1.9 of 2 cores (load average 3.3)")
    );

    qtune::run::write_results(dir.path(), &result, qtune::report::verdict_json(&result)).unwrap();
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    let marked: Vec<u64> = results["trials"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["busy_box"].is_string())
        .map(|t| t["id"].as_u64().unwrap())
        .collect();
    assert_eq!(marked, vec![3, 4], "results.json marks them too");
    assert!(
        results["trials"][0].get("busy_box").is_none(),
        "a quiet launch carries no mark"
    );

    let said = result
        .warnings
        .iter()
        .find(|w| w.contains("ran on a box that got busy after the tune started"))
        .unwrap_or_else(|| panic!("the verdict says it: {:#?}", result.warnings));
    assert!(
        said.starts_with("2 of ")
            && said.contains("(trials 3, 4; the first saw other processes used 1.9 of 2 cores"),
        "{said}"
    );
}

/// A watcher that keeps what each launch was told.
#[derive(Default)]
struct Seen(Mutex<Vec<(TrialRole, Option<RaceStep>)>>);

impl Watch for Seen {
    fn starting(&self, _config: &LaunchConfig, role: TrialRole, race: Option<&RaceStep>) {
        self.0.lock().unwrap().push((role, race.cloned()));
    }
    fn finished(&self, _line: &str) {}
}

#[test]
fn every_race_launch_is_told_its_round_and_the_most_rounds_the_budget_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let result = tune(dir.path(), runner(), seen.clone());
    let seen = seen.0.lock().unwrap();
    let race: Vec<&RaceStep> = seen
        .iter()
        .filter(|(role, _)| *role == TrialRole::Confirm)
        .map(|(_, r)| r.as_ref().expect("a race launch is told its round"))
        .collect();
    assert!(!race.is_empty(), "the tune raced: {:#?}", result.trials);
    assert!(
        seen.iter()
            .filter(|(role, _)| *role != TrialRole::Confirm)
            .all(|(_, r)| r.is_none()),
        "only race launches name a round"
    );
    // Rounds count up from 1, each launched by the baseline and a candidate.
    assert_eq!(race[0].round, 1);
    for w in race.windows(2) {
        assert!(w[1].round == w[0].round || w[1].round == w[0].round + 1);
    }
    for r in &race {
        assert!(r.round <= r.rounds_at_most, "{r:?}");
    }
    let rounds = result.race.as_ref().unwrap().outcome.rounds.len() as u32;
    assert_eq!(race.last().unwrap().round, rounds);
    assert!(race.iter().any(|r| r.arm == "the baseline"));
    assert!(race.iter().any(|r| r.arm == "a candidate"));
    assert_eq!(
        race[0].describe("-c 4096"),
        format!(
            "racing round 1 of at most {}, {} (-c 4096)",
            race[0].rounds_at_most, race[0].arm
        )
    );
}
