//! How long a waiter of a polling lock pauses between two tries.
//!
//! A lock that is only polled has no queue: at each release the lock goes to whichever waiter
//! happens to try next. With pauses that only grow (the usual jittered doubling), that is
//! nearly always a newcomer still in its first, short pauses, and a waiter that has backed off
//! to the longest pause loses release after release — under a steady crowd most waiters win
//! within a few pauses while the oldest wait for seconds, whatever the number waiting.
//!
//! So the pause grows while a waiter is young (a lock held briefly is not hammered by the
//! few that wait for it), and once the waiter has waited [`PATIENCE`] longest pauses it shrinks
//! again with the square of the time waited, down to a pause no longer than the first: the
//! waiters that have lost most turns try most often, an old waiter out-polls newcomers, and the
//! longest wait is bounded by how many are old, not by luck. Only the old few poll fast, so the
//! backend's load stays near that of plain backoff.

use std::time::Duration;

use rand::Rng;

/// After how many of its longest pauses a waiter counts as old and starts pausing less.
const PATIENCE: u32 = 4;

/// A pause schedule: `first` doubled per try up to `longest`, shrinking again for old waiters
/// down to `oldest`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    pub(crate) first: Duration,
    pub(crate) longest: Duration,
    /// The pause of the longest waiters: at most `first`, so that they out-poll newcomers; no
    /// less than the backend can take from the few old waiters of a busy lock.
    pub(crate) oldest: Duration,
}

impl Schedule {
    /// The pause before the next try of a waiter that has made `tries` tries (0-based count of
    /// failed ones) over `waited`, [`jittered`].
    pub(crate) fn pause(&self, tries: u32, waited: Duration) -> Duration {
        jittered(self.nominal(tries, waited))
    }

    fn nominal(&self, tries: u32, waited: Duration) -> Duration {
        let patience = self.longest * PATIENCE;
        if waited <= patience {
            return self
                .first
                .saturating_mul(1 << tries.min(16))
                .min(self.longest);
        }
        let young_share = patience.as_secs_f64() / waited.as_secs_f64();
        self.longest
            .mul_f64(young_share * young_share)
            .max(self.oldest)
    }
}

/// A pause drawn uniformly from half to all of `nominal`, so that waiters that started
/// together drift apart instead of arriving in lockstep.
pub(crate) fn jittered(nominal: Duration) -> Duration {
    rand::rng().random_range(nominal / 2..=nominal)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEDULE: Schedule = Schedule {
        first: Duration::from_millis(4),
        longest: Duration::from_millis(64),
        oldest: Duration::from_millis(2),
    };

    #[test]
    fn a_young_waiters_pause_doubles_up_to_the_longest() {
        let nominal: Vec<_> = (0..7)
            .map(|tries| {
                SCHEDULE
                    .nominal(tries, Duration::from_millis(10))
                    .as_millis()
            })
            .collect();
        assert_eq!(nominal, [4, 8, 16, 32, 64, 64, 64]);
    }

    #[test]
    fn an_old_waiter_pauses_less_the_longer_it_has_waited() {
        let at = |ms| SCHEDULE.nominal(20, Duration::from_millis(ms));
        assert_eq!(at(256), SCHEDULE.longest, "no jump where patience ends");
        assert!(at(512) < at(256));
        assert!(at(1_000) < at(512));
        assert_eq!(at(60_000), SCHEDULE.oldest, "floored at the oldest's pause");
    }

    #[test]
    fn a_long_waiter_polls_more_often_than_any_newcomer() {
        let newcomers_shortest = SCHEDULE.first / 2;
        let old = SCHEDULE.pause(40, Duration::from_secs(4));
        assert!(
            old <= newcomers_shortest,
            "{old:?} vs {newcomers_shortest:?}"
        );
    }

    #[test]
    fn every_pause_lies_between_half_and_all_of_its_nominal() {
        for (tries, ms) in [(0, 0), (3, 40), (9, 300), (30, 5_000)] {
            let waited = Duration::from_millis(ms);
            let nominal = SCHEDULE.nominal(tries, waited);
            let pause = SCHEDULE.pause(tries, waited);
            assert!(
                nominal / 2 <= pause && pause <= nominal,
                "{pause:?} of {nominal:?}"
            );
        }
    }
}
