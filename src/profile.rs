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

/// Safety margin on the predicted GPU memory: the plan fits `budget * PLAN_FIT_FRACTION`.
pub const PLAN_FIT_FRACTION: f64 = 0.97;
/// Budgets within this fraction of the profile's count as "the same card budget".
const SAME_BUDGET_FRACTION: f64 = 0.10;

/// How far a plan can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// Same model, same card, about the same VRAM budget: the profile's winner, re-checked.
    High,
    /// Same model (or its shape) on another card or budget: placement re-predicted.
    Medium,
    /// No matching profile: the default search space's first choices.
    Low,
}

impl Confidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
        }
    }
}

/// How a profile's model relates to the model being planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ModelMatch {
    /// Different architecture or shape.
    Other,
    /// Same architecture, block count and expert count (e.g. another quantization).
    Shape,
    /// Same model fingerprint (shape and tensor types).
    Fingerprint,
}

/// How `p`'s model relates to `layout`.
pub fn model_match(p: &Profile, layout: &ModelLayout) -> ModelMatch {
    if p.model.fingerprint == layout.fingerprint {
        ModelMatch::Fingerprint
    } else if p.model.arch == layout.arch
        && p.model.n_blocks == layout.n_blocks
        && p.model.n_experts == layout.n_experts
    {
        ModelMatch::Shape
    } else {
        ModelMatch::Other
    }
}

/// The VRAM budget a profile was tuned under (None for a CPU-only tune).
pub fn profile_budget_mib(p: &Profile) -> Option<u64> {
    if p.hardware.gpus.is_empty() {
        return None;
    }
    Some(p.hardware.vram_budget_mib.unwrap_or_else(|| {
        p.hardware
            .free_vram_at_start_mib
            .saturating_sub(p.hardware.headroom_mib)
    }))
}

/// This box's VRAM budget: free VRAM (summed) minus headroom; None with no GPU.
pub fn box_budget_mib(hw: &HardwareProfile, headroom_mib: u64) -> Option<u64> {
    hw.has_gpu()
        .then(|| hw.free_vram_mib().saturating_sub(headroom_mib))
}

fn same_gpus(p: &Profile, hw: &HardwareProfile) -> bool {
    let mine: Vec<String> = hw.gpus.iter().map(|g| sanitize_label(&g.name)).collect();
    let theirs: Vec<String> = p.hardware.gpus.iter().map(|g| g.name.clone()).collect();
    mine == theirs
}

fn same_budget(p: &Profile, budget: Option<u64>) -> bool {
    match (profile_budget_mib(p), budget) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            (a as f64 - b as f64).abs() < SAME_BUDGET_FRACTION * (a.max(b).max(1)) as f64
        }
        _ => false,
    }
}

/// The best profile for `layout` on `hw` among `profiles`: same model fingerprint first, then
/// same architecture and shape; among those the same GPUs, then the closest VRAM budget.
/// None when no profile is for this model.
pub fn best_profile<'a>(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    headroom_mib: u64,
    profiles: &'a [Profile],
) -> Option<&'a Profile> {
    let budget = box_budget_mib(hw, headroom_mib);
    profiles
        .iter()
        .filter(|p| model_match(p, layout) > ModelMatch::Other)
        .min_by_key(|p| {
            let distance = match (profile_budget_mib(p), budget) {
                (Some(a), Some(b)) => a.abs_diff(b),
                (None, None) => 0,
                _ => u64::MAX,
            };
            (
                std::cmp::Reverse(model_match(p, layout)),
                !same_gpus(p, hw),
                distance,
            )
        })
}

/// A launch config proposed for this box, with why and how far to trust it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub config: LaunchConfig,
    pub confidence: Confidence,
    /// Why the config is what it is, one sentence each.
    pub reasons: Vec<String>,
    /// Things the user should check (host RAM, nothing fits).
    pub warnings: Vec<String>,
    pub predicted_gpu_mib: f64,
    pub predicted_host_mib: f64,
    /// Free VRAM minus headroom; None with no GPU.
    pub budget_mib: Option<u64>,
    /// Name of the profile the plan started from.
    pub from_profile: Option<String>,
    /// False when even all experts on the CPU do not fit the budget.
    pub fits: bool,
}

/// Threads for this box from a profile's thread count: a profile that used all its physical
/// cores uses all of ours; otherwise its count, at most our logical cores.
pub fn scale_threads(profile_threads: u32, p: &ProfileHardware, host: &HostInfo) -> u32 {
    let ours_physical = host.physical_cores.unwrap_or(host.logical_cores).max(1);
    if p.physical_cores == Some(profile_threads) {
        ours_physical
    } else {
        profile_threads.min(host.logical_cores.max(1))
    }
}

/// The non-placement part of a config from the built-in `default` space's first choices.
fn default_base(ctx: u32, host: &HostInfo, reasons: &mut Vec<String>) -> LaunchConfig {
    let mut cfg = LaunchConfig::baseline(ctx);
    match crate::space::load("default") {
        Ok(s) => {
            cfg.parallel = s.fixed.parallel;
            cfg.mmap = s.fixed.mmap;
            cfg.threads = s.vary.threads.first().map(|t| match t {
                crate::space::Threads::Auto(_) => {
                    host.physical_cores.unwrap_or(host.logical_cores).max(1)
                }
                crate::space::Threads::Count(n) => (*n).min(host.logical_cores.max(1)),
            });
            if let Some([b, ub]) = s.vary.batch_ubatch.first() {
                cfg.batch = Some(*b);
                cfg.ubatch = Some(*ub);
            }
            if let Some([k, v]) = s.vary.kv_types.first() {
                cfg.cache_type_k = *k;
                cfg.cache_type_v = *v;
            }
            if let Some(fa) = s.vary.flash_attn.first() {
                cfg.flash_attn = *fa;
            }
            reasons.push(
                "no profile for this model: threads, batch sizes and KV type are the built-in \
                 'default' space's first choices (run 'qtune tune' to measure)"
                    .to_string(),
            );
        }
        Err(e) => reasons.push(format!(
            "no profile for this model and the default space did not load ({e}): server defaults"
        )),
    }
    cfg
}

/// Propose a config for `layout` on `hw` from `profile` (or the defaults) at context `ctx`,
/// leaving `headroom_mib` of free VRAM unused. Pure: no probing, no files.
pub fn plan(
    layout: &ModelLayout,
    hw: &HardwareProfile,
    profile: Option<&Profile>,
    ctx: u32,
    headroom_mib: u64,
) -> Plan {
    let mut reasons = Vec::new();
    let mut warnings = Vec::new();
    let budget = box_budget_mib(hw, headroom_mib);
    let matched = profile.map(|p| model_match(p, layout));

    let mut cfg = match profile {
        Some(p) => {
            let w = &p.winner.config;
            match model_match(p, layout) {
                ModelMatch::Fingerprint => reasons.push(format!(
                    "profile '{}' is for this exact model (same fingerprint)",
                    p.name
                )),
                ModelMatch::Shape => reasons.push(format!(
                    "profile '{}' is for the same architecture and shape ({} blocks, {} experts) \
                     but other tensor types",
                    p.name, layout.n_blocks, layout.n_experts
                )),
                ModelMatch::Other => reasons.push(format!(
                    "profile '{}' is for another model ({} {} blocks): only its threads, batch \
                     sizes and KV type are used",
                    p.name, p.model.arch, p.model.n_blocks
                )),
            }
            let threads = w.threads.map(|t| {
                let s = scale_threads(t, &p.hardware, &hw.host);
                if s != t {
                    reasons.push(format!(
                        "threads {t} on the profile's box ({} physical cores) become {s} here ({} physical, {} logical)",
                        p.hardware.physical_cores.map_or("?".into(), |c| c.to_string()),
                        hw.host.physical_cores.map_or("?".into(), |c| c.to_string()),
                        hw.host.logical_cores
                    ));
                }
                s
            });
            if p.space.ctx != ctx {
                reasons.push(format!(
                    "the profile was tuned at ctx {}; planned for ctx {ctx} (KV cache re-predicted)",
                    p.space.ctx
                ));
            }
            LaunchConfig {
                ctx,
                parallel: w.parallel,
                n_gpu_layers: None,
                n_cpu_moe: None,
                threads,
                batch: w.batch,
                ubatch: w.ubatch,
                cache_type_k: w.cache_type_k,
                cache_type_v: w.cache_type_v,
                flash_attn: w.flash_attn,
                mmap: w.mmap,
                fit: None,
            }
        }
        None => default_base(ctx, &hw.host, &mut reasons),
    };

    let mut fits = true;
    match budget {
        Some(b) if layout.is_moe() => {
            let target = b as f64 * PLAN_FIT_FRACTION;
            cfg.n_gpu_layers = Some(999);
            cfg.fit = Some(false);
            match crate::model::memory::min_n_cpu_moe_that_fits(layout, &cfg, target) {
                Some(n) => {
                    cfg.n_cpu_moe = Some(n);
                    reasons.push(format!(
                        "--n-cpu-moe {n}: the fewest blocks' experts on the CPU whose predicted \
                         VRAM fits 97 % of the {} budget (3 % margin for prediction error)",
                        crate::util::fmt_mib(b as f64)
                    ));
                }
                None => {
                    fits = false;
                    cfg.n_cpu_moe = Some(layout.n_blocks);
                    warnings.push(format!(
                        "nothing fits: even with all {} blocks' experts on the CPU the predicted \
                         VRAM exceeds 97 % of the {} budget",
                        layout.n_blocks,
                        crate::util::fmt_mib(b as f64)
                    ));
                }
            }
            if let (Some(p), Some(n)) = (profile, p_ncmoe(profile)) {
                if cfg.n_cpu_moe != Some(n) {
                    reasons.push(format!(
                        "the profile's box used --n-cpu-moe {n} with a budget of {}",
                        profile_budget_mib(p)
                            .map_or("?".into(), |v| crate::util::fmt_mib(v as f64))
                    ));
                }
            }
        }
        Some(_) => reasons.push(
            "dense model: nothing for --n-cpu-moe to move; placement left to the server's \
             auto-fit"
                .to_string(),
        ),
        None => reasons.push("no GPU on this box: CPU-only config, no placement flags".to_string()),
    }

    let pred = crate::model::memory::predict(layout, &cfg, hw.has_gpu());
    if pred.host_mib > hw.host.ram_available_mib as f64 {
        warnings.push(format!(
            "predicted host memory {} exceeds this box's available RAM {}{}",
            crate::util::fmt_mib(pred.host_mib),
            crate::util::fmt_mib(hw.host.ram_available_mib as f64),
            if cfg.mmap {
                " (the model is memory-mapped: expect paging from disk)"
            } else {
                ""
            }
        ));
    }

    let confidence = match (profile, matched) {
        (Some(p), Some(ModelMatch::Fingerprint)) if same_gpus(p, hw) && same_budget(p, budget) => {
            reasons.push("same model, same card and a VRAM budget within 10 %".to_string());
            Confidence::High
        }
        (Some(p), Some(ModelMatch::Fingerprint | ModelMatch::Shape)) => {
            if !same_gpus(p, hw) {
                reasons.push(format!(
                    "the profile ran on {}; this box has {}",
                    p.hardware.gpu_label(),
                    if hw.gpus.is_empty() {
                        "no GPU".to_string()
                    } else {
                        hw.gpus
                            .iter()
                            .map(|g| g.name.as_str())
                            .collect::<Vec<_>>()
                            .join(" + ")
                    }
                ));
            } else if !same_budget(p, budget) {
                reasons.push(format!(
                    "the profile's VRAM budget ({}) differs from this box's ({}) by 10 % or more",
                    profile_budget_mib(p).map_or("-".into(), |v| crate::util::fmt_mib(v as f64)),
                    budget.map_or("-".into(), |v| crate::util::fmt_mib(v as f64))
                ));
            }
            Confidence::Medium
        }
        _ => Confidence::Low,
    };

    Plan {
        config: cfg,
        confidence,
        reasons,
        warnings,
        predicted_gpu_mib: pred.gpu_mib,
        predicted_host_mib: pred.host_mib,
        budget_mib: budget,
        from_profile: profile.map(|p| p.name.clone()),
        fits,
    }
}

fn p_ncmoe(profile: Option<&Profile>) -> Option<u32> {
    profile.and_then(|p| p.winner.config.n_cpu_moe)
}

/// The text block `qtune plan` prints on stderr.
pub fn plan_text(plan: &Plan, model: &Path) -> String {
    let mib = crate::util::fmt_mib;
    let mut o = String::new();
    let _ = writeln!(o, "Plan for {}", model.display());
    let _ = writeln!(
        o,
        "  profile: {}",
        plan.from_profile
            .as_deref()
            .unwrap_or("none (built-in defaults)")
    );
    let _ = writeln!(o, "  config: {}", plan.config.label());
    let _ = writeln!(o, "  confidence: {}", plan.confidence.as_str());
    for r in &plan.reasons {
        let _ = writeln!(o, "    - {r}");
    }
    match plan.budget_mib {
        Some(b) => {
            let _ = writeln!(
                o,
                "  predicted VRAM: {} of a {} budget ({} with the 3 % margin)",
                mib(plan.predicted_gpu_mib),
                mib(b as f64),
                mib(b as f64 * PLAN_FIT_FRACTION)
            );
        }
        None => {
            let _ = writeln!(o, "  predicted VRAM: none (no GPU)");
        }
    }
    let _ = writeln!(o, "  predicted host RAM: {}", mib(plan.predicted_host_mib));
    for w in &plan.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
    o
}

/// `qtune plan --model M [--profile P]`: propose a config for this box without trials.
pub fn cmd_plan(
    model: &Path,
    profile: Option<&Path>,
    ctx: u32,
    headroom_mib: u64,
) -> anyhow::Result<()> {
    let layout = crate::model::load(model)?;
    let hw = crate::hardware::probe(false);
    let dir = Path::new(PROFILES_DIR);
    let chosen: Option<Profile> = match profile {
        Some(p) => Some(find_profile(&p.to_string_lossy(), dir)?.1),
        None => {
            let all: Vec<Profile> = load_dir(dir)
                .into_iter()
                .filter_map(|(_, r)| r.ok())
                .collect();
            best_profile(&layout, &hw, headroom_mib, &all).cloned()
        }
    };
    let plan = plan(&layout, &hw, chosen.as_ref(), ctx, headroom_mib);
    eprint!("{}", plan_text(&plan, model));
    if !plan.fits {
        bail!(
            "no placement fits this GPU's budget of {}: free VRAM, lower --ctx or use a smaller quantization",
            plan.budget_mib
                .map_or("-".into(), |b| crate::util::fmt_mib(b as f64))
        );
    }
    let server = crate::server::locate(None)
        .map(|(p, _)| p)
        .unwrap_or_else(|| PathBuf::from("llama-server"));
    let argv = plan.config.command(&server, model, "127.0.0.1", 8080);
    println!("{}", crate::config::shell_line(&argv));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KvType;

    pub(super) fn profile() -> Profile {
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

#[cfg(test)]
mod plan_tests {
    use super::*;
    use crate::config::KvType;
    use crate::hardware::{GpuInfo, PcieLink};
    use crate::model::BlockBytes;

    fn layout(n_experts: u32) -> ModelLayout {
        let n = 24u32;
        ModelLayout {
            arch: "qwen3moe".into(),
            name: None,
            file_type: Some("Q4_K_M".into()),
            file_bytes: 0,
            n_blocks: n,
            n_experts,
            n_experts_used: if n_experts > 0 { 2 } else { 0 },
            n_embd: 1024,
            n_head: 8,
            n_head_kv: 2,
            head_dim_k: 128,
            head_dim_v: 128,
            n_vocab: 1000,
            ctx_train: 32768,
            kv_blocks: vec![true; n as usize],
            recurrent_state_bytes: vec![0; n as usize],
            blocks: vec![
                BlockBytes {
                    routed_experts: if n_experts > 0 { 400 << 20 } else { 0 },
                    shared_experts: 0,
                    rest: 40 << 20,
                };
                n as usize
            ],
            token_embd_bytes: 100 << 20,
            output_bytes: 100 << 20,
            other_bytes: 0,
            bytes_by_type: Default::default(),
            tensor_bytes: 0,
            fingerprint: "00112233aabbccdd".into(),
        }
    }

    fn host(physical: u32, logical: u32) -> HostInfo {
        HostInfo {
            cpu_model: "test cpu".into(),
            physical_cores: Some(physical),
            logical_cores: logical,
            ram_total_mib: 65536,
            ram_available_mib: 60000,
            os: "test".into(),
            mem_bandwidth_gbs: None,
        }
    }

    fn hw(gpu: Option<(&str, u64)>) -> HardwareProfile {
        HardwareProfile {
            gpus: gpu
                .into_iter()
                .map(|(name, free)| GpuInfo {
                    index: 0,
                    name: name.into(),
                    uuid: "GPU-0".into(),
                    vram_total_mib: free + 300,
                    vram_free_mib: free,
                    vram_used_mib: 300,
                    pcie: PcieLink {
                        gen_current: None,
                        gen_max: None,
                        width_current: None,
                        width_max: None,
                    },
                    compute_capability: None,
                    processes: Vec::new(),
                })
                .collect(),
            no_gpu_reason: gpu.is_none().then(|| "test".to_string()),
            driver_version: None,
            cuda_version: None,
            host: host(8, 16),
            fingerprint: "abcdef0123456789".into(),
        }
    }

    /// The profile of the other test module, re-pointed at `layout(8)` on a 6 GiB card.
    fn profile_for(l: &ModelLayout) -> Profile {
        let mut p = super::tests::profile();
        p.model.fingerprint = l.fingerprint.clone();
        p.model.arch = l.arch.clone();
        p.model.n_blocks = l.n_blocks;
        p.model.n_experts = l.n_experts;
        p.model.n_experts_used = l.n_experts_used;
        p.hardware.gpus[0].name = "Test GPU 6G".into();
        p.hardware.free_vram_at_start_mib = 6144;
        p.hardware.headroom_mib = 512;
        p.hardware.vram_budget_mib = Some(5632);
        p
    }

    #[test]
    fn threads_scale_with_physical_cores_or_are_capped() {
        let mut ph = super::tests::profile().hardware;
        ph.physical_cores = Some(8);
        // All physical cores there: all physical cores here.
        assert_eq!(scale_threads(8, &ph, &host(16, 32)), 16);
        assert_eq!(scale_threads(8, &ph, &host(4, 8)), 4);
        // Any other count: kept, capped at our logical cores.
        assert_eq!(scale_threads(6, &ph, &host(16, 32)), 6);
        assert_eq!(scale_threads(12, &ph, &host(4, 8)), 8);
    }

    #[test]
    fn same_model_same_card_same_budget_is_high_and_keeps_the_profile_choices() {
        let l = layout(8);
        let p = profile_for(&l);
        let plan = plan(&l, &hw(Some(("Test GPU 6G", 6144))), Some(&p), 8192, 512);
        assert_eq!(plan.confidence, Confidence::High, "{:?}", plan.reasons);
        assert_eq!(plan.config.cache_type_k, KvType::Q8_0);
        assert_eq!(plan.config.batch, Some(2048));
        assert_eq!(plan.config.threads, Some(8));
        assert_eq!(plan.config.n_gpu_layers, Some(999));
        assert_eq!(plan.config.fit, Some(false));
        assert!(plan.fits);
        assert!(plan.predicted_gpu_mib <= 5632.0 * PLAN_FIT_FRACTION);
        // One block fewer on the CPU would not fit the margin.
        let n = plan.config.n_cpu_moe.unwrap();
        assert!(n > 0);
        let one_less = LaunchConfig {
            n_cpu_moe: Some(n - 1),
            ..plan.config.clone()
        };
        assert!(
            crate::model::memory::predict(&l, &one_less, true).gpu_mib > 5632.0 * PLAN_FIT_FRACTION
        );
        assert_eq!(plan.from_profile.as_deref(), Some(p.name.as_str()));
    }

    #[test]
    fn other_budget_or_card_is_medium_and_other_model_is_low() {
        let l = layout(8);
        let p = profile_for(&l);
        let bigger = plan(&l, &hw(Some(("Test GPU 6G", 8192))), Some(&p), 8192, 512);
        assert_eq!(bigger.confidence, Confidence::Medium);
        assert!(
            bigger.reasons.iter().any(|r| r.contains("10 %")),
            "{:?}",
            bigger.reasons
        );
        let other_card = plan(&l, &hw(Some(("Other GPU", 6144))), Some(&p), 8192, 512);
        assert_eq!(other_card.confidence, Confidence::Medium);
        let mut shape_only = p.clone();
        shape_only.model.fingerprint = "ffff".into();
        assert_eq!(model_match(&shape_only, &l), ModelMatch::Shape);
        let mut other = p.clone();
        other.model.n_blocks = 40;
        other.model.fingerprint = "eeee".into();
        assert_eq!(model_match(&other, &l), ModelMatch::Other);
        let low = plan(
            &l,
            &hw(Some(("Test GPU 6G", 6144))),
            Some(&other),
            8192,
            512,
        );
        assert_eq!(low.confidence, Confidence::Low);
    }

    #[test]
    fn best_profile_prefers_fingerprint_then_card_then_budget() {
        let l = layout(8);
        let box_hw = hw(Some(("Test GPU 6G", 6144)));
        let exact = profile_for(&l);
        let mut shape = exact.clone();
        shape.name = "shape".into();
        shape.model.fingerprint = "ffff".into();
        let mut other_card = exact.clone();
        other_card.name = "other card".into();
        other_card.hardware.gpus[0].name = "Other GPU".into();
        let mut far = exact.clone();
        far.name = "far".into();
        far.hardware.vram_budget_mib = Some(20000);
        let mut other_model = exact.clone();
        other_model.name = "other model".into();
        other_model.model.arch = "llama".into();
        other_model.model.fingerprint = "eeee".into();

        let all = vec![
            other_model.clone(),
            shape.clone(),
            far.clone(),
            other_card.clone(),
            exact.clone(),
        ];
        let pick = |ps: &[Profile]| best_profile(&l, &box_hw, 512, ps).map(|p| p.name.clone());
        assert_eq!(pick(&all), Some(exact.name.clone()));
        assert_eq!(pick(&all[..4]), Some("far".to_string()));
        assert_eq!(
            pick(&[shape.clone(), other_card.clone()]),
            Some("other card".into())
        );
        assert_eq!(pick(&[other_model.clone(), shape]), Some("shape".into()));
        assert_eq!(pick(&[other_model]), None);
    }

    #[test]
    fn no_gpu_or_dense_model_gets_no_placement_flags() {
        for (l, gpu) in [(layout(8), None), (layout(0), Some(("Test GPU 6G", 6144)))] {
            let plan = plan(&l, &hw(gpu), None, 4096, 512);
            assert_eq!(plan.confidence, Confidence::Low);
            assert!(plan.fits);
            assert!(plan.config.is_auto_placement(), "{:?}", plan.config);
            let args = plan.config.server_args();
            assert!(
                !args.iter().any(|a| a == "-ngl" || a == "--n-cpu-moe"),
                "{args:?}"
            );
            assert_eq!(plan.budget_mib, gpu.map(|(_, f)| f - 512));
        }
    }

    #[test]
    fn nothing_fits_is_reported_and_host_ram_is_checked() {
        let l = layout(8);
        let mut tiny_box = hw(Some(("Test GPU 6G", 700)));
        tiny_box.host.ram_available_mib = 100;
        let plan = plan(&l, &tiny_box, None, 8192, 512);
        assert!(!plan.fits);
        assert!(
            plan.warnings.iter().any(|w| w.contains("nothing fits")),
            "{:?}",
            plan.warnings
        );
        assert!(
            plan.warnings.iter().any(|w| w.contains("available RAM")),
            "{:?}",
            plan.warnings
        );
        let text = plan_text(&plan, Path::new("m.gguf"));
        assert!(text.contains("warning: nothing fits"), "{text}");
    }
}
