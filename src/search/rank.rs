//! Ranking trials: the space's objective turned into one comparable number, with generation
//! ties (within `tie_pct`) broken by prompt speed.

use crate::objective::{request_rate, Metric, Objective, Rates};
use crate::trial::{Stat, TrialOutcome};

/// The measured speeds of one config (possibly pooled over several trials).
#[derive(Debug, Clone, PartialEq)]
pub struct Speeds {
    pub gen: Stat,
    pub prompt: Stat,
    pub gen_at_depth: Option<Stat>,
    /// Requests per second of the workload (1 / time per request), one sample per trial.
    pub request: Option<Stat>,
}

impl Speeds {
    /// Pool the samples of every ok outcome given.
    pub fn pooled<'a>(outcomes: impl IntoIterator<Item = &'a TrialOutcome>) -> Option<Speeds> {
        Self::pooled_where(outcomes, |o| o.kind.is_ok())
    }

    /// Pool every measured outcome, within the VRAM budget or not (a baseline is what the user
    /// would type: it is compared even where its peak went past the budget).
    pub fn pooled_measured<'a>(
        outcomes: impl IntoIterator<Item = &'a TrialOutcome>,
    ) -> Option<Speeds> {
        Self::pooled_where(outcomes, |o| {
            o.kind.is_ok() || o.kind == crate::trial::OutcomeKind::Spill
        })
    }

    fn pooled_where<'a>(
        outcomes: impl IntoIterator<Item = &'a TrialOutcome>,
        keep: impl Fn(&TrialOutcome) -> bool,
    ) -> Option<Speeds> {
        let (mut g, mut p, mut d, mut r) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for o in outcomes {
            if !keep(o) {
                continue;
            }
            if let Some(rate) = o.request_s().and_then(request_rate) {
                r.push(rate);
            }
            if let Some(m) = &o.metrics {
                g.extend(&m.gen_tps.samples);
                p.extend(&m.prompt_tps.samples);
                if let Some(s) = &m.gen_tps_at_depth {
                    d.extend(&s.samples);
                }
            }
        }
        Some(Speeds {
            gen: Stat::from_samples(&g)?,
            prompt: Stat::from_samples(&p)?,
            gen_at_depth: Stat::from_samples(&d),
            request: Stat::from_samples(&r),
        })
    }

    /// The medians, as the objective reads them.
    pub fn rates(&self) -> Rates {
        Rates {
            gen_tps: self.gen.median,
            prompt_tps: self.prompt.median,
            gen_at_depth_tps: self.gen_at_depth.as_ref().map(|s| s.median),
            request_rate: self.request.as_ref().map(|s| s.median),
        }
    }

    /// The primary value the objective ranks by (higher is better): [`Objective::score`].
    pub fn primary(&self, obj: &Objective, reference: Option<&Speeds>) -> f64 {
        obj.score(&self.rates(), reference.map(Speeds::rates).as_ref())
    }

    /// The tie-break value: prompt speed, or generation when prompt is primary.
    fn secondary(&self, obj: &Objective) -> f64 {
        obj.tie_break(&self.rates())
    }
}

/// Is `a` better than `b`? Primary values within `tie_pct` are a tie, and so are repeated
/// measurements that cannot be told apart (each median inside the other's measured range);
/// a tie is broken by the secondary metric.
pub fn better(a: &Speeds, b: &Speeds, obj: &Objective, reference: Option<&Speeds>) -> bool {
    let (pa, pb) = (a.primary(obj, reference), b.primary(obj, reference));
    let noise_tie = matches!(obj.metric, Metric::Gen) && indistinguishable(&a.gen, &b.gen);
    if noise_tie || is_tie(pa, pb, obj.tie_pct) {
        a.secondary(obj) > b.secondary(obj)
    } else {
        pa > pb
    }
}

/// Two repeated measurements (at least 3 samples each) whose medians each lie within the
/// other's [min, max]: the difference is within what the box's noise produces.
pub fn indistinguishable(a: &Stat, b: &Stat) -> bool {
    a.samples.len() >= 3
        && b.samples.len() >= 3
        && (b.min..=b.max).contains(&a.median)
        && (a.min..=a.max).contains(&b.median)
}

/// Two primary values within `tie_pct` percent of the larger.
pub fn is_tie(a: f64, b: f64, tie_pct: f64) -> bool {
    let hi = a.max(b);
    hi <= 0.0 || (a - b).abs() / hi * 100.0 <= tie_pct
}

/// Percent gain of `a` over `b` (None when `b` is not positive).
pub fn gain_pct(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| (a / b - 1.0) * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(g: f64, p: f64) -> Speeds {
        Speeds {
            gen: Stat::from_samples(&[g]).unwrap(),
            prompt: Stat::from_samples(&[p]).unwrap(),
            gen_at_depth: None,
            request: None,
        }
    }

    #[test]
    fn generation_decides_unless_tied_then_prompt_breaks_the_tie() {
        let obj = Objective::default(); // gen, tie 3 %
        assert!(better(&sp(50.0, 100.0), &sp(40.0, 900.0), &obj, None));
        // 50 vs 49.5 is a tie: prompt speed decides
        assert!(better(&sp(49.5, 900.0), &sp(50.0, 100.0), &obj, None));
        assert!(!better(&sp(50.0, 100.0), &sp(49.5, 900.0), &obj, None));
    }

    #[test]
    fn overlapping_repeated_measurements_tie_and_prompt_decides() {
        let obj = Objective::default();
        let many = |g: &[f64], p: f64| Speeds {
            gen: Stat::from_samples(g).unwrap(),
            prompt: Stat::from_samples(&[p, p, p, p]).unwrap(),
            gen_at_depth: None,
            request: None,
        };
        // Medians 113 and 103.5 (9 % apart) but each inside the other's range: noise.
        let a = many(&[99.0, 112.0, 113.7, 114.9], 4800.0);
        let b = many(&[99.0, 103.0, 104.0, 114.0], 7500.0);
        assert!(better(&b, &a, &obj, None));
        // Clearly separated samples: generation decides.
        let c = many(&[120.0, 121.0, 122.0, 123.0], 4800.0);
        assert!(better(&c, &b, &obj, None));
        // Two samples are too few to call noise.
        let d = many(&[99.0, 114.9], 4800.0);
        let e = many(&[104.0, 103.0], 7500.0);
        assert!(better(&d, &e, &obj, None));
    }

    #[test]
    fn prompt_objective_ranks_by_prompt() {
        let obj = Objective {
            metric: Metric::Prompt,
            ..Objective::default()
        };
        assert!(better(&sp(10.0, 900.0), &sp(50.0, 100.0), &obj, None));
    }

    #[test]
    fn gains() {
        assert_eq!(gain_pct(150.0, 100.0), Some(50.0));
        assert_eq!(gain_pct(1.0, 0.0), None);
    }
}
