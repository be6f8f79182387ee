//! Refusing, at once, what the service cannot take: past the purchases a strategy answers
//! within the latency budget ([`limit`]), past the purchases the instance may hold at all, or
//! past a buyer's or an address's rate. A refusal here costs what a no-op costs and
//! answers `503 overloaded` or `429 rate_limited` with a spread `Retry-After`, so the load the
//! service accepts keeps its latency, its memory stays flat, and the refused come back spread
//! out instead of in one wave. (A queue without a bound does the opposite: everyone waits, the
//! wait grows with the crowd, and the answers come too late to be of use.)

pub mod connections;
mod full_line;
mod headroom;
mod lag;
mod limit;

use std::fmt::Write;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::api::Strategy;
use crate::metrics::Metrics;
pub use connections::Connections;
pub use full_line::FullLine;
pub use headroom::Headroom;
pub use limit::{Admitted, Limit, WINDOW};

/// The fewest purchases of a strategy an instance admits at once, however slowly it answers.
pub const FLOOR: u32 = 4;

/// The fewest purchases of `strategy` an instance admits at once: [`FLOOR`], or a whole batch
/// of `batch_max` for a strategy that serves its purchases together. A batch takes one round
/// trip whatever its size, so admitting fewer than one shortens no purchase's wait; it only
/// makes the batches, and what the strategy sells, smaller.
pub fn floor_of(strategy: Strategy, batch_max: u32) -> u32 {
    match strategy {
        Strategy::Batched => batch_max.max(FLOOR),
        _ => FLOOR,
    }
}

/// The most purchases of `strategy` an instance admits at once: all it may hold
/// (`max_in_flight`), or, for `optimistic`, its own bound (`optimistic`, within the same).
///
/// The limit's reading of Little's law assumes that purchases in flight wait on each other in a
/// line, so that as many may be admitted as are answered within the budget. A compare-and-set
/// on one hot row is no line: every contender reads the same version, one wins the round and
/// the others try again, so each contender admitted past a few adds failed rounds, not answers,
/// and the ones that lose every round answer `busy` after the longest waits of all. Measured on
/// one product, two instances and 200 buyers: about 100 in flight sold 361-420 purchases a
/// second and answered hundreds `busy` when offered three times that; 4 in flight per instance
/// sold 1,466-1,740 a second, and next to none `busy`.
pub fn ceiling_of(strategy: Strategy, max_in_flight: u32, optimistic: u32) -> u32 {
    match strategy {
        Strategy::Optimistic => optimistic.min(max_in_flight),
        _ => max_in_flight,
    }
}

/// How often the rate limiters forget the buyers and addresses they have not seen lately.
const FORGET_EVERY: Duration = Duration::from_secs(60);

/// The service's admission limits.
pub struct Gate {
    in_flight: Arc<Semaphore>,
    max_in_flight: u32,
    /// Purchases admitted at once as the refusals' wait allows under a crowd.
    headroom: Headroom,
    /// Each strategy's limit, by its place in the catalogue.
    limits: Vec<Arc<Limit>>,
    per_user: Option<DefaultKeyedRateLimiter<String>>,
    per_address: Option<DefaultKeyedRateLimiter<IpAddr>>,
    /// How long a buyer waits for a purchase's answer.
    pub request_timeout: Duration,
}

impl Gate {
    /// At most `max_in_flight` purchases at once, and of each strategy as many as it answers
    /// within `budget` (a zero budget: its `ceiling`), never fewer than its `floor` nor more
    /// than its `ceiling`; `per_user` and `per_address` requests of the buyer routes per second
    /// (bursts of as many) when set.
    pub fn new(
        max_in_flight: u32,
        budget: Duration,
        floor: impl Fn(Strategy) -> u32,
        ceiling: impl Fn(Strategy) -> u32,
        per_user: Option<u32>,
        per_address: Option<u32>,
        request_timeout: Duration,
    ) -> Gate {
        let max_in_flight = max_in_flight.max(1);
        Gate {
            in_flight: Arc::new(Semaphore::new(
                usize::try_from(max_in_flight).unwrap_or(usize::MAX),
            )),
            max_in_flight,
            headroom: Headroom::new(Duration::ZERO, max_in_flight),
            limits: Strategy::ALL
                .iter()
                .map(|&strategy| Arc::new(Limit::new(budget, floor(strategy), ceiling(strategy))))
                .collect(),
            per_user: keyed(per_user),
            per_address: keyed(per_address),
            request_timeout,
        }
    }

    /// Under a crowd that stays, keeps the runtime's lateness — the refusals' wait — below
    /// `lag_target` (zero: never), see [`Headroom`].
    pub fn with_lag_target(mut self, lag_target: Duration) -> Gate {
        self.headroom = Headroom::new(lag_target, self.max_in_flight);
        self
    }

    /// Keeps the room as `headroom` does.
    #[cfg(test)]
    fn with_headroom(mut self, headroom: Headroom) -> Gate {
        self.headroom = headroom;
        self
    }

    /// A place among the purchases in flight of `strategy`, held until the purchase ends;
    /// `None` when the strategy has as many in flight as it answers within the budget, or the
    /// instance as many as it may hold.
    pub fn enter(&self, strategy: Strategy) -> Option<Place> {
        // The room for the refusals, but never below the strategy's floor: fewer than a batch
        // at once only makes the batches smaller, not the cores less busy.
        let free = u32::try_from(self.in_flight.available_permits()).unwrap_or(u32::MAX);
        let in_flight = self.max_in_flight.saturating_sub(free);
        if in_flight >= self.limit(strategy).floor() && !self.headroom.admits(in_flight) {
            return None;
        }
        // The permit first: one given back has no effect, while a place of the strategy given
        // back unused would count as a purchase answered.
        let permit = Arc::clone(&self.in_flight).try_acquire_owned().ok()?;
        let admitted = self.limit(strategy).enter()?;
        Some(Place {
            _permit: permit,
            admitted,
        })
    }

    /// The purchases of `strategy` this instance admits at once now.
    pub fn limit_of(&self, strategy: Strategy) -> u32 {
        self.limit(strategy).current()
    }

    /// The limits of `strategies`, in the Prometheus text format.
    pub fn render(&self, strategies: &[Strategy]) -> String {
        let mut out = format!(
            "# HELP seckill_admission_room Purchases this instance admits at once now, as its refusals' wait allows.\n\
             # TYPE seckill_admission_room gauge\n\
             seckill_admission_room {}\n",
            self.headroom.room()
        );
        out.push_str(
            "# HELP seckill_admission_limit Purchases of a strategy this instance admits at once now.\n\
             # TYPE seckill_admission_limit gauge\n",
        );
        for &strategy in strategies {
            let _ = writeln!(
                out,
                "seckill_admission_limit{{strategy=\"{}\"}} {}",
                strategy.name(),
                self.limit_of(strategy)
            );
        }
        out.push_str(
            "# HELP seckill_rate_limiter_keys Buyers or addresses a rate limiter remembers.\n\
             # TYPE seckill_rate_limiter_keys gauge\n",
        );
        for (limiter, keys) in [
            ("user", self.per_user.as_ref().map(|l| l.len())),
            ("address", self.per_address.as_ref().map(|l| l.len())),
        ] {
            if let Some(keys) = keys {
                let _ = writeln!(
                    out,
                    "seckill_rate_limiter_keys{{limiter=\"{limiter}\"}} {keys}"
                );
            }
        }
        out
    }

    fn limit(&self, strategy: Strategy) -> &Arc<Limit> {
        &self.limits[strategy as usize]
    }

    /// Whether the buyer, and the address when known, are within their rates (each counted).
    pub fn within_rates(&self, user_id: &str, address: Option<IpAddr>) -> bool {
        let user = self
            .per_user
            .as_ref()
            .is_none_or(|limiter| limiter.check_key(&user_id.to_string()).is_ok());
        let address = match (&self.per_address, address) {
            (Some(limiter), Some(ip)) => limiter.check_key(&ip).is_ok(),
            _ => true,
        };
        user && address
    }

    /// Sets the room every [`headroom::TICK`] from the runtime's lateness and what the door
    /// did; ends at once where no room is kept.
    pub async fn keep_headroom(self: Arc<Gate>, metrics: Arc<Metrics>) {
        if !self.headroom.is_kept() {
            return;
        }
        let lag = lag::Lag::default();
        let keep = async {
            loop {
                tokio::time::sleep(headroom::TICK).await;
                self.headroom.step(headroom::Reading {
                    lag_us: lag.take_worst_us(),
                    admitted: metrics.purchases_started(),
                    turned_away: metrics.turned_away(),
                });
                lag.probe_while(self.headroom.is_crowded());
            }
        };
        // One task: the probe is woken, late or not, as every other task of the runtime is.
        tokio::join!(lag.probe(headroom::TICK), keep);
    }

    /// Forgets, now and then, the keys the rate limiters have not seen lately, so their memory
    /// follows the buyers of the last minute rather than every buyer ever.
    pub async fn forget_idle_keys(self: Arc<Gate>) {
        loop {
            tokio::time::sleep(FORGET_EVERY).await;
            if let Some(limiter) = &self.per_user {
                forget_idle(limiter);
            }
            if let Some(limiter) = &self.per_address {
                forget_idle(limiter);
            }
        }
    }
}

/// A purchase's place among those in flight: given back when dropped.
#[derive(Debug)]
pub struct Place {
    _permit: OwnedSemaphorePermit,
    admitted: Admitted,
}

impl Place {
    /// The strategy refused the purchase for want of room: see [`Admitted::turned_away`].
    pub fn turned_away(&mut self) {
        self.admitted.turned_away();
    }
}

/// A limiter of `rate` per second per key (bursts of as many), if a rate is set.
fn keyed<K: Hash + Eq + Clone>(rate: Option<u32>) -> Option<DefaultKeyedRateLimiter<K>> {
    rate.and_then(NonZeroU32::new)
        .map(|rate| RateLimiter::keyed(Quota::per_second(rate)))
}

fn forget_idle<K: Hash + Eq + Clone>(limiter: &DefaultKeyedRateLimiter<K>) {
    limiter.retain_recent();
    limiter.shrink_to_fit();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 256 in flight, batches of 64, `optimistic` admitted `optimistic` at once.
    fn gate(optimistic: u32) -> Gate {
        Gate::new(
            256,
            Duration::from_millis(200),
            |s| floor_of(s, 64),
            |s| ceiling_of(s, 256, optimistic),
            None,
            None,
            Duration::from_secs(1),
        )
    }

    #[test]
    fn a_strategy_that_serves_purchases_together_is_never_limited_below_one_batch() {
        assert_eq!(floor_of(Strategy::Batched, 64), 64);
        assert_eq!(floor_of(Strategy::Batched, 1), FLOOR);
        assert_eq!(floor_of(Strategy::Conditional, 64), FLOOR);
        let gate = gate(4);
        assert_eq!(gate.limit(Strategy::Batched).floor(), 64);
        assert_eq!(gate.limit(Strategy::Pessimistic).floor(), FLOOR);
    }

    #[test]
    fn under_a_crowd_with_late_refusals_the_door_admits_no_more_than_the_room() {
        let headroom = Headroom::new(Duration::from_millis(4), 256);
        for tick in 0..40 {
            headroom.step(headroom::Reading {
                lag_us: 10_000,
                admitted: tick,
                turned_away: 10 * tick,
            });
        }
        assert_eq!(headroom.room(), 4);
        let gate = gate(4).with_headroom(headroom);
        let held: Vec<_> = (0..4)
            .map(|_| gate.enter(Strategy::Conditional).expect("a place"))
            .collect();
        assert!(gate.enter(Strategy::Pessimistic).is_none(), "a fifth");
        drop(held);
        assert!(
            gate.enter(Strategy::Pessimistic).is_some(),
            "one given back"
        );
    }

    #[test]
    fn optimistic_is_admitted_only_a_few_at_once_and_the_others_all_the_instance_holds() {
        assert_eq!(ceiling_of(Strategy::Optimistic, 256, 4), 4);
        assert_eq!(ceiling_of(Strategy::Optimistic, 2, 4), 2);
        assert_eq!(ceiling_of(Strategy::Pessimistic, 256, 4), 256);
        let gate = gate(3);
        let held: Vec<_> = (0..3)
            .map(|_| gate.enter(Strategy::Optimistic).expect("a place"))
            .collect();
        assert!(gate.enter(Strategy::Optimistic).is_none(), "a fourth");
        assert!(
            gate.enter(Strategy::Conditional).is_some(),
            "another strategy"
        );
        drop(held);
        assert!(
            gate.enter(Strategy::Optimistic).is_some(),
            "places come back"
        );
    }
}
