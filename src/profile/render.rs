//! Profiles as text for people: the `profile list` table and `profile show`.

use super::*;
use crate::engine::LaunchArgs;

pub(crate) fn model_label(m: &ProfileModel) -> String {
    let mut s = m.name.clone().unwrap_or_else(|| m.arch.clone());
    if let Some(ft) = &m.file_type {
        let _ = write!(s, " {ft}");
    }
    s
}

/// The rows `qtune profile list` prints.
pub fn list_text(entries: &[(PathBuf, Result<Profile>)]) -> String {
    let rows: Vec<[String; 5]> = entries
        .iter()
        .map(|(path, r)| match r {
            Ok(p) => [
                format!(
                    "{}{}",
                    slug_of_path(path),
                    if path.to_string_lossy().starts_with(BUILT_IN_PREFIX) {
                        " (built-in)"
                    } else {
                        ""
                    }
                ),
                model_label(&p.model),
                p.hardware.gpu_label(),
                format!("{:.1} t/s", p.winner.tg.median),
                tuned_for_short(p),
            ],
            Err(e) => [
                one_line(&path.file_name().unwrap_or_default().to_string_lossy()),
                format!("invalid: {}", one_line(&format!("{e:#}"))),
                String::new(),
                String::new(),
                String::new(),
            ],
        })
        .collect();
    // Valid profiles as an aligned table; an invalid one as its file name and the reason.
    let valid: Vec<Vec<String>> = rows
        .iter()
        .filter(|r| !r[1].starts_with("invalid: "))
        .map(|r| r.to_vec())
        .collect();
    let mut out = crate::util::text_table(
        &["NAME", "MODEL", "GPU", "WINNER TG", "TUNED FOR"],
        &valid,
        &[3],
    );
    for r in rows.iter().filter(|r| r[1].starts_with("invalid: ")) {
        let _ = writeln!(out, "{}  {}", r[0], r[1]);
    }
    out
}

/// Did the profile's tune measure workloads (a time per request of request shapes)? Profiles
/// written before qtune had workloads (the first built-in ones) were tuned for generation
/// speed at one prompt length.
pub fn has_workloads(p: &Profile) -> bool {
    let w = &p.space.workload;
    !w.mixes.is_empty() || w.mix.is_some()
}

/// What the profile's tune chose its winner for, in words (`profile show`, `plan`).
pub fn tuned_for(p: &Profile) -> String {
    let w = &p.space.workload;
    if has_workloads(p) {
        let mut names: Vec<String> = w.mixes.iter().map(|m| one_line(&m.name)).collect();
        if names.is_empty() {
            names.extend(w.mix.as_deref().map(one_line));
        }
        return format!("the time per request of the {} workload", names.join(" + "));
    }
    let mut s = format!(
        "generation speed with a {}-token prompt and {} generated tokens, before qtune measured \
         workloads: not for a time per request of chat, agent or long-doc",
        w.prompt_tokens, w.gen_tokens
    );
    if let Some(g) = p.winner.gen_gain_pct.filter(|g| *g < 0.0) {
        s.push_str(&format!(
            "; its winner measured {:.1} % slower in generation than its baseline",
            -g
        ));
    }
    s
}

/// The narrow form of [`tuned_for`] for `profile list`.
fn tuned_for_short(p: &Profile) -> String {
    if has_workloads(p) {
        let w = &p.space.workload;
        let names: Vec<String> = w.mixes.iter().map(|m| one_line(&m.name)).collect();
        if names.is_empty() {
            w.mix.as_deref().map(one_line).unwrap_or_default()
        } else {
            names.join("+")
        }
    } else {
        "generation (before workloads)".to_string()
    }
}

/// A profile as readable text.
pub fn show_text(p: &Profile) -> String {
    let mib = |v: u64| crate::util::fmt_mib(v as f64);
    let mut o = String::new();
    let _ = writeln!(o, "Profile: {}", p.name);
    let _ = writeln!(
        o,
        "  created {} with qtune {} and llama.cpp {}",
        p.created,
        p.qtune_version,
        crate::engine::binary::short_version(&p.llama_cpp_version)
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
        if h.gpus.iter().any(|g| g.budget_mib.is_some()) {
            for (i, g) in h.gpus.iter().enumerate() {
                let _ = writeln!(
                    o,
                    "  CUDA{i}: {} · {} total · {} free at start · budget {}",
                    g.name,
                    mib(g.vram_total_mib),
                    g.free_at_start_mib.map_or("-".to_string(), mib),
                    g.budget_mib.map_or("-".to_string(), mib)
                );
            }
        }
    }
    let _ = writeln!(
        o,
        "Host: {} · {} cores ({} logical) · {} GiB RAM{} · fingerprint {}",
        h.cpu,
        h.physical_cores.map_or("?".into(), |c| c.to_string()),
        h.logical_cores,
        h.ram_total_mib / 1024,
        h.mem_bandwidth_gbs.map_or(String::new(), |b| format!(
            " · {} read",
            crate::util::gbs(b)
        )),
        h.fingerprint
    );
    let wl = &p.space.workload;
    let _ = writeln!(
        o,
        "Space: {} · ctx {} · workload {} prompt + {} generated tokens × {}",
        p.space.name, p.space.ctx, wl.prompt_tokens, wl.gen_tokens, wl.repetitions
    );
    let _ = writeln!(o, "Tuned for: {}", tuned_for(p));
    let w = &p.winner;
    // The winner's flags are on its command line below.
    let _ = writeln!(o, "Winner:");
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
    for l in crate::rpc::worker_commands(&w.config) {
        let _ = writeln!(o, "  RPC worker {}", crate::escape::terminal(&l));
    }
    if let Some(g) = &p.quality {
        let _ = writeln!(
            o,
            "Quality floor: {} (ctx {}, {} chunks of {})",
            g.floor().describe(),
            g.ctx,
            g.chunks,
            g.text
        );
        for l in g.lines() {
            let _ = writeln!(o, "  {l}");
        }
    }
    let _ = writeln!(
        o,
        "Measured configs ({}; the lowest time per request first; * the winner):",
        p.front.len()
    );
    let _ = writeln!(
        o,
        "    {:>9} {:>8} {:>8} {:>12}  {:<12} config",
        "s/request", "tg t/s", "pp t/s", "peak VRAM", "outcome"
    );
    for f in &p.front {
        let _ = writeln!(
            o,
            "  {} {:>9} {:>8} {:>8} {:>12}  {:<12} {}",
            if f.config == w.config { "*" } else { " " },
            f.request_s.map_or("-".into(), |v| format!("{v:.2}")),
            f.tg.map_or("-".into(), |v| format!("{v:.2}")),
            f.pp.map_or("-".into(), |v| format!("{v:.1}")),
            f.peak_vram_mib.map_or("-".into(), mib),
            f.outcome.as_str(),
            f.config.label()
        );
    }
    o
}
