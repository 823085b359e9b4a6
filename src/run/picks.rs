//! The picks of a finished run: the best command for each workload measured
//! ([`TuneResult::workload_picks`]), which baseline a config is ([`TuneResult::baseline_name`])
//! and the Pareto front's named picks ([`TuneResult::named_picks`]).

use super::*;

/// The spread between launches of one config: σ of the values around their own group's mean,
/// pooled over the groups with more than one value, with the degrees of freedom behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Spread {
    sigma: f64,
    /// None: [`PICK_PRIOR_SIGMA`], taken as known (fewer than two degrees of freedom measured).
    df: Option<usize>,
}

impl Spread {
    fn pooled<'a>(groups: impl Iterator<Item = &'a [f64]>) -> Spread {
        let (mut ss, mut df) = (0.0, 0usize);
        for g in groups.filter(|g| g.len() > 1) {
            let mean = g.iter().sum::<f64>() / g.len() as f64;
            ss += g.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
            df += g.len() - 1;
        }
        if df < 2 {
            Spread {
                sigma: PICK_PRIOR_SIGMA,
                df: None,
            }
        } else {
            Spread {
                sigma: (ss / df as f64).sqrt(),
                df: Some(df),
            }
        }
    }

    /// The one-sided `p` quantile a difference is held to: Student's t with the pooled degrees
    /// of freedom (σ is itself estimated from a few launches; a normal z let luck through), the
    /// normal one for the prior.
    fn quantile(self, p: f64) -> f64 {
        match self.df {
            Some(df) => crate::stats::t_quantile(p, df as f64),
            None => crate::stats::z_quantile(p),
        }
    }

    /// The standard error of the median of `n` launches: σ/√n for one or two (the median is the
    /// mean), √(π/2)·σ/√n from three on (the median's large-sample efficiency against the
    /// mean, above its exact small-sample values: 1.16 at three, 1.09 at four, 1.20 at five).
    fn median_se(self, n: usize) -> f64 {
        let efficiency = if n >= 3 {
            std::f64::consts::FRAC_PI_2.sqrt()
        } else {
            1.0
        };
        self.sigma * efficiency / (n.max(1) as f64).sqrt()
    }
}

/// One named pick of a tune: a config with its paired gains against the baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedPick {
    /// `fastest generation`, `best prompt speed, generation tied`, `the default`.
    pub name: &'static str,
    pub config: LaunchConfig,
    /// Against the baseline (None for the baseline itself, or when not raced).
    pub gen: Option<crate::stats::Comparison>,
    pub prompt: Option<crate::stats::Comparison>,
}

/// The best command for one workload, from the trials already measured: what the summary says
/// for every built-in workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadPick {
    pub workload: String,
    pub config: LaunchConfig,
    /// Median time per request over the config's trials, seconds.
    pub request_s: f64,
    /// The same for the better baseline on this workload, and which it was.
    pub reference_request_s: Option<f64>,
    pub reference_name: Option<String>,
    /// Launches behind `request_s`.
    pub launches: usize,
    /// The launch command (filled in by the tune).
    #[serde(default)]
    pub command: Vec<String>,
    /// Why this config: the raced verdict, a lead larger than the noise, or the better
    /// baseline kept (absent in files written before: a plain median).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<PickBasis>,
}

/// Why a workload's pick is the one named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PickBasis {
    /// The tune's own workload: the raced verdict.
    Verdict,
    /// Faster than the better baseline beyond the noise of the launches behind both medians
    /// (one-sided 95 % over every config that could lead, at least [`MIN_LEAD_LAUNCHES`]
    /// launches a side; not raced: re-measure with `qtune compare --workload`).
    Lead,
    /// Nothing led the better baseline by more than the noise: the baseline is the pick.
    Kept,
}

impl WorkloadPick {
    /// Why this config, for people ([`PickBasis::describe`]; files written before there was a
    /// basis ranked by the plain median).
    pub fn why(&self) -> &'static str {
        self.basis
            .map_or("the fastest median; no baseline was measured", |b| {
                b.describe()
            })
    }

    /// The better baseline's time per request over the pick's: above 1, the pick is faster.
    pub fn ratio(&self) -> Option<f64> {
        self.reference_request_s
            .filter(|_| self.request_s > 0.0)
            .map(|b| b / self.request_s)
    }
}

impl PickBasis {
    /// For people, after the pick.
    pub fn describe(self) -> &'static str {
        match self {
            PickBasis::Verdict => "the raced verdict",
            PickBasis::Lead => {
                "faster than the better baseline by more than its launches vary; not raced"
            }
            PickBasis::Kept => {
                "the better baseline: nothing beat it by more than the launches vary"
            }
        }
    }
}

/// Launches a side, at least, behind a lead on a workload that was not raced.
pub const MIN_LEAD_LAUNCHES: usize = 2;

/// σ of `ln(time per request)` between launches of one config when nothing says better (10 %:
/// what single launches on the lent GPU machine moved by).
const PICK_PRIOR_SIGMA: f64 = 0.10;

impl TuneResult {
    /// For each workload measured in every trial (the objective's first, then the other
    /// built-ins): the command to run.
    /// - For the tune's own workload, the verdict's config.
    /// - For the others, the better baseline (whatever their peak: they are what the user
    ///   would type): the one that keeps more of the model on the GPU (fit-target where it
    ///   fills the card further; the default where both loaded the same buffers), unless the
    ///   other's median is shorter beyond the noise (one-sided 95 %); unless a config
    ///   that never failed nor passed the VRAM budget has a median time per request shorter
    ///   than each baseline's beyond the noise: by more than t standard errors of the two
    ///   medians' log ratio, t one-sided 95 % over every config that could lead (Bonferroni).
    ///   The σ is the spread between launches of one config on that workload, pooled over
    ///   every config launched more than once (or 10 % when fewer than three launches repeat),
    ///   and t is Student's at the pooled degrees of freedom (normal for the 10 %); a median
    ///   of three or more launches counts √(π/2) times the mean's standard error.
    ///   A single fast launch of a config is no evidence: on a noisy box, the fastest of twenty
    ///   single launches is fast by luck. On replayed landscapes where every tuned config is
    ///   as fast as fit-target, at most 2 in 200 noise draws name a lead at 6 to 20 % noise
    ///   (10 to 26 with a normal z, the mean's standard error and the reference alone).
    pub fn workload_picks(&self) -> Vec<WorkloadPick> {
        let budget = self.inputs.vram_budget_mib;
        let mut configs: Vec<&LaunchConfig> = Vec::new();
        for t in &self.trials {
            if !configs.contains(&&t.config) {
                configs.push(&t.config);
            }
        }
        let is_baseline = |c: &LaunchConfig| self.baseline_name(c).is_some();
        let fuller_second = self
            .trials
            .iter()
            .find(|t| t.role == TrialRole::SecondBaseline)
            .is_some_and(|s| {
                crate::trial::keeps_more_on_gpu(
                    &self.trials,
                    &s.config,
                    &baseline_of(&self.inputs.space),
                )
            });
        // Both baselines loaded the same buffers: on this card they are one configuration, and
        // any difference measured between them is the launches' noise.
        let alike = self
            .trials
            .iter()
            .find(|t| t.role == TrialRole::SecondBaseline)
            .is_some_and(|s| {
                crate::trial::loaded_alike(
                    &self.trials,
                    &s.config,
                    &baseline_of(&self.inputs.space),
                )
            });
        let objective = self
            .inputs
            .space
            .workload
            .objective_mix()
            .map(|m| m.name.clone());
        let mut out = Vec::new();
        for mix in &self.inputs.space.workload.mixes {
            // (config, ln times, baseline?)
            let mut measured: Vec<(&LaunchConfig, Vec<f64>, bool)> = Vec::new();
            for &c in &configs {
                let trials: Vec<&TrialOutcome> =
                    self.trials.iter().filter(|t| &t.config == c).collect();
                let baseline = is_baseline(c);
                let failed = trials.iter().any(|t| {
                    let over =
                        matches!((budget, t.peak_vram_total_mib()), (Some(b), Some(p)) if p > b);
                    !(t.kind.is_ok() || (baseline && t.kind == crate::trial::OutcomeKind::Spill))
                        || (!baseline && over)
                });
                if failed {
                    continue;
                }
                let times: Vec<f64> = figures::launch_times(&self.trials, c, Some(mix))
                    .into_iter()
                    .map(f64::ln)
                    .collect();
                if !times.is_empty() {
                    measured.push((c, times, baseline));
                }
            }
            let median = figures::log_median;
            let spread = Spread::pooled(measured.iter().map(|m| m.1.as_slice()));
            // Shorter than `b` beyond the noise: by more than t standard errors of the two
            // medians' log ratio.
            let beats = |a: &(&LaunchConfig, Vec<f64>, bool),
                         b: &(&LaunchConfig, Vec<f64>, bool),
                         t: f64| {
                let se = spread
                    .median_se(a.1.len())
                    .hypot(spread.median_se(b.1.len()));
                median(&b.1) - median(&a.1) - t * se
            };
            // The better baseline: the one that keeps more of the model on the GPU (or the
            // default, where both loaded the same), unless the other is faster beyond the noise.
            let tied_to = measured
                .iter()
                .filter(|m| m.2)
                .find(|m| (self.baseline_name(m.0) == Some("fit-target")) == fuller_second)
                .or_else(|| measured.iter().find(|m| m.2));
            let t_one = spread.quantile(0.95);
            let reference = tied_to.map(|t| {
                if alike {
                    return t;
                }
                measured
                    .iter()
                    .filter(|m| m.2 && m.0 != t.0 && beats(m, t, t_one) > 0.0)
                    .max_by(|a, b| beats(a, t, t_one).total_cmp(&beats(b, t, t_one)))
                    .unwrap_or(t)
            });
            // The tune's own workload: the reference its verdict names (the race's, paired).
            let is_objective = objective.as_deref() == Some(mix.name.as_str());
            let verdicts_reference = self
                .winner
                .as_ref()
                .and_then(|w| w.reference.as_ref())
                .and_then(|r| measured.iter().find(|m| m.2 && *m.0 == r.config));
            let reference = match verdicts_reference {
                Some(r) if is_objective => Some(r),
                _ => reference,
            };
            let pick_of =
                |c: &LaunchConfig, times: &[f64], basis: Option<PickBasis>| WorkloadPick {
                    workload: mix.name.clone(),
                    config: c.clone(),
                    request_s: median(times).exp(),
                    reference_request_s: reference.map(|r| median(&r.1).exp()),
                    reference_name: reference
                        .and_then(|r| self.baseline_name(r.0))
                        .map(str::to_string),
                    launches: times.len(),
                    command: Vec::new(),
                    basis,
                };
            if is_objective {
                if let Some(w) = &self.winner {
                    if let Some(m) = measured.iter().find(|m| *m.0 == w.config) {
                        out.push(pick_of(m.0, &m.1, Some(PickBasis::Verdict)));
                        continue;
                    }
                }
            }
            let Some(reference) = reference else {
                // No baseline measured: the fastest median, as a ranking.
                if let Some(m) = measured
                    .iter()
                    .min_by(|a, b| median(&a.1).total_cmp(&median(&b.1)))
                {
                    out.push(pick_of(m.0, &m.1, None));
                }
                continue;
            };
            // One-sided 95 % over all the configs that could lead (Bonferroni): the fastest of
            // many equal configs is not a lead. And beyond the noise against every baseline
            // measured, not only the reference: where the two baselines are not told apart the
            // reference is the one fuller on the GPU, and a config as fast as the other one
            // is no better than a command the user could type (it led the slower baseline in
            // 12 of 200 equal landscapes at 12 % noise).
            let contenders = measured.iter().filter(|m| !m.2).count().max(1);
            let t = spread.quantile(1.0 - 0.05 / contenders as f64);
            let lead = |m: &(&LaunchConfig, Vec<f64>, bool)| {
                measured
                    .iter()
                    .filter(|b| b.2)
                    .map(|b| beats(m, b, t))
                    .fold(beats(m, reference, t), f64::min)
            };
            // Never a lead from one launch a side: one fast launch is no evidence.
            let repeated = |m: &(&LaunchConfig, Vec<f64>, bool)| {
                m.1.len() >= MIN_LEAD_LAUNCHES && reference.1.len() >= MIN_LEAD_LAUNCHES
            };
            let leader = measured
                .iter()
                .filter(|m| !m.2 && repeated(m) && lead(m) > 0.0)
                .max_by(|a, b| lead(a).total_cmp(&lead(b)));
            out.push(match leader {
                Some(m) => pick_of(m.0, &m.1, Some(PickBasis::Lead)),
                None => pick_of(reference.0, &reference.1, Some(PickBasis::Kept)),
            });
        }
        out
    }

    /// The baseline `c` is, as the verdict names it: `default` (what the user gets without
    /// placement flags) or `fit-target` (the second baseline the tune launched); None for any
    /// config qtune chose.
    pub fn baseline_name(&self, c: &LaunchConfig) -> Option<&'static str> {
        if *c == baseline_of(&self.inputs.space) {
            Some("default")
        } else if self
            .trials
            .iter()
            .any(|t| &t.config == c && t.role == TrialRole::SecondBaseline)
        {
            Some("fit-target")
        } else {
            None
        }
    }

    /// The Pareto front's named picks: fastest generation (the winner), best prompt speed
    /// among the configs whose generation interval overlaps the winner's (statistically tied),
    /// and the default. Empty without a race.
    pub fn named_picks(&self) -> Vec<NamedPick> {
        let Some(race) = &self.race else {
            return Vec::new();
        };
        let baseline = baseline_of(&self.inputs.space);
        let mut picks = Vec::new();
        let verdicts = race.verdicts();
        if let Some(w) = &self.winner {
            picks.push(NamedPick {
                name: "fastest generation",
                config: w.config.clone(),
                gen: w.gen_vs_baseline.clone(),
                prompt: w.prompt_vs_baseline.clone(),
            });
            let overlaps = |a: &crate::stats::Comparison, b: Option<&crate::stats::Comparison>| {
                match (a.lo_log, a.hi_log, b.and_then(|b| b.lo_log.zip(b.hi_log))) {
                    (Some(lo), Some(hi), Some((blo, bhi))) => lo <= bhi && blo <= hi,
                    // The baseline (no interval against itself) is tied when 0 is inside.
                    (Some(lo), Some(hi), None) if b.is_none() => lo <= 0.0 && 0.0 <= hi,
                    _ => false,
                }
            };
            let best_prompt = verdicts
                .iter()
                .filter(|(c, _)| **c != w.config)
                .filter(|(c, v)| {
                    let failed = race.outcome.candidates.iter().any(|r| {
                        race.candidates.get(r.index) == Some(*c)
                            && matches!(r.status, crate::stats::race::ArmStatus::Failed { .. })
                    });
                    !failed && overlaps(&v.gen, w.gen_vs_baseline.as_ref())
                })
                .filter(|(_, v)| {
                    w.prompt_vs_baseline
                        .as_ref()
                        .is_none_or(|p| v.prompt.mean_log > p.mean_log)
                })
                .max_by(|a, b| a.1.prompt.mean_log.total_cmp(&b.1.prompt.mean_log));
            if let Some((c, v)) = best_prompt {
                picks.push(NamedPick {
                    name: "best prompt speed, generation tied",
                    config: (*c).clone(),
                    gen: Some(v.gen.clone()),
                    prompt: Some(v.prompt.clone()),
                });
            }
        }
        picks.push(NamedPick {
            name: "the default",
            config: baseline,
            gen: None,
            prompt: None,
        });
        picks
    }
}
