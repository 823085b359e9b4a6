//! The host through `sysinfo`: CPU model, cores, RAM, OS; and a multi-threaded memory read
//! bandwidth measurement (only when asked: it takes about two seconds).

use super::HostInfo;
use std::time::{Duration, Instant};
use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};

const MIB: u64 = crate::util::MIB;

pub(super) fn probe_host(measure_bandwidth: bool) -> HostInfo {
    let sys = System::new_with_specifics(
        RefreshKind::nothing()
            .with_cpu(CpuRefreshKind::nothing())
            .with_memory(MemoryRefreshKind::nothing().with_ram()),
    );
    let cpu_model = sys
        .cpus()
        .iter()
        .map(|c| c.brand().trim())
        .find(|b| !b.is_empty())
        .unwrap_or("unknown CPU")
        .to_string();
    let logical_cores = match sys.cpus().len() {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    } as u32;
    let os = match (System::name(), System::os_version()) {
        (Some(n), Some(v)) => format!("{n} {v}"),
        (Some(n), None) => n,
        _ => System::long_os_version().unwrap_or_else(|| std::env::consts::OS.to_string()),
    };
    let ram_available_mib = sys.available_memory() / MIB;
    let mem_bandwidth_gbs = if measure_bandwidth {
        Some(measure_read_bandwidth_gbs(ram_available_mib))
    } else {
        None
    };
    HostInfo {
        cpu_model,
        physical_cores: System::physical_core_count().map(|n| n as u32),
        logical_cores,
        ram_total_mib: sys.total_memory() / MIB,
        ram_available_mib,
        os,
        mem_bandwidth_gbs,
        mem_bandwidth_by_threads: Vec::new(),
    }
}

/// Thread counts `qtune hw` measures the read bandwidth at besides all threads: 1, a quarter
/// and half of the physical cores (distinct, below the logical count).
pub fn scaling_thread_counts(physical: u32, logical: u32) -> Vec<u32> {
    let mut v: Vec<u32> = [1, physical / 4, physical / 2]
        .into_iter()
        .filter(|&t| t >= 1 && t < logical)
        .collect();
    v.dedup();
    v
}

/// Multi-threaded read bandwidth in GB/s: all runnable threads sum disjoint slices of one buffer
/// (512 MiB, less on a box with little free RAM); three rounds of about half a second, best one.
pub fn measure_read_bandwidth_gbs(ram_available_mib: u64) -> f64 {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    measure_read_bandwidth_gbs_at(ram_available_mib, threads)
}

/// [`measure_read_bandwidth_gbs`] with `threads` threads.
pub fn measure_read_bandwidth_gbs_at(ram_available_mib: u64, threads: usize) -> f64 {
    let buf_mib = (ram_available_mib / 4).clamp(16, 512);
    let words = (buf_mib * MIB / 8) as usize;
    let buf: Vec<u64> = (0..words as u64).collect();
    let chunk = words.div_ceil(threads.max(1));

    let pass = |reps: u32| -> Duration {
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for part in buf.chunks(chunk) {
                s.spawn(move || {
                    let mut total = 0u64;
                    for _ in 0..reps {
                        total = total.wrapping_add(sum_words(std::hint::black_box(part)));
                    }
                    std::hint::black_box(total);
                });
            }
        });
        t0.elapsed()
    };

    // Calibrate: one pass sets the repetitions for ~0.5 s rounds.
    let one = pass(1).as_secs_f64().max(1e-6);
    let reps = ((0.5 / one).round() as u32).clamp(1, 1000);
    let bytes = (words * 8) as f64 * reps as f64;
    (0..3)
        .map(|_| bytes / pass(reps).as_secs_f64().max(1e-9) / 1e9)
        .fold(0.0, f64::max)
}

/// Sum with independent accumulators so the loop is bound by memory, not by one add chain.
fn sum_words(xs: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut it = xs.chunks_exact(8);
    for c in &mut it {
        for i in 0..8 {
            acc[i] = acc[i].wrapping_add(c[i]);
        }
    }
    let mut total = it.remainder().iter().fold(0u64, |a, &x| a.wrapping_add(x));
    for a in acc {
        total = total.wrapping_add(a);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_probe_reports_cores_and_ram() {
        let h = probe_host(false);
        assert!(h.logical_cores >= 1);
        assert!(h.ram_total_mib > 0);
        assert!(h.ram_available_mib <= h.ram_total_mib);
        assert!(!h.cpu_model.is_empty());
        assert!(h.mem_bandwidth_gbs.is_none());
    }

    #[test]
    fn word_sum_matches_the_obvious_sum() {
        let xs: Vec<u64> = (0..1001).collect();
        assert_eq!(sum_words(&xs), 1001 * 1000 / 2);
    }

    #[test]
    fn thread_counts_for_the_scaling_are_distinct_and_below_all() {
        assert_eq!(scaling_thread_counts(16, 16), vec![1, 4, 8]);
        assert_eq!(scaling_thread_counts(2, 2), vec![1]);
        assert_eq!(scaling_thread_counts(1, 1), Vec::<u32>::new());
        assert_eq!(scaling_thread_counts(4, 8), vec![1, 2]);
    }
}
