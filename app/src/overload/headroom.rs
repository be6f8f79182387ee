//! Room for the refusals: while a crowd larger than the service can take is being turned away,
//! the instance admits only as many purchases at once as leave its refusals answered at once.
//!
//! The limit of each strategy ([`super::limit`]) admits as many purchases as are answered within
//! the latency budget, which is all the cores can do: under a crowd several times the
//! capacity, the accepted purchases (the app's work, the database's, the stock's home) keep
//! every core busy, and the refusals of everyone else — microseconds of work each — wait in the
//! cores' run queues behind them for milliseconds, tens of them at the tail. A door that says
//! "no" only once a core is free of the yes-work is not a cheap door to the buyer. Measured
//! with `redis-lua` on two cores offered three times its capacity: with the cores full,
//! refusals took 16–48 ms at p99 from the send.
//!
//! So a controller reads every [`TICK`] how late the instance's runtime got to a ready task
//! ([`super::lag`]: what a refusal waits) and, only **once the door has turned away at least
//! one purchase for every [`CROWD`] it admits for [`SUSTAINED`] ticks in a row** (a crowd past
//! the capacity that stays — not a closed loop of buyers who wait for their answers, where the
//! limit keeps out only a lock's surplus waiters, nor the burst of a sale's opening, which
//! sells at full speed), halves the purchases the instance admits at once whenever the worst
//! lateness of the tick passed the target, and raises them by an eighth when it did not; once
//! the crowd is gone they come back, doubling each tick, to `--max-in-flight`. Halving, not a
//! gentler step: a tick that was late says only that the room is past what the cores serve,
//! not by how much, and every tenth of a second spent finding out is the refusals' wait. It
//! is the shedding of Node's `toobusy` (event-loop lag past a target) and, in spirit, the
//! system rule of Sentinel's adaptive protection, engaged here only under a crowd, so the
//! capacity a closed loop measures is not touched.
//!
//! Why the lateness and not the machine's busy share (Sentinel's and Kratos' BBR's CPU
//! threshold), which this controller read first: on two cores shared with the database, Redis
//! and the load's client, the refusals alone keep the cores 88–99% busy, so a room held to a
//! busy share fell to its floor and `redis-lua` sold 40–46% of its capacity, its refusals
//! answered in 3–6 ms at p99 where ten would do. The lateness says how long the refusals
//! actually wait, and a room held to a few milliseconds of it sells more: in dev runs
//! `redis-lua` sold 57% of its capacity at a 3 ms target (refusals 4.0 ms at p99 from the due
//! time), 60% at 4 ms (6.2 ms), 78% at 6 ms (6.7 ms).
//!
//! What it costs: under such a crowd the service sells at the rate that fast refusals leave
//! it, not at its full capacity. On two cores an open loop's refusal costs about 40 µs of the
//! machine (24 in the app, 15 in the client: one request per connection per wakeup), so
//! refusing twice the capacity of a strategy that sells 10,000 a second takes half the
//! machine.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How often the lateness is read and the room set again.
pub const TICK: Duration = Duration::from_millis(100);

/// The door turns away at least one purchase for every this many it admits under a crowd.
const CROWD: u64 = 4;

/// Ticks in a row of a crowd before the room is set by the lateness: a burst shorter than that
/// (a flash sale's opening, its clicks arriving within a second and the early bots before it)
/// meets the limit alone, at the full capacity — and with it every race an unsafe strategy
/// runs at that speed. Half a second was too short: the slow unsafe strategies were still
/// selling when the room closed on them, and `naive` oversold none in a flood where it
/// oversells hundreds of units without the room.
const SUSTAINED: u32 = 15;

/// The fewest purchases the instance admits at once, however busy the cores.
const FLOOR: u32 = 4;

/// How many purchases this instance admits at once, across strategies, as the refusals' wait
/// allows.
#[derive(Debug)]
pub struct Headroom {
    /// The worst lateness of a tick aimed below, in microseconds; 0: no such limit.
    target_us: u64,
    ceiling: u32,
    room: AtomicU32,
    last: Mutex<Last>,
}

/// What the last ticks saw.
#[derive(Debug, Default)]
struct Last {
    reading: Option<Reading>,
    /// Ticks in a row that saw a crowd.
    crowded: u32,
}

/// What one tick read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The worst lateness of the runtime in the tick, in microseconds ([`super::lag`]).
    pub lag_us: u64,
    /// Purchases the door admitted and turned away, ever.
    pub admitted: u64,
    pub turned_away: u64,
}

impl Headroom {
    /// Keeps the runtime's lateness below `target` under a crowd (zero: never limits),
    /// admitting at most `ceiling` purchases at once.
    pub fn new(target: Duration, ceiling: u32) -> Headroom {
        Headroom {
            target_us: crate::metrics::micros(target),
            ceiling: ceiling.max(FLOOR),
            room: AtomicU32::new(ceiling.max(FLOOR)),
            last: Mutex::new(Last::default()),
        }
    }

    /// Whether the room is set by the lateness at all (a target other than zero).
    pub fn is_kept(&self) -> bool {
        self.target_us > 0
    }

    /// Whether the last tick saw a crowd (and the lateness is worth reading).
    pub fn is_crowded(&self) -> bool {
        self.lock_last().crowded > 0
    }

    /// Whether one more purchase fits beside the `in_flight` ones.
    pub fn admits(&self, in_flight: u32) -> bool {
        in_flight < self.room()
    }

    /// The purchases the instance admits at once now.
    pub fn room(&self) -> u32 {
        self.room.load(Ordering::Relaxed)
    }

    /// Sets the room from the counters read now and those read at the last tick.
    pub fn step(&self, now: Reading) {
        if !self.is_kept() {
            return;
        }
        let mut last = self.lock_last();
        let Some(before) = last.reading.replace(now) else {
            return;
        };
        let admitted = now.admitted.saturating_sub(before.admitted);
        let turned_away = now.turned_away.saturating_sub(before.turned_away);
        let room = self.room();
        let crowd = turned_away > 0 && turned_away * CROWD >= admitted;
        last.crowded = if crowd { last.crowded + 1 } else { 0 };
        let next = if !crowd {
            room.saturating_mul(2)
        } else if last.crowded < SUSTAINED {
            room
        } else if now.lag_us > self.target_us {
            room / 2
        } else {
            room + (room / 8).max(1)
        };
        self.room
            .store(next.clamp(FLOOR, self.ceiling), Ordering::Relaxed);
    }

    fn lock_last(&self) -> std::sync::MutexGuard<'_, Last> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target of 4 ms; ticks 5 ms late are late, 1 ms late are not.
    const TARGET: Duration = Duration::from_millis(4);
    const LATE: u64 = 5_000;
    const PROMPT: u64 = 1_000;

    fn reading(lag_us: u64, admitted: u64, turned_away: u64) -> Reading {
        Reading {
            lag_us,
            admitted,
            turned_away,
        }
    }

    /// Steps from a first reading of zeros through ticks that each add these counts and were
    /// `lag_us` late, as many as a crowd must last before the lateness sets the room; the room
    /// after them.
    fn after_ticks(h: &Headroom, lag_us: u64, admitted: u64, turned_away: u64) -> u32 {
        h.step(reading(0, 0, 0));
        for tick in 1..=u64::from(SUSTAINED) {
            h.step(reading(lag_us, admitted * tick, turned_away * tick));
        }
        h.room()
    }

    #[test]
    fn late_ticks_under_a_crowd_halve_the_room() {
        let h = Headroom::new(TARGET, 256);
        assert_eq!(after_ticks(&h, LATE, 100, 300), 128);
    }

    #[test]
    fn prompt_ticks_under_a_crowd_grow_the_room_by_an_eighth() {
        let h = Headroom::new(TARGET, 256);
        h.room.store(64, Ordering::Relaxed);
        assert_eq!(after_ticks(&h, PROMPT, 100, 300), 72);
    }

    #[test]
    fn late_ticks_without_a_crowd_leave_the_room_open() {
        let h = Headroom::new(TARGET, 256);
        // A closed loop: the runtime late, few turned away.
        assert_eq!(after_ticks(&h, LATE, 1000, 10), 256);
        assert!(!h.is_crowded());
        h.room.store(16, Ordering::Relaxed);
        h.step(reading(LATE, 1000 * 20, 10 * 20));
        assert_eq!(h.room(), 32, "the room comes back, doubling each tick");
    }

    #[test]
    fn a_crowd_shorter_than_the_sustained_ticks_leaves_the_room_as_it_was() {
        let h = Headroom::new(TARGET, 256);
        h.step(reading(0, 0, 0));
        for tick in 1..u64::from(SUSTAINED) {
            h.step(reading(LATE, 100 * tick, 300 * tick));
            assert_eq!(h.room(), 256, "tick {tick}");
            assert!(
                h.is_crowded(),
                "the lateness is read from the first crowded tick"
            );
        }
        let last = u64::from(SUSTAINED);
        h.step(reading(LATE, 100 * last, 300 * last));
        assert_eq!(
            h.room(),
            128,
            "the crowd stayed: a late tick halves the room"
        );
    }

    #[test]
    fn the_room_never_falls_below_the_floor_nor_rises_past_the_ceiling() {
        let h = Headroom::new(TARGET, 256);
        for tick in 0..40 {
            h.step(reading(LATE, 10 * tick, 100 * tick));
        }
        assert_eq!(h.room(), FLOOR);
        for tick in 40..60 {
            h.step(reading(PROMPT, 10 * tick, 3900));
        }
        assert_eq!(h.room(), 256);
    }

    #[test]
    fn a_zero_target_never_limits() {
        let h = Headroom::new(Duration::ZERO, 256);
        assert_eq!(after_ticks(&h, 100 * LATE, 1, 1000), 256);
    }
}
