//! How long a request that is ready waits for the instance to get to it: the lateness of a
//! timer of one millisecond, the worst of a tick.
//!
//! A refusal is microseconds of the instance's own work; what a refused buyer waits for is a
//! worker of the runtime to run it, and a worker waits for a core while the machine's other
//! processes (the database, Redis, the other instance) hold them. A task that asks to be woken
//! in a millisecond and is woken late has waited exactly that: for its worker, and the
//! worker for a core. So the lateness is read the way a refusal feels it, in the instance, on
//! its runtime — the `toobusy` probe of Node servers (event-loop lag), which sheds load past a
//! lag target. The machine's busy share cannot say this on two cores: under a crowd the
//! refusals alone keep it at 88–99%, whether they wait one millisecond or forty.
//!
//! The probe wakes a thousand times a second only while a crowd is being turned away, and
//! naps a tick at a time otherwise.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::metrics::micros;

/// The timer whose lateness is read.
const PROBE: Duration = Duration::from_millis(1);

/// The worst lateness of the probe's timer since it was last taken, and whether to probe.
#[derive(Debug, Default)]
pub struct Lag {
    worst_us: AtomicU64,
    probing: AtomicBool,
}

impl Lag {
    /// Probes (`true`) or naps (`false`) from now on.
    pub fn probe_while(&self, crowded: bool) {
        self.probing.store(crowded, Ordering::Relaxed);
    }

    /// The worst lateness seen since the last call, in microseconds; starts anew.
    pub fn take_worst_us(&self) -> u64 {
        self.worst_us.swap(0, Ordering::Relaxed)
    }

    /// Notes one wake-up `late` past its time.
    fn note(&self, late: Duration) {
        self.worst_us.fetch_max(micros(late), Ordering::Relaxed);
    }

    /// Sleeps a millisecond at a time and notes how late each wake-up came, while probing;
    /// naps `nap` at a time while not. Runs for ever.
    pub async fn probe(&self, nap: Duration) {
        loop {
            if !self.probing.load(Ordering::Relaxed) {
                tokio::time::sleep(nap).await;
                continue;
            }
            let asked = Instant::now();
            tokio::time::sleep(PROBE).await;
            self.note(asked.elapsed().saturating_sub(PROBE));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_lateness_is_kept_until_taken() {
        let lag = Lag::default();
        lag.note(Duration::from_micros(300));
        lag.note(Duration::from_micros(4_000));
        lag.note(Duration::from_micros(900));
        assert_eq!(lag.take_worst_us(), 4_000);
        assert_eq!(lag.take_worst_us(), 0, "taking it starts anew");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_worker_held_busy_shows_as_lateness() {
        let lag = std::sync::Arc::new(Lag::default());
        lag.probe_while(true);
        let probe = tokio::spawn({
            let lag = lag.clone();
            async move { lag.probe(Duration::from_millis(100)).await }
        });
        // Let the probe arm its timer, then hold the only worker past it.
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(30));
        while lag.worst_us.load(Ordering::Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
        probe.abort();
        assert!(
            lag.take_worst_us() >= 29_000,
            "the 30 ms the worker was held were not seen"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_probe_that_is_not_probing_notes_nothing() {
        let lag = std::sync::Arc::new(Lag::default());
        let probe = tokio::spawn({
            let lag = lag.clone();
            async move { lag.probe(Duration::from_millis(10)).await }
        });
        // Long enough for a few naps, each of which could have noted a late wake-up.
        tokio::time::sleep(Duration::from_millis(50)).await;
        probe.abort();
        assert_eq!(lag.take_worst_us(), 0);
    }
}
