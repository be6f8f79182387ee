//! The hand-off time of a lock: from the moment a holder starts its release to the moment the
//! next holder's `acquire` returns. It is what a waiter pays per grant beyond the critical
//! section itself: the release's round trip, the wake-up, and the grant's own round trips.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::drive::latency::Latencies;

/// Shared by the workers of one run (one lock: grants and releases alternate).
#[derive(Debug, Default)]
pub struct Handoffs {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// When the last release began, until the next grant takes it.
    released: Option<Instant>,
    times: Latencies,
}

impl Handoffs {
    /// A holder is about to release.
    pub fn releasing(&self, now: Instant) {
        self.lock().released = Some(now);
    }

    /// A worker was granted at `now`: the time since the last release began is one hand-off.
    pub fn granted(&self, now: Instant) {
        let mut state = self.lock();
        if let Some(released) = state.released.take() {
            state.times.record(now.saturating_duration_since(released));
        }
    }

    /// The median and 99th percentile hand-off, `None` without any.
    pub fn p50_p99(&self) -> Option<(Duration, Duration)> {
        let summary = self.lock().times.summary();
        (summary.count > 0).then(|| {
            (
                Duration::from_micros(summary.p50_us),
                Duration::from_micros(summary.p99_us),
            )
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
