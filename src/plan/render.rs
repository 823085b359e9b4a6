//! Render: the text block `qtune plan` prints.

use super::*;
use crate::engine::LaunchArgs;

/// The text block `qtune plan` prints on stderr.
pub fn plan_text(plan: &Plan, model: &Path) -> String {
    let mib = crate::util::fmt_mib;
    let mut o = String::new();
    let _ = writeln!(o, "Plan for {}", crate::escape::terminal_path(model));
    let _ = writeln!(
        o,
        "  profile: {}{}",
        crate::escape::terminal(
            plan.from_profile
                .as_deref()
                .unwrap_or("none (built-in defaults)")
        ),
        plan.profile_chosen
            .as_deref()
            .map(|why| format!(" ({})", crate::escape::terminal(why)))
            .unwrap_or_default()
    );
    let _ = writeln!(o, "  config: {}", plan.config.flags());
    let _ = writeln!(o, "  confidence: {}", plan.confidence.as_str());
    for r in &plan.reasons {
        let _ = writeln!(o, "    - {}", crate::escape::terminal(r));
    }
    if !plan.compared.is_empty() {
        let _ = writeln!(o, "  compared (predicted, not measured; * the plan's):");
        for c in &plan.compared {
            let speed = match (c.tg_tps, c.pp_tps) {
                (Some(tg), Some(pp)) => match (super::shown_tps(tg), super::shown_tps(pp)) {
                    (Some(tg), Some(pp)) => format!("tg {tg}, pp {pp} tok/s"),
                    _ => "no believable speed".to_string(),
                },
                _ => "does not fit".to_string(),
            };
            let mark = if c.chosen { '*' } else { ' ' };
            let _ = writeln!(o, "    {mark} {}: {speed}", c.config);
        }
    }
    match plan.budget_mib {
        Some(b) => {
            let _ = writeln!(
                o,
                "  predicted VRAM: {} of buffers, within {} of a {} budget (the rest: the CUDA context and a margin)",
                mib(plan.predicted_gpu_mib),
                mib(plan_fit_target_mib(b as f64)),
                mib(b as f64)
            );
        }
        None => {
            let _ = writeln!(o, "  predicted VRAM: none (no GPU)");
        }
    }
    for (g, used) in &plan.cards {
        let _ = writeln!(
            o,
            "    CUDA{} {}: {} of its {} budget",
            g.index,
            crate::escape::terminal(&g.name),
            mib(*used),
            mib(g.budget_mib as f64)
        );
    }
    let _ = writeln!(o, "  predicted host RAM: {}", mib(plan.predicted_host_mib));
    match &plan.speed {
        Some(sp) => {
            let p = &sp.prediction;
            let _ = writeln!(
                o,
                "  predicted speed (a prediction, not a measurement): tg {}, pp {}",
                p.tg.text(),
                p.pp.text()
            );
            let _ = writeln!(
                o,
                "    per token: GPU {:.1} ms, CPU experts {:.1} ms, overhead {:.1} ms",
                p.decode.gpu_ms, p.decode.cpu_experts_ms, p.decode.overhead_ms
            );
            let _ = writeln!(o, "    - {}", plan.speed_note);
        }
        None => {
            let _ = writeln!(o, "  predicted speed: none ({})", plan.speed_note);
        }
    }
    if let Some(d) = &plan.server_default {
        let _ = writeln!(
            o,
            "  the server's default (no flags: its own fit, {}, mmap, f16 KV, {} 512), predicted: tg {}, pp {}",
            d.placement,
            crate::engine::Flag::Ubatch,
            d.prediction.tg.text(),
            d.prediction.pp.text()
        );
    }
    if let Some(q) = &plan.quality {
        let _ = writeln!(o, "  quality: {}", crate::escape::terminal(&q.text()));
    }
    for w in &plan.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
    o
}
