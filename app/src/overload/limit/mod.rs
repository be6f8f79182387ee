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
//! strategy that serves in order (a row lock's queue, a batch) has its slowest within a few
//! means and keeps the budget as its aim.
//!
//! The limit stays within `[floor, ceiling]`: the floor keeps a strategy that answers slower
//! than the budget (a lock holder paused) reachable by a few purchases, so it can show that it
//! is answering again, and keeps a batching strategy fed a whole batch; the ceiling, the
//! instance's `--max-in-flight`, bounds the memory. A window in which nothing was answered
//! leaves the limit as it was (there is no time inside to read), and the capacity too unless
//! purchases waited through it.
//!
//! **A fall must shorten the time inside.** Admitting fewer shortens the wait of a line served
//! one at a time; it does nothing for a time inside that is the service's own (a batch's round
//! trip on busy cores), where it only lowers the rate, and with it the limit, down to the
//! floor. So a fall of the limit is put on trial and undone when the time inside did not
//! follow it ([`descent`]).
//!
//! An adaptive limiter that reacts to latency alone (AIMD, Vegas, gradient) finds the
//! concurrency at which latency starts to grow — for a hot row, about one — and refuses buyers
//! a batch or a queue would have served within the budget; this one aims at the budget itself,
//! which is what a buyer waits for.

mod descent;
mod window;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::metrics::micros;
use descent::{Descent, Seen};
use window::{Window, smoothed};

/// How long the rate is counted before the limit is set again.
pub const WINDOW: Duration = Duration::from_millis(100);

/// The slowest purchase may take this many means, and spend this many budgets inside, before
/// the limit aims at a shorter mean for it.
const TAIL_FACTOR: f64 = 3.0;

/// The weight of one window in the smoothed capacity and ratio of the slowest purchase to the
/// mean.
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
    /// What the windows closed so far have read: taken only by the caller closing one.
    readings: Mutex<Readings>,
    /// When the window opened, in microseconds since `epoch`.
    opened_us: AtomicU64,
    epoch: Instant,
}

/// A purchase admitted by a [`Limit`]: counted in flight until dropped, then as answered
/// unless it was [turned away](Admitted::turned_away).
#[derive(Debug)]
pub struct Admitted {
    limit: Arc<Limit>,
    since: Instant,
    answered: bool,
}

impl Admitted {
    /// The strategy refused this purchase for want of room (a bounded line full): the door's
    /// refusal, made late. It is not one of the answers the strategy can give: counted as one,
    /// the quick refusals of a full line would make the strategy look fast and keep the limit
    /// high, admitting ever more purchases only for them to be refused inside, each after a
    /// turn at the backend. So its time inside counts and its answer does not: by Little's law
    /// the purchases in flight, turned away or not, are the purchases the strategy can take per
    /// second times the time inside per purchase it takes, and that time is what the limit
    /// holds to the budget.
    pub fn turned_away(&mut self) {
        self.answered = false;
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let inside = micros(self.since.elapsed());
        let limit = &self.limit;
        limit.in_flight.fetch_sub(1, Ordering::AcqRel);
        limit.inside_us.fetch_add(inside, Ordering::AcqRel);
        if self.answered {
            limit.slowest_us.fetch_max(inside, Ordering::AcqRel);
            limit.answered.fetch_add(1, Ordering::AcqRel);
        }
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
            readings: Mutex::new(Readings::default()),
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
            answered: true,
        })
    }

    /// The fewest purchases it admits at once, however slowly they are answered.
    pub(super) fn floor(&self) -> u32 {
        self.floor
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
        let now = micros(self.epoch.elapsed());
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
        if answered == 0 && self.in_flight.load(Ordering::Acquire) == 0 {
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
        if let Some(next) = readings.close(window, now as f64 / 1e6, self.current(), self) {
            self.limit.store(next, Ordering::Release);
        }
    }

    /// The mean time inside the limit aims at, for a smoothed `ratio` of the slowest purchase
    /// to the mean: the budget, or less for a strategy whose slowest takes many means.
    fn aim(&self, ratio: f64) -> f64 {
        self.budget.min(TAIL_FACTOR * self.budget / ratio.max(1.0))
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
    /// The mean time inside, smoothed over the windows with answers.
    inside: Option<f64>,
    descent: Descent,
}

impl Default for Readings {
    fn default() -> Self {
        Readings {
            tail_ratio: 1.0,
            capacity: None,
            inside: None,
            descent: Descent::Level,
        }
    }
}

impl Readings {
    /// Reads `window`, closed `now` (seconds), and gives the limit to set after it, from the
    /// `limit` before it; `None` leaves the limit as it is.
    fn close(&mut self, window: Window, now: f64, limit: u32, bounds: &Limit) -> Option<u32> {
        self.tail_ratio = window.tail_ratio(self.tail_ratio);
        let aim = bounds.aim(self.tail_ratio);
        let capacity = window.capacity(self.capacity, aim)?;
        self.capacity = Some(capacity);
        if window.answered == 0 {
            return None;
        }
        let inside = self.inside.map_or(window.mean_inside, |before| {
            smoothed(before, window.mean_inside)
        });
        self.inside = Some(inside);
        let proposed = window.next_limit(limit, capacity, aim, bounds);
        let seen = Seen {
            now,
            seconds: window.seconds,
            answered: window.answered,
            inside: window.mean_inside,
            smoothed: inside,
        };
        let next = self.descent.steer(seen, limit, proposed);
        tracing::trace!(
            answered = window.answered,
            inside_ms = window.mean_inside * 1e3,
            capacity,
            limit = next,
            descent = ?self.descent,
            "limit window"
        );
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The limits one instance sets over `windows` windows of 100 ms, from a ceiling of 256
    /// and a budget of 250 ms, for a strategy whose purchases spend `inside(limit)` seconds
    /// inside when `limit` are in flight, always as many as the limit allows; the time inside
    /// of a window is that of the limit in force when its purchases were admitted.
    fn limits_over(windows: u32, inside: impl Fn(u32) -> f64) -> Vec<u32> {
        let bounds = Limit::new(Duration::from_millis(250), 4, 256);
        let mut readings = Readings::default();
        let mut limits = vec![256];
        for at in 1..=windows {
            let now = f64::from(at) / 10.0;
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
            let next = readings.close(window, now, current, &bounds);
            limits.push(next.unwrap_or(current));
        }
        limits
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
    fn a_batch_whose_round_trip_passes_the_budget_keeps_its_limit_instead_of_falling_to_the_floor()
    {
        // Every purchase takes one round trip of 300 ms however many are in flight: admitting
        // fewer only answers fewer.
        let limits = limits_over(200, |_| 0.3);
        let lowest = limits.iter().min().expect("limits");
        assert!(*lowest >= 192, "fell to {lowest}: {limits:?}");
        assert_eq!(limits.last(), Some(&256), "{limits:?}");
    }

    #[test]
    fn a_purchase_turned_away_for_want_of_room_counts_its_time_inside_but_not_as_an_answer() {
        // A fixed limit: no window closes and empties the counts while the test reads them.
        let limit = Arc::new(Limit::new(Duration::ZERO, 4, 2));
        let mut refused = limit.enter().expect("a place");
        let answered = limit.enter().expect("a place");
        refused.turned_away();
        std::thread::sleep(Duration::from_millis(2));
        drop(answered);
        let inside_one = limit.inside_us.load(Ordering::Acquire);
        drop(refused);
        assert_eq!(limit.in_flight.load(Ordering::Acquire), 0);
        assert_eq!(limit.answered.load(Ordering::Acquire), 1);
        assert!(limit.inside_us.load(Ordering::Acquire) >= inside_one + 2_000);
        assert_eq!(limit.enter().map(drop), Some(()), "both places are back");
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
