//! Shareable profiles (`profiles/*.yaml`): what a tune found on one box, for another box to
//! start from. A profile is data from strangers: only known keys and valid values pass.
//!
//! A profile holds no host names and no paths. Its configs are [`LaunchConfig`]s, so the flags
//! a profile leads to are always rendered by qtune ([`LaunchConfig::server_args`]); nothing in
//! a profile is ever copied onto a command line as text.

use crate::config::LaunchConfig;
use crate::hardware::{HardwareProfile, HostInfo};
use crate::model::ModelLayout;
use crate::search::TuneResult;
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
/// Where `import` puts profiles and `list` / `plan` look, relative to the current directory.
pub const PROFILES_DIR: &str = "profiles";

const MAX_FRONT: usize = 1024;
const MAX_GPUS: usize = 64;
const MAX_TYPES: usize = 64;
/// 1 TiB in MiB.
const MAX_VRAM_MIB: u64 = 1024 * 1024;

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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileGpu {
    pub name: String,
    pub vram_total_mib: u64,
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
}

// ---------------------------------------------------------------------------------------------
// Building a profile from a tune

/// Replace every character a profile label may not hold with '-', and cut to 128 characters.
pub fn sanitize_label(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| if is_label_char(c) { c } else { '-' })
        .take(128)
        .collect();
    let t = cleaned.trim();
    if t.is_empty() {
        "unnamed".to_string()
    } else {
        t.to_string()
    }
}

fn sanitize_name(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| if is_name_char(c) { c } else { '-' })
        .take(128)
        .collect();
    let t = cleaned.trim();
    if t.is_empty() {
        "unnamed".to_string()
    } else {
        t.to_string()
    }
}

/// The default profile name: model, quantization, GPU (or CPU) and the VRAM it had.
pub fn default_name(r: &TuneResult) -> String {
    let model = r.model.name.clone().unwrap_or_else(|| r.model.arch.clone());
    let ft = r
        .model
        .file_type
        .as_deref()
        .map(|f| format!(" {f}"))
        .unwrap_or_default();
    let target = match r.hardware.gpus.first() {
        Some(g) => format!(
            "{} ({} GiB free)",
            g.name,
            (r.free_vram_at_start_mib as f64 / 1024.0).round()
        ),
        None => format!("CPU {} cores", r.hardware.host.logical_cores),
    };
    sanitize_name(&format!("{model}{ft} on {target}"))
}

/// Build a profile from a tune's result. Fails when the tune has no winner.
pub fn from_tune(r: &TuneResult, name: Option<&str>) -> Result<Profile> {
    let w = r.winner.as_ref().ok_or_else(|| {
        anyhow!("this run has no winner (no config finished its trials): nothing to export")
    })?;
    let hw = &r.hardware;
    let profile = Profile {
        schema: SCHEMA_VERSION,
        name: name.map_or_else(|| default_name(r), sanitize_name),
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        qtune_version: sanitize_label(env!("CARGO_PKG_VERSION")),
        llama_cpp_version: sanitize_label(&r.server_version),
        hardware: ProfileHardware {
            fingerprint: hw.fingerprint.clone(),
            gpus: hw
                .gpus
                .iter()
                .map(|g| ProfileGpu {
                    name: sanitize_label(&g.name),
                    vram_total_mib: g.vram_total_mib,
                })
                .collect(),
            free_vram_at_start_mib: r.free_vram_at_start_mib,
            headroom_mib: r.headroom_mib,
            vram_budget_mib: r.vram_budget_mib,
            cpu: sanitize_label(&hw.host.cpu_model),
            physical_cores: hw.host.physical_cores,
            logical_cores: hw.host.logical_cores,
            ram_total_mib: hw.host.ram_total_mib,
            mem_bandwidth_gbs: hw.host.mem_bandwidth_gbs.filter(|b| b.is_finite()),
        },
        model: ProfileModel {
            fingerprint: r.model.fingerprint.clone(),
            name: r.model.name.as_deref().map(sanitize_label),
            arch: r.model.arch.clone(),
            n_blocks: r.model.n_blocks,
            n_experts: r.model.n_experts,
            n_experts_used: r.model.n_experts_used,
            file_type: r.model.file_type.clone(),
            file_bytes: r.model.file_bytes,
            bytes_by_type: r.model.bytes_by_type.clone(),
        },
        space: ProfileSpace {
            name: sanitize_name(&r.space.name),
            ctx: w.config.ctx,
            workload: r.space.workload.clone(),
        },
        winner: ProfileWinner {
            config: w.config.clone(),
            tg: Speed::from_stat(&w.gen_tps),
            pp: Speed::from_stat(&w.prompt_tps),
            peak_vram_mib: w.peak_vram_mib,
            gen_gain_pct: w.gen_gain_pct.filter(|g| g.is_finite()),
        },
        front: measured_front(r),
    };
    validate(&profile).context("the exported profile would not pass validation")?;
    Ok(profile)
}

/// Every distinct launched config of a tune, samples pooled over its trials.
pub fn measured_front(r: &TuneResult) -> Vec<FrontPoint> {
    #[derive(Default)]
    struct Acc {
        tg: Vec<f64>,
        pp: Vec<f64>,
        peak: Option<u64>,
        ok: bool,
        last_failure: Option<OutcomeKind>,
    }
    let mut by_config: BTreeMap<LaunchConfig, Acc> = BTreeMap::new();
    for t in &r.trials {
        if t.kind == OutcomeKind::Skipped {
            continue;
        }
        let a = by_config.entry(t.config.clone()).or_default();
        if t.kind.is_ok() {
            a.ok = true;
            if let Some(m) = &t.metrics {
                a.tg.extend(&m.gen_tps.samples);
                a.pp.extend(&m.prompt_tps.samples);
            }
        } else {
            a.last_failure = Some(t.kind);
        }
        if let Some(p) = t.peak_vram_total_mib() {
            a.peak = Some(a.peak.map_or(p, |q| q.max(p)));
        }
    }
    let mut front: Vec<FrontPoint> = by_config
        .into_iter()
        .map(|(config, a)| FrontPoint {
            config,
            tg: Stat::from_samples(&a.tg)
                .map(|s| s.median)
                .filter(|v| v.is_finite()),
            pp: Stat::from_samples(&a.pp)
                .map(|s| s.median)
                .filter(|v| v.is_finite()),
            peak_vram_mib: a.peak,
            outcome: if a.ok {
                OutcomeKind::Ok
            } else {
                a.last_failure.unwrap_or(OutcomeKind::Crash)
            },
            pareto: false,
        })
        .collect();
    // Pareto: no other ok point is at least as fast with no more VRAM (and better in one).
    let pts: Vec<(f64, u64)> = front
        .iter()
        .map(|p| (p.tg.unwrap_or(-1.0), p.peak_vram_mib.unwrap_or(0)))
        .collect();
    for (i, p) in front.iter_mut().enumerate() {
        if p.outcome != OutcomeKind::Ok || p.tg.is_none() {
            continue;
        }
        let (tg, vram) = pts[i];
        p.pareto = !pts
            .iter()
            .enumerate()
            .any(|(j, &(t2, v2))| j != i && t2 >= tg && v2 <= vram && (t2 > tg || v2 < vram));
    }
    front.sort_by(|a, b| {
        let ka = (a.outcome != OutcomeKind::Ok, -a.tg.unwrap_or(-1.0));
        let kb = (b.outcome != OutcomeKind::Ok, -b.tg.unwrap_or(-1.0));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
    front.truncate(MAX_FRONT);
    front
}

// ---------------------------------------------------------------------------------------------
// Validation

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || " ._+()-".contains(c)
}

/// Labels (GPU and CPU names, versions) also allow `@ , :` ("E5-2680 v4 @ 2.40GHz",
/// "version: 11434 (abc1234)"), never a shell metacharacter or a control character.
fn is_label_char(c: char) -> bool {
    is_name_char(c) || "@,:".contains(c)
}

fn check_str(key: &str, v: &str, max: usize, ok: fn(char) -> bool, what: &str) -> Result<()> {
    if v.is_empty() {
        bail!("{key} is empty");
    }
    if v.chars().count() > max {
        bail!("{key} is longer than {max} characters");
    }
    if let Some(c) = v.chars().find(|&c| !ok(c)) {
        bail!("{key} contains {} (allowed: {what})", describe_char(c));
    }
    Ok(())
}

fn describe_char(c: char) -> String {
    if c.is_control() {
        format!("a control character (U+{:04X})", c as u32)
    } else {
        format!("the character '{c}'")
    }
}

fn check_name(key: &str, v: &str) -> Result<()> {
    check_str(
        key,
        v,
        128,
        is_name_char,
        "letters, digits, space and . _ + ( ) -",
    )
}

fn check_label(key: &str, v: &str) -> Result<()> {
    check_str(
        key,
        v,
        128,
        is_label_char,
        "letters, digits, space and . _ + ( ) - @ , :",
    )
}

fn check_ident(key: &str, v: &str, max: usize) -> Result<()> {
    check_str(
        key,
        v,
        max,
        |c| c.is_ascii_alphanumeric() || "._-".contains(c),
        "letters, digits and . _ -",
    )
}

fn check_hex(key: &str, v: &str) -> Result<()> {
    check_str(key, v, 64, |c| c.is_ascii_hexdigit(), "hex digits")
}

fn check_range<T: PartialOrd + std::fmt::Display + Copy>(
    key: &str,
    v: T,
    lo: T,
    hi: T,
) -> Result<()> {
    if v < lo || v > hi {
        bail!("{key} = {v} is out of range ({lo}..={hi})");
    }
    Ok(())
}

fn check_speed(key: &str, v: f64) -> Result<()> {
    if !v.is_finite() || !(0.0..=1e9).contains(&v) {
        bail!("{key} = {v} is not a sane speed (finite, 0..=1e9)");
    }
    Ok(())
}

fn check_config(key: &str, c: &LaunchConfig) -> Result<()> {
    check_range(&format!("{key}.ctx"), c.ctx, 256, 1_048_576)?;
    check_range(&format!("{key}.parallel"), c.parallel, 1, 256)?;
    if let Some(n) = c.n_gpu_layers {
        check_range(&format!("{key}.n_gpu_layers"), n, 0, 1024)?;
    }
    if let Some(n) = c.n_cpu_moe {
        check_range(&format!("{key}.n_cpu_moe"), n, 0, 1024)?;
    }
    if let Some(t) = c.threads {
        check_range(&format!("{key}.threads"), t, 1, 1024)?;
    }
    if let Some(b) = c.batch {
        check_range(&format!("{key}.batch"), b, 1, 65536)?;
    }
    if let Some(ub) = c.ubatch {
        check_range(&format!("{key}.ubatch"), ub, 1, 65536)?;
        if let Some(b) = c.batch {
            if ub > b {
                bail!("{key}.ubatch = {ub} is larger than {key}.batch = {b}");
            }
        }
    }
    // issue 13: expert placement, fit target, and flags the server would refuse together.
    if let Some(e) = &c.cpu_experts {
        e.check(1024)
            .map_err(|m| anyhow::anyhow!("{key}.cpu_experts: {m}"))?;
    }
    for &t in &c.fit_target_mib {
        check_range(&format!("{key}.fit_target_mib"), t, 0, 1_048_576)?;
    }
    c.check().map_err(|m| anyhow::anyhow!("{key}: {m}"))?;
    Ok(())
}

fn check_vram(key: &str, v: u64) -> Result<()> {
    check_range(key, v, 0, MAX_VRAM_MIB)
}

/// Check every value of a profile: bounds, safe strings, consistency. The first problem is the
/// error, naming its key (e.g. `winner.config.threads = 5000 is out of range (1..=1024)`).
pub fn validate(p: &Profile) -> Result<()> {
    if p.schema != SCHEMA_VERSION {
        bail!(
            "schema = {} is not supported by this qtune (it reads schema {SCHEMA_VERSION})",
            p.schema
        );
    }
    check_name("name", &p.name)?;
    check_str(
        "created",
        &p.created,
        40,
        |c| c.is_ascii_digit() || "-:T.Z+".contains(c),
        "an RFC 3339 time",
    )?;
    check_label("qtune_version", &p.qtune_version)?;
    check_label("llama_cpp_version", &p.llama_cpp_version)?;

    let h = &p.hardware;
    check_hex("hardware.fingerprint", &h.fingerprint)?;
    if h.gpus.len() > MAX_GPUS {
        bail!(
            "hardware.gpus has {} entries (at most {MAX_GPUS})",
            h.gpus.len()
        );
    }
    for (i, g) in h.gpus.iter().enumerate() {
        check_label(&format!("hardware.gpus[{i}].name"), &g.name)?;
        check_vram(
            &format!("hardware.gpus[{i}].vram_total_mib"),
            g.vram_total_mib,
        )?;
    }
    check_vram("hardware.free_vram_at_start_mib", h.free_vram_at_start_mib)?;
    check_vram("hardware.headroom_mib", h.headroom_mib)?;
    if let Some(b) = h.vram_budget_mib {
        check_vram("hardware.vram_budget_mib", b)?;
    }
    check_label("hardware.cpu", &h.cpu)?;
    if let Some(c) = h.physical_cores {
        check_range("hardware.physical_cores", c, 1, 65536)?;
    }
    check_range("hardware.logical_cores", h.logical_cores, 1, 65536)?;
    check_range("hardware.ram_total_mib", h.ram_total_mib, 0, 1 << 30)?;
    if let Some(b) = h.mem_bandwidth_gbs {
        if !b.is_finite() || !(0.0..=100_000.0).contains(&b) {
            bail!("hardware.mem_bandwidth_gbs = {b} is not a sane bandwidth (0..=100000 GB/s)");
        }
    }

    let m = &p.model;
    check_hex("model.fingerprint", &m.fingerprint)?;
    if let Some(n) = &m.name {
        check_label("model.name", n)?;
    }
    check_ident("model.arch", &m.arch, 64)?;
    check_range("model.n_blocks", m.n_blocks, 1, 4096)?;
    check_range("model.n_experts", m.n_experts, 0, 65536)?;
    check_range("model.n_experts_used", m.n_experts_used, 0, m.n_experts)?;
    if let Some(f) = &m.file_type {
        check_ident("model.file_type", f, 32)?;
    }
    check_range("model.file_bytes", m.file_bytes, 0, 1 << 44)?;
    if m.bytes_by_type.len() > MAX_TYPES {
        bail!(
            "model.bytes_by_type has {} entries (at most {MAX_TYPES})",
            m.bytes_by_type.len()
        );
    }
    for (k, v) in &m.bytes_by_type {
        check_ident("model.bytes_by_type key", k, 32)?;
        check_range(&format!("model.bytes_by_type.{k}"), *v, 0, 1 << 44)?;
    }

    check_name("space.name", &p.space.name)?;
    check_range("space.ctx", p.space.ctx, 256, 1_048_576)?;
    let wl = &p.space.workload;
    check_range(
        "space.workload.prompt_tokens",
        wl.prompt_tokens,
        0,
        1_048_576,
    )?;
    check_range("space.workload.gen_tokens", wl.gen_tokens, 1, 1_048_576)?;
    check_range("space.workload.repetitions", wl.repetitions, 1, 10_000)?;
    if let Some(d) = wl.context_depth {
        check_range("space.workload.context_depth", d, 0, 1_048_576)?;
    }

    let w = &p.winner;
    check_config("winner.config", &w.config)?;
    for (key, s) in [("winner.tg", &w.tg), ("winner.pp", &w.pp)] {
        check_speed(&format!("{key}.median"), s.median)?;
        if !s.spread_pct.is_finite() || !(0.0..=100_000.0).contains(&s.spread_pct) {
            bail!("{key}.spread_pct = {} is not a sane spread", s.spread_pct);
        }
        check_range(&format!("{key}.samples"), s.samples, 1, 100_000)?;
    }
    if let Some(v) = w.peak_vram_mib {
        check_vram("winner.peak_vram_mib", v)?;
    }
    if let Some(g) = w.gen_gain_pct {
        if !g.is_finite() || !(-100.0..=1e6).contains(&g) {
            bail!("winner.gen_gain_pct = {g} is not a sane gain");
        }
    }

    if p.front.len() > MAX_FRONT {
        bail!("front has {} entries (at most {MAX_FRONT})", p.front.len());
    }
    for (i, f) in p.front.iter().enumerate() {
        check_config(&format!("front[{i}].config"), &f.config)?;
        if let Some(v) = f.tg {
            check_speed(&format!("front[{i}].tg"), v)?;
        }
        if let Some(v) = f.pp {
            check_speed(&format!("front[{i}].pp"), v)?;
        }
        if let Some(v) = f.peak_vram_mib {
            check_vram(&format!("front[{i}].peak_vram_mib"), v)?;
        }
    }
    Ok(())
}

/// Make an error text safe for a terminal: one line, no control characters.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Parse and validate a profile from its text (`origin` names it in errors).
pub fn parse_profile(text: &str, origin: &str) -> Result<Profile> {
    for (i, line) in text.lines().enumerate() {
        if let Some(c) = line
            .chars()
            .find(|&c| c.is_control() && c != '\t' && c != '\r')
        {
            bail!(
                "{origin} is not a valid profile: line {} contains {}",
                i + 1,
                describe_char(c)
            );
        }
    }
    let p: Profile = serde_yaml::from_str(text).map_err(|e| {
        anyhow!(
            "{origin} is not a valid profile: {}",
            one_line(&e.to_string())
        )
    })?;
    validate(&p).map_err(|e| {
        anyhow!(
            "{origin} is not a valid profile: {}",
            one_line(&e.to_string())
        )
    })?;
    Ok(p)
}

/// Read, parse and validate a profile file: at most 1 MiB, UTF-8, known keys only, sane values.
pub fn load_profile(path: &Path) -> Result<Profile> {
    let shown = one_line(&path.display().to_string());
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read profile {shown}"))?;
    if meta.is_dir() {
        bail!("{shown} is a directory, not a profile file (give a .yaml file)");
    }
    if !meta.is_file() {
        bail!("{shown} is not a regular file");
    }
    if meta.len() > MAX_PROFILE_BYTES {
        bail!(
            "{shown} is {} bytes; a profile is at most {MAX_PROFILE_BYTES} bytes (1 MiB)",
            meta.len()
        );
    }
    let bytes = std::fs::read(path).with_context(|| format!("cannot read profile {shown}"))?;
    if bytes.len() as u64 > MAX_PROFILE_BYTES {
        bail!("{shown} is larger than 1 MiB");
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow!(
            "{shown} is not a valid profile: not UTF-8 text (byte {})",
            e.utf8_error().valid_up_to()
        )
    })?;
    parse_profile(&text, &shown)
}

/// The YAML qtune writes for a profile.
pub fn to_yaml(p: &Profile) -> Result<String> {
    Ok(format!(
        "# qtune profile (schema {SCHEMA_VERSION}). Import with: qtune profile import FILE\n{}",
        serde_yaml::to_string(p)?
    ))
}

/// File name for a profile in `profiles/`: its name with anything but `[A-Za-z0-9._+-]` as '-'.
pub fn file_stem(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._+-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut out = String::new();
    for c in s.chars() {
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    let t = out.trim_matches(|c| c == '-' || c == '.').to_string();
    if t.is_empty() {
        "profile".to_string()
    } else {
        t
    }
}

// ---------------------------------------------------------------------------------------------
// Commands

fn read_tune_result(run_dir: &Path) -> Result<TuneResult> {
    let path = run_dir.join("results.json");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "cannot read {} (give the run directory of a finished tune)",
            path.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a qtune result", path.display()))
}

/// `qtune profile export DIR --out FILE`.
pub fn cmd_export(run_dir: &Path, out: &Path) -> Result<()> {
    let r = read_tune_result(run_dir)?;
    let p = from_tune(&r, None)?;
    crate::util::write_atomic(out, to_yaml(&p)?.as_bytes())?;
    println!(
        "exported profile '{}' ({} measured configs) to {}",
        p.name,
        p.front.len(),
        out.display()
    );
    Ok(())
}

/// Validate `file` and store it as `profiles_dir/<name>.yaml` (canonical YAML), atomically and
/// without replacing a different profile. Returns the stored path and whether it was new.
pub fn import_into(file: &Path, profiles_dir: &Path) -> Result<(PathBuf, bool)> {
    let p = load_profile(file)?;
    let yaml = to_yaml(&p)?;
    let dest = profiles_dir.join(format!("{}.yaml", file_stem(&p.name)));
    if let Ok(existing) = std::fs::read(&dest) {
        if existing == yaml.as_bytes() {
            return Ok((dest, false));
        }
        bail!(
            "{} already exists with different content: remove it or rename the profile first",
            dest.display()
        );
    }
    std::fs::create_dir_all(profiles_dir)
        .with_context(|| format!("cannot create {}", profiles_dir.display()))?;
    // Write a temporary file, then link it into place: linking never replaces an existing file.
    let tmp = profiles_dir.join(format!(".import-{}.tmp", std::process::id()));
    crate::util::write_atomic(&tmp, yaml.as_bytes())?;
    let linked = std::fs::hard_link(&tmp, &dest);
    let result = match linked {
        Ok(()) => Ok((dest.clone(), true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(anyhow!(
            "{} appeared while importing: remove it or rename the profile first",
            dest.display()
        )),
        Err(_) => std::fs::rename(&tmp, &dest)
            .map(|_| (dest.clone(), true))
            .with_context(|| format!("cannot write {}", dest.display())),
    };
    let _ = std::fs::remove_file(&tmp);
    result
}

/// `qtune profile import FILE`: validate and copy into `profiles/`.
pub fn cmd_import(file: &Path) -> Result<()> {
    let (dest, new) = import_into(file, Path::new(PROFILES_DIR))?;
    if new {
        println!("imported profile into {}", dest.display());
    } else {
        println!("{} is already imported (same content)", dest.display());
    }
    Ok(())
}

/// Every `*.yaml` / `*.yml` in `dir`, loaded (invalid ones with their error), sorted by path.
pub fn load_dir(dir: &Path) -> Vec<(PathBuf, Result<Profile>)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml" || e == "yml")
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let r = load_profile(&p);
            (p, r)
        })
        .collect()
}

fn model_label(m: &ProfileModel) -> String {
    let mut s = m.name.clone().unwrap_or_else(|| m.arch.clone());
    if let Some(ft) = &m.file_type {
        let _ = write!(s, " {ft}");
    }
    s
}

/// The rows `qtune profile list` prints.
pub fn list_text(entries: &[(PathBuf, Result<Profile>)]) -> String {
    let rows: Vec<[String; 4]> = entries
        .iter()
        .map(|(path, r)| match r {
            Ok(p) => [
                p.name.clone(),
                model_label(&p.model),
                p.hardware.gpu_label(),
                format!("{:.1} t/s", p.winner.tg.median),
            ],
            Err(e) => [
                one_line(&path.file_name().unwrap_or_default().to_string_lossy()),
                format!("invalid: {}", one_line(&format!("{e:#}"))),
                String::new(),
                String::new(),
            ],
        })
        .collect();
    let header = ["NAME", "MODEL", "GPU", "WINNER TG"].map(String::from);
    let width = |i: usize| {
        rows.iter()
            .filter(|r| !r[1].starts_with("invalid: ") || i == 0)
            .map(|r| r[i].chars().count())
            .chain([header[i].len()])
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2) = (width(0), width(1), width(2));
    let mut out = String::new();
    for r in std::iter::once(&header).chain(rows.iter()) {
        let line = if r[1].starts_with("invalid: ") {
            format!("{:<w0$}  {}", r[0], r[1])
        } else {
            format!("{:<w0$}  {:<w1$}  {:<w2$}  {:>10}", r[0], r[1], r[2], r[3])
        };
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// `qtune profile list`.
pub fn cmd_list() -> Result<()> {
    let entries = load_dir(Path::new(PROFILES_DIR));
    if entries.is_empty() {
        println!("no profiles in ./{PROFILES_DIR} (add one with 'qtune profile import FILE')");
        return Ok(());
    }
    print!("{}", list_text(&entries));
    Ok(())
}

/// Find a profile by file path, by file stem in `profiles_dir`, or by its `name`.
pub fn find_profile(name: &str, profiles_dir: &Path) -> Result<(PathBuf, Profile)> {
    let as_path = Path::new(name);
    if as_path.exists() {
        return Ok((as_path.to_path_buf(), load_profile(as_path)?));
    }
    for cand in [
        profiles_dir.join(format!("{name}.yaml")),
        profiles_dir.join(format!("{}.yaml", file_stem(name))),
    ] {
        if cand.is_file() {
            let p = load_profile(&cand)?;
            return Ok((cand, p));
        }
    }
    for (path, r) in load_dir(profiles_dir) {
        if let Ok(p) = r {
            if p.name == name {
                return Ok((path, p));
            }
        }
    }
    bail!(
        "no profile '{}' (not a file, not in ./{}; see 'qtune profile list')",
        one_line(name),
        profiles_dir.display()
    )
}

/// A profile as readable text.
pub fn show_text(p: &Profile) -> String {
    let mib = |v: u64| crate::util::fmt_mib(v as f64);
    let mut o = String::new();
    let _ = writeln!(o, "Profile: {}", p.name);
    let _ = writeln!(
        o,
        "  created {} with qtune {} and llama.cpp {}",
        p.created, p.qtune_version, p.llama_cpp_version
    );
    let m = &p.model;
    let _ = writeln!(
        o,
        "Model: {} · arch {} · {} blocks · {} experts ({} used) · {} · fingerprint {}",
        model_label(m),
        m.arch,
        m.n_blocks,
        m.n_experts,
        m.n_experts_used,
        mib(m.file_bytes / crate::util::MIB),
        m.fingerprint
    );
    let h = &p.hardware;
    if h.gpus.is_empty() {
        let _ = writeln!(o, "GPU: none (CPU-only tune)");
    } else {
        let _ = writeln!(
            o,
            "GPU: {} · {} total · {} free at start · headroom {} · budget {}",
            h.gpu_label(),
            mib(h.vram_total_mib()),
            mib(h.free_vram_at_start_mib),
            mib(h.headroom_mib),
            h.vram_budget_mib.map_or("-".to_string(), mib)
        );
    }
    let _ = writeln!(
        o,
        "Host: {} · {} cores ({} logical) · {} GiB RAM{} · fingerprint {}",
        h.cpu,
        h.physical_cores.map_or("?".into(), |c| c.to_string()),
        h.logical_cores,
        h.ram_total_mib / 1024,
        h.mem_bandwidth_gbs
            .map_or(String::new(), |b| format!(" · {b:.1} GB/s read")),
        h.fingerprint
    );
    let wl = &p.space.workload;
    let _ = writeln!(
        o,
        "Space: {} · ctx {} · workload {} prompt + {} generated tokens × {}",
        p.space.name, p.space.ctx, wl.prompt_tokens, wl.gen_tokens, wl.repetitions
    );
    let w = &p.winner;
    let _ = writeln!(o, "Winner: {}", w.config.label());
    let _ = writeln!(
        o,
        "  tg {:.2} tok/s (spread {:.1} %, {} samples) · pp {:.1} tok/s (spread {:.1} %) · peak VRAM {}{}",
        w.tg.median,
        w.tg.spread_pct,
        w.tg.samples,
        w.pp.median,
        w.pp.spread_pct,
        w.peak_vram_mib.map_or("-".into(), mib),
        w.gen_gain_pct
            .map_or(String::new(), |g| format!(" · {g:+.1} % tg vs baseline"))
    );
    let mut argv = vec!["llama-server".to_string(), "-m".into(), "MODEL.gguf".into()];
    argv.extend(w.config.server_args());
    let _ = writeln!(o, "  {}", crate::config::shell_line(&argv));
    let _ = writeln!(o, "Measured configs ({}):", p.front.len());
    for f in &p.front {
        let _ = writeln!(
            o,
            "  {} {:>8} {:>8} {:>12}  {:<12} {}",
            if f.pareto { "*" } else { " " },
            f.tg.map_or("-".into(), |v| format!("{v:.2}")),
            f.pp.map_or("-".into(), |v| format!("{v:.1}")),
            f.peak_vram_mib.map_or("-".into(), mib),
            f.outcome.as_str(),
            f.config.label()
        );
    }
    o
}

/// `qtune profile show NAME|FILE`.
pub fn cmd_show(name: &str) -> Result<()> {
    let (path, p) = find_profile(name, Path::new(PROFILES_DIR))?;
    println!("# {}", path.display());
    print!("{}", show_text(&p));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Planning: a config for this box from a profile (or the defaults), without trials

pub mod plan;
pub use plan::{cmd_plan, plan, Confidence, Plan, PLAN_FIT_FRACTION};

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
            }],
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
