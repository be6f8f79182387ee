//! Shedding for the refusals' sake: while a crowd larger than the service can take is being
//! turned away, a purchase that arrives while the instance's runtime is late is refused.
//!
//! Each strategy's limit ([`super::limit`]) admits as many purchases as are answered within
//! the latency budget, which is all the cores can do: under a crowd several times the
//! capacity, the accepted purchases (the app's work, the database's, the stock's backend) keep
//! every core busy, and the refusals of everyone else — microseconds of work each — wait in
//! the cores' run queues behind them for milliseconds, tens of them at the tail. A door that
//! says "no" only once a core is free of the yes-work is not a cheap door to the buyer.
//! Measured with `redis-lua` on two cores offered three times its capacity: with the cores
//! full, refusals took 16–48 ms at p99 from the send.
//!
//! **What the lateness is.** A refusal is microseconds of the instance's own work; what a
//! refused buyer waits for is a worker of the runtime to run it, and a worker waits for a core
//! while the machine's other processes hold them. A task that asks to be woken in a
//! millisecond and is woken late has waited exactly that. So a probe sleeps a millisecond at a
//! time and notes when its wake is due; how far the clock is past a due wake that has not come
//! is how late the runtime is *now* — read at each admission, an atomic load and a clock read,
//! with nothing to go stale between readings. It is the `toobusy` probe of Node servers
//! (event-loop lag), which sheds load past a lag target. The machine's busy share cannot say
//! this on two cores: under a crowd the refusals alone keep it at 88–99%, whether they wait
//! one millisecond or forty; admissions held to a busy share fell to their least and
//! `redis-lua` sold 40–46% of its capacity.
//!
//! **What the lateness does.** Once the door has turned away at least one purchase for every
//! [`CROWD`] it admits for [`SUSTAINED`] ticks in a row — a crowd past the capacity that stays;
//! not a closed loop of buyers who wait for their answers, where the limit keeps out only a
//! lock's surplus waiters, nor the burst of a sale's opening, which sells at full speed — a
//! purchase arriving while the runtime is later than `--lag-target-ms` is refused, unless the
//! instance has fewer in flight than the strategy's least. It holds no number of its own: the
//! limit alone says how many may be in flight, the lateness only whether this purchase may
//! add to them. That is enough because the lateness is the refusals' wait itself, read when
//! the purchase comes: while it is past the target every new purchase is refused, the work
//! already admitted drains and the probe's wake comes; once it is within the target purchases
//! are admitted again, as many as the limit allows: the runtime is held near its target by
//! the millisecond, and what was admitted before it got late is bounded by the limit, which
//! holds it to what the strategy answers within the budget. A controller that moves a number of places every tenth of a second instead
//! — halving it on a late tick, an eighth back on a prompt one — is a second limit on the
//! number the limit already sets, and overshoots both ways between its readings.
//!
//! What it costs: under such a crowd the service sells at the rate that prompt refusals leave
//! it, not at its full capacity. On two cores an open loop's refusal costs about 40 µs of the
//! machine (24 in the app, 15 in the client), so refusing twice the capacity of a strategy that
//! sells 10,000 a second takes half the machine.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::metrics::{Metrics, micros};

/// How often the door's counts are read for a crowd.
pub const TICK: Duration = Duration::from_millis(100);

/// The door turns away at least one purchase for every this many it admits under a crowd.
const CROWD: u64 = 4;

/// Ticks in a row of a crowd before the lateness sheds: a burst shorter than that (a flash
/// sale's opening, its clicks arriving within a second and the early bots before it) meets the
/// limit alone, at the full capacity — and with it every race an unsafe strategy runs at that
/// speed. Half a second was too short: the slow unsafe strategies were still selling when the
/// shedding began, and `naive` oversold none in a flood where it oversells hundreds of units
/// without it.
const SUSTAINED: u32 = 15;

/// The timer whose lateness is read, while a crowd is being turned away; a tick otherwise.
const PROBE: Duration = Duration::from_millis(1);

/// Whether to shed a purchase now, from the door's counts and the runtime's lateness.
#[derive(Debug)]
pub struct Shedding {
    /// The lateness past which a purchase is shed, in microseconds; 0: never.
    target_us: u64,
    epoch: Instant,
    /// When the probe's next wake is due, in microseconds after `epoch` (`u64::MAX`: none yet).
    due_us: AtomicU64,
    /// Ticks in a row that saw a crowd.
    crowded: AtomicU32,
}

/// The door's counts, ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Door {
    pub admitted: u64,
    pub turned_away: u64,
}

impl Shedding {
    /// Sheds past a lateness of `target` under a crowd that stays (zero: never).
    pub fn new(target: Duration) -> Shedding {
        Shedding {
            target_us: micros(target),
            epoch: Instant::now(),
            due_us: AtomicU64::new(u64::MAX),
            crowded: AtomicU32::new(0),
        }
    }

    /// Shedding under a crowd that stayed, with the runtime a second late.
    #[cfg(test)]
    pub(super) fn late_under_a_crowd() -> Shedding {
        let shedding = Shedding::new(Duration::from_millis(4));
        let second_ago = Instant::now().checked_sub(Duration::from_secs(1));
        Shedding {
            epoch: second_ago.expect("the monotonic clock has run a second"),
            due_us: AtomicU64::new(0),
            crowded: AtomicU32::new(SUSTAINED),
            ..shedding
        }
    }

    /// Whether to shed the purchase that arrives now.
    pub fn sheds(&self) -> bool {
        // The crowd first: it is one load, and it is false but under a crowd.
        self.crowd_stayed() && self.late_past_target(self.now_us())
    }

    fn crowd_stayed(&self) -> bool {
        self.target_us > 0 && self.crowded.load(Ordering::Relaxed) >= SUSTAINED
    }

    /// Whether the runtime is later than the target at `now_us`.
    fn late_past_target(&self, now_us: u64) -> bool {
        self.late_us(now_us) > self.target_us
    }

    /// How far `now_us` is past the probe's due wake.
    fn late_us(&self, now_us: u64) -> u64 {
        now_us.saturating_sub(self.due_us.load(Ordering::Relaxed))
    }

    fn now_us(&self) -> u64 {
        micros(self.epoch.elapsed())
    }

    /// Reads the door's counts every [`TICK`] and probes the runtime's lateness while a crowd
    /// is turned away; ends at once where nothing is ever shed.
    pub async fn watch(&self, metrics: &Metrics) {
        if self.target_us == 0 {
            return;
        }
        let door = || Door {
            admitted: metrics.purchases_started(),
            turned_away: metrics.turned_away(),
        };
        let count = async {
            let mut before = door();
            loop {
                tokio::time::sleep(TICK).await;
                let now = door();
                self.count(before, now);
                before = now;
            }
        };
        // One task: the probe is woken, late or not, as every other task of the runtime is.
        tokio::join!(self.probe(), count);
    }

    /// Counts one tick of the door, from its counts `before` it to those `now`.
    fn count(&self, before: Door, now: Door) {
        let admitted = now.admitted.saturating_sub(before.admitted);
        let turned_away = now.turned_away.saturating_sub(before.turned_away);
        let crowd = turned_away > 0 && turned_away * CROWD >= admitted;
        if crowd {
            self.crowded.fetch_add(1, Ordering::Relaxed);
        } else {
            self.crowded.store(0, Ordering::Relaxed);
        }
    }

    /// Sleeps a millisecond at a time while a crowd is turned away, a tick at a time
    /// otherwise, each time noting when its wake is due. Runs for ever.
    async fn probe(&self) {
        loop {
            let nap = match self.crowded.load(Ordering::Relaxed) {
                0 => TICK,
                _ => PROBE,
            };
            self.due_us
                .store(self.now_us() + micros(nap), Ordering::Relaxed);
            tokio::time::sleep(nap).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target of 4 ms.
    const TARGET: Duration = Duration::from_millis(4);

    /// `ticks` ticks of the door each admitting `admitted` and turning away `turned_away`.
    fn ticks(shedding: &Shedding, ticks: u32, admitted: u64, turned_away: u64) {
        for tick in 0..u64::from(ticks) {
            let door = |tick: u64| Door {
                admitted: admitted * tick,
                turned_away: turned_away * tick,
            };
            shedding.count(door(tick), door(tick + 1));
        }
    }

    /// Whether `shedding` sheds with the runtime `late` past the probe's due wake.
    fn sheds_when_late(shedding: &Shedding, late: Duration) -> bool {
        shedding.due_us.store(1_000_000, Ordering::Relaxed);
        shedding.crowd_stayed() && shedding.late_past_target(1_000_000 + micros(late))
    }

    #[test]
    fn under_a_crowd_that_stays_a_late_runtime_sheds_and_a_prompt_one_does_not() {
        let shedding = Shedding::new(TARGET);
        ticks(&shedding, SUSTAINED, 100, 300);
        assert!(sheds_when_late(&shedding, Duration::from_millis(5)));
        assert!(!sheds_when_late(&shedding, Duration::from_millis(1)));
    }

    #[test]
    fn a_crowd_shorter_than_the_sustained_ticks_is_not_shed_however_late() {
        let shedding = Shedding::new(TARGET);
        ticks(&shedding, SUSTAINED - 1, 100, 300);
        assert!(!sheds_when_late(&shedding, Duration::from_secs(1)));
        ticks(&shedding, 1, 100, 300);
        assert!(sheds_when_late(&shedding, Duration::from_secs(1)));
    }

    #[test]
    fn a_closed_loop_with_a_late_runtime_is_not_shed() {
        // Few turned away for what is admitted: buyers who wait for their answers.
        let shedding = Shedding::new(TARGET);
        ticks(&shedding, 3 * SUSTAINED, 1_000, 10);
        assert!(!sheds_when_late(&shedding, Duration::from_secs(1)));
    }

    #[test]
    fn a_tick_without_a_crowd_ends_the_shedding() {
        let shedding = Shedding::new(TARGET);
        ticks(&shedding, SUSTAINED, 100, 300);
        ticks(&shedding, 1, 1_000, 0);
        assert!(!sheds_when_late(&shedding, Duration::from_secs(1)));
    }

    #[test]
    fn a_zero_target_never_sheds() {
        let shedding = Shedding::new(Duration::ZERO);
        ticks(&shedding, SUSTAINED, 1, 1_000);
        assert!(!sheds_when_late(&shedding, Duration::from_secs(1)));
    }

    #[test]
    fn before_the_probe_runs_the_runtime_is_not_late() {
        let shedding = Shedding::new(TARGET);
        ticks(&shedding, SUSTAINED, 100, 300);
        assert!(!shedding.sheds());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_worker_held_busy_shows_as_lateness() {
        let shedding = std::sync::Arc::new(Shedding::new(TARGET));
        ticks(&shedding, SUSTAINED, 100, 300);
        let probe = tokio::spawn({
            let shedding = shedding.clone();
            async move { shedding.probe().await }
        });
        // Let the probe arm its timer, then hold the only worker past it.
        while shedding.due_us.load(Ordering::Relaxed) == u64::MAX {
            tokio::task::yield_now().await;
        }
        std::thread::sleep(Duration::from_millis(30));
        let late = shedding.late_us(shedding.now_us());
        assert!(
            late >= 29_000,
            "the 30 ms the worker was held were not seen: {late} µs"
        );
        assert!(shedding.sheds());
        probe.abort();
    }
}
