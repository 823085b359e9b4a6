//! Building a profile from a finished tune: its winner, its measured configs and their
//! Pareto front, with every label cleaned for strangers.

use super::*;
use crate::run::pareto::Goal;

/// The gate as a shareable profile carries it: a user's text is named by its file name only.
pub fn quality_for_profile(
    g: &crate::quality::floor::QualityGate,
) -> crate::quality::floor::QualityGate {
    let mut g = g.clone();
    if let Some(name) = std::path::Path::new(&g.text)
        .file_name()
        .filter(|_| g.text.contains('/'))
    {
        g.text = name.to_string_lossy().into_owned();
    }
    g.text = sanitize_label(&g.text);
    g
}

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

pub(crate) fn sanitize_name(s: &str) -> String {
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

/// The default profile name, a slug to type: model, quantization, GPU (or CPU) and the VRAM it
/// had, e.g. `qwen3.5-35b-a3b-q4_k_m-h200-16gib` or `qwen3-30b-a3b-q4_k_m-cpu-16t`.
pub fn default_name(r: &TuneResult) -> String {
    let model = r.model.name.clone().unwrap_or_else(|| r.model.arch.clone());
    let ft = r.model.file_type.as_deref().unwrap_or_default();
    let target = match r.inputs.hardware.gpus.first() {
        Some(g) => {
            let card: Vec<&str> = g
                .name
                .split_whitespace()
                .filter(|w| !["nvidia", "geforce"].contains(&w.to_lowercase().as_str()))
                .collect();
            format!(
                "{} {}gib",
                card.join(" "),
                (r.inputs.free_vram_at_start_mib as f64 / 1024.0).round()
            )
        }
        None => format!("cpu {}t", r.inputs.hardware.host.logical_cores),
    };
    sanitize_name(&slug(&format!("{model} {ft} {target}")))
}

/// What `profile export` warns about before a stranger plans from the profile: a winner the
/// tune's verdict did not decide (never raced, or faster by its estimate only), and a winner
/// whose own measurements spread wider than the gain a race is sized to decide (its speeds
/// would mislead `plan`'s predictions). Empty for a decided, steady winner.
pub fn export_warnings(r: &TuneResult) -> Vec<String> {
    use crate::run::VerdictStatus;
    let Some(w) = &r.winner else {
        return Vec::new();
    };
    let mut out = Vec::new();
    match w.status {
        Some(VerdictStatus::Proven | VerdictStatus::Kept) => {}
        Some(VerdictStatus::Likely) => out.push(
            "the winner is faster by its estimate only: the race did not prove it (tune longer, \
             e.g. --budget-minutes, then export again)"
                .to_string(),
        ),
        // Never raced, or raced without a decision.
        _ => out.push(
            "the tune's verdict did not decide that the winner is faster than its baseline \
             (tune longer, e.g. --budget-minutes, then export again)"
                .to_string(),
        ),
    }
    let decidable = crate::stats::race::RaceSettings::default().target_gain_pct;
    let (what, spread) = if w.gen_tps.spread_pct >= w.prompt_tps.spread_pct {
        ("generation", w.gen_tps.spread_pct)
    } else {
        ("prompt", w.prompt_tps.spread_pct)
    };
    if spread.is_finite() && spread > decidable {
        out.push(format!(
            "the winner's {what} speeds spread {spread:.0} % between its measurements, more than \
             the {decidable:.0} % difference the race is sized to decide: the box was busy or \
             noisy, and `qtune plan` would predict from these numbers (tune again on a quiet box)"
        ));
    }
    out
}

/// Build a profile from a tune's result. Fails when the tune has no winner.
pub fn from_tune(r: &TuneResult, name: Option<&str>) -> Result<Profile> {
    let w = r.winner.as_ref().ok_or_else(|| {
        anyhow!("this run has no winner (no config finished its trials): nothing to export")
    })?;
    let hw = &r.inputs.hardware;
    let profile = Profile {
        schema: SCHEMA_VERSION,
        name: name.map_or_else(|| default_name(r), sanitize_name),
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        qtune_version: sanitize_label(env!("CARGO_PKG_VERSION")),
        // The winner's engine's server (`--engine both` races two).
        llama_cpp_version: sanitize_label(crate::engine::select::version_for(
            w.config.engine,
            &r.inputs.server_version,
            &r.inputs.engine_servers,
        )),
        hardware: ProfileHardware {
            fingerprint: hw.fingerprint.clone(),
            gpus: hw
                .gpus
                .iter()
                .map(|g| {
                    let card = r.inputs.gpu_budgets.iter().find(|b| b.index == g.index);
                    ProfileGpu {
                        name: sanitize_label(&g.name),
                        vram_total_mib: g.vram_total_mib,
                        free_at_start_mib: card.map(|c| c.free_mib),
                        budget_mib: card.map(|c| c.budget_mib),
                    }
                })
                .collect(),
            free_vram_at_start_mib: r.inputs.free_vram_at_start_mib,
            headroom_mib: r.inputs.headroom_mib,
            vram_budget_mib: r.inputs.vram_budget_mib,
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
            name: sanitize_name(&r.inputs.space.name),
            ctx: w.config.ctx,
            workload: r.inputs.space.workload.clone(),
        },
        winner: ProfileWinner {
            config: w.config.clone(),
            tg: Speed::from_stat(&w.gen_tps),
            pp: Speed::from_stat(&w.prompt_tps),
            peak_vram_mib: w.peak_vram_mib,
            gen_gain_pct: w.gen_gain_pct.filter(|g| g.is_finite()),
        },
        front: measured_front(r),
        quality: r.inputs.quality.as_ref().map(quality_for_profile),
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
            request_s: r
                .objective_time(&config, None)
                .map(|t| t.seconds)
                .filter(|v| v.is_finite()),
            config,
        })
        .collect();
    // Pareto: fastest generation for the least peak VRAM, among the points that ran.
    let eligible: Vec<usize> = (0..front.len())
        .filter(|&i| front[i].outcome == OutcomeKind::Ok && front[i].tg.is_some())
        .collect();
    let points: Vec<(f64, f64)> = eligible
        .iter()
        .map(|&i| {
            (
                front[i].peak_vram_mib.unwrap_or(0) as f64,
                front[i].tg.unwrap_or(f64::NAN),
            )
        })
        .collect();
    for k in crate::run::pareto::front(&points, Goal::Min, Goal::Max) {
        front[eligible[k]].pareto = true;
    }
    // The tune's objective first: the lowest time per request, failures last.
    front.sort_by(|a, b| {
        (a.outcome != OutcomeKind::Ok)
            .cmp(&(b.outcome != OutcomeKind::Ok))
            .then(crate::util::by_time(
                a.request_s,
                a.tg.unwrap_or(-1.0),
                b.request_s,
                b.tg.unwrap_or(-1.0),
            ))
    });
    front.truncate(MAX_FRONT);
    front
}
