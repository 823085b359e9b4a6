//! Hand-made hardware profiles: one builder instead of a struct literal per test.
//!
//! `FakeBox::new()` is a GPU-less desktop (8 physical / 16 logical cores, 64 GiB RAM, no
//! bandwidth measured); `.gpu(name, total, free)` adds a card (PCIe 5 x16, compute capability
//! 9.0 unless `.pcie_gen` / `.compute_capability` say otherwise), and the other methods set
//! what a test is about.
#![allow(dead_code)]

use qtune::hardware::{GpuInfo, HardwareProfile, HostInfo, PcieLink};

pub struct FakeBox {
    hw: HardwareProfile,
}

impl Default for FakeBox {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeBox {
    pub fn new() -> Self {
        FakeBox {
            hw: HardwareProfile {
                gpus: Vec::new(),
                no_gpu_reason: Some("no NVIDIA driver".into()),
                driver_version: None,
                cuda_version: None,
                host: HostInfo {
                    cpu_model: "AMD Ryzen 7 7700X 8-Core Processor".into(),
                    physical_cores: Some(8),
                    logical_cores: 16,
                    ram_total_mib: 65_536,
                    ram_available_mib: 60_000,
                    os: "test".into(),
                    mem_bandwidth_gbs: None,
                    mem_bandwidth_by_threads: Vec::new(),
                },
                fingerprint: "0123456789abcdef".into(),
            },
        }
    }

    /// One more card: `name`, `total_mib` of VRAM of which `free_mib` is free.
    pub fn gpu(mut self, name: &str, total_mib: u64, free_mib: u64) -> Self {
        let index = self.hw.gpus.len() as u32;
        self.hw.gpus.push(GpuInfo {
            index,
            name: name.into(),
            uuid: format!("GPU-{index}"),
            vram_total_mib: total_mib,
            vram_free_mib: free_mib,
            vram_used_mib: total_mib - free_mib,
            pcie: PcieLink {
                gen_current: Some(5),
                gen_max: Some(5),
                width_current: Some(16),
                width_max: Some(16),
            },
            compute_capability: Some((9, 0)),
            processes: Vec::new(),
            mem_bandwidth_gbs: None,
        });
        self.hw.no_gpu_reason = None;
        self
    }

    /// Every card's PCIe generation (x16).
    pub fn pcie_gen(mut self, gen: u32) -> Self {
        for g in &mut self.hw.gpus {
            g.pcie.gen_current = Some(gen);
            g.pcie.gen_max = Some(gen);
        }
        self
    }

    /// Every card's compute capability.
    pub fn compute_capability(mut self, major: i32, minor: i32) -> Self {
        for g in &mut self.hw.gpus {
            g.compute_capability = Some((major, minor));
        }
        self
    }

    pub fn driver(mut self, driver: &str, cuda: &str) -> Self {
        self.hw.driver_version = Some(driver.into());
        self.hw.cuda_version = Some(cuda.into());
        self
    }

    /// The host: its CPU, cores and RAM (MiB).
    pub fn host(
        mut self,
        cpu_model: &str,
        physical: u32,
        logical: u32,
        ram_total_mib: u64,
        ram_available_mib: u64,
    ) -> Self {
        let h = &mut self.hw.host;
        h.cpu_model = cpu_model.into();
        h.physical_cores = Some(physical);
        h.logical_cores = logical;
        h.ram_total_mib = ram_total_mib;
        h.ram_available_mib = ram_available_mib;
        self
    }

    /// The host's measured read bandwidth, GB/s.
    pub fn host_bandwidth(mut self, gbs: f64) -> Self {
        self.hw.host.mem_bandwidth_gbs = Some(gbs);
        self
    }

    pub fn build(self) -> HardwareProfile {
        self.hw
    }
}
