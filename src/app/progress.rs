//! The tune's progress on stderr: one line as each launch starts (`launch 5/20 · search ·
//! 3m12s elapsed · ETA 9m`), one line per finished trial, and a heartbeat every
//! [`HEARTBEAT`] while a launch is still loading or measuring. A spinner on a terminal; plain
//! lines otherwise. `--quiet` prints none of it. Colour only on a terminal without `NO_COLOR`.

use crate::config::LaunchConfig;
use crate::engine::LaunchArgs;
use crate::search::progress::launch_word;
use crate::trial::TrialRole;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a launch runs before a heartbeat line says it is still going.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// The tune's budget and what earlier sessions (a resumed tune) already spent.
#[derive(Debug, Clone, Copy)]
pub struct TuneBudget {
    pub launches: u32,
    pub minutes: f64,
    pub launches_done: u32,
    pub elapsed_s: f64,
}

struct State {
    budget: TuneBudget,
    started: Instant,
    /// The launch now running (1-based over the whole tune), its role and start.
    launch: u32,
    current: Option<(Instant, String)>,
    /// Wall time of each launch finished in this session, seconds.
    durations: Vec<f64>,
    last_line: Instant,
    /// What the launch is doing now, when the runner says it (a real tune).
    doing: Option<crate::trial::phase::PhaseCell>,
    /// Where the launch stands in the confirmation race (`racing round 2 of at most 5, ...`).
    race: Option<String>,
}

impl State {
    fn elapsed_s(&self) -> f64 {
        self.budget.elapsed_s + self.started.elapsed().as_secs_f64()
    }

    /// Seconds left: the mean launch so far times the launches left (this one included),
    /// capped by the minutes budget. None before any launch has finished.
    fn eta_s(&self) -> Option<f64> {
        eta_s(
            &self.durations,
            self.budget
                .launches
                .saturating_sub(self.launch.saturating_sub(1)),
            self.budget.minutes * 60.0 - self.elapsed_s(),
        )
    }
}

/// The estimate [`State::eta_s`] makes: `mean(durations) * launches_left`, at most
/// `minutes_left_s` (never negative); None with no finished launch.
pub fn eta_s(durations: &[f64], launches_left: u32, minutes_left_s: f64) -> Option<f64> {
    if durations.is_empty() {
        return None;
    }
    let mean = durations.iter().sum::<f64>() / durations.len() as f64;
    Some((mean * f64::from(launches_left)).min(minutes_left_s.max(0.0)))
}

pub use crate::util::duration_text;

/// The line printed as launch `launch` of `budget` starts; a race launch names its round
/// (`confirm, round 2 of at most 5`).
pub fn launch_line(
    launch: u32,
    budget: u32,
    (word, race): (&str, Option<&crate::search::progress::RaceStep>),
    elapsed_s: f64,
    eta_s: Option<f64>,
    flags: &str,
) -> String {
    let phase = match race {
        Some(r) => format!("{word}, round {} of at most {}", r.round, r.rounds_at_most),
        None => word.to_string(),
    };
    format!(
        "launch {launch}/{budget} · {phase} · {} elapsed · ETA {} · {flags}",
        duration_text(elapsed_s),
        eta_s.map_or("-".to_string(), duration_text)
    )
}

/// The heartbeat of a launch still running after `running_s`: where it stands in the race,
/// when it is a race launch (`racing round 2 of at most 5, a candidate (-t 1)`), and what it
/// is doing when known (`loading the model, 1.2 of 3.4 GB in memory`, `measuring the
/// agent-turn request ...`).
pub fn heartbeat_line(
    launch: u32,
    budget: u32,
    word: &str,
    running_s: f64,
    race: Option<&str>,
    doing: Option<&str>,
) -> String {
    let what = match (race, doing) {
        (Some(r), Some(d)) => format!("{r}: {d}"),
        (Some(r), None) => r.to_string(),
        (None, Some(d)) => d.to_string(),
        (None, None) => "loading the model or measuring".to_string(),
    };
    format!(
        "  launch {launch}/{budget} · {word} · still running after {}: {what}",
        duration_text(running_s),
    )
}

/// Before every launch: the box read again ([`crate::hardware::busy::Probe`]). A launch
/// with more threads than the free cores, or beside another process on the GPU, ran on a
/// busy box: said in one line as the box gets busy (and as it gets quiet again), and noted
/// in the launch's outcome through `note`.
pub struct BusyWatch {
    probe: Box<dyn crate::hardware::busy::Probe>,
    /// The threads a launch without `-t` runs (the server's default: the physical cores).
    default_threads: u32,
    /// The box as last said: None while quiet; the free cores and GPU users when busy.
    said: Option<(u32, Vec<String>)>,
    note: crate::trial::phase::BusyNote,
}

impl BusyWatch {
    pub fn new(
        probe: Box<dyn crate::hardware::busy::Probe>,
        default_threads: u32,
        note: crate::trial::phase::BusyNote,
    ) -> Self {
        BusyWatch {
            probe,
            default_threads,
            said: None,
            note,
        }
    }

    /// Read the box before launch `launch` of `threads` threads (None: the default); the
    /// line to print, if the box changed since the last one said.
    pub fn check(&mut self, launch: u32, threads: Option<u32>) -> Option<String> {
        let b = self.probe.measure();
        let t = threads.unwrap_or(self.default_threads).max(1);
        let free = b.free_cores();
        let busy = b.is_busy() && (free < t || !b.gpu_others.is_empty());
        self.note.set(busy.then(|| b.describe()));
        if !busy {
            return self.said.take().map(|_| {
                format!(
                    "qtune: the box is quiet again before launch {launch}: {}; this launch and the next are timed as usual",
                    b.describe()
                )
            });
        }
        let now = (free, b.gpu_others.clone());
        if self.said.as_ref() == Some(&now) {
            return None;
        }
        self.said = Some(now);
        let cause = if free < t {
            format!(
                "this launch's {} {t} is more than the {free} free {}, and llama.cpp's threads spin on cores other work holds",
                crate::engine::Flag::Threads,
                if free == 1 { "core" } else { "cores" }
            )
        } else {
            "the GPU is shared".to_string()
        };
        Some(format!(
            "qtune: warning: the box got busy before launch {launch}: {}: {cause}, so its timings will be slow; the launches keep their flags so the race compares the same configs, and each launch while it lasts is marked busy in the journal and the verdict (close what is running)",
            b.describe()
        ))
    }
}

pub struct Progress {
    busy: Mutex<Option<BusyWatch>>,
    bar: ProgressBar,
    state: Arc<Mutex<State>>,
    quiet: bool,
    colour: bool,
    stop: Arc<AtomicBool>,
}

impl Progress {
    pub fn new(budget: TuneBudget, quiet: bool) -> Self {
        let bar = if quiet {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden())
        } else {
            ProgressBar::new_spinner()
        };
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                .expect("static template"),
        );
        if !quiet {
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        let state = Arc::new(Mutex::new(State {
            budget,
            started: Instant::now(),
            launch: budget.launches_done,
            current: None,
            durations: Vec::new(),
            last_line: Instant::now(),
            doing: None,
            race: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let p = Progress {
            busy: Mutex::new(None),
            bar,
            state,
            quiet,
            colour: crate::util::colour_on_stderr(),
            stop,
        };
        if !quiet {
            p.spawn_heartbeat();
        }
        p
    }

    /// A thread that says a launch is still running, every [`HEARTBEAT`] without a line.
    fn spawn_heartbeat(&self) {
        let (state, stop, bar) = (self.state.clone(), self.stop.clone(), self.bar.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                let line = {
                    let Ok(mut s) = state.lock() else { return };
                    match s.current.clone() {
                        Some((t0, word)) if s.last_line.elapsed() >= HEARTBEAT => {
                            s.last_line = Instant::now();
                            let doing = s.doing.as_ref().and_then(|d| d.describe());
                            Some(heartbeat_line(
                                s.launch,
                                s.budget.launches,
                                &word,
                                t0.elapsed().as_secs_f64(),
                                s.race.as_deref(),
                                doing.as_deref(),
                            ))
                        }
                        _ => None,
                    }
                };
                if let Some(l) = line {
                    if !stop.load(Ordering::Relaxed) {
                        print_line(&bar, &crate::util::fit(&l));
                    }
                }
            }
        });
    }

    /// Name each launch's step in the heartbeat, as the runner sets it in `cell`.
    pub fn with_phase(self, cell: crate::trial::phase::PhaseCell) -> Self {
        if let Ok(mut s) = self.state.lock() {
            s.doing = Some(cell);
        }
        self
    }

    /// Check the box before every launch (a real tune): see [`BusyWatch`].
    pub fn with_busy_watch(self, watch: BusyWatch) -> Self {
        if let Ok(mut b) = self.busy.lock() {
            *b = Some(watch);
        }
        self
    }

    pub fn finish(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.bar.finish_and_clear();
    }

    fn bold(&self, s: &str) -> String {
        if self.colour {
            format!("\x1b[1m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Print `line` (already fitted to the columns, [`crate::util::fit`]) above the bar.
fn print_line(bar: &ProgressBar, line: &str) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

impl crate::search::Watch for Progress {
    fn starting(
        &self,
        config: &LaunchConfig,
        role: TrialRole,
        race: Option<&crate::search::progress::RaceStep>,
    ) {
        let launch = self.state.lock().map_or(0, |s| s.launch + 1);
        let busy = self
            .busy
            .lock()
            .ok()
            .and_then(|mut b| b.as_mut().and_then(|w| w.check(launch, config.threads)));
        // Said under --quiet too, as the check at the start is.
        if let Some(l) = busy {
            print_line(&self.bar, &crate::util::fit(&crate::escape::terminal(&l)));
        }
        let flags = crate::config::shell_line(&config.server_args());
        let line = {
            let Ok(mut s) = self.state.lock() else { return };
            s.launch += 1;
            s.race = race.map(|r| r.describe(&config.label()));
            let word = launch_word(role, config);
            s.current = Some((Instant::now(), word.clone()));
            s.last_line = Instant::now();
            launch_line(
                s.launch,
                s.budget.launches,
                (&word, race),
                s.elapsed_s(),
                s.eta_s(),
                &flags,
            )
        };
        if self.quiet {
            return;
        }
        let line = crate::escape::terminal(&line);
        self.bar.set_message(line.clone());
        print_line(&self.bar, &self.bold(&crate::util::fit(&line)));
    }

    fn finished(&self, line: &str) {
        if let Ok(mut s) = self.state.lock() {
            if let Some((t0, _)) = s.current.take() {
                s.durations.push(t0.elapsed().as_secs_f64());
            }
            s.last_line = Instant::now();
        }
        if self.quiet {
            return;
        }
        // A trial's line may quote its server's log: shown escaped, never raw.
        print_line(
            &self.bar,
            &crate::util::fit(&crate::escape::terminal_lines(line)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::progress::role_word;

    #[test]
    fn eta_is_the_mean_launch_times_the_launches_left_capped_by_the_minutes() {
        assert_eq!(eta_s(&[], 10, 600.0), None);
        assert_eq!(eta_s(&[30.0, 50.0], 5, 1000.0), Some(200.0));
        // The minutes budget ends the tune first.
        assert_eq!(eta_s(&[30.0, 50.0], 5, 120.0), Some(120.0));
        assert_eq!(eta_s(&[30.0], 5, -3.0), Some(0.0));
    }

    #[test]
    fn a_launch_line_names_the_launch_the_phase_the_time_and_the_flags() {
        let l = launch_line(
            5,
            20,
            (role_word(TrialRole::Search), None),
            192.0,
            Some(540.0),
            "-c 4096",
        );
        assert_eq!(
            l,
            "launch 5/20 · search · 3m12s elapsed · ETA 9m00s · -c 4096"
        );
        let first = launch_line(
            1,
            20,
            (role_word(TrialRole::Baseline), None),
            0.4,
            None,
            "-c 4096",
        );
        assert_eq!(
            first,
            "launch 1/20 · baseline · 0s elapsed · ETA - · -c 4096"
        );
        assert_eq!(duration_text(3725.0), "1h02m");
        let step = crate::search::progress::RaceStep {
            round: 2,
            rounds_at_most: 5,
            arm: "the baseline",
        };
        assert_eq!(
            launch_line(
                9,
                20,
                (role_word(TrialRole::Confirm), Some(&step)),
                60.0,
                None,
                "-t 1"
            ),
            "launch 9/20 · confirm, round 2 of at most 5 · 1m00s elapsed · ETA - · -t 1"
        );
    }

    #[test]
    fn the_heartbeat_names_the_step() {
        assert_eq!(
            heartbeat_line(
                3,
                20,
                role_word(TrialRole::Search),
                45.0,
                None,
                Some("loading the model, 1.2 of 3.4 GB in memory")
            ),
            "  launch 3/20 · search · still running after 45s: loading the model, 1.2 of 3.4 GB in memory"
        );
        assert!(
            heartbeat_line(3, 20, role_word(TrialRole::Confirm), 45.0, None, None)
                .ends_with(": loading the model or measuring")
        );
    }

    #[test]
    fn the_heartbeat_of_a_race_launch_names_its_round_and_config() {
        let step = crate::search::progress::RaceStep {
            round: 2,
            rounds_at_most: 5,
            arm: "a candidate",
        };
        let race = step.describe("-t 1 -ub 256");
        assert_eq!(
            heartbeat_line(
                14,
                20,
                role_word(TrialRole::Confirm),
                30.0,
                Some(&race),
                Some("measuring the chat request")
            ),
            "  launch 14/20 · confirm · still running after 30s: racing round 2 of at most 5, a candidate (-t 1 -ub 256): measuring the chat request"
        );
        assert!(heartbeat_line(
            14,
            20,
            role_word(TrialRole::Confirm),
            30.0,
            Some(&race),
            None
        )
        .ends_with(": racing round 2 of at most 5, a candidate (-t 1 -ub 256)"));
    }

    fn box_now(others: f64, gpu: &[&str]) -> crate::hardware::busy::Busy {
        crate::hardware::busy::Busy {
            logical_cores: 2,
            others_cores: others,
            load_1m: Some(others + 1.0),
            gpu_others: gpu.iter().map(|s| s.to_string()).collect(),
            gpu_idle: Vec::new(),
        }
    }

    #[test]
    fn a_box_that_gets_busy_between_launches_is_said_once_and_noted_on_each_launch_it_lasts() {
        let note = crate::trial::phase::BusyNote::default();
        let script = [
            box_now(0.1, &[]),
            box_now(1.9, &[]),
            box_now(1.9, &[]),
            box_now(0.2, &[]),
            box_now(0.1, &["pid 77 (python)"]),
        ];
        let mut w = BusyWatch::new(
            Box::new(crate::hardware::busy::Scripted(
                script.into_iter().collect(),
            )),
            2,
            note.clone(),
        );
        // Quiet: nothing said, nothing noted.
        assert_eq!(w.check(1, None), None);
        assert_eq!(note.take(), None);
        // Busy: one line at once, saying what was seen and what the tune does.
        let line = w.check(2, None).expect("said as the box gets busy");
        assert!(
            line.starts_with("qtune: warning: the box got busy before launch 2: other processes used 1.9 of 2 cores (load average 2.9): this launch's -t 2 is more than the 1 free core"),
            "{line}"
        );
        assert!(
            line.contains("marked busy in the journal and the verdict"),
            "{line}"
        );
        assert_eq!(
            note.take().as_deref(),
            Some("other processes used 1.9 of 2 cores (load average 2.9)")
        );
        // Still busy: noted again, not said again.
        assert_eq!(w.check(3, None), None);
        assert!(note.take().is_some());
        // Quiet again: said, not noted.
        let quiet = w.check(4, None).expect("said as the box gets quiet");
        assert!(
            quiet.starts_with("qtune: the box is quiet again before launch 4"),
            "{quiet}"
        );
        assert_eq!(note.take(), None);
        // Another process on the GPU makes the launch busy whatever its threads.
        let gpu = w.check(5, Some(1)).expect("a GPU user is said");
        assert!(
            gpu.contains("pid 77 (python)") && gpu.contains("the GPU is shared"),
            "{gpu}"
        );
        assert!(note.take().is_some());
    }

    #[test]
    fn a_launch_within_the_free_cores_is_not_busy() {
        // Two busy loops on two cores, launches capped at -t 1 at the start: the free core
        // is the launch's, as the start check gave it.
        let note = crate::trial::phase::BusyNote::default();
        let mut w = BusyWatch::new(
            Box::new(crate::hardware::busy::Scripted(
                [box_now(1.0, &[])].into_iter().collect(),
            )),
            2,
            note.clone(),
        );
        assert_eq!(w.check(1, Some(1)), None);
        assert_eq!(note.take(), None);
        // The same box against the server's default 2 threads is busy.
        assert!(w.check(2, None).is_some());
    }
}
