//! Room on the cores for the refusals: while a crowd larger than the service can take is being
//! turned away, the instance admits only as many purchases at once as leave the machine's
//! cores a share idle.
//!
//! The limit of each strategy ([`super::limit`]) admits as many purchases as are answered within
//! the latency budget, which is all the cores can do: under a crowd several times the
//! capacity, the accepted purchases (the app's work, the database's, the stock's home) keep
//! every core busy, and the refusals of everyone else — microseconds of work each — wait in the
//! cores' run queues behind them for milliseconds, tens of them at the tail. A door that says
//! "no" only once a core is free of the yes-work is not a cheap door to the buyer. Measured
//! with `redis-lua` on two cores offered three times its capacity: with the cores full,
//! refusals took 16–48 ms at p99 from the send; with the purchases admitted held down so that
//! the cores had a moment free now and then, 2–4 ms, and the accepted purchases' own p99 fell
//! from a few hundred milliseconds to a few.
//!
//! So a controller reads the machine's busy share ([`super::cores`]) every [`TICK`] and, only
//! **once the door has turned away at least one purchase for every [`CROWD`] it admits for
//! [`SUSTAINED`] ticks in a row** (a crowd past the capacity that stays — not a closed loop of
//! buyers who wait for their answers, where the limit keeps out only a lock's surplus waiters,
//! nor the burst of a sale's first second, which sells at full speed), halves the purchases the instance admits at once
//! whenever the cores were busier than the target, and raises them by an eighth when they were
//! not; once the crowd is gone they come back, doubling each tick, to `--max-in-flight`.
//! Halving, not a gentler step: while every core is busy the busy share says only that the
//! room is past what the cores serve, not by how much, and the tenth of a second it takes to
//! find out is the refusals' wait; a gentler step (by a quarter, or in proportion to the
//! share) took a second or more to get there, and the refusals' p99 stayed at 10–20 ms. It is
//! the system rule of Sentinel's adaptive protection and of Kratos' BBR limiter (shed past a
//! CPU threshold), engaged here only under a crowd, so the capacity a closed loop measures is
//! not touched.
//!
//! What it costs: under such a crowd the service sells at the rate that the refusals leave it,
//! not at its full capacity. On two cores shared with the load's client, an open loop's
//! refusal costs about 40 µs of the machine (24 in the app, 15 in the client: one request per
//! connection per wakeup), so refusing twice the capacity of a strategy that sells 10,000 a
//! second takes half the machine, and `redis-lua` then sells 35–55% of its closed-loop
//! capacity. The busy share never falls far below the target there: the refusals alone keep
//! the cores nearly busy, and the room settles where the halving and the eighths balance.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How often the busy share is read and the room set again.
pub const TICK: Duration = Duration::from_millis(100);

/// The door turns away at least one purchase for every this many it admits under a crowd.
const CROWD: u64 = 4;

/// Ticks in a row of a crowd before the room is set by the cores: a burst shorter than that
/// (the first second of a flash sale, a thousand units sold in part of it) meets the limit
/// alone, at the full capacity.
const SUSTAINED: u32 = 5;

/// The fewest purchases the instance admits at once, however busy the cores.
const FLOOR: u32 = 4;

/// How many purchases this instance admits at once, across strategies, as the cores allow.
#[derive(Debug)]
pub struct Headroom {
    /// The busy share of the cores aimed at, in thousandths; 0: no such limit.
    target: u32,
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

/// Counters read at one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The cores' busy and total time, in one unit ([`super::cores`]).
    pub busy: u64,
    pub total: u64,
    /// Purchases the door admitted and turned away, ever.
    pub admitted: u64,
    pub turned_away: u64,
}

impl Headroom {
    /// Keeps the cores below `target_percent` busy under a crowd (0: never limits), admitting
    /// at most `ceiling` purchases at once.
    pub fn new(target_percent: u32, ceiling: u32) -> Headroom {
        Headroom {
            target: target_percent.min(100) * 10,
            ceiling: ceiling.max(FLOOR),
            room: AtomicU32::new(ceiling.max(FLOOR)),
            last: Mutex::new(Last::default()),
        }
    }

    /// Whether the room is set by the cores at all (a target other than 0).
    pub fn is_kept(&self) -> bool {
        self.target > 0
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
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(before) = last.reading.replace(now) else {
            return;
        };
        let total = now.total.saturating_sub(before.total);
        let busy = now.busy.saturating_sub(before.busy);
        let admitted = now.admitted.saturating_sub(before.admitted);
        let turned_away = now.turned_away.saturating_sub(before.turned_away);
        let room = self.room();
        let crowd = turned_away > 0 && turned_away * CROWD >= admitted;
        last.crowded = if crowd { last.crowded + 1 } else { 0 };
        let next = if !crowd {
            room.saturating_mul(2)
        } else if last.crowded < SUSTAINED || total == 0 {
            room
        } else if busy * 1000 > u64::from(self.target) * total {
            room / 2
        } else {
            room + (room / 8).max(1)
        };
        self.room
            .store(next.clamp(FLOOR, self.ceiling), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(busy: u64, total: u64, admitted: u64, turned_away: u64) -> Reading {
        Reading {
            busy,
            total,
            admitted,
            turned_away,
        }
    }

    /// Steps from a first reading of zeros through ticks that each add these counts, as many
    /// as a crowd must last before the cores set the room; the room after them.
    fn after_ticks(h: &Headroom, busy: u64, total: u64, admitted: u64, turned_away: u64) -> u32 {
        for tick in 0..=u64::from(SUSTAINED) {
            h.step(reading(
                busy * tick,
                total * tick,
                admitted * tick,
                turned_away * tick,
            ));
        }
        h.room()
    }

    #[test]
    fn busy_cores_under_a_crowd_halve_the_room() {
        let h = Headroom::new(75, 256);
        assert_eq!(after_ticks(&h, 19, 20, 100, 300), 128);
    }

    #[test]
    fn idle_cores_under_a_crowd_grow_the_room_by_an_eighth() {
        let h = Headroom::new(75, 256);
        h.room.store(64, Ordering::Relaxed);
        assert_eq!(after_ticks(&h, 10, 20, 100, 300), 72);
    }

    #[test]
    fn busy_cores_without_a_crowd_leave_the_room_open() {
        let h = Headroom::new(75, 256);
        // A closed loop: every core busy, few turned away.
        assert_eq!(after_ticks(&h, 20, 20, 1000, 10), 256);
        h.room.store(16, Ordering::Relaxed);
        h.step(reading(120, 120, 6000, 60));
        assert_eq!(h.room(), 32, "the room comes back, doubling each tick");
    }

    #[test]
    fn a_crowd_shorter_than_the_sustained_ticks_leaves_the_room_as_it_was() {
        let h = Headroom::new(75, 256);
        h.step(reading(0, 0, 0, 0));
        for tick in 1..u64::from(SUSTAINED) {
            h.step(reading(20 * tick, 20 * tick, 100 * tick, 300 * tick));
            assert_eq!(h.room(), 256, "tick {tick}");
        }
        h.step(reading(20 * 9, 20 * 9, 100 * 9, 300 * 9));
        assert_eq!(h.room(), 128, "the crowd stayed: busy cores halve the room");
    }

    #[test]
    fn the_room_never_falls_below_the_floor_nor_rises_past_the_ceiling() {
        let h = Headroom::new(75, 256);
        for tick in 1..20 {
            h.step(reading(20 * tick, 20 * tick, 10 * tick, 100 * tick));
        }
        assert_eq!(h.room(), FLOOR);
        for tick in 20..40 {
            h.step(reading(20 * tick, 20 * tick, 10 * tick, 1900));
        }
        assert_eq!(h.room(), 256);
    }

    #[test]
    fn a_zero_target_never_limits() {
        let h = Headroom::new(0, 256);
        assert_eq!(after_ticks(&h, 20, 20, 1, 1000), 256);
    }
}
