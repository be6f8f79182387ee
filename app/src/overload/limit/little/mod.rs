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
//! strategy can answer: the limit becomes capacity × budget. When it did not, the rate may be
//! only the demand's and says nothing of the capacity, so it may only raise the capacity read
//! before, never lower it, and the limit may only rise. So an idle strategy keeps the limit its
//! last busy window earned, a crowd that arrives all at once meets that limit, not one measured
//! on a trickle, and a burst that is answered within the budget is no reason to lower it,
//! however many came at once.
//!
//! **The capacity is read over several windows.** One window of one instance holds a few dozen
//! answers, and a lock shared by several instances serves them in turns, not evenly: an
//! instance answers twice its share in one window and next to nothing in the next, while its
//! purchases wait for the other instance's turn. A limit set from each window on its own
//! follows those turns — up to twice the share after a lucky window, so that the purchases it
//! admits then wait through the next unlucky ones — and the slowest of them waited three times
//! the budget and more. So each window moves the capacity by a share ([`SMOOTHING`]) of what
//! it saw, and a window in which nothing was answered while purchases waited counts as one
//! that answered none.
//!
//! **The slowest, not only the mean.** A lock that does not serve its waiters in order (a
//! lock row retried on a timer, a Redis `SET NX` polled, a memcached `add`) lets some
//! purchases win at once and others wait many turns: at a mean of 200 ms the slowest waited
//! 1–3 s. So each window also keeps its slowest purchase, and the limit follows how many means
//! the slowest takes, smoothed over windows (one window's slowest is a handful of answers'
//! worst): past [`TAIL_FACTOR`], it aims at a mean shorter by as much, so that the slowest
//! stays within [`TAIL_FACTOR`] budgets — fewer waiters, fewer turns for the unlucky one. A
//! strategy that serves in order (a row lock's queue) has its slowest within a few means and
//! keeps the budget as its aim.
//!
//! The limit stays within `[least, most]`, the strategy's own bounds
//! ([`crate::strategy::AtOnce`]): the least keeps a strategy that answers slower than the budget
//! (a lock holder paused) reachable by a few purchases, so it can show that it is answering
//! again; the most, at most the instance's `--max-in-flight`, bounds the memory. A window in
//! which nothing was answered leaves the limit as it was (there is no time inside to read),
//! and the capacity too unless purchases waited through it.
//!
//! **A fall must shorten the time inside.** Admitting fewer shortens the wait of a line served
//! one at a time; it does nothing for a time inside that is the service's own (a batch's round
//! trip on busy cores), where it only lowers the rate, and with it the limit, down to the
//! least. Such a strategy says so in its file ([`crate::strategy::AtOnce::adaptive`]) and is
//! held by a fixed limit instead, its queue's bound holding its time inside.
//!
//! An adaptive limiter that reacts to latency alone (AIMD, Vegas, gradient) finds the
//! concurrency at which latency starts to grow — for a hot row, about one — and refuses buyers
//! a batch or a queue would have served within the budget; this one aims at the budget itself,
//! which is what a buyer waits for.

mod window;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Limit, Sample};
use crate::metrics::micros;
use window::Window;

/// How long the rate is counted before the limit is set again.
const WINDOW: Duration = Duration::from_millis(100);

/// The slowest purchase may take this many means, and spend this many budgets inside, before
/// the limit aims at a shorter mean for it.
const TAIL_FACTOR: f64 = 3.0;

/// The weight of one window in the smoothed capacity and ratio of the slowest purchase to the
/// mean.
const SMOOTHING: f64 = 0.2;

/// The fewest answers of a window whose slowest says anything of the ratio.
const FEWEST_FOR_RATIO: u32 = 4;

/// The Little's-law limit of one strategy in one instance.
#[derive(Debug)]
pub struct Little {
    budget: f64,
    least: u32,
    most: u32,
    limit: AtomicU32,
    /// Purchases answered since the window opened, and the time inside of those that ended.
    answered: AtomicU32,
    inside_us: AtomicU64,
    /// The longest time inside of a purchase answered in the window.
    slowest_us: AtomicU64,
    /// What the windows closed so far have read: taken only by the caller closing one.
    readings: Mutex<Readings>,
    /// When the window opened, in microseconds since `epoch`.
    opened_us: AtomicU64,
    epoch: Instant,
}

impl Little {
    /// A limit aiming at `budget` (more than zero) per admitted purchase, never below `least`
    /// nor above `most`, starting at `most`.
    pub fn new(budget: Duration, least: u32, most: u32) -> Little {
        let most = most.max(1);
        Little {
            budget: budget.as_secs_f64(),
            least: least.clamp(1, most),
            most,
            limit: AtomicU32::new(most),
            answered: AtomicU32::new(0),
            inside_us: AtomicU64::new(0),
            slowest_us: AtomicU64::new(0),
            readings: Mutex::new(Readings::default()),
            opened_us: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Closes the window if it has lasted [`WINDOW`] at `at`, with `in_flight` purchases
    /// waiting, and sets the limit from it; the one caller that moves the window's start
    /// closes it.
    fn close_window(&self, at: Instant, in_flight: u32) {
        let now = micros(at.saturating_duration_since(self.epoch));
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
        if answered == 0 && in_flight == 0 {
            // Idle: nothing answered, nothing waiting; nothing to read.
            return;
        }
        let window = Window {
            answered,
            mean_inside: inside_us as f64 / 1e6 / f64::from(answered.max(1)),
            slowest_inside: slowest_us as f64 / 1e6,
            seconds: lasted as f64 / 1e6,
        };
        let mut readings = self.readings.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(next) = readings.close(window, self.limit(), self) {
            self.limit.store(next, Ordering::Release);
        }
    }

    /// The mean time inside the limit aims at, for a smoothed `ratio` of the slowest purchase
    /// to the mean: the budget, or less for a strategy whose slowest takes many means.
    fn aim(&self, ratio: f64) -> f64 {
        self.budget.min(TAIL_FACTOR * self.budget / ratio.max(1.0))
    }
}

impl Limit for Little {
    fn limit(&self) -> u32 {
        self.limit.load(Ordering::Acquire)
    }

    /// A purchase the strategy turned away for want of room counts its time inside and not its
    /// answer: counted as one, the quick refusals of a full queue would make the strategy look
    /// fast and keep the limit high, admitting ever more purchases only for them to be refused
    /// inside, each after a turn at the backend. By Little's law the purchases in flight,
    /// turned away or not, are the purchases the strategy can take per second times the time
    /// inside per purchase it takes, and that time is what the limit holds to the budget.
    fn update(&self, sample: Sample) {
        if let Some(ended) = sample.ended {
            let inside = micros(ended.inside);
            self.inside_us.fetch_add(inside, Ordering::AcqRel);
            if ended.answered {
                self.slowest_us.fetch_max(inside, Ordering::AcqRel);
                self.answered.fetch_add(1, Ordering::AcqRel);
            }
        }
        self.close_window(sample.at, sample.in_flight);
    }
}

/// What the windows closed so far have read.
#[derive(Debug)]
struct Readings {
    /// How many means the slowest purchase took, smoothed over windows.
    tail_ratio: f64,
    /// The purchases answered per second under saturation, smoothed over windows (`None`
    /// until the first window with an answer).
    capacity: Option<f64>,
}

impl Default for Readings {
    fn default() -> Self {
        Readings {
            tail_ratio: 1.0,
            capacity: None,
        }
    }
}

impl Readings {
    /// Reads `window` and gives the limit to set after it, from the `limit` before it; `None`
    /// leaves the limit as it is.
    fn close(&mut self, window: Window, limit: u32, bounds: &Little) -> Option<u32> {
        self.tail_ratio = window.tail_ratio(self.tail_ratio);
        let aim = bounds.aim(self.tail_ratio);
        let capacity = window.capacity(self.capacity, aim)?;
        self.capacity = Some(capacity);
        if window.answered == 0 {
            return None;
        }
        let next = window.next_limit(limit, capacity, aim, bounds);
        tracing::trace!(
            answered = window.answered,
            inside_ms = window.mean_inside * 1e3,
            capacity,
            limit = next,
            "limit window"
        );
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overload::limit::Ended;

    /// The limits one instance sets over `windows` windows of 100 ms, from a most of 256 and
    /// a budget of 250 ms, for a strategy whose purchases spend `inside(limit)` seconds inside
    /// when `limit` are in flight, always as many as the limit allows; the time inside of a
    /// window is that of the limit in force when its purchases were admitted.
    fn limits_over(windows: u32, inside: impl Fn(u32) -> f64) -> Vec<u32> {
        let bounds = Little::new(Duration::from_millis(250), 4, 256);
        let mut readings = Readings::default();
        let mut limits = vec![256];
        for _ in 0..windows {
            let current = *limits.last().expect("a limit");
            let lag = (inside(current) * 10.0).ceil() as usize;
            let admitted = limits[limits.len().saturating_sub(lag + 1)];
            let mean_inside = inside(admitted);
            let window = Window {
                answered: (f64::from(admitted) * 0.1 / mean_inside).round() as u32,
                mean_inside,
                slowest_inside: mean_inside * 1.2,
                seconds: 0.1,
            };
            let next = readings.close(window, current, &bounds);
            limits.push(next.unwrap_or(current));
        }
        limits
    }

    /// One purchase that ended at `at`, `inside` seconds after its admission, `in_flight` of
    /// the strategy's left in flight.
    fn ended(at: Instant, in_flight: u32, inside: f64, answered: bool) -> Sample {
        Sample {
            at,
            in_flight,
            ended: Some(Ended {
                inside: Duration::from_secs_f64(inside),
                answered,
            }),
        }
    }

    /// Feeds `little` `windows` windows of 100 ms, each of `answers` purchases answered
    /// evenly through it, each `inside(limit)` seconds inside while the limit is `limit` and
    /// as many are in flight.
    fn feed(little: &Little, windows: u32, answers: u32, inside: impl Fn(u32) -> f64) {
        let start = Instant::now();
        for window in 0..windows {
            let limit = little.limit();
            for answer in 0..answers {
                let ms = u64::from(window) * 100 + u64::from(answer * 100 / answers);
                let at = start + Duration::from_millis(ms);
                little.update(ended(at, limit, inside(limit), true));
            }
        }
    }

    #[test]
    fn little_limit_shrinks_when_latency_passes_the_budget() {
        // A line answering 500 a second: 256 in flight spend half a second inside each, and
        // 125 spend the budget of 250 ms.
        let little = Little::new(Duration::from_millis(250), 4, 256);
        feed(&little, 100, 50, |limit| f64::from(limit) / 500.0);
        assert!((115..=135).contains(&little.limit()), "{}", little.limit());
    }

    #[test]
    fn little_limit_keeps_its_most_while_answers_come_within_the_budget() {
        // Ten answers a window, 10 ms inside each: a trickle says nothing of the capacity.
        let little = Little::new(Duration::from_millis(250), 4, 256);
        feed(&little, 30, 10, |_| 0.01);
        assert_eq!(little.limit(), 256);
    }

    #[test]
    fn little_limit_counts_a_purchase_turned_away_inside_but_not_as_an_answer() {
        let little = Little::new(Duration::from_millis(250), 4, 256);
        // Within the first window: nothing closes it and empties the counts.
        let at = Instant::now();
        little.update(ended(at, 1, 0.002, false));
        little.update(ended(at, 0, 0.001, true));
        assert_eq!(little.answered.load(Ordering::Acquire), 1);
        assert_eq!(little.inside_us.load(Ordering::Acquire), 3_000);
        assert_eq!(little.slowest_us.load(Ordering::Acquire), 1_000);
    }

    #[test]
    fn a_line_served_one_at_a_time_is_limited_to_what_it_answers_within_the_budget() {
        // 500 answers a second whatever the crowd: 125 in flight spend the budget inside.
        let limits = limits_over(100, |limit| f64::from(limit) / 500.0);
        let settled = &limits[50..];
        assert!(
            settled.iter().all(|&l| (115..=135).contains(&l)),
            "{settled:?}"
        );
    }

    #[test]
    fn a_batch_whose_round_trip_passes_the_budget_takes_its_limit_down_to_a_few() {
        // Every purchase takes one round trip of 300 ms however many are in flight: admitting
        // fewer only answers fewer, and the limit follows the rate it lowered — why a batching
        // strategy's limit is not adaptive.
        let limits = limits_over(200, |_| 0.3);
        let last = *limits.last().expect("limits");
        assert!(last <= 256 / 10, "ended at {last}: {limits:?}");
    }
}
