//! The tune's progress on stderr: one line as each launch starts (`launch 5/20 · search ·
//! 3m12s elapsed · ETA 9m`), one line per finished trial, and a heartbeat every
//! [`HEARTBEAT`] while a launch is still loading or measuring. A spinner on a terminal; plain
//! lines otherwise. `--quiet` prints none of it. Colour only on a terminal without `NO_COLOR`.

use crate::config::LaunchConfig;
use crate::engine::LaunchArgs;
use crate::search::progress::role_word;
use crate::trial::TrialRole;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a launch runs before a heartbeat line says it is still going.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// The tune's budget and what earlier sessions (a resumed tune) already spent.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub launches: u32,
    pub minutes: f64,
    pub launches_done: u32,
    pub elapsed_s: f64,
}

struct State {
    budget: Budget,
    started: Instant,
    /// The launch now running (1-based over the whole tune), its role and start.
    launch: u32,
    current: Option<(Instant, TrialRole)>,
    /// Wall time of each launch finished in this session, seconds.
    durations: Vec<f64>,
    last_line: Instant,
    /// What the launch is doing now, when the runner says it (a real tune).
    doing: Option<crate::trial::phase::PhaseCell>,
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

/// The line printed as launch `launch` of `budget` starts.
pub fn launch_line(
    launch: u32,
    budget: u32,
    role: TrialRole,
    elapsed_s: f64,
    eta_s: Option<f64>,
    flags: &str,
) -> String {
    format!(
        "launch {launch}/{budget} · {} · {} elapsed · ETA {} · {flags}",
        role_word(role),
        duration_text(elapsed_s),
        eta_s.map_or("-".to_string(), duration_text)
    )
}

/// The heartbeat of a launch still running after `running_s`: what it is doing when known
/// (`loading the model, 1.2 of 3.4 GB in memory`, `measuring the agent-turn request ...`).
pub fn heartbeat_line(
    launch: u32,
    budget: u32,
    role: TrialRole,
    running_s: f64,
    doing: Option<&str>,
) -> String {
    format!(
        "  launch {launch}/{budget} · {} · still running after {}: {}",
        role_word(role),
        duration_text(running_s),
        doing.unwrap_or("loading the model or measuring")
    )
}

/// Between launches: is the box busier than the launch's threads allow?
struct BusyWatch {
    logical_cores: u32,
    /// The threads a launch without `-t` runs (the server's default: the physical cores).
    default_threads: u32,
    /// The free cores last warned about (no repeat while they stay the same).
    warned: Option<u32>,
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
    pub fn new(budget: Budget, quiet: bool) -> Self {
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
                    match s.current {
                        Some((t0, role)) if s.last_line.elapsed() >= HEARTBEAT => {
                            s.last_line = Instant::now();
                            let doing = s.doing.as_ref().and_then(|d| d.describe());
                            Some(heartbeat_line(
                                s.launch,
                                s.budget.launches,
                                role,
                                t0.elapsed().as_secs_f64(),
                                doing.as_deref(),
                            ))
                        }
                        _ => None,
                    }
                };
                if let Some(l) = line {
                    if !stop.load(Ordering::Relaxed) {
                        print_line(&bar, &l);
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

    /// Check the box before every launch (a real tune): a launch with more threads than the
    /// free cores gets a one-line warning, once per change.
    pub fn with_busy_watch(self, logical_cores: u32, default_threads: u32) -> Self {
        if let Ok(mut b) = self.busy.lock() {
            *b = Some(BusyWatch {
                logical_cores,
                default_threads,
                warned: None,
            });
        }
        self
    }

    /// The warning for a launch of `threads` threads on the box as it is now, if any.
    fn busy_line(&self, threads: Option<u32>) -> Option<String> {
        let mut guard = self.busy.lock().ok()?;
        let w = guard.as_mut()?;
        let b =
            crate::hardware::busy::measure(crate::hardware::busy::WINDOW / 2, w.logical_cores, &[]);
        let t = threads.unwrap_or(w.default_threads);
        let free = b.free_cores();
        if !b.is_busy() || free >= t {
            w.warned = None;
            return None;
        }
        if w.warned == Some(free) {
            return None;
        }
        w.warned = Some(free);
        Some(format!(
            "  the box got busy: {}: this launch's {t} threads are more than the {free} free cores, so its timings will be slow (the race's paired rounds keep comparisons fair; close what is running)",
            b.describe()
        ))
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

fn print_line(bar: &ProgressBar, line: &str) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

impl crate::search::Watch for Progress {
    fn starting(&self, config: &LaunchConfig, role: TrialRole) {
        if let Some(l) = self.busy_line(config.threads) {
            print_line(&self.bar, &l);
        }
        let flags = crate::config::shell_line(&config.server_args());
        let line = {
            let Ok(mut s) = self.state.lock() else { return };
            s.launch += 1;
            s.current = Some((Instant::now(), role));
            s.last_line = Instant::now();
            launch_line(
                s.launch,
                s.budget.launches,
                role,
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
        print_line(&self.bar, &self.bold(&line));
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
        print_line(&self.bar, &crate::escape::terminal_lines(line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let l = launch_line(5, 20, TrialRole::Search, 192.0, Some(540.0), "-c 4096");
        assert_eq!(
            l,
            "launch 5/20 · search · 3m12s elapsed · ETA 9m00s · -c 4096"
        );
        let first = launch_line(1, 20, TrialRole::Baseline, 0.4, None, "-c 4096");
        assert_eq!(
            first,
            "launch 1/20 · baseline · 0s elapsed · ETA - · -c 4096"
        );
        assert_eq!(duration_text(3725.0), "1h02m");
    }

    #[test]
    fn the_heartbeat_names_the_step() {
        assert_eq!(
            heartbeat_line(
                3,
                20,
                TrialRole::Search,
                45.0,
                Some("loading the model, 1.2 of 3.4 GB in memory")
            ),
            "  launch 3/20 · search · still running after 45s: loading the model, 1.2 of 3.4 GB in memory"
        );
        assert!(heartbeat_line(3, 20, TrialRole::Confirm, 45.0, None)
            .ends_with(": loading the model or measuring"));
    }
}
