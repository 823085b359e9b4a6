//! The test set of `qtune plan --box`: speeds users published with their card, CPU, quant and
//! placement (the project's seeds 001-004), each against what the plan's models predict for
//! that box, quant and placement. Nothing is fitted on them: the speed model's constants come
//! from qtune's own runs (`crate::model::speed::FITTED`). `docs/seed-speeds.csv` holds the rows
//! (each citing its seed file and line); [`table`] renders the table of docs/results.md, which
//! `cargo run --example seed_table` prints and `tests/it/plan_box.rs` checks is current.

use crate::config::LaunchConfig;
use crate::hardware::HardwareProfile;
use crate::model::speed::{self, SpeedBox, FITTED};
use crate::model::synth::{planned_layout, SynthFtype};
use crate::model::ModelLayout;
use anyhow::{bail, Context, Result};

/// A row's measured generation speeds (tok/s) for the seed's four workloads, or an OOM.
#[derive(Debug, Clone, PartialEq)]
pub enum SeedResult {
    Speeds(Vec<f64>),
    /// The launch ran out of GPU memory.
    Oom,
}

/// One published measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedRow {
    /// "003:43": seed file and line.
    pub cite: String,
    /// A catalog box ([`super::boxes::CATALOG`]).
    pub box_id: String,
    /// The host as the seed names it.
    pub cpu: String,
    pub shape: String,
    pub quant: String,
    /// The flags as qtune spells them (`-c 65536 -np 1 ...`); no placement flags: the server's
    /// own fit.
    pub flags: String,
    pub measured: SeedResult,
    /// VRAM the seed reports in use, MiB (nvidia-smi's MB).
    pub vram_mib: Option<f64>,
    pub note: String,
}

/// What the models predict for one row.
#[derive(Debug, Clone, PartialEq)]
pub struct RowPrediction {
    /// The placement predicted (the server's fit's stand-in for rows without placement flags).
    pub placement: String,
    /// Predicted VRAM in use: buffers plus the CUDA context, MiB.
    pub vram_mib: f64,
    /// Fits the card's memory.
    pub fits: bool,
    pub tg: Option<speed::Estimate>,
}

const HEADER: &str =
    "seed_line,box,cpu,shape,quant,flags,short,medium,long,multi_turn,vram_mib,note";

/// Read the rows (`docs/seed-speeds.csv`): the header above, then one row per line; `#` lines
/// are comments; a field holds no comma. Speeds: four numbers, or `OOM` in the first.
pub fn parse_rows(csv: &str) -> Result<Vec<SeedRow>> {
    let mut lines = csv
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
    match lines.next() {
        Some((_, h)) if h.trim() == HEADER => {}
        _ => bail!("the seed rows must start with the header {HEADER}"),
    }
    let mut rows = Vec::new();
    for (i, line) in lines {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 12 {
            bail!("line {}: {} fields, expected 12", i + 1, f.len());
        }
        let num = |s: &str| -> Result<Option<f64>> {
            if s.is_empty() || s == "-" {
                Ok(None)
            } else {
                s.parse::<f64>()
                    .map(Some)
                    .with_context(|| format!("line {}: '{s}' is not a number", i + 1))
            }
        };
        let measured = if f[6] == "OOM" {
            SeedResult::Oom
        } else {
            let v: Vec<f64> = f[6..10]
                .iter()
                .map(|s| num(s))
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .flatten()
                .collect();
            if v.is_empty() {
                bail!("line {}: no speed", i + 1);
            }
            SeedResult::Speeds(v)
        };
        rows.push(SeedRow {
            cite: f[0].into(),
            box_id: f[1].into(),
            cpu: f[2].into(),
            shape: f[3].into(),
            quant: f[4].into(),
            flags: f[5].into(),
            measured,
            vram_mib: num(f[10])?,
            note: f[11].into(),
        });
    }
    Ok(rows)
}

/// The row's box: the catalog card with the seed's host cores (the threads are in its flags).
fn row_box(row: &SeedRow) -> Result<HardwareProfile> {
    let c = super::boxes::catalog_card(&row.box_id)
        .with_context(|| format!("{}: unknown box {}", row.cite, row.box_id))?;
    Ok(c.hardware())
}

/// The row's config: its flags read as a command line.
fn row_config(row: &SeedRow) -> Result<LaunchConfig> {
    let mut argv = vec!["llama-server".to_string()];
    argv.extend(row.flags.split_whitespace().map(String::from));
    crate::engine::parse_command(&argv)
        .map(|c| c.config)
        .map_err(|e| anyhow::anyhow!("{}: {e}", row.cite))
}

/// Predict one row on its box from the layout of its shape and quant.
pub fn predict_row(row: &SeedRow, layout: &ModelLayout) -> Result<RowPrediction> {
    let hw = row_box(row)?;
    let total = hw.gpus[0].vram_total_mib as f64;
    let mut cfg = row_config(row)?;
    let placement;
    if cfg.is_auto_placement() || cfg.is_fit_placement() {
        // The server's own fit, with its target (1024 MiB unless --fit-target) as the room.
        let target = cfg.fit_target_mib.first().map(|&t| f64::from(t));
        cfg.fit_target_mib.clear();
        cfg.fit = None;
        let free = hw.gpus[0].vram_free_mib as f64
            + target.map_or(0.0, |t| crate::placement::SERVER_FIT_TARGET_MIB - t);
        match crate::placement::server_default_stand_in(layout, &cfg, free) {
            Some(s) => {
                placement = format!("fit: {}", crate::placement::stand_in_placement(&s));
                cfg = s;
            }
            None => {
                return Ok(RowPrediction {
                    placement: "fit: nothing fits".into(),
                    vram_mib: f64::NAN,
                    fits: false,
                    tg: None,
                })
            }
        }
    } else {
        placement = super::described::experts_text(layout, &cfg, true);
    }
    let mem = crate::model::memory::predict(layout, &cfg, true);
    let vram = mem.gpu_mib + crate::model::cards::CARD_CONTEXT_MIB;
    let sb = SpeedBox::from_hardware(&hw);
    let tg = speed::predict(
        layout,
        &cfg,
        &sb,
        true,
        speed::DEFAULT_PROMPT_TOKENS,
        &FITTED,
    )
    .map(|p| p.tg);
    Ok(RowPrediction {
        placement,
        vram_mib: vram,
        fits: vram <= total,
        tg,
    })
}

/// Within this relative error a prediction counts as a hit (the goal).
pub const GOAL_PCT: f64 = 20.0;

/// The markdown table of every row against its prediction, and a summary line.
pub fn table(csv: &str) -> Result<String> {
    let rows = parse_rows(csv)?;
    let mut layouts: Vec<((String, String), ModelLayout)> = Vec::new();
    let mut out = String::new();
    out.push_str(
        "| Seed:line | Card | Quant | Flags (qtune's spelling) | Measured tg tok/s | Predicted tg [interval] | Error | Placement predicted | VRAM MiB measured / predicted |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    let (mut rows_hit, mut rows_n, mut speeds_hit, mut speeds_n) = (0, 0, 0, 0);
    let (mut oom_agree, mut oom_n) = (0, 0);
    for row in &rows {
        let key = (row.shape.clone(), row.quant.to_ascii_lowercase());
        if !layouts.iter().any(|(k, _)| *k == key) {
            let l = planned_layout(&row.shape, SynthFtype::parse(&row.quant)?)?;
            layouts.push((key.clone(), l));
        }
        let layout = &layouts.iter().find(|(k, _)| *k == key).unwrap().1;
        let p = predict_row(row, layout)?;
        let (measured, predicted, error) = match (&row.measured, p.tg) {
            (SeedResult::Oom, _) => {
                oom_n += 1;
                let agree = !p.fits;
                if agree {
                    oom_agree += 1;
                }
                (
                    "OOM".to_string(),
                    if p.fits {
                        "fits".to_string()
                    } else {
                        "does not fit".to_string()
                    },
                    if agree { "agrees" } else { "misses" }.to_string(),
                )
            }
            (SeedResult::Speeds(v), Some(tg)) => {
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                let err = (tg.tps - mean) / mean * 100.0;
                rows_n += 1;
                if err.abs() <= GOAL_PCT {
                    rows_hit += 1;
                }
                for s in v {
                    speeds_n += 1;
                    if ((tg.tps - s) / s * 100.0).abs() <= GOAL_PCT {
                        speeds_hit += 1;
                    }
                }
                (
                    v.iter()
                        .map(|x| format!("{x}"))
                        .collect::<Vec<_>>()
                        .join(" / "),
                    format!(
                        "{:.1} [{:.1}, {:.1}]{}",
                        tg.tps,
                        tg.low,
                        tg.high,
                        if p.fits {
                            ""
                        } else {
                            " (predicted not to fit)"
                        }
                    ),
                    format!("{err:+.0} %"),
                )
            }
            (SeedResult::Speeds(v), None) => (
                v.iter()
                    .map(|x| format!("{x}"))
                    .collect::<Vec<_>>()
                    .join(" / "),
                "none".to_string(),
                "-".to_string(),
            ),
        };
        let vram = format!(
            "{} / {}",
            row.vram_mib.map_or("-".into(), |v| format!("{v:.0}")),
            if p.vram_mib.is_finite() {
                format!("{:.0}", p.vram_mib)
            } else {
                "-".into()
            }
        );
        out.push_str(&format!(
            "| {} | {} | {} | `{}` | {measured} | {predicted} | {error} | {} | {vram} |\n",
            row.cite, row.box_id, row.quant, row.flags, p.placement
        ));
    }
    out.push_str(&format!(
        "\n{rows_hit} of {rows_n} rows within {GOAL_PCT:.0} % (the mean of a row's speeds against the prediction); \
         {speeds_hit} of {speeds_n} single speeds; {oom_agree} of {oom_n} out-of-memory launches predicted not to fit.\n"
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_parse_and_bad_rows_are_refused() {
        let csv = format!(
            "# comment\n{HEADER}\n002:88,rtx-5080-16gb,Ryzen 9 9950X,qwen3.5-35b-a3b,Q4_K_M,-c 65536 -np 1,74.7,72.9,73.7,76.1,14559,x\n003:35,rtx-5080-16gb,x,qwen3.5-35b-a3b,Q8_0,-c 65536 -np 1,OOM,,,,,y\n"
        );
        let rows = parse_rows(&csv).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0].measured,
            SeedResult::Speeds(vec![74.7, 72.9, 73.7, 76.1])
        );
        assert_eq!(rows[1].measured, SeedResult::Oom);
        assert!(parse_rows("a,b\n").is_err());
        assert!(parse_rows(&format!("{HEADER}\n1,2,3\n")).is_err());
    }
}
