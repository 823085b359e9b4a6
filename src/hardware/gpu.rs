//! GPUs through NVML. `libnvidia-ml.so.1` is loaded at run time, once per process, and shared;
//! a box without the driver gets a reason in words instead of a GPU list.

use super::{GpuInfo, GpuProcess, PcieLink};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::Duration;

const MIB: u64 = crate::util::MIB;

/// Where the GPU machine keeps NVML (outside the loader's default path).
const NVML_FALLBACK_PATHS: [&str; 2] = [
    "libnvidia-ml.so.1",
    "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
];

static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

/// The process-wide NVML handle, or why there is none ("no NVIDIA driver (...)").
///
/// `QTUNE_NO_GPU=1` pretends there is no GPU (to exercise CPU-only paths on a GPU box).
/// `QTUNE_NVML_LIB=/path/libnvidia-ml.so.1` is tried first when set.
pub fn nvml() -> Result<&'static Nvml, &'static str> {
    NVML.get_or_init(init_nvml).as_ref().map_err(|e| e.as_str())
}

fn init_nvml() -> Result<Nvml, String> {
    if std::env::var_os("QTUNE_NO_GPU").is_some_and(|v| !v.is_empty() && v != "0") {
        return Err("GPU disabled by QTUNE_NO_GPU".to_string());
    }
    let mut candidates: Vec<String> = Vec::new();
    if let Some(p) = std::env::var_os("QTUNE_NVML_LIB") {
        candidates.push(p.to_string_lossy().into_owned());
    }
    let mut loaded_but_failed: Option<String> = None;
    // The crate's default name first ("libnvidia-ml.so", present with the dev package).
    match Nvml::init() {
        Ok(n) => return Ok(n),
        Err(e) => note_failure(&mut loaded_but_failed, e),
    }
    candidates.extend(NVML_FALLBACK_PATHS.iter().map(|s| s.to_string()));
    for path in &candidates {
        match Nvml::builder()
            .lib_path(std::ffi::OsStr::new(path.as_str()))
            .init()
        {
            Ok(n) => return Ok(n),
            Err(e) => note_failure(&mut loaded_but_failed, e),
        }
    }
    Err(loaded_but_failed
        .unwrap_or_else(|| "no NVIDIA driver (libnvidia-ml.so.1 not found)".to_string()))
}

/// Remember the first failure that happened after the library was found: it says more than
/// "not found" (driver not loaded, no permission, ...).
fn note_failure(slot: &mut Option<String>, e: NvmlError) {
    if slot.is_some() {
        return;
    }
    match e {
        NvmlError::LibloadingError(_) => {}
        NvmlError::DriverNotLoaded => {
            *slot = Some(
                "NVIDIA driver not loaded (NVML found, but the kernel driver is not running)"
                    .into(),
            )
        }
        NvmlError::NoPermission => {
            *slot = Some("no permission to talk to the NVIDIA driver (NVML init refused)".into())
        }
        other => *slot = Some(format!("NVML failed to start: {other}")),
    }
}

/// GPUs, driver version, CUDA version.
pub(super) type GpuProbe = (Vec<GpuInfo>, Option<String>, Option<String>);

/// What NVML says about the GPUs: (gpus, driver version, CUDA version).
pub(super) fn probe_gpus(nvml: &Nvml) -> Result<GpuProbe, String> {
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML could not count GPUs: {e}"))?;
    let driver = nvml.sys_driver_version().ok();
    let cuda = nvml.sys_cuda_driver_version().ok().map(|v| {
        format!(
            "{}.{}",
            nvml_wrapper::cuda_driver_version_major(v),
            nvml_wrapper::cuda_driver_version_minor(v)
        )
    });
    let mut gpus = Vec::new();
    let mut last_err = None;
    for index in 0..count {
        match probe_one(nvml, index) {
            Ok(g) => gpus.push(g),
            Err(e) => {
                tracing::warn!("GPU {index}: {e}");
                last_err = Some(format!("GPU {index}: {e}"));
            }
        }
    }
    if gpus.is_empty() {
        return Err(last_err.unwrap_or_else(|| "NVML found no GPU".to_string()));
    }
    Ok((gpus, driver, cuda))
}

/// A process on a GPU now, as a busy check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuUser {
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`), "?" where unreadable.
    pub name: String,
    /// The share of the card's SMs it used over the last few seconds, in percent; None where
    /// NVML keeps no per-process utilization for the card.
    pub sm_pct: Option<u32>,
}

/// What the GPUs are doing now: who is on them and how busy the busiest card is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuActivity {
    pub users: Vec<GpuUser>,
    /// The busiest card's utilization over NVML's last sample period, in percent.
    pub device_util_pct: Option<u32>,
}

/// The processes on the GPUs now (NVML's compute and graphics lists) with what each computes;
/// empty without NVML. Read before every launch of a tune: a process that holds memory and
/// computes nothing (a desktop's compositor, a browser, a ballast) is not a busy box.
pub fn activity_now() -> GpuActivity {
    let Ok(nvml) = nvml() else {
        return GpuActivity::default();
    };
    // Samples of the last 3 s (NVML's timestamps are the CPU clock in microseconds).
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
        .saturating_sub(3_000_000);
    let mut out = GpuActivity::default();
    for index in 0..nvml.device_count().unwrap_or(0) {
        let Ok(d) = nvml.device_by_index(index) else {
            continue;
        };
        if let Ok(u) = d.utilization_rates() {
            out.device_util_pct = Some(out.device_util_pct.unwrap_or(0).max(u.gpu));
        }
        // Only processes that computed in the period are listed: the others used 0 %.
        let samples = match d.process_utilization_stats(since) {
            Ok(v) => Some(v),
            Err(NvmlError::NotFound) => Some(Vec::new()),
            Err(_) => None,
        };
        let lists = [
            d.running_compute_processes().unwrap_or_default(),
            d.running_graphics_processes().unwrap_or_default(),
        ];
        for p in lists.into_iter().flatten() {
            let sm = samples.as_ref().map(|v| {
                v.iter()
                    .filter(|s| s.pid == p.pid)
                    .map(|s| s.sm_util)
                    .max()
                    .unwrap_or(0)
            });
            if let Some(u) = out.users.iter_mut().find(|u| u.pid == p.pid) {
                u.sm_pct = match (u.sm_pct, sm) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                continue;
            }
            let name = std::fs::read_to_string(format!("/proc/{}/comm", p.pid))
                .map_or_else(|_| "?".to_string(), |s| s.trim().to_string());
            out.users.push(GpuUser {
                pid: p.pid,
                name,
                sm_pct: sm,
            });
        }
    }
    out.users.sort_by_key(|u| u.pid);
    out
}

fn probe_one(nvml: &Nvml, index: u32) -> Result<GpuInfo, NvmlError> {
    let d = nvml.device_by_index(index)?;
    let mem = d.memory_info()?;
    let pcie = PcieLink {
        gen_current: d.current_pcie_link_gen().ok(),
        gen_max: d.max_pcie_link_gen().ok(),
        width_current: d.current_pcie_link_width().ok(),
        width_max: d.max_pcie_link_width().ok(),
    };
    let mut processes: Vec<GpuProcess> = Vec::new();
    let lists = [
        d.running_compute_processes().unwrap_or_default(),
        d.running_graphics_processes().unwrap_or_default(),
    ];
    for p in lists.into_iter().flatten() {
        let used_mib = match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => Some(b / MIB),
            UsedGpuMemory::Unavailable => None,
        };
        if let Some(existing) = processes.iter_mut().find(|q| q.pid == p.pid) {
            existing.used_mib = match (existing.used_mib, used_mib) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            continue;
        }
        let name = nvml
            .sys_process_name(p.pid, 256)
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| {
                std::fs::read_to_string(format!("/proc/{}/comm", p.pid))
                    .ok()
                    .map(|s| s.trim().to_string())
            });
        processes.push(GpuProcess {
            pid: p.pid,
            name,
            used_mib,
        });
    }
    processes.sort_by_key(|p| p.pid);
    Ok(GpuInfo {
        index,
        name: d.name()?,
        uuid: d.uuid().unwrap_or_default(),
        vram_total_mib: mem.total / MIB,
        vram_free_mib: mem.free / MIB,
        vram_used_mib: mem.used / MIB,
        pcie,
        compute_capability: d.cuda_compute_capability().ok().map(|c| (c.major, c.minor)),
        processes,
        mem_bandwidth_gbs: memory_bandwidth_gbs(
            d.max_clock_info(nvml_wrapper::enum_wrappers::device::Clock::Memory)
                .ok(),
            d.memory_bus_width().ok(),
        ),
    })
}

/// Peak memory bandwidth (GB/s) from NVML's maximum memory clock (MHz) and bus width (bits):
/// clock x width x 2 transfers per clock / 8 bits. H100 SXM: 2619 MHz x 5120 bits = 3352 GB/s.
pub fn memory_bandwidth_gbs(
    max_mem_clock_mhz: Option<u32>,
    bus_width_bits: Option<u32>,
) -> Option<f64> {
    match (max_mem_clock_mhz, bus_width_bits) {
        (Some(c), Some(w)) if c > 0 && w > 0 => Some(c as f64 * 1e6 * w as f64 * 2.0 / 8.0 / 1e9),
        _ => None,
    }
}

/// Used VRAM per GPU (MiB) as NVML reports it now; None with no GPU or on an NVML error.
fn used_vram_mib(nvml: &Nvml) -> Option<Vec<u64>> {
    let count = nvml.device_count().ok()?;
    (0..count)
        .map(|i| {
            nvml.device_by_index(i)
                .and_then(|d| d.memory_info())
                .map(|m| m.used / MIB)
                .ok()
        })
        .collect()
}

/// Free VRAM per GPU (MiB) right now; None with no GPU (or when NVML fails).
pub fn free_vram_mib_now() -> Option<Vec<u64>> {
    let nvml = nvml().ok()?;
    let count = nvml.device_count().ok()?;
    if count == 0 {
        return None;
    }
    (0..count)
        .map(|i| {
            nvml.device_by_index(i)
                .and_then(|d| d.memory_info())
                .map(|m| m.free / MIB)
                .ok()
        })
        .collect()
}

/// Polls used VRAM per GPU on a background thread and keeps the peak.
///
/// Used VRAM is NVML's `used` (all processes, driver-reserved memory excluded), so a trial's own
/// peak is `stop()[i]` minus the used VRAM before it started. With no GPU nothing is sampled.
pub struct VramSampler {
    stop_tx: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<Vec<u64>>>,
}

impl VramSampler {
    /// Start sampling every `interval` (e.g. 100 ms). Samples once at once and once at stop.
    pub fn start(interval: Duration) -> VramSampler {
        let Ok(nvml) = nvml() else {
            return VramSampler {
                stop_tx: None,
                handle: None,
            };
        };
        let (tx, rx) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("qtune-vram-sampler".into())
            .spawn(move || {
                let mut peaks: Vec<u64> = Vec::new();
                let sample = |peaks: &mut Vec<u64>| {
                    if let Some(now) = used_vram_mib(nvml) {
                        if peaks.len() < now.len() {
                            peaks.resize(now.len(), 0);
                        }
                        for (p, n) in peaks.iter_mut().zip(now) {
                            *p = (*p).max(n);
                        }
                    }
                };
                loop {
                    sample(&mut peaks);
                    match rx.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => continue,
                        // Stopped, or the sampler was dropped.
                        _ => break,
                    }
                }
                sample(&mut peaks);
                peaks
            });
        match spawned {
            Ok(h) => VramSampler {
                stop_tx: Some(tx),
                handle: Some(h),
            },
            Err(e) => {
                tracing::warn!("cannot start the VRAM sampler thread: {e}");
                VramSampler {
                    stop_tx: None,
                    handle: None,
                }
            }
        }
    }

    /// Stop and return the peak used VRAM per GPU (MiB); empty with no GPU.
    pub fn stop(mut self) -> Vec<u64> {
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(());
        }
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for VramSampler {
    fn drop(&mut self) {
        // Dropping the sender ends the thread at its next wake-up; nothing to join here.
        self.stop_tx.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampler_without_gpu_returns_nothing_and_never_blocks() {
        if nvml().is_ok() {
            return; // a GPU box: covered by the real run
        }
        let s = VramSampler::start(Duration::from_millis(10));
        std::thread::sleep(Duration::from_millis(30));
        assert!(s.stop().is_empty());
        assert!(free_vram_mib_now().is_none());
    }

    #[test]
    fn no_driver_reason_is_in_words() {
        if let Err(reason) = nvml() {
            assert!(
                reason.contains("NVIDIA") || reason.contains("QTUNE_NO_GPU"),
                "{reason}"
            );
        }
    }
}
