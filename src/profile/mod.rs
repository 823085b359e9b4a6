//! Shareable profiles (`profiles/*.yaml`): what a tune found on one box, for another box to
//! start from. A profile is data from strangers: only known keys and valid values pass.
//!
//! A profile holds no host names and no paths. Its configs are [`LaunchConfig`]s, so the flags
//! a profile leads to are always rendered by qtune ([`crate::engine::Engine::server_args`]); nothing in
//! a profile is ever copied onto a command line as text.

use crate::config::LaunchConfig;

use crate::run::TuneResult;
use crate::space::Workload;
use crate::trial::{OutcomeKind, Stat};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The profile format this qtune writes and reads.
pub const SCHEMA_VERSION: u32 = 1;
/// Largest profile file accepted.
pub const MAX_PROFILE_BYTES: u64 = 1024 * 1024;

const MAX_FRONT: usize = 1024;
const MAX_GPUS: usize = 64;
const MAX_TYPES: usize = 64;
/// 1 TiB in MiB.
const MAX_VRAM_MIB: u64 = 1024 * 1024;

mod convert;
mod parse;
mod render;
mod schema;
mod store;
mod validation;

pub use convert::*;
pub use parse::*;
pub use render::*;
pub use schema::*;
pub use store::*;
pub use validation::*;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::KvType;

    pub(crate) fn profile() -> Profile {
        let cfg = LaunchConfig {
            n_gpu_layers: Some(999),
            n_cpu_moe: Some(20),
            threads: Some(8),
            batch: Some(2048),
            ubatch: Some(512),
            cache_type_k: KvType::Q8_0,
            cache_type_v: KvType::Q8_0,
            ..LaunchConfig::baseline(8192)
        };
        let speed = |m| Speed {
            median: m,
            spread_pct: 4.0,
            samples: 3,
        };
        Profile {
            schema: SCHEMA_VERSION,
            name: "Qwen3.5-35B-A3B Q4_K_M on RTX 4080 (16 GiB)".into(),
            created: "2026-11-22T16:00:00Z".into(),
            qtune_version: "0.1.0".into(),
            llama_cpp_version: "version: 11434 (abc1234)".into(),
            hardware: ProfileHardware {
                fingerprint: "0123456789abcdef".into(),
                gpus: vec![ProfileGpu {
                    name: "NVIDIA GeForce RTX 4080".into(),
                    vram_total_mib: 16376,
                    free_at_start_mib: None,
                    budget_mib: None,
                }],
                free_vram_at_start_mib: 15800,
                headroom_mib: 512,
                vram_budget_mib: Some(15288),
                cpu: "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz".into(),
                physical_cores: Some(8),
                logical_cores: 16,
                ram_total_mib: 64000,
                mem_bandwidth_gbs: Some(60.0),
            },
            model: ProfileModel {
                fingerprint: "fedcba9876543210".into(),
                name: Some("Qwen3.5-35B-A3B".into()),
                arch: "qwen35moe".into(),
                n_blocks: 40,
                n_experts: 256,
                n_experts_used: 8,
                file_type: Some("Q4_K_M".into()),
                file_bytes: 21_000_000_000,
                bytes_by_type: [("Q4_K".to_string(), 20_000_000_000u64)].into(),
            },
            space: ProfileSpace {
                name: "default".into(),
                ctx: 8192,
                workload: Workload::default(),
            },
            winner: ProfileWinner {
                config: cfg.clone(),
                tg: speed(40.0),
                pp: speed(800.0),
                peak_vram_mib: Some(14000),
                gen_gain_pct: Some(12.0),
            },
            front: vec![FrontPoint {
                config: cfg,
                tg: Some(40.0),
                pp: Some(800.0),
                peak_vram_mib: Some(14000),
                outcome: OutcomeKind::Ok,
                pareto: true,
                request_s: None,
            }],
            quality: None,
        }
    }

    #[test]
    fn valid_profile_passes_and_round_trips() {
        let p = profile();
        validate(&p).unwrap();
        let text = to_yaml(&p).unwrap();
        assert_eq!(parse_profile(&text, "t.yaml").unwrap(), p);
    }

    #[test]
    fn bounds_are_inclusive_and_named() {
        let mut p = profile();
        p.winner.config.ctx = 256;
        p.winner.config.threads = Some(1024);
        p.winner.config.batch = Some(65536);
        p.winner.config.ubatch = Some(65536);
        p.winner.config.n_cpu_moe = Some(1024);
        p.winner.config.parallel = 256;
        validate(&p).unwrap();
        type Case = (fn(&mut Profile), &'static str);
        let cases: Vec<Case> = vec![
            (|p| p.winner.config.ctx = 255, "winner.config.ctx = 255"),
            (|p| p.winner.config.ctx = 1_048_577, "winner.config.ctx"),
            (
                |p| p.winner.config.threads = Some(0),
                "winner.config.threads = 0",
            ),
            (
                |p| p.winner.config.batch = Some(0),
                "winner.config.batch = 0",
            ),
            (
                |p| p.winner.config.n_cpu_moe = Some(1025),
                "winner.config.n_cpu_moe",
            ),
            (
                |p| p.winner.config.n_gpu_layers = Some(1025),
                "winner.config.n_gpu_layers",
            ),
            (
                |p| p.winner.config.parallel = 0,
                "winner.config.parallel = 0",
            ),
            (
                |p| p.winner.config.cpu_experts = Some(crate::config::CpuExperts::last(2, 1026)),
                "winner.config.cpu_experts: block 1024 is out of range",
            ),
            (
                |p| p.winner.config.fit_target_mib = vec![1 << 21],
                "winner.config.fit_target_mib",
            ),
            (
                |p| p.winner.config.fit = Some(true),
                "winner.config: --fit on cannot be combined",
            ),
            (|p| p.winner.tg.median = f64::NAN, "winner.tg.median"),
            (|p| p.front[0].tg = Some(-0.5), "front[0].tg"),
            (
                |p| p.winner.peak_vram_mib = Some((1 << 20) + 1),
                "winner.peak_vram_mib",
            ),
            (|p| p.model.n_experts_used = 300, "model.n_experts_used"),
            (|p| p.name = "a".repeat(129), "name is longer than 128"),
            (|p| p.name = String::new(), "name is empty"),
            (|p| p.name = "x;y".into(), "name contains the character ';'"),
            (
                |p| p.hardware.fingerprint = "zz".into(),
                "hardware.fingerprint",
            ),
            (|p| p.model.arch = "qwen/../x".into(), "model.arch"),
            (|p| p.created = "$(date)".into(), "created"),
        ];
        for (f, expect) in cases {
            let mut p = profile();
            f(&mut p);
            let err = validate(&p).unwrap_err().to_string();
            assert!(err.contains(expect), "expected '{expect}' in: {err}");
        }
    }

    #[test]
    fn malformed_yaml_names_the_line() {
        let err = parse_profile("schema: 1\nname: [x\n", "t.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.yaml is not a valid profile"), "{err}");
        assert!(err.contains("line"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn labels_are_sanitized_and_stems_are_safe() {
        assert_eq!(sanitize_label("GeForce `rm` $HOME"), "GeForce -rm- -HOME");
        assert_eq!(sanitize_label("\u{1b}[31m"), "--31m");
        assert_eq!(sanitize_label("   "), "unnamed");
        assert_eq!(
            file_stem("Qwen3.5 Q4_K_M on RTX 4080 (16 GiB)"),
            "Qwen3.5-Q4_K_M-on-RTX-4080-16-GiB"
        );
        assert_eq!(file_stem("../../etc/passwd"), "etc-passwd");
        assert_eq!(file_stem("..."), "profile");
    }

    #[test]
    fn import_refuses_a_different_file_and_accepts_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("p.yaml");
        std::fs::write(&src, to_yaml(&profile()).unwrap()).unwrap();
        let profiles = dir.path().join("profiles");
        let (dest, new) = import_into(&src, &profiles).unwrap();
        assert!(new);
        assert_eq!(import_into(&src, &profiles).unwrap(), (dest.clone(), false));
        let mut other = profile();
        other.winner.tg.median = 50.0;
        std::fs::write(&src, to_yaml(&other).unwrap()).unwrap();
        let err = import_into(&src, &profiles).unwrap_err().to_string();
        assert!(err.contains("already exists"), "{err}");
        assert_eq!(load_profile(&dest).unwrap(), profile());
        // Only the stored profile, no temporary files left.
        assert_eq!(std::fs::read_dir(&profiles).unwrap().count(), 1);
    }
}
