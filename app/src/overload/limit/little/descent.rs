//! Whether lowering the limit shortens the time inside, tried before it is believed.
//!
//! The limit falls on the assumption that the purchases in flight wait on each other: by
//! Little's law, at as many answers a second, fewer in flight spend less time inside each. That
//! holds for a line served one at a time, a row lock's queue. It does not when the time inside
//! is the service's own: a batch takes one database round trip whatever its size, and when the
//! cores are busy refusing the crowd, that round trip is as slow for one purchase as for two
//! hundred. Admitting fewer then shortens nobody's wait: the batches shrink, the answers per
//! second fall with them, the limit (capacity × budget) falls again, and so on down to the
//! least, where the strategy sells a few dozen units a second while it could sell thousands.
//!
//! So a fall is put on trial. Once the limit has fallen by [`TRIAL_FALL`] from where the fall
//! began, it holds there until the purchases admitted before have left (a time inside) and
//! those admitted under it have been answered for another time inside, [`TRIAL_SPAN`] at
//! least. Then the purchases in flight and their time inside under it (each the mean over the
//! windows, the first by Little's law: time spent inside per second) are set beside those of
//! the fall's windows, which span [`TRIAL_SPAN`] too: a batch's answers come in bursts, and
//! the limit waits at the trial's line until the fall has lasted as long. In a line served one
//! at a time the time inside falls as the purchases in flight did. If the purchases in flight
//! fell and their time inside by less than half as much, the fall bought nothing: the limit
//! goes back to where the fall began, and does not fall again for [`FUTILE_FOR`] unless the
//! time inside grows past [`FUTILE_SPREAD`] times what it was (something else is slow now, and
//! a fall may help). A trial in which the purchases in flight hardly fell (the limit was above
//! them: a line still filling up) says nothing, and the fall goes on.

/// How far the limit falls, as a share of where it began, before the fall is put on trial.
const TRIAL_FALL: f64 = 0.25;

/// The share by which the purchases in flight must have fallen for a trial to say anything.
const CONCLUSIVE_FALL: f64 = 0.15;

/// How long, in seconds, the windows on either side of a trial last at least: a batch's
/// answers come in bursts, a few windows apart.
const TRIAL_SPAN: f64 = 0.5;

/// How many times the time inside of a futile fall it may grow before falling is tried again.
const FUTILE_SPREAD: f64 = 2.0;

/// How long, in seconds, a futile fall keeps the limit from falling before it is tried again.
const FUTILE_FOR: f64 = 10.0;

/// What one window tells the descent, in seconds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
    /// When the window closed, and how long it lasted.
    pub now: f64,
    pub seconds: f64,
    /// The window's answers, and their mean time inside.
    pub answered: u32,
    pub inside: f64,
    /// The mean time inside smoothed over windows.
    pub smoothed: f64,
}

/// Windows added up.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Sums {
    answered: u32,
    seconds: f64,
    inside: f64,
}

impl Sums {
    fn add(&mut self, seen: Seen) {
        self.answered += seen.answered;
        self.seconds += seen.seconds;
        self.inside += seen.inside * f64::from(seen.answered);
    }

    /// The mean time inside of their answers.
    fn mean_inside(self) -> f64 {
        self.inside / f64::from(self.answered.max(1))
    }

    /// The purchases in flight on average: by Little's law, the time spent inside per second.
    fn in_flight(self) -> f64 {
        self.inside / self.seconds.max(f64::EPSILON)
    }
}

/// Where the limit's fall stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Descent {
    /// Not falling.
    Level,
    /// Falling from `from`; the windows of the fall add up to `before`.
    Falling { from: u32, before: Sums },
    /// Held where it fell to from `from` until `judged_at`; the windows from `settled_at` on
    /// add up to `after`.
    OnTrial {
        from: u32,
        before: Sums,
        settled_at: f64,
        judged_at: f64,
        after: Sums,
    },
    /// Falling did not shorten the time inside, `inside`: the limit does not fall while it
    /// stays so, until `until`.
    Futile { inside: f64, until: f64 },
}

impl Descent {
    /// The limit to set after a window that saw `seen`, from the `limit` before it and the
    /// limit the window's capacity calls for, `proposed`.
    pub fn steer(&mut self, seen: Seen, limit: u32, proposed: u32) -> u32 {
        match *self {
            Descent::Level if proposed < limit => {
                *self = Descent::Falling {
                    from: limit,
                    before: Sums::default(),
                };
                self.fall(seen, proposed)
            }
            Descent::Level => proposed,
            Descent::Falling { .. } => self.fall(seen, proposed),
            Descent::OnTrial { .. } => self.try_fall(seen, limit, proposed),
            Descent::Futile { inside, until } => {
                if seen.now >= until || seen.smoothed > FUTILE_SPREAD * inside {
                    *self = Descent::Level;
                    self.steer(seen, limit, proposed)
                } else {
                    proposed.max(limit)
                }
            }
        }
    }

    /// Lets the limit fall to `proposed`, or holds it there for a trial once it has fallen far
    /// enough; a limit that rises back past where the fall began ends the fall.
    fn fall(&mut self, seen: Seen, proposed: u32) -> u32 {
        let Descent::Falling { from, mut before } = *self else {
            return proposed;
        };
        before.add(seen);
        *self = Descent::Falling { from, before };
        let trial_line = (f64::from(from) * (1.0 - TRIAL_FALL)).ceil();
        if proposed >= from {
            *self = Descent::Level;
        } else if f64::from(proposed) <= trial_line {
            if before.seconds < TRIAL_SPAN {
                // Not yet enough of the fall's windows to set beside the trial's.
                return proposed.max(trial_line as u32);
            }
            // The purchases admitted before the fall leave within a time inside; those
            // admitted under it are then answered for at least as long.
            let leave = seen.inside.max(seen.smoothed);
            *self = Descent::OnTrial {
                from,
                before,
                settled_at: seen.now + leave,
                judged_at: seen.now + leave + leave.max(TRIAL_SPAN),
                after: Sums::default(),
            };
        }
        proposed
    }

    /// Holds the limit on trial until it is judged; then the fall goes on, or is undone.
    fn try_fall(&mut self, seen: Seen, limit: u32, proposed: u32) -> u32 {
        let Descent::OnTrial {
            from,
            before,
            settled_at,
            judged_at,
            ref mut after,
            ..
        } = *self
        else {
            return proposed;
        };
        if seen.now >= settled_at {
            after.add(seen);
        }
        if seen.now < judged_at || after.answered == 0 {
            return limit;
        }
        let fell = after.in_flight() / before.in_flight();
        // A line served one at a time: the time inside falls as the purchases in flight did.
        let followed = before.mean_inside() * fell;
        if fell <= 1.0 - CONCLUSIVE_FALL
            && after.mean_inside() > (before.mean_inside() + followed) / 2.0
        {
            *self = Descent::Futile {
                inside: before.mean_inside(),
                until: seen.now + FUTILE_FOR,
            };
            proposed.max(from)
        } else {
            *self = Descent::Level;
            proposed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window of 100 ms closed at `now` in which `in_flight` purchases spent `inside` each.
    fn seen(now: f64, in_flight: f64, inside: f64) -> Seen {
        Seen {
            now,
            seconds: 0.1,
            answered: (in_flight * 0.1 / inside).round() as u32,
            inside,
            smoothed: inside,
        }
    }

    /// A descent on trial after a fall from 100 (half a second of windows of 100 purchases
    /// spending 0.4 s inside each) to 70, then windows up to 1.3 s of `in_flight` purchases
    /// spending `inside`.
    fn tried(in_flight: f64, inside: f64) -> Descent {
        let mut descent = Descent::Level;
        for at in 0..5 {
            let now = f64::from(at) / 10.0;
            assert_eq!(descent.steer(seen(now, 100.0, 0.4), 100, 90), 90);
        }
        assert_eq!(descent.steer(seen(0.5, 100.0, 0.4), 90, 70), 70);
        for now in [0.7, 0.9, 1.0, 1.1, 1.2, 1.3] {
            assert_eq!(descent.steer(seen(now, in_flight, inside), 70, 50), 70);
        }
        descent
    }

    #[test]
    fn a_small_fall_is_taken_at_once_and_a_rise_past_its_start_ends_it() {
        let mut descent = Descent::Level;
        assert_eq!(descent.steer(seen(0.0, 100.0, 0.3), 100, 90), 90);
        assert!(matches!(descent, Descent::Falling { from: 100, .. }));
        assert_eq!(descent.steer(seen(0.1, 90.0, 0.2), 90, 100), 100);
        assert_eq!(descent, Descent::Level);
    }

    #[test]
    fn a_steep_fall_stops_at_the_trial_line_until_its_windows_span_half_a_second() {
        let mut descent = Descent::Level;
        assert_eq!(descent.steer(seen(0.0, 100.0, 0.4), 100, 50), 75);
        assert!(matches!(descent, Descent::Falling { from: 100, .. }));
    }

    #[test]
    fn a_fall_of_a_quarter_holds_the_limit_until_the_purchases_under_it_have_answered() {
        // Settled 0.4 s after the fall, judged half a second later: it holds at 70 meanwhile.
        let descent = tried(70.0, 0.4);
        assert!(
            matches!(descent, Descent::OnTrial { after, .. } if after.answered == 90),
            "{descent:?}"
        );
    }

    #[test]
    fn a_fall_that_shortened_the_time_inside_as_a_line_does_goes_on() {
        // 70 of 100 in flight at as many answers a second: 0.28 s inside.
        let mut descent = tried(70.0, 0.28);
        assert_eq!(descent.steer(seen(1.4, 70.0, 0.28), 70, 62), 62);
        assert_eq!(descent, Descent::Level);
    }

    #[test]
    fn a_fall_that_did_not_shorten_the_time_inside_is_undone_and_not_tried_again() {
        // 70 in flight, each as long inside as 100 were: fewer answers, no shorter wait.
        let mut descent = tried(70.0, 0.39);
        assert_eq!(descent.steer(seen(1.4, 70.0, 0.39), 70, 50), 100);
        assert!(matches!(descent, Descent::Futile { inside, .. } if (inside - 0.4).abs() < 1e-9));
        // As slow as before: it holds, and may still rise.
        assert_eq!(descent.steer(seen(2.0, 100.0, 0.42), 100, 40), 100);
        assert_eq!(descent.steer(seen(2.1, 100.0, 0.42), 100, 120), 120);
    }

    #[test]
    fn a_trial_in_which_the_purchases_in_flight_hardly_fell_lets_the_fall_go_on() {
        // A line still filling up: as many in flight as before, and longer inside.
        let mut descent = tried(98.0, 0.5);
        assert_eq!(descent.steer(seen(1.4, 98.0, 0.5), 70, 50), 50);
        assert_eq!(descent, Descent::Level);
    }

    #[test]
    fn a_futile_fall_is_tried_again_after_a_while_or_once_the_time_inside_doubles() {
        let futile = Descent::Futile {
            inside: 0.4,
            until: 10.0,
        };
        let mut descent = futile;
        assert_eq!(descent.steer(seen(10.0, 100.0, 0.4), 100, 95), 95);
        assert!(matches!(descent, Descent::Falling { from: 100, .. }));
        let mut descent = futile;
        assert_eq!(descent.steer(seen(1.0, 100.0, 0.9), 100, 95), 95);
        assert!(matches!(descent, Descent::Falling { from: 100, .. }));
    }
}
