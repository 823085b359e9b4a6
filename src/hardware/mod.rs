//! The box: GPUs through NVML (`nvml-wrapper`, loaded at run time), host through `sysinfo`.
//! With no NVIDIA driver the profile says "no GPU" and everything else still works.

pub mod busy;
pub mod gpu;
mod host;
pub mod rpc;

pub use gpu::{free_vram_mib_now, memory_bandwidth_gbs, nvml, VramSampler};
pub use host::measure_read_bandwidth_gbs;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// PCIe link of one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PcieLink {
    pub gen_current: Option<u32>,
    pub gen_max: Option<u32>,
    pub width_current: Option<u32>,
    pub width_max: Option<u32>,
}

/// A process holding VRAM on a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub name: Option<String>,
    pub used_mib: Option<u64>,
}

/// One GPU. The fields a box described rather than probed may leave out (`qtune plan --box
/// FILE`: a file of the form `qtune hw --yaml` writes) default to nothing: index, uuid, free
/// and used VRAM, link, compute capability and processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    #[serde(default)]
    pub index: u32,
    pub name: String,
    #[serde(default)]
    pub uuid: String,
    pub vram_total_mib: u64,
    #[serde(default)]
    pub vram_free_mib: u64,
    #[serde(default)]
    pub vram_used_mib: u64,
    #[serde(default)]
    pub pcie: PcieLink,
    /// e.g. (9, 0) for Hopper.
    #[serde(default)]
    pub compute_capability: Option<(i32, i32)>,
    #[serde(default)]
    pub processes: Vec<GpuProcess>,
    /// Peak memory bandwidth, GB/s: NVML's maximum memory clock x bus width x 2 (double data
    /// rate). None when NVML does not say (profiles written before this field, too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bandwidth_gbs: Option<f64>,
}

/// The host. A described box may leave out available RAM (then its total), the OS, the
/// physical cores and the bandwidth (then assumed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    #[serde(default)]
    pub cpu_model: String,
    #[serde(default)]
    pub physical_cores: Option<u32>,
    pub logical_cores: u32,
    pub ram_total_mib: u64,
    #[serde(default)]
    pub ram_available_mib: u64,
    #[serde(default)]
    pub os: String,
    /// Measured multi-threaded host memory read bandwidth (GB/s), when measured.
    #[serde(default)]
    pub mem_bandwidth_gbs: Option<f64>,
    /// The same at fewer threads (`qtune hw` only), ascending: how the CPU experts' read rate
    /// scales with `-t`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mem_bandwidth_by_threads: Vec<ThreadBandwidth>,
}

/// Host read bandwidth at one thread count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThreadBandwidth {
    pub threads: u32,
    pub gbs: f64,
}

/// Measure the host read bandwidth at a few thread counts below all threads (about 1.5 s
/// each) into `hw.host.mem_bandwidth_by_threads`.
pub fn measure_thread_scaling(hw: &mut HardwareProfile) {
    let h = &hw.host;
    let counts =
        host::scaling_thread_counts(h.physical_cores.unwrap_or(h.logical_cores), h.logical_cores);
    let ram = h.ram_available_mib;
    hw.host.mem_bandwidth_by_threads = counts
        .into_iter()
        .map(|t| ThreadBandwidth {
            threads: t,
            gbs: host::measure_read_bandwidth_gbs_at(ram, t as usize),
        })
        .collect();
}

/// One GPU's share of a tune on a box with several: its free VRAM before the tune and its
/// budget (free minus the headroom, which applies to each card).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuBudget {
    /// NVML index, which is the CUDA index under `CUDA_DEVICE_ORDER=PCI_BUS_ID`.
    pub index: u32,
    pub name: String,
    pub free_mib: u64,
    pub budget_mib: u64,
}

/// The environment that makes CUDA number the GPUs as NVML (and this profile) does: by PCI
/// bus, all of them. Without it CUDA puts the fastest card first, so on a box with two
/// different cards `CUDA0` need not be GPU 0 here.
pub fn cuda_device_env(gpus: &[GpuBudget]) -> Vec<(String, String)> {
    if gpus.len() < 2 {
        return Vec::new();
    }
    vec![
        ("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()),
        (
            "CUDA_VISIBLE_DEVICES".to_string(),
            gpus.iter()
                .map(|g| g.index.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
    ]
}

/// Everything qtune knows about the box before it launches anything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HardwareProfile {
    #[serde(default)]
    pub gpus: Vec<GpuInfo>,
    /// Why there is no GPU (no driver, NVML error), when `gpus` is empty.
    #[serde(default)]
    pub no_gpu_reason: Option<String>,
    #[serde(default)]
    pub driver_version: Option<String>,
    #[serde(default)]
    pub cuda_version: Option<String>,
    pub host: HostInfo,
    /// Stable short hash of what does not change between runs (GPU names and totals, CPU, RAM).
    #[serde(default)]
    pub fingerprint: String,
}

impl HardwareProfile {
    /// Total free VRAM over all GPUs (MiB); 0 with no GPU.
    pub fn free_vram_mib(&self) -> u64 {
        self.gpus.iter().map(|g| g.vram_free_mib).sum()
    }
    pub fn has_gpu(&self) -> bool {
        !self.gpus.is_empty()
    }
    /// Each GPU's budget: its free VRAM minus `headroom_mib` (never negative), device order.
    pub fn gpu_budgets(&self, headroom_mib: u64) -> Vec<GpuBudget> {
        self.gpus
            .iter()
            .map(|g| GpuBudget {
                index: g.index,
                name: g.name.clone(),
                free_mib: g.vram_free_mib,
                budget_mib: g.vram_free_mib.saturating_sub(headroom_mib),
            })
            .collect()
    }
    /// One line, e.g. "1× NVIDIA H200 (143,771 MiB, 16,384 free) · 16 cores · 128 GiB RAM".
    pub fn summary(&self) -> String {
        let gpus = if self.gpus.is_empty() {
            format!(
                "no GPU ({})",
                terminal(self.no_gpu_reason.as_deref().unwrap_or("none found"))
            )
        } else {
            self.gpus
                .iter()
                .map(|g| {
                    format!(
                        "{} ({} total, {} free)",
                        terminal(&g.name),
                        crate::util::fmt_mib(g.vram_total_mib as f64),
                        crate::util::fmt_mib(g.vram_free_mib as f64)
                    )
                })
                .collect::<Vec<_>>()
                .join(" + ")
        };
        format!(
            "{gpus} · {} · {} cores ({} logical) · {} GiB RAM",
            terminal(&self.host.cpu_model),
            self.host
                .physical_cores
                .map_or("?".to_string(), |c| c.to_string()),
            self.host.logical_cores,
            self.host.ram_total_mib / 1024
        )
    }
}

/// Probe the box: GPUs through NVML (none, with a reason, when there is no driver) and the host
/// through sysinfo. `measure_bandwidth` adds the host memory read bandwidth (about two seconds).
pub fn probe(measure_bandwidth: bool) -> HardwareProfile {
    let host = host::probe_host(measure_bandwidth);
    let (gpus, no_gpu_reason, driver_version, cuda_version) = match nvml() {
        Err(reason) => (Vec::new(), Some(reason.to_string()), None, None),
        Ok(n) => match gpu::probe_gpus(n) {
            Ok((g, d, c)) => (g, None, d, c),
            Err(reason) => (Vec::new(), Some(reason), None, None),
        },
    };
    let fingerprint = fingerprint(&gpus, &host);
    HardwareProfile {
        gpus,
        no_gpu_reason,
        driver_version,
        cuda_version,
        host,
        fingerprint,
    }
}

/// Stable short hash (16 hex digits) of what does not change between runs of one box:
/// GPU names and total VRAM, CPU model, logical cores and RAM rounded to GiB.
pub fn fingerprint(gpus: &[GpuInfo], host: &HostInfo) -> String {
    let mut h = Sha256::new();
    for g in gpus {
        h.update(format!("gpu:{}|{}\n", g.name, g.vram_total_mib));
    }
    let ram_gib = (host.ram_total_mib as f64 / 1024.0).round() as u64;
    h.update(format!(
        "cpu:{}|{}|{}",
        host.cpu_model, host.logical_cores, ram_gib
    ));
    let digest = h.finalize();
    digest.iter().take(8).fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// "gen 5 x16 (max gen 5 x16)"; unknown parts are "?".
pub fn pcie_text(p: &PcieLink) -> String {
    if p == &(PcieLink {
        gen_current: None,
        gen_max: None,
        width_current: None,
        width_max: None,
    }) {
        return "unknown".to_string();
    }
    let v = |x: Option<u32>| x.map_or("?".to_string(), |n| n.to_string());
    format!(
        "gen {} x{} (max gen {} x{})",
        v(p.gen_current),
        v(p.width_current),
        v(p.gen_max),
        v(p.width_max)
    )
}

use crate::escape::terminal;

/// One GPU as a readable block (several lines, no trailing newline).
pub fn gpu_text(g: &GpuInfo) -> String {
    let mib = |m: u64| crate::util::fmt_mib(m as f64);
    let mut out = format!(
        "GPU {}: {}\n  VRAM: {} total, {} free, {} used\n  PCIe: {}\n  Compute capability: {}",
        g.index,
        terminal(&g.name),
        mib(g.vram_total_mib),
        mib(g.vram_free_mib),
        mib(g.vram_used_mib),
        pcie_text(&g.pcie),
        g.compute_capability
            .map_or("unknown".to_string(), |(a, b)| format!("{a}.{b}")),
    );
    if let Some(bw) = g.mem_bandwidth_gbs {
        let _ = write!(
            out,
            "\n  Memory bandwidth: {} (peak, from NVML clocks)",
            crate::util::gbs(bw)
        );
    }
    if !g.uuid.is_empty() {
        let _ = write!(out, "\n  UUID: {}", terminal(&g.uuid));
    }
    if g.processes.is_empty() {
        out.push_str("\n  Processes holding VRAM: none");
    } else {
        out.push_str("\n  Processes holding VRAM:");
        for p in &g.processes {
            let _ = write!(
                out,
                "\n    pid {} {} ({})",
                p.pid,
                terminal(p.name.as_deref().unwrap_or("?")),
                p.used_mib.map_or("usage unknown".to_string(), mib)
            );
        }
    }
    out
}

/// The whole profile as the text `qtune hw` prints.
pub fn render_text(hw: &HardwareProfile) -> String {
    let mut out = String::new();
    if hw.gpus.is_empty() {
        let _ = writeln!(
            out,
            "GPU: none — {}; qtune will tune for CPU only",
            terminal(hw.no_gpu_reason.as_deref().unwrap_or("no GPU found"))
        );
    } else {
        for g in &hw.gpus {
            let _ = writeln!(out, "{}", gpu_text(g));
        }
        let _ = writeln!(
            out,
            "Driver: {} · CUDA {}",
            terminal(hw.driver_version.as_deref().unwrap_or("unknown")),
            terminal(hw.cuda_version.as_deref().unwrap_or("unknown"))
        );
    }
    let h = &hw.host;
    let _ = writeln!(out, "Host:");
    let _ = writeln!(
        out,
        "  CPU: {} · {} physical cores, {} logical",
        terminal(&h.cpu_model),
        h.physical_cores.map_or("?".to_string(), |c| c.to_string()),
        h.logical_cores
    );
    let _ = writeln!(
        out,
        "  RAM: {} total, {} available",
        crate::util::fmt_mib(h.ram_total_mib as f64),
        crate::util::fmt_mib(h.ram_available_mib as f64)
    );
    let _ = writeln!(out, "  OS: {}", terminal(&h.os));
    let _ = writeln!(
        out,
        "  Memory read bandwidth: {}",
        h.mem_bandwidth_gbs
            .map_or("not measured".to_string(), |b| format!(
                "{} (all threads)",
                crate::util::gbs(b)
            ))
    );
    if !h.mem_bandwidth_by_threads.is_empty() {
        let _ = writeln!(
            out,
            "  Memory read bandwidth by threads: {}",
            h.mem_bandwidth_by_threads
                .iter()
                .map(|t| format!("{}: {}", t.threads, crate::util::gbs(t.gbs)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = write!(out, "Fingerprint: {}", hw.fingerprint);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_16gib() -> GpuInfo {
        GpuInfo {
            index: 0,
            name: "NVIDIA GeForce RTX 4080".into(),
            uuid: "GPU-00000000-1111-2222-3333-444444444444".into(),
            vram_total_mib: 16376,
            vram_free_mib: 15100,
            vram_used_mib: 1276,
            pcie: PcieLink {
                gen_current: Some(4),
                gen_max: Some(4),
                width_current: Some(16),
                width_max: Some(16),
            },
            compute_capability: Some((8, 9)),
            processes: vec![GpuProcess {
                pid: 1234,
                name: Some("Xorg".into()),
                used_mib: Some(312),
            }],
            mem_bandwidth_gbs: Some(716.8),
        }
    }

    fn fake_host() -> HostInfo {
        HostInfo {
            cpu_model: "AMD Ryzen 7 7700X 8-Core Processor".into(),
            physical_cores: Some(8),
            logical_cores: 16,
            ram_total_mib: 64 * 1024 - 300,
            ram_available_mib: 50_000,
            os: "Ubuntu 24.04".into(),
            mem_bandwidth_gbs: Some(61.25),
            mem_bandwidth_by_threads: Vec::new(),
        }
    }

    fn fake_profile(gpus: Vec<GpuInfo>) -> HardwareProfile {
        let host = fake_host();
        let no_gpu_reason = gpus
            .is_empty()
            .then(|| "no NVIDIA driver (libnvidia-ml.so.1 not found)".to_string());
        HardwareProfile {
            fingerprint: fingerprint(&gpus, &host),
            gpus,
            no_gpu_reason,
            driver_version: Some("570.86".into()),
            cuda_version: Some("12.8".into()),
            host,
        }
    }

    #[test]
    fn gpu_block_shows_vram_pcie_cc_and_processes() {
        let t = gpu_text(&fake_16gib());
        assert!(t.starts_with("GPU 0: NVIDIA GeForce RTX 4080"), "{t}");
        assert!(
            t.contains("VRAM: 16,376 MiB total, 15,100 MiB free, 1,276 MiB used"),
            "{t}"
        );
        assert!(t.contains("PCIe: gen 4 x16 (max gen 4 x16)"), "{t}");
        assert!(t.contains("Memory bandwidth: 717 GB/s"), "{t}");
        assert!(t.contains("Compute capability: 8.9"), "{t}");
        assert!(t.contains("pid 1234 Xorg (312 MiB)"), "{t}");
    }

    #[test]
    fn pcie_text_marks_unknown_parts() {
        let mut p = fake_16gib().pcie;
        p.gen_current = Some(1); // idle link downshift
        p.width_max = None;
        assert_eq!(pcie_text(&p), "gen 1 x16 (max gen 4 x?)");
        let none = PcieLink {
            gen_current: None,
            gen_max: None,
            width_current: None,
            width_max: None,
        };
        assert_eq!(pcie_text(&none), "unknown");
    }

    #[test]
    fn no_gpu_text_says_cpu_only_with_the_reason() {
        let t = render_text(&fake_profile(vec![]));
        assert!(t.starts_with(
            "GPU: none — no NVIDIA driver (libnvidia-ml.so.1 not found); qtune will tune for CPU only"
        ), "{t}");
        assert!(t.contains("8 physical cores, 16 logical"), "{t}");
        assert!(t.contains("61.2 GB/s") || t.contains("61.3 GB/s"), "{t}");
        assert!(!t.contains("Driver:"), "{t}");
    }

    #[test]
    fn gpu_profile_text_and_summary() {
        let hw = fake_profile(vec![fake_16gib()]);
        let t = render_text(&hw);
        assert!(t.contains("Driver: 570.86 · CUDA 12.8"), "{t}");
        assert!(!t.contains("GPU: none"), "{t}");
        assert_eq!(hw.free_vram_mib(), 15100);
        assert!(hw
            .summary()
            .contains("NVIDIA GeForce RTX 4080 (16,376 MiB total, 15,100 MiB free)"));
    }

    #[test]
    fn fingerprint_ignores_free_memory_but_not_the_card() {
        let a = fake_16gib();
        let mut b = a.clone();
        b.vram_free_mib = 3;
        b.processes.clear();
        let mut host2 = fake_host();
        host2.ram_available_mib = 1;
        host2.ram_total_mib += 200; // still the same GiB
        assert_eq!(
            fingerprint(std::slice::from_ref(&a), &fake_host()),
            fingerprint(&[b], &host2)
        );
        let mut c = a.clone();
        c.vram_total_mib = 24564;
        assert_ne!(
            fingerprint(std::slice::from_ref(&a), &fake_host()),
            fingerprint(&[c], &fake_host())
        );
        let f = fingerprint(&[a], &fake_host());
        assert_eq!(f.len(), 16);
        assert!(f.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn profile_round_trips_through_json_and_yaml() {
        let hw = fake_profile(vec![fake_16gib()]);
        let j: HardwareProfile =
            serde_json::from_str(&serde_json::to_string(&hw).unwrap()).unwrap();
        assert_eq!(j, hw);
        let y: HardwareProfile =
            serde_yaml::from_str(&serde_yaml::to_string(&hw).unwrap()).unwrap();
        assert_eq!(y, hw);
    }

    #[test]
    fn real_probe_never_panics_and_is_consistent() {
        let hw = probe(false);
        assert_eq!(hw.gpus.is_empty(), hw.no_gpu_reason.is_some());
        assert_eq!(hw.fingerprint, fingerprint(&hw.gpus, &hw.host));
    }
}
