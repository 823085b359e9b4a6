//! Validation: a profile is data from strangers, so every string and number is checked
//! against what a real tune can produce before anything uses it.

use super::*;

pub(crate) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || " ._+()-".contains(c)
}

/// Labels (GPU and CPU names, versions) also allow `@ , :` ("E5-2680 v4 @ 2.40GHz",
/// "version: 11434 (abc1234)"), never a shell metacharacter or a control character.
pub(crate) fn is_label_char(c: char) -> bool {
    is_name_char(c) || "@,:".contains(c)
}

pub(crate) fn check_str(
    key: &str,
    v: &str,
    max: usize,
    ok: fn(char) -> bool,
    what: &str,
) -> Result<()> {
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

pub(crate) fn describe_char(c: char) -> String {
    if c.is_control() {
        format!("a control character (U+{:04X})", c as u32)
    } else {
        format!("the character '{c}'")
    }
}

pub(crate) fn check_name(key: &str, v: &str) -> Result<()> {
    check_str(
        key,
        v,
        128,
        is_name_char,
        "letters, digits, space and . _ + ( ) -",
    )
}

pub(crate) fn check_label(key: &str, v: &str) -> Result<()> {
    check_str(
        key,
        v,
        128,
        is_label_char,
        "letters, digits, space and . _ + ( ) - @ , :",
    )
}

pub(crate) fn check_ident(key: &str, v: &str, max: usize) -> Result<()> {
    check_str(
        key,
        v,
        max,
        |c| c.is_ascii_alphanumeric() || "._-".contains(c),
        "letters, digits and . _ -",
    )
}

pub(crate) fn check_hex(key: &str, v: &str) -> Result<()> {
    check_str(key, v, 64, |c| c.is_ascii_hexdigit(), "hex digits")
}

pub(crate) fn check_range<T: PartialOrd + std::fmt::Display + Copy>(
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

/// The class of an imported number: each class has one range, a physical floor under every
/// positive quantity (1e-300 is no measurement, and a prediction divided by it is 300 digits
/// long) and the bounds a real measurement stays under. Every number a profile holds is
/// checked by its class in [`check_number`], not value by value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Class {
    /// Generation speed, tok/s: from a token in 100 s to the trials' absolute ceiling.
    GenSpeed,
    /// Prompt processing speed, tok/s: the same floor, the prompt ceiling.
    PromptSpeed,
    /// Host memory bandwidth, GB/s: from an old laptop's hundredth to far past any box's.
    Bandwidth,
    /// A spread, percent of the median: 0 (one sample) or more, bounded.
    SpreadPct,
    /// A gain, percent: from -100 (nothing left) up, bounded.
    GainPct,
}

impl Class {
    /// The range (inclusive), and what it is called in the message.
    fn range(self) -> (f64, f64, &'static str) {
        use crate::trial::plausible::SpeedCeiling;
        match self {
            Class::GenSpeed => (
                0.01,
                SpeedCeiling::ABSOLUTE.gen_tps,
                "generation speed (tok/s)",
            ),
            Class::PromptSpeed => (
                0.01,
                SpeedCeiling::ABSOLUTE.prompt_tps,
                "prompt speed (tok/s)",
            ),
            Class::Bandwidth => (0.1, 100_000.0, "memory bandwidth (GB/s)"),
            Class::SpreadPct => (0.0, 100_000.0, "spread (%)"),
            Class::GainPct => (-100.0, 1e6, "gain (%)"),
        }
    }
}

/// An imported number of `class`: finite and within its class's range, else a one-line error
/// naming the key, the value and the range.
pub(crate) fn check_number(key: &str, v: f64, class: Class) -> Result<()> {
    let (lo, hi, what) = class.range();
    if !(v.is_finite() && (lo..=hi).contains(&v)) {
        // Never 300 digits: 1e-300 as written, not as a decimal.
        let shown = if v == 0.0 || !v.is_finite() || (1e-3..1e9).contains(&v.abs()) {
            format!("{v}")
        } else {
            format!("{v:e}")
        };
        bail!(
            "{key} = {shown} is not a sane {what}: it must be from {lo} to {hi}; fix it or \
             delete the key"
        );
    }
    Ok(())
}

pub(crate) fn check_config(key: &str, c: &LaunchConfig) -> Result<()> {
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
    // Expert placement, fit target, and flags the server would refuse together.
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

pub(crate) fn check_vram(key: &str, v: u64) -> Result<()> {
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
    if let Some(g) = &p.quality {
        crate::quality::floor::validate_gate(g)?;
    }
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
        for (what, v) in [
            ("free_at_start_mib", g.free_at_start_mib),
            ("budget_mib", g.budget_mib),
        ] {
            if let Some(v) = v {
                check_vram(&format!("hardware.gpus[{i}].{what}"), v)?;
            }
        }
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
        check_number("hardware.mem_bandwidth_gbs", b, Class::Bandwidth)?;
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
    for (key, s, class) in [
        ("winner.tg", &w.tg, Class::GenSpeed),
        ("winner.pp", &w.pp, Class::PromptSpeed),
    ] {
        check_number(&format!("{key}.median"), s.median, class)?;
        check_number(&format!("{key}.spread_pct"), s.spread_pct, Class::SpreadPct)?;
        check_range(&format!("{key}.samples"), s.samples, 1, 100_000)?;
    }
    if let Some(v) = w.peak_vram_mib {
        check_vram("winner.peak_vram_mib", v)?;
    }
    if let Some(g) = w.gen_gain_pct {
        check_number("winner.gen_gain_pct", g, Class::GainPct)?;
    }

    if p.front.len() > MAX_FRONT {
        bail!("front has {} entries (at most {MAX_FRONT})", p.front.len());
    }
    for (i, f) in p.front.iter().enumerate() {
        check_config(&format!("front[{i}].config"), &f.config)?;
        if let Some(v) = f.tg {
            check_number(&format!("front[{i}].tg"), v, Class::GenSpeed)?;
        }
        if let Some(v) = f.pp {
            check_number(&format!("front[{i}].pp"), v, Class::PromptSpeed)?;
        }
        if let Some(v) = f.peak_vram_mib {
            check_vram(&format!("front[{i}].peak_vram_mib"), v)?;
        }
    }
    Ok(())
}
