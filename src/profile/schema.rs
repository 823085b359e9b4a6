//! The profile format: what a shareable profile holds (schema version 1).

use super::*;

/// A shareable profile: one tune's result without anything that identifies the box or paths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub schema: u32,
    pub name: String,
    /// RFC 3339 time of export.
    pub created: String,
    pub qtune_version: String,
    /// `llama-server --version` of the tune.
    pub llama_cpp_version: String,
    pub hardware: ProfileHardware,
    pub model: ProfileModel,
    pub space: ProfileSpace,
    pub winner: ProfileWinner,
    /// Every distinct config the tune launched: ok ones by generation speed, then failures.
    pub front: Vec<FrontPoint>,
    /// The space's quality floor and what it measured (KV types against f16), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<crate::quality::floor::QualityGate>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileGpu {
    pub name: String,
    pub vram_total_mib: u64,
    /// On a box with two GPUs or more: this card's free VRAM before the tune and its budget
    /// (free minus the headroom). The list is in device order (`CUDA_DEVICE_ORDER=PCI_BUS_ID`,
    /// `CUDA_VISIBLE_DEVICES` as listed), the order of the winner's `-ts` split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_at_start_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_mib: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileHardware {
    /// [`crate::hardware::fingerprint`] of the box.
    pub fingerprint: String,
    /// Empty for a CPU-only tune.
    pub gpus: Vec<ProfileGpu>,
    /// Free VRAM (summed) before the tune; with a VRAM ballast, the emulated card size.
    pub free_vram_at_start_mib: u64,
    pub headroom_mib: u64,
    /// Free VRAM at start minus headroom; absent with no GPU.
    #[serde(default)]
    pub vram_budget_mib: Option<u64>,
    pub cpu: String,
    #[serde(default)]
    pub physical_cores: Option<u32>,
    pub logical_cores: u32,
    pub ram_total_mib: u64,
    #[serde(default)]
    pub mem_bandwidth_gbs: Option<f64>,
}

impl ProfileHardware {
    /// "NVIDIA GeForce RTX 4080 + ..." or "CPU only".
    pub fn gpu_label(&self) -> String {
        if self.gpus.is_empty() {
            "CPU only".to_string()
        } else {
            self.gpus
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(" + ")
        }
    }
    pub fn vram_total_mib(&self) -> u64 {
        self.gpus.iter().map(|g| g.vram_total_mib).sum()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileModel {
    /// [`crate::model::ModelLayout::fingerprint`] (shape and tensor types, not the path).
    pub fingerprint: String,
    #[serde(default)]
    pub name: Option<String>,
    pub arch: String,
    pub n_blocks: u32,
    pub n_experts: u32,
    pub n_experts_used: u32,
    #[serde(default)]
    pub file_type: Option<String>,
    pub file_bytes: u64,
    pub bytes_by_type: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpace {
    pub name: String,
    pub ctx: u32,
    pub workload: Workload,
}

/// A measured speed: median over samples and spread ((max - min) / median, percent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speed {
    pub median: f64,
    pub spread_pct: f64,
    pub samples: u32,
}

impl Speed {
    pub fn from_stat(s: &Stat) -> Speed {
        Speed {
            median: s.median,
            spread_pct: s.spread_pct,
            samples: s.samples.len() as u32,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileWinner {
    pub config: LaunchConfig,
    /// Generation tok/s.
    pub tg: Speed,
    /// Prompt processing tok/s.
    pub pp: Speed,
    #[serde(default)]
    pub peak_vram_mib: Option<u64>,
    /// Generation gain over the baseline (server defaults), percent.
    #[serde(default)]
    pub gen_gain_pct: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrontPoint {
    pub config: LaunchConfig,
    /// Generation tok/s median (ok configs).
    #[serde(default)]
    pub tg: Option<f64>,
    #[serde(default)]
    pub pp: Option<f64>,
    #[serde(default)]
    pub peak_vram_mib: Option<u64>,
    pub outcome: OutcomeKind,
    /// On the Pareto front of generation speed against peak VRAM.
    #[serde(default)]
    pub pareto: bool,
    /// Time per request on the tune's own workload, seconds: the median over the config's
    /// launches, the number the tune's summary printed (None in older profiles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_s: Option<f64>,
}
