//! The box: GPUs through NVML (`nvml-wrapper`, loaded at run time), host through `sysinfo`.
//! With no NVIDIA driver the profile says "no GPU" and everything else still works.

use serde::{Deserialize, Serialize};

/// PCIe link of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub vram_total_mib: u64,
    pub vram_free_mib: u64,
    pub vram_used_mib: u64,
    pub pcie: PcieLink,
    /// e.g. (9, 0) for Hopper.
    pub compute_capability: Option<(i32, i32)>,
    pub processes: Vec<GpuProcess>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub cpu_model: String,
    pub physical_cores: Option<u32>,
    pub logical_cores: u32,
    pub ram_total_mib: u64,
    pub ram_available_mib: u64,
    pub os: String,
    /// Measured multi-threaded host memory read bandwidth (GB/s), when measured.
    pub mem_bandwidth_gbs: Option<f64>,
}

/// Everything qtune knows about the box before it launches anything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HardwareProfile {
    pub gpus: Vec<GpuInfo>,
    /// Why there is no GPU (no driver, NVML error), when `gpus` is empty.
    pub no_gpu_reason: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub host: HostInfo,
    /// Stable short hash of what does not change between runs (GPU names and totals, CPU, RAM).
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
    /// One line, e.g. "1× NVIDIA H200 (143,771 MiB, 16,384 free) · 16 cores · 128 GiB RAM".
    pub fn summary(&self) -> String {
        let gpus = if self.gpus.is_empty() {
            format!(
                "no GPU ({})",
                self.no_gpu_reason.as_deref().unwrap_or("none found")
            )
        } else {
            self.gpus
                .iter()
                .map(|g| {
                    format!(
                        "{} ({} total, {} free)",
                        g.name,
                        crate::util::fmt_mib(g.vram_total_mib as f64),
                        crate::util::fmt_mib(g.vram_free_mib as f64)
                    )
                })
                .collect::<Vec<_>>()
                .join(" + ")
        };
        format!(
            "{gpus} · {} · {} cores ({} logical) · {} GiB RAM",
            self.host.cpu_model,
            self.host
                .physical_cores
                .map_or("?".to_string(), |c| c.to_string()),
            self.host.logical_cores,
            self.host.ram_total_mib / 1024
        )
    }
}

/// `qtune hw`: print the hardware profile.
pub fn cmd_hw(format: crate::util::Format, measure_bandwidth: bool) -> anyhow::Result<()> {
    let _ = (format, measure_bandwidth);
    anyhow::bail!("qtune hw is not implemented yet")
}
