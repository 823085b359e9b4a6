//! Time as the tune sees it, injectable: the real clock for real tunes, a manual clock that a
//! replayed landscape advances by a pretend duration per trial (so the minutes budget, resume
//! and the report's timings are deterministic in tests).

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A monotonic clock plus wall-clock timestamps.
pub trait Clock: std::fmt::Debug + Send + Sync {
    /// Seconds since the clock's own origin (monotonic).
    fn seconds(&self) -> f64;
    /// Now, RFC 3339 (for `started_at` / `finished_at`).
    fn timestamp(&self) -> String;
}

/// The machine's clock.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl Clock for SystemClock {
    fn seconds(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }
    fn timestamp(&self) -> String {
        chrono::Local::now().to_rfc3339()
    }
}

/// The machine's clock, shared.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock {
        origin: Instant::now(),
    })
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    seconds: Arc<Mutex<f64>>,
}

/// The wall-clock time a manual clock starts at (2023-11-14T22:13:20Z).
const MANUAL_EPOCH: i64 = 1_700_000_000;

impl ManualClock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Move the clock forward by `s` seconds.
    pub fn advance(&self, s: f64) {
        *self.seconds.lock().unwrap_or_else(|e| e.into_inner()) += s.max(0.0);
    }
}

impl Clock for ManualClock {
    fn seconds(&self) -> f64 {
        *self.seconds.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn timestamp(&self) -> String {
        chrono::DateTime::<chrono::Utc>::from_timestamp(MANUAL_EPOCH + self.seconds() as i64, 0)
            .map(|t| t.to_rfc3339())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced_and_clones_share_it() {
        let c = ManualClock::new();
        let d = c.clone();
        assert_eq!(c.seconds(), 0.0);
        d.advance(90.0);
        assert_eq!(c.seconds(), 90.0);
        assert_eq!(c.timestamp(), "2023-11-14T22:14:50+00:00");
        c.advance(-5.0);
        assert_eq!(d.seconds(), 90.0, "time never goes back");
    }

    #[test]
    fn system_clock_is_monotonic() {
        let c = system();
        let a = c.seconds();
        assert!(c.seconds() >= a);
        assert!(!c.timestamp().is_empty());
    }
}
