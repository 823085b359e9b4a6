//! Whether a trial's numbers can be real: one check over every number the server reported for
//! it (the short depth-0 samples, the sample at depth, and every request of the workload's
//! mixes), against the speed model's ceiling ([`SpeedCeiling`]). A trial with one reading that
//! is not a finite positive number, or is past the ceiling, is [`OutcomeKind::Implausible`]:
//! classified, its numbers kept only in the evidence, never ranked. `tune` and `compare` both
//! go through the trial runner, so both get this one check.

use super::classify::Verdict;
use super::OutcomeKind;
use crate::config::LaunchConfig;

/// The speed ceiling of one config (see [`SpeedCeiling`]).
pub type SpeedCeilingFn = Box<dyn Fn(&LaunchConfig) -> SpeedCeiling + Send + Sync>;
/// The predicted speeds of one config, when the speed model has them (see
/// [`super::workload::Pace`]).
pub type PaceFn = Box<dyn Fn(&LaunchConfig) -> Option<super::workload::Pace> + Send + Sync>;

/// The fastest speeds a trial may report before it is called [`OutcomeKind::Implausible`]:
/// tokens per second, generation and prompt processing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpeedCeiling {
    pub gen_tps: f64,
    pub prompt_tps: f64,
    /// Where the numbers come from, for the message.
    pub source: &'static str,
}

impl SpeedCeiling {
    /// Where no prediction exists: far above any single-box llama.cpp speed (a 135M model on
    /// an H200 decodes a few thousand tokens per second, and prefills a few hundred thousand).
    pub const ABSOLUTE: SpeedCeiling = SpeedCeiling {
        gen_tps: 50_000.0,
        prompt_tps: 5_000_000.0,
        source: "the absolute bound",
    };

    /// How far past the speed model's bound a reading may go: the bound is a roofline
    /// (bytes over bandwidth), so a real server stays under it; 10x leaves room for caches
    /// and for a model that is wrong about this box.
    pub const MARGIN: f64 = 10.0;

    /// [`Self::MARGIN`] times the speed model's generation bound and prompt prediction,
    /// never above [`Self::ABSOLUTE`]; the absolute bound for a value that is not a positive
    /// number.
    pub fn from_prediction(tg_bound_tps: f64, pp_tps: f64) -> SpeedCeiling {
        let scaled = |v: f64, abs: f64| {
            if v.is_finite() && v > 0.0 {
                (v * Self::MARGIN).min(abs)
            } else {
                abs
            }
        };
        SpeedCeiling {
            gen_tps: scaled(tg_bound_tps, Self::ABSOLUTE.gen_tps),
            prompt_tps: scaled(pp_tps, Self::ABSOLUTE.prompt_tps),
            source: "10x the speed model's bound",
        }
    }
}

impl Default for SpeedCeiling {
    fn default() -> Self {
        Self::ABSOLUTE
    }
}

/// The fastest believable speeds of each config: 10x the speed model's bound where it has
/// one for this box and config, else the absolute bound. Models under 4 GiB (synthetic ones,
/// SmolLM2: they run largely from the CPU's caches, past any bandwidth roofline; SmolLM2
/// decodes at 15x its roofline on the CPU box) get the absolute bound too.
pub fn ceiling_for(
    layout: &crate::model::ModelLayout,
    hw: &crate::hardware::HardwareProfile,
) -> SpeedCeilingFn {
    use crate::model::speed;
    if speed::is_synthetic(layout) || layout.file_bytes < 4 << 30 {
        return Box::new(|_| SpeedCeiling::ABSOLUTE);
    }
    let layout = layout.clone();
    let sb = speed::SpeedBox::from_hardware(hw);
    let has_gpu = hw.has_gpu();
    Box::new(move |cfg| {
        speed::predict(&layout, cfg, &sb, has_gpu, 512, &speed::FITTED)
            .map(|p| SpeedCeiling::from_prediction(p.tg_bound_tps, p.pp.tps))
            .unwrap_or(SpeedCeiling::ABSOLUTE)
    })
}

/// The speed model's pessimistic speeds of each config (the low end of its intervals), which
/// the timeouts follow until a trial has measured any; none for the models [`ceiling_for`]
/// gives the absolute bound (the model is not trusted there).
pub fn pace_for(
    layout: &crate::model::ModelLayout,
    hw: &crate::hardware::HardwareProfile,
) -> PaceFn {
    use super::workload::Pace;
    use crate::model::speed;
    if speed::is_synthetic(layout) || layout.file_bytes < 4 << 30 {
        return Box::new(|_| None);
    }
    let layout = layout.clone();
    let sb = speed::SpeedBox::from_hardware(hw);
    let has_gpu = hw.has_gpu();
    Box::new(move |cfg| {
        speed::predict(&layout, cfg, &sb, has_gpu, 512, &speed::FITTED)
            .and_then(|p| Pace::new(p.tg.low, p.pp.low))
    })
}

/// An [`OutcomeKind::Implausible`] verdict when any reading of a trial's speeds is not a
/// finite positive number, or is past `ceiling`; `None` for a believable measurement. Every
/// sample is checked, not only the median, and every request of the workload's mixes (its
/// time to first token, prompt speed and generation speed): one bogus reading taints the trial.
pub fn implausible_speed(m: &super::Metrics, ceiling: &SpeedCeiling) -> Option<Verdict> {
    let mut bad: Vec<String> = Vec::new();
    let mut check = |name: &str, stat: &super::Stat, max: f64| {
        for &v in &stat.samples {
            if let Some(why) = speed_problem(v, max, ceiling.source) {
                bad.push(format!("{name} {} tok/s, {why}", fmt_speed(v)));
                break;
            }
        }
    };
    check("generation", &m.gen_tps, ceiling.gen_tps);
    check("prompt processing", &m.prompt_tps, ceiling.prompt_tps);
    if let Some(d) = &m.gen_tps_at_depth {
        check("generation at depth", d, ceiling.gen_tps);
    }
    // The depth-0 requests read their whole prompt (no cache): no time at all is no reading.
    if m.ttft_ms
        .samples
        .iter()
        .any(|v| !v.is_finite() || *v <= 0.0)
    {
        bad.push("a time to first token is zero, negative or not a finite number".into());
    }
    for t in &m.shapes {
        if let Some(why) = shape_problem(t, ceiling) {
            bad.push(format!("the '{}' request: {why}", t.shape.name));
        }
    }
    if let Some(r) = &m.replay {
        if let Some(why) = replay_problem(r, ceiling) {
            bad.push(why);
        }
    }
    bad.extend(disagreement(m));
    if let Some(r) = m.request_s {
        if !(r.is_finite() && r > 0.0) {
            bad.push(format!(
                "time per request {} s, not a finite positive number",
                fmt_speed(r)
            ));
        }
    }
    let first = bad.first()?.clone();
    Some(Verdict {
        kind: OutcomeKind::Implausible,
        message: format!(
            "the server reported a speed that cannot be real: {first}; a broken measurement, never ranked"
        ),
        evidence: bad,
    })
}

/// Past this factor either way between two readings of one speed in one launch (a workload
/// request's against the depth-0 samples' median), the readings are no measurement: depth,
/// a cached prefix or a longer prompt moves a real server's speed by a few times, never by
/// two orders of magnitude. Checked beside the absolute ceiling, which a faked speed just
/// under it passes (issue 53: 49,000 tok/s generation beside 25 tok/s samples).
pub const DISAGREEMENT: f64 = 100.0;

/// A workload request that reads fewer prompt tokens than this is not called too slow
/// against the depth-0 prompt speed: a few tokens are read at about generation speed. Too
/// fast is checked at any length.
pub const SHORT_PROMPT: u32 = 256;

/// Where this launch's own readings of one speed disagree by [`DISAGREEMENT`] or more: each
/// workload request's generation and prompt speed, the sample at depth and each replayed
/// request's generation, against the median of the depth-0 samples (generation, prompt).
fn disagreement(m: &super::Metrics) -> Vec<String> {
    let usable = |v: f64| v.is_finite() && v > 0.0;
    let (gen0, pp0) = (m.gen_tps.median, m.prompt_tps.median);
    let mut bad = Vec::new();
    let mut check = |what: String, v: f64, base: f64, slower_too: bool| {
        if !(usable(v) && usable(base)) {
            return; // not a number at all: the checks above name it
        }
        let apart = (v / base).max(base / v);
        // 1e-9: a factor of exactly 100 that division rounds to 99.99999999999999.
        if apart * (1.0 + 1e-9) >= DISAGREEMENT && (v > base || slower_too) {
            bad.push(format!(
                "{what} {} tok/s against {} tok/s in the same launch's depth-0 samples, {}x apart",
                fmt_speed(v),
                fmt_speed(base),
                if apart < 1e6 {
                    format!("{apart:.0}")
                } else {
                    format!("{apart:.0e}")
                }
            ));
        }
    };
    for t in &m.shapes {
        let name = &t.shape.name;
        check(
            format!("the '{name}' request's generation"),
            t.gen_tps,
            gen0,
            true,
        );
        if let Some(tps) = t.prompt_tps() {
            let long = t.prompt_n >= SHORT_PROMPT;
            check(
                format!("the '{name}' request's prompt processing"),
                tps,
                pp0,
                long,
            );
        }
    }
    if let Some(d) = &m.gen_tps_at_depth {
        check("generation at depth".into(), d.median, gen0, true);
    }
    if let Some(r) = &m.replay {
        for q in &r.requests {
            if let Some(tps) = q.gen_tps() {
                let what = format!("replayed request {}'s generation", q.id);
                check(what.clone(), tps, gen0, false);
                // Too slow too, where it generated enough to time (a few tokens are noise),
                // with the requests in flight beside it sharing the server: N at once each
                // generate about 1/N as fast, never 100x slower than the launch's own samples
                // (a faked slow reference would make any candidate "faster").
                let shared = tps * f64::from(q.in_flight + 1);
                if q.generated >= SHORT_GEN && shared < gen0 {
                    check(what, shared, gen0, true);
                }
            }
        }
    }
    bad
}

/// A replayed request that generated fewer tokens than this is not called too slow against
/// the depth-0 generation speed (its time is mostly the first tokens' noise). Too fast is
/// checked at any length.
pub const SHORT_GEN: u32 = 32;

/// Why a speed (tok/s) cannot be real, if it cannot.
fn speed_problem(v: f64, max: f64, source: &str) -> Option<String> {
    if !v.is_finite() {
        Some("not a finite number".to_string())
    } else if v <= 0.0 {
        Some("not positive".to_string())
    } else if v > max {
        Some(format!(
            "past the ceiling of {} tok/s ({source})",
            fmt_speed(max)
        ))
    } else {
        None
    }
}

/// Why one measured request of a mix cannot be real, if it cannot: its generation speed, its
/// time to first token (finite, not negative; positive when it read any token) and the prompt
/// speed that time implies.
fn shape_problem(t: &crate::workloads::ShapeTiming, c: &SpeedCeiling) -> Option<String> {
    if let Some(why) = speed_problem(t.gen_tps, c.gen_tps, c.source) {
        return Some(format!("generation {} tok/s, {why}", fmt_speed(t.gen_tps)));
    }
    let ms = t.prompt_ms;
    if !ms.is_finite() || ms < 0.0 || (ms == 0.0 && t.prompt_n > 0) {
        return Some(format!(
            "time to first token {} ms for {} prompt tokens, not a finite positive time",
            fmt_speed(ms),
            t.prompt_n
        ));
    }
    if t.prompt_n > 0 {
        let tps = f64::from(t.prompt_n) / ms * 1000.0;
        if let Some(why) = speed_problem(tps, c.prompt_tps, c.source) {
            return Some(format!(
                "prompt processing {} tok/s ({} tokens in {} ms), {why}",
                fmt_speed(tps),
                t.prompt_n,
                fmt_speed(ms)
            ));
        }
    }
    None
}

/// Why a replayed trace's numbers cannot be real, if they cannot: one request's times (finite,
/// not negative; positive where it read or generated any token), its prompt speed and
/// generation speed (every request, the short ones the samples leave out included), more
/// tokens taken from the cache or read than its prompt holds (the server may add one: a
/// BOS); and the aggregate generation (all generated tokens over the replay's wall clock),
/// past the generation ceiling times the requests that ran at once.
fn replay_problem(t: &super::replay_trace::ReplayTiming, c: &SpeedCeiling) -> Option<String> {
    let bad_time = |ms: f64, n: u32| !ms.is_finite() || ms < 0.0 || (ms == 0.0 && n > 0);
    for q in &t.requests {
        let at = |why: String| Some(format!("replayed request {}: {why}", q.id));
        // The first generated token is timed with the prompt (see `ReplayedRequest::gen_tps`).
        if bad_time(q.predicted_ms, q.generated.saturating_sub(1)) {
            return at(format!(
                "generation time {} ms for {} tokens, not a finite positive time",
                fmt_speed(q.predicted_ms),
                q.generated
            ));
        }
        if bad_time(q.prompt_ms, q.prompt_n) {
            return at(format!(
                "time to first token {} ms for {} prompt tokens, not a finite positive time",
                fmt_speed(q.prompt_ms),
                q.prompt_n
            ));
        }
        let most = u64::from(q.prompt_tokens) + 1;
        for (n, what) in [(q.cache_n, "from the cache"), (q.prompt_n, "read")] {
            if u64::from(n) > most {
                return at(format!(
                    "{n} tokens {what} of a {}-token prompt",
                    q.prompt_tokens
                ));
            }
        }
        if let Some(tps) = q.gen_tps() {
            if let Some(why) = speed_problem(tps, c.gen_tps, c.source) {
                return at(format!("generation {} tok/s, {why}", fmt_speed(tps)));
            }
        }
        if q.prompt_n > 0 {
            let tps = f64::from(q.prompt_n) / q.prompt_ms * 1000.0;
            if let Some(why) = speed_problem(tps, c.prompt_tps, c.source) {
                return at(format!("prompt processing {} tok/s, {why}", fmt_speed(tps)));
            }
        }
    }
    if let Some(a) = t.aggregate_tps {
        let at_once = t
            .requests
            .iter()
            .map(|q| q.in_flight + 1)
            .max()
            .unwrap_or(1);
        let max = c.gen_tps * f64::from(at_once);
        // No tokens generated in no time is zero, not a problem: only a speed past the
        // ceiling, or no number, is.
        if !(a.is_finite() && a <= max) {
            return Some(format!(
                "the replay's aggregate generation {} tok/s ({at_once} request(s) at once), past the ceiling of {} tok/s ({})",
                fmt_speed(a),
                fmt_speed(max),
                c.source
            ));
        }
    }
    None
}

/// A speed for a message: plain below a million, else in scientific notation.
fn fmt_speed(v: f64) -> String {
    if v.is_finite() && v.abs() < 1e6 {
        format!("{v:.1}")
    } else {
        format!("{v:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implausible_speeds() {
        use super::super::{Metrics, Stat};
        let m = |g: f64, p: f64| Metrics {
            drafts: None,
            gen_tps: Stat::from_samples(&[g]).unwrap(),
            prompt_tps: Stat::from_samples(&[p]).unwrap(),
            ttft_ms: Stat::from_samples(&[10.0]).unwrap(),
            gen_tps_at_depth: None,
            shapes: Vec::new(),
            request_s: None,
            replay: None,
        };
        let c = SpeedCeiling::ABSOLUTE;
        assert!(implausible_speed(&m(50.0, 1000.0), &c).is_none());
        for (g, p) in [
            (f64::NAN, 1.0),
            (f64::INFINITY, 1.0),
            (0.0, 1.0),
            (-1.0, 1.0),
            (1e300, 1.0),
            (1.0, -0.0),
            (1.0, 1e7),
        ] {
            let v = implausible_speed(&m(g, p), &c).unwrap();
            assert_eq!(v.kind, OutcomeKind::Implausible, "{g} {p}");
            assert_eq!(v.message.lines().count(), 1);
        }
        let mut zero_ttft = m(50.0, 1000.0);
        zero_ttft.ttft_ms = Stat::from_samples(&[0.0]).unwrap();
        assert!(implausible_speed(&zero_ttft, &c).is_some());
        let tight = SpeedCeiling::from_prediction(3.0, 100.0);
        assert!(implausible_speed(&m(31.0, 10.0), &tight).is_some());
        assert!(implausible_speed(&m(29.0, 10.0), &tight).is_none());
    }

    #[test]
    fn every_request_of_a_mix_is_checked() {
        use super::super::{Metrics, Stat};
        use crate::workloads::{Shape, ShapeTiming};
        let shape = |prompt_ms: f64, gen_tps: f64| ShapeTiming {
            shape: Shape {
                name: "chat".into(),
                held: 0,
                new: 1000,
                gen: 100,
                weight: 1.0,
            },
            cache_n: 0,
            prompt_n: 1000,
            prompt_ms,
            gen_tps,
            gen_measured: 100,
            draft_n: None,
            draft_n_accepted: None,
        };
        let m = |s: ShapeTiming| Metrics {
            drafts: None,
            gen_tps: Stat::from_samples(&[50.0]).unwrap(),
            prompt_tps: Stat::from_samples(&[1000.0]).unwrap(),
            ttft_ms: Stat::from_samples(&[10.0]).unwrap(),
            gen_tps_at_depth: None,
            request_s: s.request_s(),
            shapes: vec![s],
            replay: None,
        };
        let c = SpeedCeiling::ABSOLUTE;
        assert!(implausible_speed(&m(shape(500.0, 40.0)), &c).is_none());
        for (ms, g, why) in [
            (500.0, 1e300, "past the ceiling"),
            (500.0, 0.0, "not positive"),
            (500.0, -3.0, "not positive"),
            (1e-300, 40.0, "past the ceiling"),
            (0.0, 40.0, "not a finite positive time"),
            (-1.0, 40.0, "not a finite positive time"),
            (f64::NAN, 40.0, "not a finite positive time"),
        ] {
            let v = implausible_speed(&m(shape(ms, g)), &c).expect("implausible");
            assert_eq!(v.kind, OutcomeKind::Implausible);
            assert!(v.message.contains("the 'chat' request"), "{}", v.message);
            assert!(v.message.contains(why), "{ms} {g}: {}", v.message);
            assert_eq!(v.message.lines().count(), 1);
        }
        // A prompt read wholly from the cache may take no time at all.
        let mut cached = shape(0.0, 40.0);
        cached.prompt_n = 0;
        assert!(implausible_speed(&m(cached), &c).is_none());
    }

    /// Issue 53: a replayed request's generation 100x slower than the launch's own samples
    /// is no measurement either (a faked slow reference makes any candidate "faster"), once
    /// it generated enough tokens to time and allowing for the requests in flight beside it.
    #[test]
    fn a_replayed_request_100x_slower_than_its_samples_is_implausible() {
        use super::super::replay_trace::{ReplayTiming, ReplayedRequest};
        use super::super::{Metrics, Stat};
        let launch = |generated: u32, gen_tps: f64, in_flight: u32| {
            let q = ReplayedRequest {
                id: 7,
                prompt_tokens: 100,
                cache_n: 0,
                prompt_n: 100,
                generated,
                prompt_ms: 100.0,
                predicted_ms: f64::from(generated - 1) / gen_tps * 1000.0,
                in_flight,
                request_s: 1.0,
                draft_n: None,
                draft_n_accepted: None,
                answer: None,
            };
            Metrics {
                drafts: None,
                gen_tps: Stat::from_samples(&[50.0]).unwrap(),
                prompt_tps: Stat::from_samples(&[1000.0]).unwrap(),
                ttft_ms: Stat::from_samples(&[10.0]).unwrap(),
                gen_tps_at_depth: None,
                request_s: Some(1.0),
                shapes: Vec::new(),
                replay: Some(ReplayTiming {
                    workload: "t".into(),
                    in_trace: 1,
                    requests: vec![q],
                    mean_s: 1.0,
                    p90_s: 1.0,
                    wall_s: 1000.0,
                    aggregate_tps: None,
                    acceptance: None,
                    probes: Vec::new(),
                }),
            }
        };
        let c = SpeedCeiling::ABSOLUTE;
        // 0.4 tok/s against 50: 125x apart.
        let v = implausible_speed(&launch(64, 0.4, 0), &c).expect("implausible");
        assert!(
            v.message.contains("replayed request 7's generation"),
            "{}",
            v.message
        );
        assert!(v.message.contains("125x apart"), "{}", v.message);
        // Four in flight beside it share the server: 0.4 x 5 = 2 tok/s, 25x apart: believable.
        assert!(implausible_speed(&launch(64, 0.4, 4), &c).is_none());
        // A few tokens are not timed for slowness; a few times slower is depth, not a fake.
        assert!(implausible_speed(&launch(8, 0.4, 0), &c).is_none());
        assert!(implausible_speed(&launch(64, 10.0, 0), &c).is_none());
    }
}
