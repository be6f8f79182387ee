//! The page's pacer: products' public pages served at most `--page-views-per-second` by an
//! instance, each view in its turn, so that buyers refreshing a page cannot take the cores the
//! purchases need.
//!
//! **Why a page needs one.** A page costs what a refusal from memory costs (see
//! [`crate::pages`]), but a crowd refreshing it asks without pause: 64 readers in a closed loop
//! kept both cores of a two-core machine busy with page views, their generator's and the
//! instance's, and the purchases of another product beside them waited in the run queues —
//! 62.9 ms at p99 against 7.8 ms without the readers. Refusing the surplus would not help: a
//! refusal costs what a view costs, and a reader refused asks again at once. Pacing does: a
//! view past the rate waits for its turn on a timer, which costs no core, and the reader who
//! waits asks for nothing meanwhile.
//!
//! **How.** Virtual scheduling, as the generic cell rate algorithm keeps time: the pacer holds
//! the moment the next turn is free; a view takes the later of that moment and now (less a
//! tenth of a second's worth of views, so that a quiet page serves a burst at once), moves the
//! next free moment on by one interval, and waits until its turn. Turns are handed out in
//! arrival order, one compare-and-swap each. A view whose turn is further off than
//! `--page-max-wait-ms` takes none and is refused `503 busy` with a `Retry-After`: a queue past
//! that would only answer readers who have left. (`governor`, which the buyers' rates use,
//! answers "not before t" without keeping t for the asker, so that every waiting view would
//! race the others for each freed turn instead of taking its own.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Views of products' pages served at most at a rate, in arrival order.
#[derive(Debug)]
pub struct Pacer {
    /// Nanoseconds between two turns.
    interval: u64,
    /// How far before now a turn may lie: a quiet page's burst, in nanoseconds.
    burst: u64,
    /// The longest a view may wait for its turn, in nanoseconds.
    max_wait: u64,
    origin: Instant,
    /// The next free turn, in nanoseconds from `origin`.
    next: AtomicU64,
}

impl Pacer {
    /// A pacer of `per_second` views (`None` for 0: unpaced), each waiting at most `max_wait`.
    pub fn new(per_second: u32, max_wait: Duration) -> Option<Pacer> {
        let per_second = u64::from(per_second);
        (per_second > 0).then(|| {
            let interval = 1_000_000_000 / per_second;
            Pacer {
                interval,
                burst: interval * (per_second / 10).saturating_sub(1),
                max_wait: u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX),
                origin: Instant::now(),
                next: AtomicU64::new(0),
            }
        })
    }

    /// The turn of a view arriving at `now`: `Ok(wait)` until it may be served, or `Err(after)`,
    /// how much later a turn within the longest wait would be free, when its turn is further
    /// off than that (the view takes none).
    pub fn turn(&self, now: Instant) -> Result<Duration, Duration> {
        let now = u64::try_from(now.saturating_duration_since(self.origin).as_nanos())
            .unwrap_or(u64::MAX);
        let earliest = now.saturating_sub(self.burst);
        let mut next = self.next.load(Ordering::Relaxed);
        loop {
            let turn = next.max(earliest);
            let wait = turn.saturating_sub(now);
            if wait > self.max_wait {
                return Err(Duration::from_nanos(wait - self.max_wait));
            }
            match self.next.compare_exchange_weak(
                next,
                turn + self.interval,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(Duration::from_nanos(wait)),
                Err(taken) => next = taken,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn no_rate_means_no_pacer() {
        assert!(Pacer::new(0, MS).is_none());
    }

    #[test]
    fn a_quiet_page_serves_a_tenth_of_a_seconds_views_at_once_then_paces_the_rest() {
        // 100 a second: one turn every 10 ms, a burst of 10.
        let pacer = Pacer::new(100, Duration::from_secs(1)).unwrap();
        let now = pacer.origin + Duration::from_secs(5);
        let waits: Vec<Duration> = (0..13).map(|_| pacer.turn(now).unwrap()).collect();
        assert!(waits[..10].iter().all(Duration::is_zero), "{waits:?}");
        assert_eq!(&waits[10..], &[10 * MS, 20 * MS, 30 * MS]);
    }

    #[test]
    fn turns_are_handed_out_in_arrival_order_one_interval_apart() {
        let pacer = Pacer::new(1_000, Duration::from_secs(1)).unwrap();
        let now = pacer.origin + Duration::from_secs(1);
        let waits: Vec<Duration> = (0..300).map(|_| pacer.turn(now).unwrap()).collect();
        assert!(waits.windows(2).all(|w| w[0] <= w[1]));
        // A burst of 100, then one a millisecond.
        assert_eq!(waits[99], Duration::ZERO);
        assert_eq!(waits[100], MS);
        assert_eq!(waits[299], 200 * MS);
    }

    #[test]
    fn a_view_whose_turn_is_past_the_longest_wait_takes_none_and_is_told_when_to_come_back() {
        // 10 a second, a burst of 0 (one tenth of a second's worth is one view), waits ≤ 250 ms.
        let pacer = Pacer::new(10, 250 * MS).unwrap();
        let now = pacer.origin + Duration::from_secs(1);
        let waits: Vec<Duration> = (0..3).map(|_| pacer.turn(now).unwrap()).collect();
        assert_eq!(waits, [Duration::ZERO, 100 * MS, 200 * MS]);
        // The fourth would wait 300 ms: refused, and told the turn within the wait is 50 ms off.
        assert_eq!(pacer.turn(now), Err(50 * MS));
        // It took no turn: the next view 50 ms later waits the 250 ms the refused one would have.
        assert_eq!(pacer.turn(now + 50 * MS), Ok(250 * MS));
    }

    #[test]
    fn turns_freed_by_time_are_taken_again_without_a_backlog_of_idle_turns() {
        let pacer = Pacer::new(10, Duration::ZERO).unwrap();
        let start = pacer.origin + Duration::from_secs(1);
        assert_eq!(pacer.turn(start), Ok(Duration::ZERO));
        assert!(pacer.turn(start).is_err());
        // A minute idle buys one tenth of a second's views, not a minute's.
        let later = start + Duration::from_secs(60);
        assert_eq!(pacer.turn(later), Ok(Duration::ZERO));
        assert!(pacer.turn(later).is_err());
    }

    #[test]
    fn concurrent_views_each_take_a_turn_of_their_own() {
        let pacer = std::sync::Arc::new(Pacer::new(1_000, Duration::from_secs(3600)).unwrap());
        let now = pacer.origin + Duration::from_secs(1);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let pacer = pacer.clone();
                std::thread::spawn(move || {
                    (0..1_000)
                        .map(|_| pacer.turn(now).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut waits: Vec<Duration> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        waits.sort();
        // 4,000 views, a burst of 100 at once and then one a millisecond, none twice.
        assert!(waits[..100].iter().all(Duration::is_zero));
        let expected: Vec<Duration> = (1..=3_900).map(|n| n * MS).collect();
        assert_eq!(&waits[100..], &expected[..]);
    }
}
