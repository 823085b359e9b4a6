//! The speed model's pick: the config the tune launches first and races when its
//! single launch cannot be told apart from the screening's leader.
//!
//! The screening ranks configs by one launch each (two when close), and one launch on the GPU
//! machine moves by 5-15 %. Screening on such a difference, 16 GiB tunes raced another
//! micro-batch first and kept the default, while the config `qtune plan` had proposed for those
//! cards (the same speed model, the same space's batch/KV pairs and placement styles) was never
//! launched; re-measured later it was ahead of `--fit` on both axes (30B: generation +10.2 %
//! [+5.2, +15.5], prompt +47.6 % [+37.2, +58.7]; docs/evidence/gpu-h100-run6). So the pick is launched right after
//! the baseline, and where the measurements cannot separate it from the leader, the model's
//! ranking decides which one the race takes first.

use super::context::SearchContext;
use super::rank::Speeds;
use crate::config::{Base, KvType, LaunchConfig};
use crate::engine::LaunchArgs;
use crate::model::speed::{self, PickInput, SpeedBox, SpeedPrediction, FITTED, PICK_TIE_PCT};
use crate::model::ModelLayout;
use crate::objective::{request_seconds, Objective, Rates};
use crate::placement::{propose, Limits};

/// The config the speed model rates best on this box, by the tune's objective
/// ([`speed::pick`], the rule `qtune plan` chooses by): every batch/ubatch × KV pair of the
/// space with the starting point's threads, flash attention and load mode, each placed with
/// `--n-cpu-moe` at its predicted boundary and with each of the space's placement styles (but
/// `fit`, which the model cannot predict) filled to the budget as the variants are filled.
/// `unitemized_mib`: what this tune measured beyond the buffers (the CUDA context).
/// `None` without a speed model for this box, without a GPU or experts to place, on several
/// GPUs (the split search places those), or when nothing fits.
pub fn model_pick(ctx: &SearchContext, unitemized_mib: f64) -> Option<LaunchConfig> {
    let sb = ctx.speed.as_ref()?;
    if !ctx.gpu_moe || ctx.multi_gpu() {
        return None;
    }
    let budget = ctx.budget_mib?;
    let start = ctx.start_base();
    let v = &ctx.space.vary;
    let batches: Vec<Option<[u32; 2]>> = if v.batch_ubatch.is_empty() {
        vec![start.batch]
    } else {
        v.batch_ubatch.iter().copied().map(Some).collect()
    };
    let kvs: Vec<[KvType; 2]> = if v.kv_types.is_empty() {
        vec![start.kv]
    } else {
        v.kv_types.clone()
    };
    let limits = Limits {
        vram_budget_mib: budget - unitemized_mib,
        ram_available_mib: ctx.ram_available_mib,
        fit_target_mib: ctx.fit_candidate_target_mib(),
    };
    let mut configs: Vec<LaunchConfig> = Vec::new();
    for b in &batches {
        for kv in &kvs {
            let base = Base {
                batch: *b,
                kv: *kv,
                ..start.clone()
            };
            let Some(n) = ctx.predicted_fit(&base, unitemized_mib) else {
                continue;
            };
            let plain = ctx.config(&base, n);
            let styled = if n > 0 {
                propose(&ctx.layout, &plain, &ctx.space, &limits)
            } else {
                Vec::new()
            };
            let fills = styled
                .into_iter()
                .filter(|c| c.refused.is_none() && !c.config.is_fit_placement())
                .map(|c| c.config);
            for c in fills.chain([plain]) {
                if !configs.contains(&c) {
                    configs.push(c);
                }
            }
        }
    }
    let preds: Vec<Option<speed::SpeedPrediction>> = configs
        .iter()
        .map(|c| {
            speed::predict(
                &ctx.layout,
                c,
                sb,
                ctx.has_gpu,
                ctx.space.workload.prompt_tokens,
                &FITTED,
            )
        })
        .collect();
    let reference = preds.iter().flatten().next().cloned();
    let prompt_first = matches!(ctx.space.objective.metric, crate::objective::Metric::Prompt);
    let inputs: Vec<Option<PickInput>> = preds
        .iter()
        .zip(&configs)
        .map(|(p, c)| {
            p.as_ref().map(|p| PickInput {
                primary: predicted_objective(
                    p,
                    &ctx.space.objective,
                    reference.as_ref(),
                    ctx.space.workload.request_tokens(),
                ),
                secondary: if prompt_first { p.tg.tps } else { p.pp.tps },
                plain: c.cpu_experts.is_none(),
            })
        })
        .collect();
    let pick = speed::pick(&inputs, PICK_TIE_PCT)?;
    Some(configs.swap_remove(pick.win))
}

/// σ of one launch's `ln` generation speed, as the race sizes with it: the baseline's
/// back-to-back launches pooled with the race's prior ([`crate::stats::race::RaceSettings`]).
pub fn launch_sigma(baseline_gen_tps: &[f64], settings: &crate::stats::race::RaceSettings) -> f64 {
    let logs: Vec<f64> = baseline_gen_tps.iter().map(|g| g.ln()).collect();
    crate::stats::race::pooled_launch_sigma(&logs, settings)
}

/// How far below the leader (percent of the leader's primary speed) a single-launch
/// measurement may read and still be the same speed: two σ of the difference of two launches
/// (`2 √2 σ`, about 95 % of what equal configs differ by), at least the space's `tie_pct`.
pub fn noise_band_pct(launch_sigma: f64, tie_pct: f64) -> f64 {
    let band = (1.0 - (-2.0 * std::f64::consts::SQRT_2 * launch_sigma).exp()) * 100.0;
    band.max(tie_pct)
}

/// The race's candidates, best-ranked first, with the model's pick moved to the front when its
/// measured primary speed is within `band_pct` of the screening leader's (the measurements
/// cannot separate them, so the model's ranking does). Returns the note that says so, or None
/// when the order stands.
pub fn pick_first(
    ranked: &mut Vec<(LaunchConfig, Speeds)>,
    pick: &LaunchConfig,
    obj: &crate::objective::Objective,
    reference: Option<&Speeds>,
    band_pct: f64,
) -> Option<String> {
    let i = ranked.iter().position(|(c, _)| c == pick)?;
    if i == 0 {
        return None;
    }
    let lead = ranked[0].1.primary(obj, reference);
    let mine = ranked[i].1.primary(obj, reference);
    if lead <= 0.0 {
        return None;
    }
    let behind = (1.0 - mine / lead) * 100.0;
    if behind > band_pct {
        return None;
    }
    let note = format!(
        "raced the speed model's pick {} first: its screening measured {:+.1} % against {} on \
         the objective, within how much two launches of one config differ on this box \
         (±{:.1} %), so the model's ranking decided the order",
        ranked[i].0.label(),
        -behind,
        ranked[0].0.label(),
        band_pct
    );
    let p = ranked.remove(i);
    ranked.insert(0, p);
    Some(note)
}

/// The space's objective applied to a prediction (higher is better), the way the search ranks
/// measured speeds: generation, prompt, generation at depth (the model predicts at the
/// workload's depth, so: generation), or the blend relative to `reference` (e.g. the
/// baseline's prediction).
pub fn predicted_objective(
    p: &SpeedPrediction,
    obj: &Objective,
    reference: Option<&SpeedPrediction>,
    request_tokens: (f64, f64),
) -> f64 {
    // Requests per second: new prompt tokens at the predicted prompt speed plus generated
    // tokens at the predicted generation speed, per request (`request_tokens`).
    let rates = |p: &SpeedPrediction| {
        let (new, gen) = request_tokens;
        let request_s = request_seconds(new / p.pp.tps.max(1e-9), gen, p.tg.tps.max(1e-9));
        Rates {
            gen_tps: p.tg.tps,
            prompt_tps: p.pp.tps,
            gen_at_depth_tps: None,
            request_rate: Some(1.0 / request_s.max(1e-12)),
        }
    };
    obj.score(&rates(p), reference.map(rates).as_ref())
}

/// Indices of `configs` from the highest predicted objective to the lowest, so a search can
/// launch the likely winner first. Configs the model cannot predict (`--fit` placement, an
/// unknown GPU) keep their relative order after the predicted ones. Stable: equal predictions
/// keep the caller's order.
pub fn order_by_predicted(
    layout: &ModelLayout,
    sb: &SpeedBox,
    has_gpu: bool,
    prompt_tokens: u32,
    obj: &Objective,
    request_tokens: (f64, f64),
    configs: &[LaunchConfig],
) -> Vec<usize> {
    let preds: Vec<Option<SpeedPrediction>> = configs
        .iter()
        .map(|c| speed::predict(layout, c, sb, has_gpu, prompt_tokens, &FITTED))
        .collect();
    let reference = preds.iter().flatten().next().cloned();
    let score: Vec<Option<f64>> = preds
        .iter()
        .map(|p| {
            p.as_ref()
                .map(|p| predicted_objective(p, obj, reference.as_ref(), request_tokens))
        })
        .collect();
    let mut idx: Vec<usize> = (0..configs.len()).collect();
    idx.sort_by(|&a, &b| match (score[a], score[b]) {
        (Some(x), Some(y)) => y.partial_cmp(&x).unwrap_or(std::cmp::Ordering::Equal),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    idx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objective::Metric;

    #[test]
    fn the_noise_band_is_two_sigma_of_a_launch_difference_at_least_the_tie() {
        // 2 % per launch: 2 √2 σ = 5.5 %.
        let b = noise_band_pct((1.02f64).ln(), 0.0);
        assert!((b - 5.5).abs() < 0.1, "{b}");
        // A quiet box keeps the space's tie.
        assert_eq!(noise_band_pct(0.001, 5.0), 5.0);
        // The prior alone when the probe has one launch.
        let s = crate::stats::race::RaceSettings::default();
        let one = launch_sigma(&[80.0], &s);
        assert!((one - (1.02f64).ln()).abs() < 1e-12);
        // Two launches 10 % apart, pooled with the prior's 4 degrees of freedom.
        let two = launch_sigma(&[40.0, 36.0], &s);
        assert!((noise_band_pct(two, 5.0) - 10.1).abs() < 0.1, "{two}");
    }

    #[test]
    fn candidates_are_ordered_by_predicted_objective_unpredictable_last() {
        use crate::model::speed::tests::{gpu_box, layout, placed};
        let l = layout();
        let sb = gpu_box();
        let mut small_ub = placed(6);
        small_ub.batch = Some(2048);
        small_ub.ubatch = Some(512);
        let mut big_ub = small_ub.clone();
        big_ub.ubatch = Some(2048);
        let configs = vec![
            LaunchConfig::baseline(8192), // --fit: not predictable
            placed(20),
            small_ub,
            big_ub,
        ];
        let gen = Objective {
            metric: Metric::Gen,
            gen_weight: 1.0,
            prompt_weight: 0.0,
            tie_pct: 3.0,
            second_baseline: true,
        };
        let order = order_by_predicted(&l, &sb, true, 2048, &gen, (2048.0, 128.0), &configs);
        // Fewer CPU blocks first; the two ubatch sizes generate alike (stable order); fit last.
        assert_eq!(order, vec![2, 3, 1, 0]);
        let prompt = Objective {
            metric: Metric::Prompt,
            ..gen
        };
        let order = order_by_predicted(&l, &sb, true, 2048, &prompt, (2048.0, 128.0), &configs);
        assert_eq!(order[0], 3, "the bigger micro-batch prefills faster");
        assert_eq!(order[3], 0);
    }
}
