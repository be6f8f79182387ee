//! How many purchases one strategy may work on at once in an instance: as many as it answers
//! within the latency budget at the rate it answers them now.
//!
//! **Little's law**: purchases in flight = answers per second × seconds each one spends inside.
//! So a limit of `rate × budget` keeps an admitted purchase's time inside near the budget,
//! whatever the strategy's speed. A hot row answering 650 purchases a second in this instance
//! may have 130 in flight for a budget of 200 ms; a ZooKeeper lock answering 85 may have 17. One
//! fixed limit suits one strategy at most: above what a slow strategy answers in the budget,
//! every purchase it admits waits behind the others (256 in flight at 85 a second is three
//! seconds each, past any buyer's patience); below what a fast one needs, it refuses buyers it
//! could serve.
//!
//! **The rate is the capacity only under saturation.** It is read over windows of
//! [`WINDOW`], with the mean time the purchases answered in the window spent inside. When that
//! time passed the budget, the purchases were waiting on each other and the rate is what the
//! strategy can answer: the limit becomes rate × budget. When it did not, the rate may be only
//! the demand's and says nothing of the capacity, so the limit may only rise (to rate × budget,
//! when that is more). So an idle strategy keeps the limit its last busy window earned, a crowd
//! that arrives all at once meets that limit, not one measured on a trickle, and a burst that
//! is answered within the budget is no reason to lower it, however many came at once.
//!
//! **The slowest, not only the mean.** A lock that does not serve its waiters in order (a
//! lock row retried on a timer, a Redis `SET NX` polled, a memcached `add`) lets some
//! purchases win at once and others wait many turns: at a mean of 200 ms the slowest waited
//! 1–3 s. So each window also keeps its slowest purchase, and the limit follows how many means
//! the slowest takes, smoothed over windows (one window's slowest is a handful of answers'
//! worst): past [`TAIL_FACTOR`], it aims at a mean shorter by as much, so that the slowest
//! stays within [`TAIL_FACTOR`] budgets — fewer waiters, fewer turns for the unlucky one. A
//! strategy that serves in order (a row lock's queue, a batch) has its slowest within a few
//! means and keeps the budget as its aim.
//!
//! The limit stays within `[floor, ceiling]`: the floor keeps a strategy that answers slower
//! than the budget (a lock holder paused) reachable by a few purchases, so it can show that it
//! is answering again; the ceiling, the instance's `--max-in-flight`, bounds the memory. A
//! window in which nothing was answered changes nothing: there is nothing to read a rate from.
//!
//! An adaptive limiter that reacts to latency alone (AIMD, Vegas, gradient) finds the
//! concurrency at which latency starts to grow — for a hot row, about one — and refuses buyers
//! a batch or a queue would have served within the budget; this one aims at the budget itself,
//! which is what a buyer waits for.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long the rate is counted before the limit is set again.
pub const WINDOW: Duration = Duration::from_millis(100);

/// The slowest purchase may take this many means, and spend this many budgets inside, before
/// the limit aims at a shorter mean for it.
const TAIL_FACTOR: f64 = 3.0;

/// The weight of one window in the smoothed ratio of the slowest purchase to the mean.
const SMOOTHING: f64 = 0.2;

/// The fewest answers of a window whose slowest says anything of the ratio.
const FEWEST_FOR_RATIO: u32 = 4;

/// The limit of one strategy in one instance.
#[derive(Debug)]
pub struct Limit {
    budget: f64,
    floor: u32,
    ceiling: u32,
    limit: AtomicU32,
    in_flight: AtomicU32,
    /// Purchases answered since the window opened, and their time inside together.
    answered: AtomicU32,
    inside_us: AtomicU64,
    /// The longest time inside of a purchase answered in the window.
    slowest_us: AtomicU64,
    /// How many means the slowest purchase took, smoothed over windows (an `f64`'s bits;
    /// written only by the caller that closes a window).
    tail_ratio: AtomicU64,
    /// When the window opened, in microseconds since `epoch`.
    opened_us: AtomicU64,
    epoch: Instant,
}

/// A purchase admitted by a [`Limit`]: counted in flight until dropped, then as answered.
#[derive(Debug)]
pub struct Admitted {
    limit: Arc<Limit>,
    since: Instant,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let inside = u64::try_from(self.since.elapsed().as_micros()).unwrap_or(u64::MAX);
        let limit = &self.limit;
        limit.in_flight.fetch_sub(1, Ordering::AcqRel);
        limit.inside_us.fetch_add(inside, Ordering::AcqRel);
        limit.slowest_us.fetch_max(inside, Ordering::AcqRel);
        limit.answered.fetch_add(1, Ordering::AcqRel);
        limit.tick();
    }
}

impl Limit {
    /// A limit aiming at `budget` per admitted purchase, starting at `ceiling`. A zero budget
    /// keeps the limit at `ceiling`: a fixed limit.
    pub fn new(budget: Duration, floor: u32, ceiling: u32) -> Limit {
        let ceiling = ceiling.max(1);
        Limit {
            budget: budget.as_secs_f64(),
            floor: floor.clamp(1, ceiling),
            ceiling,
            limit: AtomicU32::new(ceiling),
            in_flight: AtomicU32::new(0),
            answered: AtomicU32::new(0),
            inside_us: AtomicU64::new(0),
            slowest_us: AtomicU64::new(0),
            tail_ratio: AtomicU64::new(1.0f64.to_bits()),
            opened_us: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// A place for one more purchase, or `None` when as many are in flight as the limit allows.
    pub fn enter(self: &Arc<Self>) -> Option<Admitted> {
        self.tick();
        let limit = self.limit.load(Ordering::Acquire);
        let mut in_flight = self.in_flight.load(Ordering::Acquire);
        loop {
            if in_flight >= limit {
                return None;
            }
            match self.in_flight.compare_exchange_weak(
                in_flight,
                in_flight + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => in_flight = now,
            }
        }
        Some(Admitted {
            limit: Arc::clone(self),
            since: Instant::now(),
        })
    }

    /// The purchases it admits at once now.
    pub fn current(&self) -> u32 {
        self.limit.load(Ordering::Acquire)
    }

    /// Closes the window if it has lasted [`WINDOW`], and sets the limit from it. Called on
    /// every admission and every answer; the one caller that moves the window's start closes it.
    fn tick(&self) {
        if self.budget <= 0.0 {
            return;
        }
        let now = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX);
        let opened = self.opened_us.load(Ordering::Acquire);
        let lasted = now.saturating_sub(opened);
        if u128::from(lasted) < WINDOW.as_micros() {
            return;
        }
        if self
            .opened_us
            .compare_exchange(opened, now, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        // Read apart, the two may disagree by an answer counted in one and not yet in the
        // other: one answer's weight in the mean of a window.
        let answered = self.answered.swap(0, Ordering::AcqRel);
        let inside_us = self.inside_us.swap(0, Ordering::AcqRel);
        let slowest_us = self.slowest_us.swap(0, Ordering::AcqRel);
        let window = Window {
            answered,
            mean_inside: inside_us as f64 / 1e6 / f64::from(answered.max(1)),
            slowest_inside: slowest_us as f64 / 1e6,
            seconds: lasted as f64 / 1e6,
        };
        let ratio = window.tail_ratio(f64::from_bits(self.tail_ratio.load(Ordering::Acquire)));
        self.tail_ratio.store(ratio.to_bits(), Ordering::Release);
        let next = window.next_limit(self.current(), ratio, self);
        self.limit.store(next, Ordering::Release);
    }
}

/// What one window saw.
#[derive(Debug, Clone, Copy)]
struct Window {
    answered: u32,
    /// The mean time its answered purchases spent inside, in seconds.
    mean_inside: f64,
    /// The longest time one of them spent inside, in seconds.
    slowest_inside: f64,
    seconds: f64,
}

impl Window {
    /// The ratio of the slowest purchase to the mean after this window, from the one before.
    fn tail_ratio(self, before: f64) -> f64 {
        if self.answered < FEWEST_FOR_RATIO || self.mean_inside <= 0.0 {
            return before;
        }
        let seen = (self.slowest_inside / self.mean_inside).max(1.0);
        before + SMOOTHING * (seen - before)
    }

    /// The limit after this window, from the limit before it and the smoothed `ratio` of the
    /// slowest purchase to the mean.
    fn next_limit(self, limit: u32, ratio: f64, bounds: &Limit) -> u32 {
        let rate = f64::from(self.answered) / self.seconds.max(f64::EPSILON);
        let budget = bounds.budget;
        let aim = budget.min(TAIL_FACTOR * budget / ratio.max(1.0));
        let target = (rate * aim)
            .round()
            .clamp(f64::from(bounds.floor), f64::from(bounds.ceiling)) as u32;
        let saturated = self.answered > 0 && self.mean_inside > aim;
        if saturated { target } else { limit.max(target) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_millis(250);

    fn bounds() -> Limit {
        Limit::new(BUDGET, 4, 256)
    }

    fn window(answered: u32, mean_inside: f64) -> Window {
        Window {
            answered,
            mean_inside,
            slowest_inside: mean_inside,
            seconds: 0.1,
        }
    }

    #[test]
    fn a_strategy_whose_purchases_waited_past_the_budget_is_limited_to_what_it_answers_in_it() {
        // 16 answers in 100 ms: 160/s, 40 within 250 ms; they spent 1.6 s inside.
        assert_eq!(window(16, 1.6).next_limit(256, 1.0, &bounds()), 40);
    }

    #[test]
    fn a_strategy_answering_within_the_budget_keeps_the_limit_its_busy_windows_earned() {
        // A trickle: its 10 answers a second say nothing of the capacity.
        assert_eq!(window(1, 0.01).next_limit(43, 1.0, &bounds()), 43);
        // A burst answered within the budget is no reason to lower it either.
        assert_eq!(window(3, 0.05).next_limit(256, 1.0, &bounds()), 256);
    }

    #[test]
    fn a_strategy_that_answers_faster_than_its_limit_needs_gets_a_higher_limit() {
        // At its limit of 40, it answered 400/s in 100 ms each: 100 within the budget.
        assert_eq!(window(40, 0.1).next_limit(40, 1.0, &bounds()), 100);
    }

    #[test]
    fn a_strategy_whose_slowest_purchase_takes_many_means_aims_at_a_shorter_mean() {
        // The slowest takes six means: aim at half the budget, 125 ms; 160/s, 20 in flight.
        assert_eq!(window(16, 0.2).next_limit(40, 6.0, &bounds()), 20);
        // A queue served in order, its slowest at two means: the budget is the aim.
        assert_eq!(window(16, 0.2).next_limit(40, 2.0, &bounds()), 40);
    }

    #[test]
    fn the_ratio_of_the_slowest_to_the_mean_follows_the_windows_smoothly() {
        let unfair = Window {
            slowest_inside: 2.0,
            ..window(16, 0.2)
        };
        // One window of a slowest at ten means moves a ratio of 1 a fifth of the way.
        let once = unfair.tail_ratio(1.0);
        assert!((once - 2.8).abs() < 1e-9, "{once}");
        // Windows on end bring it to what they see.
        let settled = (0..40).fold(1.0, |r, _| unfair.tail_ratio(r));
        assert!((settled - 10.0).abs() < 0.01, "{settled}");
        // A window of too few answers says nothing of it.
        assert_eq!(window(2, 0.2).tail_ratio(5.0), 5.0);
    }

    #[test]
    fn a_strategy_that_answers_slowly_keeps_the_floor_open() {
        assert_eq!(window(1, 3.0).next_limit(43, 1.0, &bounds()), 4);
    }

    #[test]
    fn a_window_without_answers_changes_nothing() {
        assert_eq!(window(0, 0.0).next_limit(43, 1.0, &bounds()), 43);
    }

    #[test]
    fn the_limit_never_passes_the_ceiling() {
        assert_eq!(window(10_000, 0.3).next_limit(256, 1.0, &bounds()), 256);
    }

    #[test]
    fn a_zero_budget_keeps_a_fixed_limit_and_places_come_back_when_purchases_end() {
        let limit = Arc::new(Limit::new(Duration::ZERO, 4, 3));
        let held: Vec<_> = (0..3).map(|_| limit.enter().expect("a place")).collect();
        assert!(limit.enter().is_none(), "a fourth past a fixed limit of 3");
        drop(held);
        assert_eq!(limit.current(), 3);
        assert!(limit.enter().is_some());
    }
}
