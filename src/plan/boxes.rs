//! Boxes described rather than probed (`qtune plan --box NAME|FILE`): a small catalog of
//! common cards from their vendors' datasheets, each with a typical host, and box files of the
//! form `qtune hw --yaml` writes, checked number by number.

use crate::hardware::{GpuInfo, HardwareProfile, HostInfo, PcieLink};
use anyhow::{bail, Context, Result};

use std::path::Path;

/// One catalog card, from its vendor's datasheet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CatalogCard {
    /// What `--box` takes: "rtx-5080-16gb".
    pub id: &'static str,
    /// The name NVML reports for the card.
    pub gpu_name: &'static str,
    /// Memory, GiB (the datasheet's "GB" are GiB of memory chips).
    pub vram_gib: u32,
    /// Peak memory bandwidth, GB/s.
    pub mem_bandwidth_gbs: f64,
    pub pcie_gen: u32,
    pub pcie_width: u32,
    /// Which typical host it is paired with.
    pub host: CatalogHost,
}

/// The hosts catalog cards are paired with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogHost {
    /// A current desktop: AMD Ryzen 9 9950X (16 cores, 32 threads), 64 GiB dual-channel DDR5
    /// (the host of the seeds' RTX 5080 measurements, with less RAM). Its read bandwidth is not
    /// measured: the speed model's assumed desktop rate
    /// ([`crate::model::speed::DEFAULT_HOST_BW_GBS`]) is used, and the plan says so.
    Desktop,
    /// The leased machine the speed model was fitted on: a 16-core Xeon, 126 GiB, 99 GB/s of
    /// read bandwidth measured by `qtune hw` (docs/evidence/).
    LeasedXeon,
}

/// The built-in boxes. Bandwidths and links from NVIDIA's product pages and datasheets.
pub const CATALOG: [CatalogCard; 8] = [
    CatalogCard {
        id: "rtx-3060-12gb",
        gpu_name: "NVIDIA GeForce RTX 3060",
        vram_gib: 12,
        mem_bandwidth_gbs: 360.0,
        pcie_gen: 4,
        pcie_width: 16,
        host: CatalogHost::Desktop,
    },
    CatalogCard {
        id: "rtx-3090",
        gpu_name: "NVIDIA GeForce RTX 3090",
        vram_gib: 24,
        mem_bandwidth_gbs: 936.0,
        pcie_gen: 4,
        pcie_width: 16,
        host: CatalogHost::Desktop,
    },
    CatalogCard {
        id: "rtx-4070-ti-super-16gb",
        gpu_name: "NVIDIA GeForce RTX 4070 Ti SUPER",
        vram_gib: 16,
        mem_bandwidth_gbs: 672.0,
        pcie_gen: 4,
        pcie_width: 16,
        host: CatalogHost::Desktop,
    },
    CatalogCard {
        id: "rtx-4090",
        gpu_name: "NVIDIA GeForce RTX 4090",
        vram_gib: 24,
        mem_bandwidth_gbs: 1008.0,
        pcie_gen: 4,
        pcie_width: 16,
        host: CatalogHost::Desktop,
    },
    CatalogCard {
        id: "rtx-5060-ti-16gb",
        gpu_name: "NVIDIA GeForce RTX 5060 Ti",
        vram_gib: 16,
        mem_bandwidth_gbs: 448.0,
        pcie_gen: 5,
        pcie_width: 8,
        host: CatalogHost::Desktop,
    },
    CatalogCard {
        id: "rtx-5080-16gb",
        gpu_name: "NVIDIA GeForce RTX 5080",
        vram_gib: 16,
        mem_bandwidth_gbs: 960.0,
        pcie_gen: 5,
        pcie_width: 16,
        host: CatalogHost::Desktop,
    },
    CatalogCard {
        id: "rtx-5090",
        gpu_name: "NVIDIA GeForce RTX 5090",
        vram_gib: 32,
        mem_bandwidth_gbs: 1792.0,
        pcie_gen: 5,
        pcie_width: 16,
        host: CatalogHost::Desktop,
    },
    CatalogCard {
        id: "h100",
        gpu_name: "NVIDIA H100 80GB HBM3",
        vram_gib: 80,
        mem_bandwidth_gbs: 3352.0,
        pcie_gen: 5,
        pcie_width: 16,
        host: CatalogHost::LeasedXeon,
    },
];

impl CatalogHost {
    pub fn info(self) -> HostInfo {
        match self {
            CatalogHost::Desktop => HostInfo {
                cpu_model: "AMD Ryzen 9 9950X (typical desktop host)".into(),
                physical_cores: Some(16),
                logical_cores: 32,
                ram_total_mib: 64 * 1024,
                ram_available_mib: 64 * 1024,
                os: String::new(),
                mem_bandwidth_gbs: None,
                mem_bandwidth_by_threads: Vec::new(),
            },
            CatalogHost::LeasedXeon => HostInfo {
                cpu_model: "Intel(R) Xeon(R) Processor (16 cores, the speed model's host)".into(),
                physical_cores: Some(16),
                logical_cores: 16,
                ram_total_mib: 128_887,
                ram_available_mib: 128_887,
                os: String::new(),
                mem_bandwidth_gbs: Some(99.0),
                mem_bandwidth_by_threads: Vec::new(),
            },
        }
    }
    /// One line for `--list-boxes`.
    pub fn describe(self) -> &'static str {
        match self {
            CatalogHost::Desktop => "Ryzen 9 9950X, 16 cores, 64 GiB DDR5 (bandwidth assumed)",
            CatalogHost::LeasedXeon => "16-core Xeon, 126 GiB, 99 GB/s measured",
        }
    }
}

impl CatalogCard {
    /// The box: this card (all its memory free: a card driving no display) and its host.
    pub fn hardware(&self) -> HardwareProfile {
        let vram = u64::from(self.vram_gib) * 1024;
        let gpu = GpuInfo {
            index: 0,
            name: self.gpu_name.into(),
            uuid: String::new(),
            vram_total_mib: vram,
            vram_free_mib: vram,
            vram_used_mib: 0,
            pcie: PcieLink {
                gen_current: Some(self.pcie_gen),
                gen_max: Some(self.pcie_gen),
                width_current: Some(self.pcie_width),
                width_max: Some(self.pcie_width),
            },
            compute_capability: None,
            processes: Vec::new(),
            mem_bandwidth_gbs: Some(self.mem_bandwidth_gbs),
        };
        finish(vec![gpu], self.host.info())
    }
}

/// The catalog card called `id`.
pub fn catalog_card(id: &str) -> Option<&'static CatalogCard> {
    let id = id.trim().to_ascii_lowercase();
    CATALOG.iter().find(|c| c.id == id)
}

/// The catalog as `qtune plan --list-boxes` prints it.
pub fn catalog_text() -> String {
    let mut o = String::from("Built-in boxes (vendor datasheets; --box NAME):\n");
    for c in &CATALOG {
        o.push_str(&format!(
            "  {:<24} {} GiB, {:.0} GB/s, PCIe {}.0 x{}; host: {}\n",
            c.id,
            c.vram_gib,
            c.mem_bandwidth_gbs,
            c.pcie_gen,
            c.pcie_width,
            c.host.describe()
        ));
    }
    o.push_str(
        "Any other box: a YAML file of the form `qtune hw --yaml` writes (gpus: name, \
         vram_total_mib, mem_bandwidth_gbs, pcie; host: logical_cores, physical_cores, \
         ram_total_mib, mem_bandwidth_gbs), passed as --box FILE.\n",
    );
    o
}

/// Limits a described box's numbers must keep: far beyond any real box, low enough that a typo
/// (a size in bytes, a bandwidth in MB/s) is caught.
pub const MAX_GPUS: usize = 16;
const MAX_VRAM_MIB: u64 = 4 << 20; // 4 TiB
const MAX_GPU_BW_GBS: f64 = 100_000.0;
const MAX_HOST_BW_GBS: f64 = 10_000.0;
const MAX_CORES: u32 = 4096;
const MAX_RAM_MIB: u64 = 64 << 20; // 64 TiB
/// A box file larger than this is not a box file.
const MAX_BOX_FILE_BYTES: u64 = 256 * 1024;

/// The box named `spec`: a catalog id, else a YAML file (`qtune hw --yaml`'s form). Errors are
/// one line and say what to change.
pub fn load_box(spec: &str) -> Result<HardwareProfile> {
    if let Some(c) = catalog_card(spec) {
        return Ok(c.hardware());
    }
    let path = Path::new(spec);
    if !path.exists() {
        bail!(
            "unknown box '{}': give one of {} (qtune plan --list-boxes) or a YAML file as `qtune hw --yaml` writes",
            crate::model::gguf::shown(spec, 60),
            CATALOG.iter().map(|c| c.id).collect::<Vec<_>>().join(", ")
        );
    }
    let bytes = crate::util::read_bounded(path, MAX_BOX_FILE_BYTES)
        .with_context(|| format!("cannot read box file {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("box file {} is not UTF-8 text", path.display()))?;
    parse_box(&text).map_err(|e| anyhow::anyhow!("box file {}: {e:#}", path.display()))
}

/// A box from YAML text (`qtune hw --yaml`'s form), checked ([`check_box`]).
pub fn parse_box(text: &str) -> Result<HardwareProfile> {
    crate::util::check_yaml_shape(text, crate::util::MAX_YAML_DEPTH)
        .map_err(|e| anyhow::anyhow!("not a box description: {e}"))?;
    let hw: HardwareProfile = serde_yaml::from_str(text).map_err(|e| {
        anyhow::anyhow!(
            "not a box description ({}): write it as `qtune hw --yaml` does (gpus: [..], host: {{..}})",
            one_line(&e.to_string())
        )
    })?;
    check_box(hw)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Check every number of a described box and fill what it may leave out (free VRAM: all of
/// it; available RAM: all of it; device indices). The first bad number is the error.
pub fn check_box(hw: HardwareProfile) -> Result<HardwareProfile> {
    if hw.gpus.len() > MAX_GPUS {
        bail!(
            "{} GPUs: qtune plans at most {MAX_GPUS} cards in one box",
            hw.gpus.len()
        );
    }
    let mut gpus = Vec::with_capacity(hw.gpus.len());
    for (i, mut g) in hw.gpus.into_iter().enumerate() {
        let at = format!("gpus[{i}] ({})", crate::model::gguf::shown(&g.name, 40));
        if g.name.trim().is_empty() {
            bail!("gpus[{i}] has no name: give the card's name, e.g. NVIDIA GeForce RTX 4090");
        }
        if g.vram_total_mib == 0 || g.vram_total_mib > MAX_VRAM_MIB {
            bail!(
                "{at}: vram_total_mib is {}: give the card's memory in MiB, 1 to {MAX_VRAM_MIB} (16384 for a 16 GB card)",
                g.vram_total_mib
            );
        }
        if g.vram_free_mib == 0 {
            g.vram_free_mib = g.vram_total_mib.saturating_sub(g.vram_used_mib);
        }
        if g.vram_free_mib > g.vram_total_mib {
            bail!(
                "{at}: vram_free_mib {} is more than vram_total_mib {}",
                g.vram_free_mib,
                g.vram_total_mib
            );
        }
        match g.mem_bandwidth_gbs {
            Some(v) if !(v.is_finite() && v > 0.0 && v <= MAX_GPU_BW_GBS) => bail!(
                "{at}: mem_bandwidth_gbs is {v}: give the card's memory bandwidth in GB/s, above 0 and at most {MAX_GPU_BW_GBS:.0} (960 for an RTX 5080)"
            ),
            Some(_) => {}
            None if crate::model::speed::gpu_bandwidth_by_name(&g.name).is_some() => {}
            None => bail!(
                "{at}: no mem_bandwidth_gbs and the card is not known by name: give its memory bandwidth in GB/s from its datasheet"
            ),
        }
        let p = &g.pcie;
        for (what, v) in [("gen_max", p.gen_max), ("gen_current", p.gen_current)] {
            if let Some(v) = v.filter(|v| !(1..=6).contains(v)) {
                bail!("{at}: pcie.{what} is {v}: PCIe generations are 1 to 6");
            }
        }
        for (what, v) in [
            ("width_max", p.width_max),
            ("width_current", p.width_current),
        ] {
            if let Some(v) = v.filter(|v| ![1, 2, 4, 8, 16, 32].contains(v)) {
                bail!("{at}: pcie.{what} is {v}: a link is x1, x2, x4, x8, x16 or x32");
            }
        }
        g.index = i as u32;
        gpus.push(g);
    }
    let mut host = hw.host;
    if host.logical_cores == 0 || host.logical_cores > MAX_CORES {
        bail!(
            "host: logical_cores is {}: give the CPU's threads, 1 to {MAX_CORES}",
            host.logical_cores
        );
    }
    if let Some(p) = host.physical_cores {
        if p == 0 || p > host.logical_cores {
            bail!(
                "host: physical_cores is {p}: give 1 to logical_cores ({})",
                host.logical_cores
            );
        }
    }
    if host.ram_total_mib == 0 || host.ram_total_mib > MAX_RAM_MIB {
        bail!(
            "host: ram_total_mib is {}: give the RAM in MiB, 1 to {MAX_RAM_MIB} (65536 for 64 GiB)",
            host.ram_total_mib
        );
    }
    if host.ram_available_mib == 0 {
        host.ram_available_mib = host.ram_total_mib;
    }
    if host.ram_available_mib > host.ram_total_mib {
        bail!(
            "host: ram_available_mib {} is more than ram_total_mib {}",
            host.ram_available_mib,
            host.ram_total_mib
        );
    }
    if let Some(v) = host.mem_bandwidth_gbs {
        if !(v.is_finite() && v > 0.0 && v <= MAX_HOST_BW_GBS) {
            bail!(
                "host: mem_bandwidth_gbs is {v}: give the RAM's read bandwidth in GB/s, above 0 and at most {MAX_HOST_BW_GBS:.0} (about 60 for dual-channel DDR5), or leave it out to assume one"
            );
        }
    }
    for t in &host.mem_bandwidth_by_threads {
        if !(t.gbs.is_finite() && t.gbs > 0.0 && t.gbs <= MAX_HOST_BW_GBS) || t.threads == 0 {
            bail!(
                "host: mem_bandwidth_by_threads has {} GB/s at {} threads: each must be above 0 GB/s at 1 thread or more",
                t.gbs,
                t.threads
            );
        }
    }
    Ok(finish(gpus, host))
}

/// Override the host of a box: cores, RAM (GiB) and read bandwidth (GB/s), each checked.
pub fn with_host(
    mut hw: HardwareProfile,
    cores: Option<u32>,
    ram_gib: Option<u64>,
    host_bw_gbs: Option<f64>,
) -> Result<HardwareProfile> {
    if let Some(c) = cores {
        hw.host.physical_cores = Some(c);
        hw.host.logical_cores = hw.host.logical_cores.max(c);
        hw.host.mem_bandwidth_by_threads.clear();
    }
    if let Some(r) = ram_gib {
        hw.host.ram_total_mib = r.saturating_mul(1024);
        hw.host.ram_available_mib = hw.host.ram_total_mib;
    }
    if let Some(b) = host_bw_gbs {
        hw.host.mem_bandwidth_gbs = Some(b);
        hw.host.mem_bandwidth_by_threads.clear();
    }
    check_box(hw).map_err(|e| anyhow::anyhow!("--cores/--ram-gib/--host-bw-gbs: {e:#}"))
}

fn finish(gpus: Vec<GpuInfo>, host: HostInfo) -> HardwareProfile {
    let fingerprint = crate::hardware::fingerprint(&gpus, &host);
    HardwareProfile {
        no_gpu_reason: gpus.is_empty().then(|| "described with no GPU".to_string()),
        gpus,
        driver_version: None,
        cuda_version: None,
        host,
        fingerprint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalog_box_is_valid_and_found_by_name() {
        for c in &CATALOG {
            let hw = check_box(c.hardware()).unwrap();
            assert_eq!(hw.gpus.len(), 1);
            assert_eq!(load_box(c.id).unwrap(), c.hardware());
        }
        assert!(catalog_card("RTX-5080-16GB").is_some());
        let e = load_box("rtx-9999").unwrap_err().to_string();
        assert!(e.contains("rtx-5080-16gb") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn what_hw_yaml_writes_reads_back_as_a_box() {
        let hw = CATALOG[5].hardware();
        let yaml = serde_yaml::to_string(&hw).unwrap();
        assert_eq!(parse_box(&yaml).unwrap(), hw);
    }
}
