//! The quality floor of a search space (`quality:` in the YAML): KV cache types that lose more
//! than it allows against f16 are not searched. The tune measures each KV type of the space once
//! (reusing `qtune quality`'s cache), drops those below the floor, and carries the numbers into
//! its results, report and profile as a [`QualityGate`].
//!
//! ```yaml
//! quality:
//!   min_top1_pct: 99      # same top-1 token as f16 at least 99 % of the time
//!   max_mean_kld: 0.01    # optional: mean KL divergence at most this
//!   text: my-text.txt     # optional: the text to score, relative to where qtune runs
//!                         # (default: the KJV, see quality::text)
//!   chunks: 4             # optional: chunks per run (default: 16,384 tokens / ctx)
//! ```

use super::{kv_label, KvQuality, QualityOptions};
use crate::config::KvType;
pub use crate::space::QualityFloor;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Does a measured KV type keep this floor?
pub fn passes(f: &QualityFloor, q: &KvQuality) -> bool {
    f.min_top1_pct.is_none_or(|m| q.same_top1_pct >= m)
        && f.max_mean_kld.is_none_or(|m| q.mean_kld <= m)
}

/// What the floor did to a tune: carried by `results.json`, the report and the profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualityGate {
    pub min_top1_pct: Option<f64>,
    pub max_mean_kld: Option<f64>,
    /// The text's name (a path for a user's file) and the first 16 hex digits of its SHA-256.
    pub text: String,
    pub text_sha256: String,
    pub ctx: u32,
    pub chunks: u32,
    /// Every measured KV type of the space (f16/f16, the reference, is not measured).
    pub measured: Vec<KvQuality>,
    /// `[K, V]` pairs taken out of the space.
    pub excluded: Vec<[KvType; 2]>,
}

impl QualityGate {
    /// One line per measured type, for reports.
    pub fn lines(&self) -> Vec<String> {
        self.measured
            .iter()
            .map(|q| {
                format!(
                    "{}: mean KLD {:.6}, KLD p99 {:.6}, same top-1 {:.3} %{}",
                    q.label(),
                    q.mean_kld,
                    q.kld_p99,
                    q.same_top1_pct,
                    if self.excluded.contains(&q.kv) {
                        " (below the floor: not searched)"
                    } else {
                        ""
                    }
                )
            })
            .collect()
    }

    pub fn floor(&self) -> QualityFloor {
        QualityFloor {
            min_top1_pct: self.min_top1_pct,
            max_mean_kld: self.max_mean_kld,
            text: None,
            chunks: None,
        }
    }
}

/// Check a gate read from a profile from elsewhere: finite numbers in range, a short text name.
pub fn validate_gate(g: &QualityGate) -> Result<()> {
    let floor_ok = g.min_top1_pct.is_none_or(|m| (0.0..=100.0).contains(&m))
        && g.max_mean_kld.is_none_or(|m| m.is_finite() && m >= 0.0);
    if !floor_ok {
        bail!("quality: the floor is out of range");
    }
    if g.text.len() > 200 || g.text_sha256.len() > 64 || g.ctx == 0 || g.measured.len() > 32 {
        bail!("quality: text, ctx or measured is out of range");
    }
    for q in &g.measured {
        let ok = q.mean_kld.is_finite()
            && q.kld_p99.is_finite()
            && (0.0..=100.0).contains(&q.same_top1_pct)
            && q.ppl_ratio.is_none_or(f64::is_finite);
        if !ok {
            bail!(
                "quality: the numbers for KV {} are not finite or out of range",
                q.label()
            );
        }
    }
    Ok(())
}

/// The report's "Quality floor" section.
pub fn markdown(g: &QualityGate) -> String {
    let mut m = String::from(
        "## Quality floor (KV cache types against f16)

",
    );
    m.push_str(&format!(
        "Floor: {}. Measured with llama-perplexity on {} (sha256 {}), {} chunks at ctx {}; KV types below the floor were not searched.\n\n",
        g.floor().describe(),
        g.text,
        g.text_sha256,
        g.chunks,
        g.ctx
    ));
    if g.measured.is_empty() {
        m.push_str("The space searches f16 KV only: nothing to measure.\n\n");
        return m;
    }
    m.push_str(
        "| KV (K/V) | mean KLD | KLD p99 | same top-1 | searched |\n|---|---:|---:|---:|---|\n",
    );
    for q in &g.measured {
        m.push_str(&format!(
            "| {} | {:.6} | {:.6} | {:.3} % | {} |\n",
            q.label(),
            q.mean_kld,
            q.kld_p99,
            q.same_top1_pct,
            if g.excluded.contains(&q.kv) {
                "no: below the floor"
            } else {
                "yes"
            }
        ));
    }
    m.push('\n');
    m
}

/// Remove the space's KV types that fall below its floor. No floor: nothing measured, `None`.
/// `note` receives progress lines.
pub fn apply(
    space: &mut crate::space::SearchSpace,
    model: &Path,
    server: Option<&Path>,
    note: &mut dyn FnMut(String),
) -> Result<Option<QualityGate>> {
    let Some(floor) = space.quality.clone() else {
        return Ok(None);
    };
    let reference = [KvType::F16, KvType::F16];
    let kv: Vec<[KvType; 2]> = space
        .vary
        .kv_types
        .iter()
        .copied()
        .filter(|p| *p != reference)
        .collect();
    let mut gate = QualityGate {
        min_top1_pct: floor.min_top1_pct,
        max_mean_kld: floor.max_mean_kld,
        text: String::new(),
        text_sha256: String::new(),
        ctx: space.fixed.ctx,
        chunks: 0,
        measured: Vec::new(),
        excluded: Vec::new(),
    };
    if kv.is_empty() {
        return Ok(Some(gate));
    }
    let mut opts = QualityOptions::new(model, kv.clone(), space.fixed.ctx);
    opts.text = floor.text.clone();
    opts.chunks = floor.chunks;
    opts.server = server.map(Path::to_path_buf);
    // The tune's launches' thread cap (a busy box's free cores, or QTUNE_MAX_THREADS).
    opts.threads = space.fixed.threads_cap;
    note(format!(
        "quality floor ({}): measuring KV {} against f16 at ctx {}",
        floor.describe(),
        kv.iter()
            .map(|k| kv_label(*k))
            .collect::<Vec<_>>()
            .join(", "),
        space.fixed.ctx
    ));
    let (report, origin) = super::measure(&opts, note)?;
    if origin == super::Origin::Cached {
        note("quality: reusing the cached measurement".into());
    }
    gate.text = report.text.name.clone();
    gate.text_sha256 = report.text.sha256.clone();
    gate.ctx = report.ctx;
    gate.chunks = report.chunks;
    gate.measured = report.candidates.clone();
    gate.excluded = report
        .candidates
        .iter()
        .filter(|q| !passes(&floor, q))
        .map(|q| q.kv)
        .collect();
    space.vary.kv_types.retain(|p| !gate.excluded.contains(p));
    if space.vary.kv_types.is_empty() {
        bail!(
            "every KV type of the space is below the quality floor ({}): {}; add [f16, f16] to kv_types or lower the floor",
            floor.describe(),
            gate.lines().join("; ")
        );
    }
    Ok(Some(gate))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(kv: KvType, top1: f64, kld: f64) -> KvQuality {
        KvQuality {
            kv: [kv, kv],
            mean_kld: kld,
            kld_p99: kld * 10.0,
            same_top1_pct: top1,
            ppl_ratio: None,
        }
    }

    #[test]
    fn floor_passes_and_refuses() {
        let f = QualityFloor {
            min_top1_pct: Some(99.0),
            max_mean_kld: None,
            text: None,
            chunks: None,
        };
        assert!(passes(&f, &q(KvType::Q8_0, 99.5, 0.001)));
        assert!(!passes(&f, &q(KvType::Q4_0, 97.0, 0.02)));
        let g = QualityFloor {
            max_mean_kld: Some(0.005),
            ..f
        };
        assert!(!passes(&g, &q(KvType::Q8_0, 99.5, 0.006)));
    }

    #[test]
    fn floor_validation() {
        let f = QualityFloor {
            min_top1_pct: None,
            max_mean_kld: None,
            text: None,
            chunks: None,
        };
        assert!(crate::space::validate_quality_floor(&f).is_err());
        let f = QualityFloor {
            min_top1_pct: Some(101.0),
            ..f
        };
        assert_eq!(
            crate::space::validate_quality_floor(&f).unwrap_err().0,
            "min_top1_pct"
        );
    }

    fn gate() -> QualityGate {
        QualityGate {
            min_top1_pct: Some(90.0),
            max_mean_kld: None,
            text: "/home/me/secret/notes.txt".into(),
            text_sha256: "0123456789abcdef".into(),
            ctx: 512,
            chunks: 8,
            measured: vec![q(KvType::Q8_0, 95.4, 0.0074), q(KvType::Q4_0, 84.2, 0.119)],
            excluded: vec![[KvType::Q4_0, KvType::Q4_0]],
        }
    }

    #[test]
    fn a_profile_carries_the_gate_and_round_trips() {
        let mut p = crate::profile::tests::profile();
        p.quality = Some(crate::profile::quality_for_profile(&gate()));
        assert_eq!(
            p.quality.as_ref().unwrap().text,
            "notes.txt",
            "no local path"
        );
        crate::profile::validate(&p).unwrap();
        let yaml = crate::profile::to_yaml(&p).unwrap();
        assert_eq!(crate::profile::parse_profile(&yaml, "p.yaml").unwrap(), p);
        let shown = crate::profile::show_text(&p);
        assert!(
            shown.contains("q4_0: mean KLD 0.119000") && shown.contains("not searched"),
            "{shown}"
        );
        // Hostile numbers are refused.
        let mut bad = gate();
        bad.measured[0].same_top1_pct = f64::NAN;
        p.quality = Some(bad);
        assert!(crate::profile::validate(&p).is_err());
    }

    #[test]
    fn report_section_lists_each_type() {
        let md = markdown(&gate());
        assert!(
            md.contains("| q8_0 | 0.007400 | 0.074000 | 95.400 % | yes |"),
            "{md}"
        );
        assert!(
            md.contains("| q4_0 | 0.119000 | 1.190000 | 84.200 % | no: below the floor |"),
            "{md}"
        );
    }
}
