//! `qtune sweep`, `depth` and `calibrate`: measurements outside the search: a `--n-cpu-moe` sweep at a tune's winning flags (to check
//! the search against brute force) and a memory calibration (predicted vs what llama-server
//! reports for its buffers).

use crate::config::{KvType, LaunchConfig};
use crate::engine::LaunchArgs;
use crate::run::{RunInputs, TuneResult};
use crate::trial::llama_runner::LlamaServerRunner;
use crate::trial::{TrialRole, TrialRunner};
use crate::util::fmt_mib;
use anyhow::{Context, Result};
use std::path::Path;

fn load_run(dir: &Path) -> Result<(RunInputs, TuneResult)> {
    let (_, result) = crate::run::read_result(dir)?;
    let inputs = crate::run::read_inputs(dir)?;
    Ok((inputs, result))
}

/// After Ctrl-C / SIGTERM: stop here (the interrupted trial was not recorded; every finished
/// one is in the journal), so qtune exits 130 / 143.
fn stop_if_interrupted() -> Result<()> {
    match crate::trial::cleanup::interrupted() {
        Some(signal) => Err(
            anyhow::Error::new(crate::trial::cleanup::Interrupted { signal })
                .context("interrupted: every finished trial is in the run's journal.jsonl"),
        ),
        None => Ok(()),
    }
}

/// The `--n-cpu-moe` values of a sweep: every value from `from` to `to`, unless `step` says otherwise.
pub fn sweep_points(from: u32, to: u32, step: u32) -> Vec<u32> {
    (from..=to).step_by(step.max(1) as usize).collect()
}

/// `qtune sweep DIR`: measure the winner's flags at every `--n-cpu-moe` in a range, append the
/// trials (role `sweep`) to the run's results and re-render its report.
pub fn sweep(dir: &Path, from: Option<u32>, to: Option<u32>, step: u32) -> Result<()> {
    crate::trial::cleanup::install_handlers();
    let (inputs, mut result) = load_run(dir)?;
    let winner = result
        .winner
        .as_ref()
        .context("the run has no winner to sweep around")?
        .config
        .clone();
    if winner.n_cpu_moe.is_none() {
        anyhow::bail!(
            "the winner does not place experts (no GPU or a dense model): nothing to sweep"
        );
    }
    let n_blocks = result.model.n_blocks;
    let from = from.unwrap_or(0).min(n_blocks);
    let to = to.unwrap_or(n_blocks).min(n_blocks);
    let _lock = crate::run::lock(dir)?;
    let _ = crate::trial::journal::Journal::repair(dir)?;
    let mut next_id = result.trials.iter().map(|t| t.id).max().unwrap_or(0) + 1;
    if let Ok(j) = crate::trial::journal::Journal::read(dir) {
        next_id = next_id.max(j.iter().map(|t| t.id).max().unwrap_or(0) + 1);
    }
    let journal = crate::trial::journal::Journal::open(dir)?;
    let mut runner = LlamaServerRunner::new(
        &inputs.server_path,
        &inputs.model_path,
        result.model.file_bytes,
        inputs.space.workload.clone(),
        dir,
        journal,
        inputs.vram_budget_mib,
        std::time::Duration::from_secs(300),
    )?
    .with_first_id(next_id);
    eprintln!(
        "{:>6} {:>10} {:>10} {:>12}  outcome",
        "ncmoe", "tg t/s", "pp t/s", "peak VRAM"
    );
    for n in sweep_points(from, to, step) {
        let cfg = LaunchConfig {
            n_cpu_moe: Some(n),
            ..winner.clone()
        };
        let o = runner.run(&cfg, TrialRole::Sweep);
        stop_if_interrupted()?;
        eprintln!(
            "{n:>6} {:>10} {:>10} {:>12}  {}",
            o.gen_tps().map_or("-".into(), |v| format!("{v:.1}")),
            o.prompt_tps().map_or("-".into(), |v| format!("{v:.1}")),
            o.peak_vram_total_mib()
                .map_or("-".into(), |v| fmt_mib(v as f64)),
            o.kind
        );
        result.trials.push(o);
        // Keep results current after every trial: an interrupted sweep loses nothing.
        crate::run::write_results(dir, &result, crate::report::verdict_json(&result))?;
    }
    crate::report::write_all(dir, &result)?;
    println!("{}", dir.join("report.md").display());
    Ok(())
}

/// One calibration row: what the prediction said and what the server reported.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CalibrationRow {
    pub config: LaunchConfig,
    pub outcome: String,
    pub predicted_gpu_mib: f64,
    pub predicted_host_mib: f64,
    pub reported_gpu_mib: Option<f64>,
    pub reported_host_mib: Option<f64>,
    pub reported: Option<crate::trial::ReportedMemory>,
}

fn device_total(r: &crate::trial::ReportedMemory, gpu: bool) -> f64 {
    let is_gpu = |d: &str| d.starts_with("CUDA") && !d.contains("Host");
    [&r.model_mib, &r.kv_mib, &r.recurrent_mib, &r.compute_mib]
        .iter()
        .flat_map(|m| m.iter())
        .filter(|(d, _)| is_gpu(d) == gpu)
        .map(|(_, v)| *v)
        .sum()
}

/// `qtune calibrate MODEL`: launch the server for each (n_cpu_moe, ctx, kv) and compare what
/// it reports for its buffers with the memory prediction. Writes `calibration.json` to `out`.
#[allow(clippy::too_many_arguments)]
pub fn calibrate(
    model: &Path,
    server: Option<&Path>,
    n_cpu_moe: &[u32],
    ctxs: &[u32],
    kvs: &[KvType],
    ubatches: &[u32],
    out: &Path,
) -> Result<()> {
    crate::trial::cleanup::install_handlers();
    let server = crate::run::setup::server(server, crate::run::setup::FindServer::Look)?;
    let ubatches: Vec<Option<u32>> = if ubatches.is_empty() {
        vec![None]
    } else {
        ubatches.iter().map(|u| Some(*u)).collect()
    };
    let layout = crate::model::load(model)?;
    let hw = crate::hardware::probe(false);
    let workload = crate::space::Workload {
        prompt_tokens: 16,
        gen_tokens: 4,
        repetitions: 1,
        shape_repetitions: 1,
        warmup: false,
        context_depth: None,
        mix: None,
        mixes: Vec::new(),
        replay: None,
    };
    // Its folder is checked like a run's: no link in it, nobody else's; and like a comparison's,
    // new or empty (a calibration.json of the user's there is never overwritten).
    let _lock = crate::run::lock(out)?;
    crate::run::check_fresh(out, "a calibration")?;
    let journal = crate::trial::journal::Journal::open(out)?;
    let mut runner = LlamaServerRunner::new(
        &server.path,
        model,
        layout.file_bytes,
        workload,
        out,
        journal,
        None,
        std::time::Duration::from_secs(300),
    )?;
    let placements: Vec<Option<u32>> = if hw.has_gpu() && layout.is_moe() {
        n_cpu_moe.iter().map(|n| Some(*n)).collect()
    } else {
        vec![None]
    };
    let mut rows = Vec::new();
    eprintln!(
        "{:<40} {:>12} {:>12} {:>7}   {:>12} {:>12} {:>7}",
        "config", "GPU pred", "GPU server", "err", "host pred", "host server", "err"
    );
    let mut combos = Vec::new();
    for &n in &placements {
        for &ctx in ctxs {
            for &kv in kvs {
                for &ub in &ubatches {
                    combos.push((n, ctx, kv, ub));
                }
            }
        }
    }
    for (n, ctx, kv, ub) in combos {
        let mut cfg = LaunchConfig {
            cache_type_k: kv,
            cache_type_v: kv,
            flash_attn: crate::config::FlashAttn::On,
            batch: ub.map(|u| u.max(2048)),
            ubatch: ub,
            ..LaunchConfig::baseline(ctx)
        };
        if let Some(n) = n {
            cfg.place_experts(n);
        }
        let pred = crate::model::memory::predict(&layout, &cfg, hw.has_gpu());
        let o = runner.run(&cfg, TrialRole::Sweep);
        stop_if_interrupted()?;
        let (rg, rh) = match &o.reported {
            Some(r) => (Some(device_total(r, true)), Some(device_total(r, false))),
            None => (None, None),
        };
        let err = |p: f64, r: Option<f64>| {
            r.filter(|r| *r > 0.0)
                .map_or("-".into(), |r| format!("{:+.1}%", (p / r - 1.0) * 100.0))
        };
        eprintln!(
            "{:<40} {:>12} {:>12} {:>7}   {:>12} {:>12} {:>7}  {}",
            cfg.flags(),
            fmt_mib(pred.gpu_mib),
            rg.map_or("-".into(), fmt_mib),
            err(pred.gpu_mib, rg),
            fmt_mib(pred.host_mib),
            rh.map_or("-".into(), fmt_mib),
            err(pred.host_mib, rh),
            o.kind
        );
        rows.push(CalibrationRow {
            config: cfg,
            outcome: o.kind.to_string(),
            predicted_gpu_mib: pred.gpu_mib,
            predicted_host_mib: pred.host_mib,
            reported_gpu_mib: rg,
            reported_host_mib: rh,
            reported: o.reported,
        });
    }
    let path = out.join("calibration.json");
    crate::util::write_atomic(&path, serde_json::to_string_pretty(&rows)?.as_bytes())?;
    println!("{}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_points_cover_the_range() {
        assert_eq!(sweep_points(14, 18, 1), vec![14, 15, 16, 17, 18]);
        assert_eq!(sweep_points(0, 40, 10), vec![0, 10, 20, 30, 40]);
        assert_eq!(sweep_points(5, 5, 0), vec![5]);
    }
}

/// One row of a depth measurement.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DepthRow {
    pub depth_tokens: u32,
    pub outcome: String,
    pub gen_tps: Option<crate::trial::Stat>,
    pub trial_id: u32,
}

/// `qtune depth DIR --depths 0,8192,31744`: the winner's generation speed with that many tokens
/// already in context (does speed hold at long context?). Writes `depth.json` into the run.
pub fn depth(dir: &Path, depths: &[u32]) -> Result<()> {
    crate::trial::cleanup::install_handlers();
    let (inputs, result) = load_run(dir)?;
    let winner = result
        .winner
        .as_ref()
        .context("the run has no winner to measure")?
        .config
        .clone();
    let _lock = crate::run::lock(dir)?;
    let _ = crate::trial::journal::Journal::repair(dir)?;
    let mut next_id = result.trials.iter().map(|t| t.id).max().unwrap_or(0) + 1;
    if let Ok(j) = crate::trial::journal::Journal::read(dir) {
        next_id = next_id.max(j.iter().map(|t| t.id).max().unwrap_or(0) + 1);
    }
    let mut rows = Vec::new();
    eprintln!("{:>8} {:>14}  outcome", "depth", "tg t/s");
    for &d in depths {
        if d.saturating_add(inputs.space.workload.gen_tokens)
            .saturating_add(8)
            > winner.ctx
        {
            anyhow::bail!(
                "depth {d} + {} generated tokens does not fit the winner's context {}",
                inputs.space.workload.gen_tokens,
                winner.ctx
            );
        }
        let workload = crate::space::Workload {
            context_depth: (d > 0).then_some(d),
            ..inputs.space.workload.clone()
        };
        let journal = crate::trial::journal::Journal::open(dir)?;
        let mut runner = LlamaServerRunner::new(
            &inputs.server_path,
            &inputs.model_path,
            result.model.file_bytes,
            workload,
            dir,
            journal,
            inputs.vram_budget_mib,
            std::time::Duration::from_secs(600),
        )?
        .with_first_id(next_id);
        let o = runner.run(&winner, TrialRole::Sweep);
        stop_if_interrupted()?;
        next_id = o.id + 1;
        let gen = o.metrics.as_ref().map(|m| {
            if d > 0 {
                m.gen_tps_at_depth
                    .clone()
                    .unwrap_or_else(|| m.gen_tps.clone())
            } else {
                m.gen_tps.clone()
            }
        });
        eprintln!(
            "{d:>8} {:>14}  {}",
            gen.as_ref().map_or("-".into(), |s| format!(
                "{:.1} ±{:.0}%",
                s.median,
                s.spread_pct / 2.0
            )),
            o.kind
        );
        rows.push(DepthRow {
            depth_tokens: d,
            outcome: o.kind.to_string(),
            gen_tps: gen,
            trial_id: o.id,
        });
    }
    let path = dir.join("depth.json");
    crate::util::write_atomic(&path, serde_json::to_string_pretty(&rows)?.as_bytes())?;
    println!("{}", path.display());
    Ok(())
}
