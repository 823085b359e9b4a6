//! Issue 13's new flags against the real CPU llama-server (pinned build): `-ot` expert rules,
//! `--load-mode none` and `--no-op-offload` are accepted, the server serves, and llama.cpp's own
//! regex engine sends exactly the intended expert tensors to the CPU (read from its `-v` log).

use crate::support;
use qtune::engine::LaunchArgs;
use support::{free_port, health_ok, require};

use qtune::config::{BlockSet, CpuExperts, ExpertProj, LaunchConfig, LoadMode, PartialBlock};
use qtune::model::gguf;
use qtune::model::layout::{classify, TensorClass};
use qtune::trial::journal::Journal;
use qtune::trial::llama_runner::LlamaServerRunner;
use qtune::trial::{OutcomeKind, TrialRole, TrialRunner};
use std::collections::BTreeSet;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn setup() -> Option<(PathBuf, PathBuf)> {
    let server = require::or_skip(require::server(), "the real CPU llama-server")?;
    let model = require::tiny_qwen3moe()?;
    Some((server, model))
}

/// A real-server trial runner with a short workload (32 prompt tokens, 8 generated, one
/// request), journaling into `dir`.
fn short_trial_runner(
    server: &Path,
    model: &Path,
    layout: &qtune::model::ModelLayout,
    dir: &Path,
) -> LlamaServerRunner {
    LlamaServerRunner::new(
        server,
        model,
        layout.file_bytes,
        qtune::space::Workload {
            prompt_tokens: 32,
            gen_tokens: 8,
            repetitions: 1,
            shape_repetitions: 1,
            warmup: false,
            context_depth: None,
            mix: None,
            mixes: Vec::new(),
            replay: None,
        },
        dir,
        Journal::open(dir).unwrap(),
        None,
        Duration::from_secs(120),
    )
    .unwrap()
}

/// Last block's experts whole, and the block before it split (gate and down on the CPU).
fn placement(n_blocks: u32) -> CpuExperts {
    CpuExperts {
        blocks: BlockSet::new([0, n_blocks - 1]),
        partial: Some(PartialBlock::new(
            n_blocks - 2,
            [ExpertProj::Gate, ExpertProj::Down],
        )),
    }
}

fn config(n_blocks: u32) -> LaunchConfig {
    LaunchConfig {
        threads: Some(2),
        cpu_experts: Some(placement(n_blocks)),
        load_mode: LoadMode::None,
        op_offload: false,
        ..LaunchConfig::baseline(512)
    }
}

/// Kills the server it holds when dropped (a failed assertion included).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn llama_cpp_sends_exactly_the_intended_expert_tensors_to_the_cpu() {
    let Some((server, model)) = setup() else {
        return;
    };
    let layout = qtune::model::load(&model).unwrap();
    let g = gguf::read(&model).unwrap();
    let cfg = config(layout.n_blocks);
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("server.log");
    let port = free_port();
    let argv = cfg.command(&server, &model, "127.0.0.1", port);
    let log = std::fs::File::create(&log_path).unwrap();
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        // Debug logging: llama.cpp names every tensor an override moved.
        .arg("-v")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut server_guard = Server(child);
    let start = Instant::now();
    while !health_ok(port) {
        if let Some(status) = server_guard.0.try_wait().unwrap() {
            panic!(
                "llama-server exited ({status}) on {}:\n{}",
                argv.join(" "),
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "not ready in 120 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(server_guard);
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(text.contains("load_mode = none"), "--load-mode none used");
    let moved: BTreeSet<String> = text
        .lines()
        .filter(|l| l.contains("buffer type overridden to"))
        .filter_map(|l| l.split("tensor ").nth(1)?.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let p = placement(layout.n_blocks);
    let want: BTreeSet<String> = g
        .tensors
        .iter()
        .filter(|t| match classify(&t.name) {
            TensorClass::RoutedExperts(il) => p.on_cpu(il, ExpertProj::of_tensor(&t.name).unwrap()),
            _ => false,
        })
        .map(|t| t.name.clone())
        .collect();
    assert!(!want.is_empty());
    assert_eq!(moved, want, "{}", argv.join(" "));
}

#[test]
fn a_trial_with_ot_rules_pinned_experts_and_no_op_offload_is_measured() {
    let Some((server, model)) = setup() else {
        return;
    };
    let layout = qtune::model::load(&model).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut r = short_trial_runner(&server, &model, &layout, dir.path());
    let cfg = config(layout.n_blocks);
    let o = r.run(&cfg, TrialRole::Search);
    assert_eq!(o.kind, OutcomeKind::Ok, "{} {:?}", o.message, o.evidence);
    assert!(o.gen_tps().is_some_and(|v| v > 0.0));
    let pid = r.last_server_pid().expect("a server was started");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z ")),
        "llama-server {pid} outlived the trial"
    );
    let log = std::fs::read_to_string(o.log.as_ref().unwrap()).unwrap();
    for flag in ["-ot ", "--load-mode none", "--no-op-offload"] {
        assert!(log.contains(flag), "{flag} in the logged argv");
    }
    // The journaled config reads back equal (new fields round-trip through the journal).
    let j = Journal::read(dir.path()).unwrap();
    assert_eq!(j[0].config, cfg);
}

/// Issue 15's flags against the pinned build: a two-GPU placement (`-sm layer -ts 60,40` and a
/// CPU expert rule) is accepted and measured (the CPU build ignores the split with a warning);
/// experts sent to a GPU the box does not have (`=CUDA1` on a CPU build) end as a bad flag,
/// not a crash, with the server's own words as evidence.
#[test]
fn two_gpu_flags_are_accepted_and_a_missing_device_is_a_bad_flag() {
    let Some((server, model)) = setup() else {
        return;
    };
    let layout = qtune::model::load(&model).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut r = short_trial_runner(&server, &model, &layout, dir.path());
    let mut cfg = LaunchConfig {
        threads: Some(2),
        split_mode: Some(qtune::config::SplitMode::Layer),
        ..LaunchConfig::baseline(512)
    };
    cfg.place_on_gpus(vec![60, 40], BlockSet::new([layout.n_blocks - 1]));
    let o = r.run(&cfg, TrialRole::Search);
    assert_eq!(o.kind, OutcomeKind::Ok, "{} {:?}", o.message, o.evidence);
    let log = std::fs::read_to_string(o.log.as_ref().unwrap()).unwrap();
    assert!(log.contains("-sm layer -ts 60,40"), "{log}");
    let mut on_gpu1 = cfg.clone();
    on_gpu1.gpu_experts = vec![qtune::config::GpuExperts {
        device: 1,
        blocks: BlockSet::new([0]),
    }];
    let o = r.run(&on_gpu1, TrialRole::Search);
    assert_eq!(
        o.kind,
        OutcomeKind::BadFlag,
        "{} {:?}",
        o.message,
        o.evidence
    );
    assert!(
        o.evidence.iter().any(|e| e.contains("unknown buffer type"))
            || o.message.contains("unknown buffer type"),
        "{} {:?}",
        o.message,
        o.evidence
    );
    let j = Journal::read(dir.path()).unwrap();
    assert_eq!(
        j[0].config, cfg,
        "the split round-trips through the journal"
    );
}
