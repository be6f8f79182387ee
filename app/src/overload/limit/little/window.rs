//! What one window of the limit saw, and what it makes of it: the capacity, the ratio of the
//! slowest purchase to the mean, and the limit they call for.

use super::{FEWEST_FOR_RATIO, Little, SMOOTHING};

/// `before` moved by one window's weight ([`SMOOTHING`]) towards what the window `seen`.
fn smoothed(before: f64, seen: f64) -> f64 {
    before + SMOOTHING * (seen - before)
}

/// What one window saw.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub answered: u32,
    /// The time inside of the purchases that ended in it, turned away or answered, per
    /// answered purchase, in seconds: with none turned away, their mean.
    pub mean_inside: f64,
    /// The longest time one of them spent inside, in seconds.
    pub slowest_inside: f64,
    pub seconds: f64,
}

impl Window {
    /// The ratio of the slowest purchase to the mean after this window, from the one before.
    pub fn tail_ratio(self, before: f64) -> f64 {
        if self.answered < FEWEST_FOR_RATIO || self.mean_inside <= 0.0 {
            return before;
        }
        let seen = (self.slowest_inside / self.mean_inside).max(1.0);
        smoothed(before, seen)
    }

    /// Whether its purchases waited on each other: they spent longer inside than `aim`.
    pub fn saturated(self, aim: f64) -> bool {
        self.answered > 0 && self.mean_inside > aim
    }

    /// The capacity after this window, from the capacity read `before` (`None`: none yet).
    /// A saturated window, or one that answered nothing while purchases waited, moves it
    /// towards its rate; any other only towards a higher rate.
    pub fn capacity(self, before: Option<f64>, aim: f64) -> Option<f64> {
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
    pub fn next_limit(self, limit: u32, capacity: f64, aim: f64, bounds: &Little) -> u32 {
        let target = (capacity * aim)
            .round()
            .clamp(f64::from(bounds.least), f64::from(bounds.most)) as u32;
        if self.saturated(aim) {
            target
        } else {
            limit.max(target)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const BUDGET: Duration = Duration::from_millis(250);

    fn bounds() -> Little {
        Little::new(BUDGET, 4, 256)
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
    fn a_strategy_that_answers_slowly_keeps_its_least_open() {
        assert_eq!(next(window(1, 3.0), 43, 1.0, None), 4);
    }

    #[test]
    fn the_limit_never_passes_the_most() {
        assert_eq!(next(window(10_000, 0.3), 256, 1.0, None), 256);
    }
}
