//! A seeded model of a noisy box, for deterministic tests of comparisons and races.
//!
//! Each launch measures `truth × exp(drift(round) + trend × slot + launch noise)`:
//! - **launch noise**: independent for every launch and metric (normal in logs);
//! - **drift**: one value per round, shared by every config launched in that round (the box
//!   got busier or quieter between rounds);
//! - **trend** (optional): a drift linear in the launch's position within its round, the kind
//!   ABBA ordering cancels.
//!
//! Everything comes from a hash of (seed, round, launch), so a seed replays exactly.

use super::Sample;

/// Noise levels, as standard deviations in percent (in logs, so 5 % is `ln` ≈ 0.049).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseModel {
    /// Launch-to-launch noise of one config (σ, percent).
    pub launch_sigma_pct: f64,
    /// Drift between rounds, shared by all configs of a round (σ, percent).
    pub drift_sigma_pct: f64,
    /// Drift per launch slot within a round (percent per launch).
    pub trend_pct_per_launch: f64,
}

impl NoiseModel {
    /// The GPU machine as measured (`measuring.md`): launches of one config within ±7 %
    /// and rounds drifting ±10 %, read as 95 % ranges (±2σ): σ 3.5 % per launch, σ 5 %
    /// between rounds.
    pub fn measured_box() -> Self {
        NoiseModel {
            launch_sigma_pct: 3.5,
            drift_sigma_pct: 5.0,
            trend_pct_per_launch: 0.0,
        }
    }

    /// A harsher reading of the same notes: ±7 % and ±10 % as one σ each.
    pub fn harsh_box() -> Self {
        NoiseModel {
            launch_sigma_pct: 7.0,
            drift_sigma_pct: 10.0,
            trend_pct_per_launch: 0.0,
        }
    }
}

/// splitmix64.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A standard normal from two hashed uniforms (Box–Muller).
fn normal(key: u64) -> f64 {
    let a = mix(key);
    let b = mix(a ^ 0x5851_F42D_4C95_7F2D);
    let u1 = ((a >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let u2 = ((b >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

fn key(seed: u64, what: u64, a: u64, b: u64) -> u64 {
    mix(mix(mix(seed ^ what.wrapping_mul(0xD6E8_FEB8_6659_FD93)) ^ a) ^ b)
}

/// A box with known true speeds per arm and seeded noise.
#[derive(Debug, Clone)]
pub struct NoisyBox {
    pub model: NoiseModel,
    /// True speeds of each arm.
    pub truth: Vec<Sample>,
    seed: u64,
    launches: u64,
}

impl NoisyBox {
    pub fn new(model: NoiseModel, truth: Vec<Sample>, seed: u64) -> Self {
        NoisyBox {
            model,
            truth,
            seed,
            launches: 0,
        }
    }

    /// Launches measured so far.
    pub fn launches(&self) -> u64 {
        self.launches
    }

    /// One launch of `arm` in round `round` (launches outside rounds, e.g. a noise probe,
    /// pass their own round number) at position `slot` within it.
    pub fn measure(&mut self, arm: usize, round: u64, slot: u64) -> Sample {
        let n = self.launches;
        self.launches += 1;
        let m = &self.model;
        let drift = m.drift_sigma_pct / 100.0 * normal(key(self.seed, 1, round, 0));
        let trend = m.trend_pct_per_launch / 100.0 * slot as f64;
        let noise = |metric: u64| m.launch_sigma_pct / 100.0 * normal(key(self.seed, 2, n, metric));
        let t = self.truth[arm];
        Sample {
            gen_tps: t.gen_tps * (drift + trend + noise(0)).exp(),
            prompt_tps: t.prompt_tps * (drift + trend + noise(1)).exp(),
            request_rate: t.request_rate.map(|r| r * (drift + trend + noise(2)).exp()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_noise_is_seeded_and_has_the_asked_spread() {
        let truth = vec![Sample {
            gen_tps: 100.0,
            prompt_tps: 1000.0,
            request_rate: None,
        }];
        let model = NoiseModel {
            launch_sigma_pct: 5.0,
            drift_sigma_pct: 0.0,
            trend_pct_per_launch: 0.0,
        };
        let mut a = NoisyBox::new(model, truth.clone(), 7);
        let mut b = NoisyBox::new(model, truth, 7);
        let xs: Vec<f64> = (0..4000).map(|i| a.measure(0, i, 0).gen_tps).collect();
        let ys: Vec<f64> = (0..4000).map(|i| b.measure(0, i, 0).gen_tps).collect();
        assert_eq!(xs, ys, "same seed, same launches");
        let logs: Vec<f64> = xs.iter().map(|x| (x / 100.0).ln()).collect();
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        let sd =
            (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (logs.len() - 1) as f64).sqrt();
        assert!(mean.abs() < 0.005, "mean {mean}");
        assert!((sd - 0.05).abs() < 0.003, "sd {sd}");
    }

    #[test]
    fn drift_is_shared_by_a_round() {
        let s = Sample {
            gen_tps: 100.0,
            prompt_tps: 100.0,
            request_rate: None,
        };
        let model = NoiseModel {
            launch_sigma_pct: 0.0,
            drift_sigma_pct: 10.0,
            trend_pct_per_launch: 0.0,
        };
        let mut bx = NoisyBox::new(model, vec![s, s], 3);
        let (a, b) = (bx.measure(0, 1, 0), bx.measure(1, 1, 1));
        assert_eq!(a, b);
        let c = bx.measure(0, 2, 0);
        assert_ne!(a, c);
    }
}
