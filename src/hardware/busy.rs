//! Is the box busy? The CPU time other processes used over a short window (`/proc/stat`
//! minus qtune's own process and its children), the load average, and other processes
//! computing on the GPUs (NVML's process list and utilization: a process that only holds
//! memory, as a desktop's compositor or a browser does, is named once and is not busy). llama.cpp's generation threads spin: with more threads
//! than free cores they collapse (issue 43: at a load of 3.3 on 2 cores, tiny-qwen35moe
//! generated 1.0 tok/s with the default threads and 117.8 tok/s with `-t 1`), so a tune on a
//! busy box gives its trials a thread count that fits the free cores, and says so.

use std::time::Duration;

/// How long the CPU is watched before a tune and between launches.
pub const WINDOW: Duration = Duration::from_millis(1000);

/// Other processes using at least this many cores (over [`WINDOW`]) make the box busy.
pub const BUSY_CORES: f64 = 0.5;

/// Another process computing on at least this share of a card's SMs (or, where NVML keeps no
/// per-process utilization, the card busy at least this much while no launch of qtune's runs)
/// makes the GPU busy. A compositor redrawing a desktop uses a few percent.
pub const GPU_BUSY_PCT: u32 = 10;

/// The box is too busy to tune (without `--allow-busy`) when other processes use every core
/// (within a quarter of one) and the load average is at least this many times the cores:
/// even a one-thread trial then gets under a quarter of a core, and its timings are noise.
pub const STOP_LOAD_PER_CORE: f64 = 4.0;

/// `QTUNE_MAX_THREADS=N`: at most N generation threads (`-t`) in any trial, for a box shared
/// with other work (the test suite sets it: two tests at once on two cores).
pub const MAX_THREADS_ENV: &str = "QTUNE_MAX_THREADS";

/// `QTUNE_ALLOW_BUSY=1`: as `--allow-busy`.
pub const ALLOW_BUSY_ENV: &str = "QTUNE_ALLOW_BUSY";

/// `QTUNE_ALLOW_BUSY` is set to 1 (or true/yes).
pub fn allow_busy_env() -> bool {
    std::env::var(ALLOW_BUSY_ENV)
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// CPU time counters at one instant, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuSample {
    /// Every CPU's busy ticks (all but idle and iowait).
    pub busy: u64,
    /// Every CPU's ticks.
    pub total: u64,
    /// qtune's own ticks: this process, its reaped children, its running children.
    pub own: u64,
}

/// What was measured of the box.
#[derive(Debug, Clone, PartialEq)]
pub struct Busy {
    pub logical_cores: u32,
    /// Cores' worth of CPU other processes used over the window.
    pub others_cores: f64,
    /// The 1-minute load average (None: not readable).
    pub load_1m: Option<f64>,
    /// Other processes computing on the GPUs: "pid 1234 (python, 87 % of the GPU)".
    pub gpu_others: Vec<String>,
    /// Other processes on the GPUs that hold memory and compute nothing: "pid 1234 (Xorg)".
    /// Information, not a busy box: the budget is the VRAM they leave free.
    pub gpu_idle: Vec<String>,
}

/// The busy and total ticks of the `cpu ` line of `/proc/stat`.
pub fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<Vec<u64>>>()?;
    if v.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest is already in user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// A process's `/proc/PID/stat`: (parent pid, utime + stime, cutime + cstime).
pub fn parse_pid_stat(text: &str) -> Option<(u32, u64, u64)> {
    // The command name is in parentheses and may hold spaces: fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] state, f[1] ppid, ... f[11] utime, f[12] stime, f[13] cutime, f[14] cstime.
    let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
    Some((f.get(1)?.parse().ok()?, n(11)? + n(12)?, n(13)? + n(14)?))
}

/// qtune's own ticks: this process (and the children it reaped) and its running children.
fn own_ticks() -> u64 {
    let me = std::process::id();
    let mut own = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|t| parse_pid_stat(&t))
        .map_or(0, |(_, t, c)| t + c);
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if pid == me {
                continue;
            }
            if let Some((ppid, t, c)) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|t| parse_pid_stat(&t))
            {
                if ppid == me {
                    own += t + c;
                }
            }
        }
    }
    own
}

/// The counters now (None where `/proc/stat` cannot be read: not Linux).
pub fn sample() -> Option<CpuSample> {
    let (busy, total) = parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)?;
    Some(CpuSample {
        busy,
        total,
        own: own_ticks(),
    })
}

/// Cores' worth of CPU that processes other than qtune used between two samples.
pub fn others_cores(before: CpuSample, after: CpuSample, logical_cores: u32) -> f64 {
    let total = after.total.saturating_sub(before.total);
    if total == 0 {
        return 0.0;
    }
    let busy = after.busy.saturating_sub(before.busy);
    let own = after.own.saturating_sub(before.own);
    let share = busy.saturating_sub(own) as f64 / total as f64;
    (share * f64::from(logical_cores.max(1))).clamp(0.0, f64::from(logical_cores.max(1)))
}

/// The 1-minute load average.
pub fn load_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `QTUNE_MAX_THREADS`, when set to a whole number of at least 1.
pub fn max_threads_env() -> Result<Option<u32>, String> {
    match std::env::var(MAX_THREADS_ENV) {
        Err(_) => Ok(None),
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(format!(
                "{MAX_THREADS_ENV}={v:?} is not a whole number of threads of at least 1: set it to e.g. 1, or unset it"
            )),
        },
    }
}

/// Measure the box over `window`: the CPU other processes used, the load, the GPUs' other
/// processes (`gpu`: what NVML lists; qtune's own are left out), split into those computing
/// and those only holding memory ([`split_gpu_users`]).
pub fn measure(window: Duration, logical_cores: u32, gpu: &super::gpu::GpuActivity) -> Busy {
    let before = sample();
    std::thread::sleep(window);
    let after = sample();
    let others = match (before, after) {
        (Some(b), Some(a)) => others_cores(b, a, logical_cores),
        _ => 0.0,
    };
    let me = std::process::id();
    // qtune's own servers are not other users (a launch's server may still be exiting).
    let ours = |pid: u32| {
        pid == me
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|t| parse_pid_stat(&t))
                .is_some_and(|(ppid, _, _)| ppid == me)
    };
    let theirs = super::gpu::GpuActivity {
        users: gpu.users.iter().filter(|u| !ours(u.pid)).cloned().collect(),
        device_util_pct: gpu.device_util_pct,
    };
    let (gpu_others, gpu_idle) = split_gpu_users(&theirs);
    Busy {
        logical_cores,
        others_cores: others,
        load_1m: load_1m(),
        gpu_others,
        gpu_idle,
    }
}

/// Other processes on the GPUs, as (computing, only holding memory), each "pid N (name)".
/// A process computes when its own SM share is at least [`GPU_BUSY_PCT`]; where NVML keeps no
/// per-process share, every other process counts as computing when the busiest card is at
/// least that busy (between launches no server of qtune's runs), else none does.
pub fn split_gpu_users(gpu: &super::gpu::GpuActivity) -> (Vec<String>, Vec<String>) {
    let mut busy = Vec::new();
    let mut idle = Vec::new();
    let card_busy = gpu.device_util_pct.is_some_and(|u| u >= GPU_BUSY_PCT);
    for u in &gpu.users {
        let name = crate::escape::one_line(&u.name);
        match u.sm_pct {
            Some(p) if p >= GPU_BUSY_PCT => {
                busy.push(format!("pid {} ({name}, {p} % of the GPU)", u.pid))
            }
            None if card_busy => busy.push(format!(
                "pid {} ({name}; the GPU at {} %)",
                u.pid,
                gpu.device_util_pct.unwrap_or(0)
            )),
            _ => idle.push(format!("pid {} ({name})", u.pid)),
        }
    }
    (busy, idle)
}

/// How busy the box is now: what a tune reads again before every launch. The machine's
/// ([`SystemProbe`]) in a tune; a scripted one ([`Scripted`]) in tests.
pub trait Probe: Send {
    fn measure(&mut self) -> Busy;
}

/// The machine: the CPU other processes used over `window`, the load average, and the
/// processes NVML lists on the GPUs (none without NVML).
pub struct SystemProbe {
    pub logical_cores: u32,
    pub window: Duration,
}

impl Probe for SystemProbe {
    fn measure(&mut self) -> Busy {
        let gpu = super::gpu::activity_now();
        measure(self.window, self.logical_cores, &gpu)
    }
}

/// Measurements given in advance, one per call; the last one repeats.
pub struct Scripted(pub std::collections::VecDeque<Busy>);

impl Probe for Scripted {
    fn measure(&mut self) -> Busy {
        match self.0.len() {
            0 => Busy {
                logical_cores: 1,
                others_cores: 0.0,
                load_1m: None,
                gpu_others: Vec::new(),
                gpu_idle: Vec::new(),
            },
            1 => self.0[0].clone(),
            _ => self.0.pop_front().expect("not empty"),
        }
    }
}

impl Busy {
    /// Cores other processes leave free, rounded to the nearest whole core, at least 1.
    pub fn free_cores(&self) -> u32 {
        let cores = f64::from(self.logical_cores.max(1));
        ((cores - self.others_cores + 0.5).floor().max(1.0) as u32).min(self.logical_cores.max(1))
    }

    /// Other processes use at least [`BUSY_CORES`] of the CPU, or the GPUs.
    pub fn is_busy(&self) -> bool {
        self.others_cores >= BUSY_CORES || !self.gpu_others.is_empty()
    }

    /// Too busy to tune without `--allow-busy` ([`STOP_LOAD_PER_CORE`]).
    pub fn too_busy(&self) -> bool {
        let cores = f64::from(self.logical_cores.max(1));
        self.others_cores >= cores - 0.25
            && self
                .load_1m
                .is_some_and(|l| l >= STOP_LOAD_PER_CORE * cores)
    }

    /// What was measured, in words: "other processes used 1.9 of 2 cores (load average 3.3)".
    /// The load average (a decaying mean, which a finished build leaves high for minutes) is
    /// named only beside CPU use that is busy now.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "other processes used {:.1} of {} cores",
            self.others_cores, self.logical_cores
        );
        if let Some(l) = self.load_1m.filter(|_| self.others_cores >= BUSY_CORES) {
            s.push_str(&format!(" (load average {l:.1})"));
        }
        if !self.gpu_others.is_empty() {
            s.push_str(&format!(
                "; other processes on the GPU: {}",
                self.gpu_others.join(", ")
            ));
        }
        s
    }

    /// The one-line error of a box too busy to time; `anyway` says how to go on regardless
    /// ("run qtune tune with --allow-busy").
    pub fn stop_message(&self, anyway: &str) -> String {
        format!(
            "the box is busy: {}; a trial would get under a quarter of a core and its timings would be noise. Close what is running (top or htop shows it), or {anyway} to go on anyway",
            self.describe()
        )
    }
}

/// The generation threads trials get: at most the free cores (when the box is busy) and at
/// most `QTUNE_MAX_THREADS`; None where neither limits what `default_threads` (the threads a
/// launch without `-t` uses) would run.
pub fn thread_cap(busy: Option<&Busy>, env_max: Option<u32>, default_threads: u32) -> Option<u32> {
    let free = busy.filter(|b| b.is_busy()).map(Busy::free_cores);
    let cap = match (free, env_max) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }?;
    (cap < default_threads.max(1)).then_some(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy_box(others: f64, load: f64) -> Busy {
        Busy {
            logical_cores: 2,
            others_cores: others,
            load_1m: Some(load),
            gpu_others: Vec::new(),
            gpu_idle: Vec::new(),
        }
    }

    fn user(pid: u32, name: &str, sm_pct: Option<u32>) -> crate::hardware::gpu::GpuUser {
        crate::hardware::gpu::GpuUser {
            pid,
            name: name.into(),
            sm_pct,
        }
    }

    #[test]
    fn a_gpu_process_that_holds_memory_and_computes_nothing_is_not_busy() {
        use crate::hardware::gpu::GpuActivity;
        // A ballast (or a compositor) holding 62 GiB at 0 % of the SMs, the card idle.
        let ballast = GpuActivity {
            users: vec![user(4242, "python3", Some(0)), user(900, "Xorg", Some(3))],
            device_util_pct: Some(2),
        };
        let (busy, idle) = split_gpu_users(&ballast);
        assert!(busy.is_empty(), "{busy:?}");
        assert_eq!(idle, ["pid 4242 (python3)", "pid 900 (Xorg)"]);
        let b = Busy {
            gpu_others: busy,
            gpu_idle: idle,
            ..busy_box(0.0, 6.1)
        };
        assert!(!b.is_busy());
        // Nor does a load average left by a finished build make it busy, or get named.
        assert_eq!(b.describe(), "other processes used 0.0 of 2 cores");

        // One that computes is busy, and named with its share.
        let (busy, _) = split_gpu_users(&GpuActivity {
            users: vec![user(77, "train.py", Some(93))],
            device_util_pct: Some(95),
        });
        assert_eq!(busy, ["pid 77 (train.py, 93 % of the GPU)"]);
        // Without per-process shares, the card's own utilization decides.
        let unknown = |util| GpuActivity {
            users: vec![user(77, "x", None)],
            device_util_pct: Some(util),
        };
        assert_eq!(split_gpu_users(&unknown(80)).0.len(), 1);
        assert_eq!(split_gpu_users(&unknown(0)).0.len(), 0);
    }

    #[test]
    fn proc_stat_busy_is_everything_but_idle_and_iowait() {
        let t = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 1 2 3 4\n";
        assert_eq!(parse_proc_stat(t), Some((160, 1000)));
        assert_eq!(parse_proc_stat("intr 1 2 3"), None);
    }

    #[test]
    fn pid_stat_survives_a_name_with_spaces_and_parentheses() {
        let t = "4242 (llama server) (x)) S 77 1 1 0 -1 0 0 0 0 0 120 30 7 3 20 0";
        assert_eq!(parse_pid_stat(t), Some((77, 150, 10)));
    }

    #[test]
    fn others_are_the_busy_ticks_minus_qtunes_own() {
        let a = CpuSample {
            busy: 0,
            total: 0,
            own: 0,
        };
        // Two cores, 200 ticks each second: 180 busy, 20 of them qtune's.
        let b = CpuSample {
            busy: 180,
            total: 200,
            own: 20,
        };
        assert!((others_cores(a, b, 2) - 1.6).abs() < 1e-9);
        assert_eq!(others_cores(a, a, 2), 0.0);
    }

    #[test]
    fn two_busy_loops_on_two_cores_leave_one_thread_and_do_not_stop_the_tune() {
        let b = busy_box(2.0, 3.3);
        assert!(b.is_busy());
        assert_eq!(b.free_cores(), 1);
        assert!(!b.too_busy());
        assert_eq!(thread_cap(Some(&b), None, 2), Some(1));
        // An idle box keeps the server's default threads.
        let idle = busy_box(0.1, 0.2);
        assert!(!idle.is_busy());
        assert_eq!(thread_cap(Some(&idle), None, 2), None);
        assert_eq!(thread_cap(Some(&idle), Some(1), 2), Some(1));
        let four = Busy {
            logical_cores: 4,
            ..busy_box(1.0, 1.0)
        };
        assert_eq!(thread_cap(Some(&four), None, 4), Some(3));
    }

    #[test]
    fn every_core_taken_and_a_load_of_four_per_core_stops_the_tune() {
        assert!(busy_box(1.9, 8.5).too_busy());
        assert!(!busy_box(1.2, 8.5).too_busy());
        let m = busy_box(1.9, 8.5).stop_message("run qtune tune with --allow-busy");
        assert!(
            m.starts_with(
                "the box is busy: other processes used 1.9 of 2 cores (load average 8.5)"
            ),
            "{m}"
        );
        assert!(m.contains("--allow-busy"), "{m}");
    }
}
