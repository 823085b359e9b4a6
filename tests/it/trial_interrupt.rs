//! No orphans under interruption. The parent tests re-run this test binary as a child that
//! runs real llama-server trials in a loop (`interrupt_child`, only active with
//! QTUNE_TEST_CHILD=1), then interrupt it at seeded random points in the load and measure
//! phases: with SIGINT / SIGTERM (the handlers set a flag; the runner ends its server on the
//! main thread, and the child exits 130 / 143 as qtune does) and with
//! SIGKILL (no handler runs: PR_SET_PDEATHSIG must take the server down). Each server carries a
//! unique `--alias` marker so a leftover one can be found in /proc.

use crate::support;

use qtune::trial::journal::{Journal, FILE_NAME};
use qtune::trial::llama_runner::LlamaServerRunner;
use qtune::trial::{OutcomeKind, TrialOutcome, TrialRole, TrialRunner};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::trial::*;

/// The child: trials in a loop until interrupted. Writes "started N" / "finished N" lines.
#[test]
fn interrupt_child() {
    if std::env::var("QTUNE_TEST_CHILD").as_deref() != Ok("1") {
        return;
    }
    qtune::trial::cleanup::install_handlers();
    let run_dir = PathBuf::from(std::env::var("QTUNE_TEST_RUN_DIR").unwrap());
    let marker = std::env::var("QTUNE_TEST_MARKER").unwrap();
    // The parent checked both before it started this child.
    let model = qtune::fixtures::smollm2().unwrap();
    let bytes = std::fs::metadata(&model).unwrap().len();
    let mut runner = LlamaServerRunner::new(
        &support::require::server().unwrap(),
        &model,
        bytes,
        qtune::space::Workload {
            repetitions: 1,
            ..tiny_workload()
        },
        &run_dir,
        Journal::open(&run_dir).unwrap(),
        None,
        Duration::from_secs(60),
    )
    .unwrap()
    .with_extra_args(vec!["--alias".into(), marker]);
    let mut progress = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run_dir.join("progress"))
        .unwrap();
    for _ in 0..500 {
        let id = runner.next_id();
        writeln!(progress, "started {id}").unwrap();
        let o = runner.run(&cpu_config(), TrialRole::Search);
        // The handlers only set a flag; the runner stopped its server and journaled nothing
        // half-done. Exit the way qtune's app layer does: 128 + the signal.
        if let Some(sig) = qtune::trial::cleanup::interrupted() {
            std::process::exit(128 + sig);
        }
        writeln!(progress, "finished {id} {}", o.kind).unwrap();
    }
}

/// A small deterministic generator (no rand dependency).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The child test's full name in this binary (`trial_interrupt::interrupt_child` in the one
/// integration-test binary, tests/it): `--exact` needs the module path, less the crate's name.
fn child_test_name() -> String {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    if module.is_empty() {
        "interrupt_child".into()
    } else {
        format!("{module}::interrupt_child")
    }
}

fn spawn_child(run_dir: &Path, marker: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &child_test_name(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("QTUNE_TEST_CHILD", "1")
        .env("QTUNE_TEST_RUN_DIR", run_dir)
        .env("QTUNE_TEST_MARKER", marker)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn progress(run_dir: &Path) -> (Vec<u32>, Vec<u32>) {
    let text = std::fs::read_to_string(run_dir.join("progress")).unwrap_or_default();
    let (mut started, mut finished) = (Vec::new(), Vec::new());
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["started", id] => started.push(id.parse().unwrap()),
            ["finished", id, ..] => finished.push(id.parse().unwrap()),
            _ => {}
        }
    }
    (started, finished)
}

fn trial_log(run_dir: &Path, id: u32) -> String {
    std::fs::read_to_string(run_dir.join(format!("logs/trial-{id}.log"))).unwrap_or_default()
}

/// Wait (bounded) until `cond` holds; false on timeout.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn wait_child(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child did not exit within {limit:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every journal line parses; ids are 1..=n; finished ⊆ journal ⊆ started.
fn check_journal(run_dir: &Path, started: &[u32], finished: &[u32]) -> Vec<TrialOutcome> {
    let raw = std::fs::read_to_string(run_dir.join(FILE_NAME)).unwrap_or_default();
    let entries: Vec<TrialOutcome> = raw
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("torn journal line {l:?}: {e}")))
        .collect();
    let ids: Vec<u32> = entries.iter().map(|o| o.id).collect();
    assert_eq!(ids, (1..=ids.len() as u32).collect::<Vec<_>>());
    for f in finished {
        assert!(ids.contains(f), "trial {f} finished but is not journaled");
    }
    for id in &ids {
        assert!(started.contains(id), "journaled trial {id} never started");
    }
    // An interrupted trial is never journaled as a failure.
    for o in &entries {
        assert_eq!(
            o.kind,
            OutcomeKind::Ok,
            "trial {} journaled as {}: {}",
            o.id,
            o.kind,
            o.message
        );
    }
    entries
}

/// After the child is gone: no server with the marker may remain (PDEATHSIG may take a moment
/// when the server had not been registered yet, so allow a short delay).
fn assert_no_server(marker: &str) {
    let gone = wait_for(Duration::from_secs(3), || processes_with(marker).is_empty());
    let left = processes_with(marker);
    for pid in &left {
        unsafe {
            libc::kill(*pid as i32, libc::SIGKILL);
        }
    }
    assert!(gone, "llama-server left behind: {left:?} ({marker})");
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Anywhere,
    Load,
    Measure,
}

/// Start the child, wait for the target phase of trial `nth` (1 or 2), plus a random delay.
fn interrupt_once(
    rng: &mut Lcg,
    target: Target,
    signal: i32,
    tag: &str,
) -> (PathBuf, tempfile::TempDir, String, std::process::ExitStatus) {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    let marker = format!("qtune-int-{}-{tag}", std::process::id());
    let mut child = spawn_child(&run_dir, &marker);
    let nth = 1 + rng.below(2) as u32;
    let reached = match target {
        Target::Anywhere => {
            std::thread::sleep(Duration::from_millis(300 + rng.below(3000)));
            true
        }
        Target::Load => wait_for(Duration::from_secs(60), || {
            run_dir.join(format!("logs/trial-{nth}.log")).exists()
        }),
        Target::Measure => wait_for(Duration::from_secs(60), || {
            trial_log(&run_dir, nth).contains("model loaded")
        }),
    };
    assert!(reached, "the child never reached {target:?} of trial {nth}");
    let extra = match target {
        Target::Anywhere => 0,
        Target::Load => rng.below(60),
        Target::Measure => rng.below(250),
    };
    std::thread::sleep(Duration::from_millis(extra));
    unsafe {
        libc::kill(child.id() as i32, signal);
    }
    let st = wait_child(&mut child, Duration::from_secs(20));
    (run_dir, dir, marker, st)
}

/// Where the interrupted trial was: "load", "measure" or "between".
fn phase_hit(run_dir: &Path, started: &[u32], finished: &[u32]) -> &'static str {
    match started.last() {
        Some(last) if !finished.contains(last) => {
            if trial_log(run_dir, *last).contains("model loaded") {
                "measure"
            } else {
                "load"
            }
        }
        _ => "between",
    }
}

#[test]
fn sigint_and_sigterm_at_random_points_leave_no_server_and_a_clean_journal() {
    if support::real_server().is_none() || support::smollm2().is_none() {
        return;
    }
    let mut rng = Lcg(0x5eed_2026);
    let targets = [Target::Anywhere, Target::Load, Target::Measure];
    let mut hits = std::collections::BTreeMap::<&str, u32>::new();
    for i in 0..21 {
        let target = targets[i % 3];
        // Every 7th run uses SIGTERM instead of SIGINT.
        let (sig, code) = if i % 7 == 6 {
            (libc::SIGTERM, 143)
        } else {
            (libc::SIGINT, 130)
        };
        let (run_dir, _dir, marker, st) = interrupt_once(&mut rng, target, sig, &format!("s{i}"));
        assert_eq!(
            st.code(),
            Some(code),
            "run {i} ({target:?}): exit status {st:?}"
        );
        assert_no_server(&marker);
        let (started, finished) = progress(&run_dir);
        check_journal(&run_dir, &started, &finished);
        let phase = phase_hit(&run_dir, &started, &finished);
        *hits.entry(phase).or_default() += 1;
        eprintln!(
            "run {i:2} {target:?} signal {sig}: interrupted in {phase}, {} trials finished",
            finished.len()
        );
    }
    eprintln!("phases hit: {hits:?}");
    assert!(hits.get("load").copied().unwrap_or(0) >= 1, "{hits:?}");
    assert!(hits.get("measure").copied().unwrap_or(0) >= 1, "{hits:?}");
}

#[test]
fn sigkill_of_qtune_takes_its_server_down() {
    if support::real_server().is_none() || support::smollm2().is_none() {
        return;
    }
    let mut rng = Lcg(0xdead_beef);
    for (i, target) in [Target::Measure, Target::Load, Target::Measure]
        .into_iter()
        .enumerate()
    {
        let (run_dir, _dir, marker, st) =
            interrupt_once(&mut rng, target, libc::SIGKILL, &format!("k{i}"));
        assert_eq!(st.signal(), Some(libc::SIGKILL));
        // No handler ran: only PDEATHSIG can have ended the server.
        assert_no_server(&marker);
        let (started, finished) = progress(&run_dir);
        check_journal(&run_dir, &started, &finished);
        eprintln!(
            "SIGKILL run {i} {target:?}: interrupted in {}",
            phase_hit(&run_dir, &started, &finished)
        );
    }
}
