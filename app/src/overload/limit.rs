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
//! is answering again; the ceiling, the instance's `--max-in-flight`, bounds the memory. A
//! window in which nothing was answered leaves the limit as it was (there is no time inside to
//! read), and the capacity too unless purchases waited through it.
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
    /// How many means the slowest purchase took, smoothed over windows (an `f64`'s bits;
    /// written only by the caller that closes a window).
    tail_ratio: AtomicU64,
    /// The purchases answered per second under saturation, smoothed over windows (an `f64`'s
    /// bits, NaN until the first window with an answer; written as `tail_ratio` is).
    capacity: AtomicU64,
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
        let inside = u64::try_from(self.since.elapsed().as_micros()).unwrap_or(u64::MAX);
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
            tail_ratio: AtomicU64::new(1.0f64.to_bits()),
            capacity: AtomicU64::new(f64::NAN.to_bits()),
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
        let ratio = window.tail_ratio(f64::from_bits(self.tail_ratio.load(Ordering::Acquire)));
        self.tail_ratio.store(ratio.to_bits(), Ordering::Release);
        let aim = self.aim(ratio);
        let before = f64::from_bits(self.capacity.load(Ordering::Acquire));
        let capacity = window.capacity((!before.is_nan()).then_some(before), aim);
        let Some(capacity) = capacity else { return };
        self.capacity.store(capacity.to_bits(), Ordering::Release);
        if answered > 0 {
            let next = window.next_limit(self.current(), capacity, aim, self);
            self.limit.store(next, Ordering::Release);
        }
    }

    /// The mean time inside the limit aims at, for a smoothed `ratio` of the slowest purchase
    /// to the mean: the budget, or less for a strategy whose slowest takes many means.
    fn aim(&self, ratio: f64) -> f64 {
        self.budget.min(TAIL_FACTOR * self.budget / ratio.max(1.0))
    }
}

/// `before` moved by one window's weight ([`SMOOTHING`]) towards what the window `seen`.
fn smoothed(before: f64, seen: f64) -> f64 {
    before + SMOOTHING * (seen - before)
}

/// What one window saw.
#[derive(Debug, Clone, Copy)]
struct Window {
    answered: u32,
    /// The time inside of the purchases that ended in it, turned away or answered, per
    /// answered purchase, in seconds: with none turned away, their mean.
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
        smoothed(before, seen)
    }

    /// Whether its purchases waited on each other: they spent longer inside than `aim`.
    fn saturated(self, aim: f64) -> bool {
        self.answered > 0 && self.mean_inside > aim
    }

    /// The capacity after this window, from the capacity read `before` (`None`: none yet).
    /// A saturated window, or one that answered nothing while purchases waited, moves it
    /// towards its rate; any other only towards a higher rate.
    fn capacity(self, before: Option<f64>, aim: f64) -> Option<f64> {
        let rate = f64::from(self.answered) / self.seconds.max(f64::EPSILON);
        let Some(before) = before else {
            return (self.answered > 0).then_some(rate);
        };
        let seen = if self.answered == 0 || self.saturated(aim) {
            rate
        } else {
            rate.max(before)
        };
        Some(smoothed(before, seen))
    }

    /// The limit after this window, from the limit before it, the smoothed `capacity` and the
    /// mean time inside it `aim`s at.
    fn next_limit(self, limit: u32, capacity: f64, aim: f64, bounds: &Limit) -> u32 {
        let target = (capacity * aim)
            .round()
            .clamp(f64::from(bounds.floor), f64::from(bounds.ceiling)) as u32;
        if self.saturated(aim) {
            target
        } else {
            limit.max(target)
        }
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

    /// The limit after `window`, from `limit`, a smoothed slowest-to-mean `ratio` and the
    /// capacity read before (`None`: the first window).
    fn next(window: Window, limit: u32, ratio: f64, before: Option<f64>) -> u32 {
        let bounds = bounds();
        let aim = bounds.aim(ratio);
        let capacity = window.capacity(before, aim).expect("a window with answers");
        window.next_limit(limit, capacity, aim, &bounds)
    }

    #[test]
    fn a_strategy_whose_purchases_waited_past_the_budget_is_limited_to_what_it_answers_in_it() {
        // 16 answers in 100 ms: 160/s, 40 within 250 ms; they spent 1.6 s inside.
        assert_eq!(next(window(16, 1.6), 256, 1.0, None), 40);
    }

    #[test]
    fn a_strategy_answering_within_the_budget_keeps_the_limit_its_busy_windows_earned() {
        // A trickle: its 10 answers a second say nothing of the capacity.
        assert_eq!(next(window(1, 0.01), 43, 1.0, None), 43);
        assert_eq!(next(window(1, 0.01), 43, 1.0, Some(172.0)), 43);
        // A burst answered within the budget is no reason to lower it either.
        assert_eq!(next(window(3, 0.05), 256, 1.0, None), 256);
    }

    #[test]
    fn a_strategy_that_answers_faster_than_its_limit_needs_gets_a_higher_limit() {
        // At its limit of 40, it answered 400/s in 100 ms each: 100 within the budget.
        assert_eq!(next(window(40, 0.1), 40, 1.0, None), 100);
    }

    #[test]
    fn a_strategy_whose_slowest_purchase_takes_many_means_aims_at_a_shorter_mean() {
        // The slowest takes six means: aim at half the budget, 125 ms; 160/s, 20 in flight.
        assert_eq!(next(window(16, 0.2), 40, 6.0, None), 20);
        // A queue served in order, its slowest at two means: the budget is the aim.
        assert_eq!(next(window(16, 0.2), 40, 2.0, None), 40);
    }

    #[test]
    fn one_lucky_or_unlucky_window_moves_the_capacity_by_a_share_of_what_it_saw() {
        // An instance whose share of a lock is 500/s (125 within the budget) answered twice
        // that in one window, within the budget: the limit rises by a fifth of the difference.
        assert_eq!(next(window(100, 0.2), 125, 1.0, Some(500.0)), 150);
        // It answered next to nothing in the next one while its purchases waited.
        assert_eq!(next(window(2, 0.8), 150, 1.0, Some(600.0)), 121);
        // A window in which nothing was answered while purchases waited counts as rate 0.
        let waited = window(0, 0.0).capacity(Some(600.0), BUDGET.as_secs_f64());
        assert_eq!(waited, Some(480.0));
        // Before any answer, there is no capacity to read.
        assert_eq!(window(0, 0.0).capacity(None, 0.25), None);
    }

    #[test]
    fn under_saturation_the_capacity_follows_the_windows_to_what_they_see() {
        let saturated = window(16, 1.6);
        let settled = (0..40).fold(1_000.0, |c, _| {
            saturated.capacity(Some(c), 0.25).expect("answers")
        });
        assert!((settled - 160.0).abs() < 0.5, "{settled}");
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
        assert_eq!(next(window(1, 3.0), 43, 1.0, None), 4);
    }

    #[test]
    fn the_limit_never_passes_the_ceiling() {
        assert_eq!(next(window(10_000, 0.3), 256, 1.0, None), 256);
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
