//! The admission limiter: the one place a purchase is admitted or refused `503 overloaded`
//! before its strategy runs.

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::limit::{Ended, Fixed, Limit, Little, Sample};
use super::shedding::Shedding;
use crate::api::Strategy;
use crate::metrics::Metrics;
use crate::strategy::{AtOnce, StockStrategy};

/// Admits a purchase while its strategy's queue is not believed full, the instance holds fewer
/// than `--max-in-flight`, the runtime is not late under a crowd that stays ([`Shedding`]),
/// and the strategy has fewer in flight than its [`Limit`] says.
pub struct Limiter {
    in_flight: Arc<Semaphore>,
    max_in_flight: u32,
    /// Each strategy's limit and purchases in flight, by its place in the catalogue.
    lanes: Vec<Arc<Lane>>,
    shedding: Shedding,
}

/// One strategy's limit and its purchases in flight.
#[derive(Debug)]
struct Lane {
    limit: Box<dyn Limit>,
    in_flight: AtomicU32,
    /// Shedding never refuses while the instance holds fewer than this.
    least: u32,
}

impl Limiter {
    /// At most `max_in_flight` purchases at once; of each strategy as many as it answers
    /// within `budget` (a zero budget: a [`Fixed`] limit at its most), within the bounds
    /// `at_once` gives; under a crowd that stays, none while the runtime is later than
    /// `lag_target` (zero: never).
    pub fn new(
        max_in_flight: u32,
        budget: Duration,
        lag_target: Duration,
        at_once: impl Fn(Strategy) -> AtOnce,
    ) -> Limiter {
        let max_in_flight = max_in_flight.max(1);
        let lane = |strategy: Strategy| {
            let AtOnce { least, most } = at_once(strategy);
            let most = most.unwrap_or(max_in_flight).min(max_in_flight);
            let limit: Box<dyn Limit> = match budget.is_zero() {
                true => Box::new(Fixed::new(most)),
                false => Box::new(Little::new(budget, least, most)),
            };
            Arc::new(Lane {
                limit,
                in_flight: AtomicU32::new(0),
                least: least.min(most),
            })
        };
        Limiter {
            in_flight: Arc::new(Semaphore::new(
                usize::try_from(max_in_flight).unwrap_or(usize::MAX),
            )),
            max_in_flight,
            lanes: Strategy::ALL.iter().map(|&s| lane(s)).collect(),
            shedding: Shedding::new(lag_target),
        }
    }

    /// A place among the purchases in flight for one of `strategy`, built as `built`, held
    /// until the purchase ends; `None`: refuse it `503 overloaded`.
    pub fn admit(&self, strategy: Strategy, built: &dyn StockStrategy) -> Option<Place> {
        if built.queue_full() {
            return None;
        }
        let lane = &self.lanes[strategy as usize];
        let free = u32::try_from(self.in_flight.available_permits()).unwrap_or(u32::MAX);
        let held = self.max_in_flight.saturating_sub(free);
        // Never below the strategy's least: fewer than a batch at once only makes the batches
        // smaller, not the cores less busy.
        if held >= lane.least && self.shedding.sheds() {
            return None;
        }
        // The permit first: one given back has no effect, while a place of the strategy is
        // counted only once it is taken.
        let permit = Arc::clone(&self.in_flight).try_acquire_owned().ok()?;
        let since = Instant::now();
        let mut in_flight = lane.in_flight.load(Ordering::Acquire);
        lane.limit.update(Sample {
            at: since,
            in_flight,
            ended: None,
        });
        let limit = lane.limit.limit();
        loop {
            if in_flight >= limit {
                return None;
            }
            match lane.in_flight.compare_exchange_weak(
                in_flight,
                in_flight + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => in_flight = now,
            }
        }
        Some(Place {
            _permit: permit,
            lane: Arc::clone(lane),
            since,
            answered: true,
        })
    }

    /// Sheds as `shedding` does.
    #[cfg(test)]
    fn with_shedding(mut self, shedding: Shedding) -> Limiter {
        self.shedding = shedding;
        self
    }

    /// The purchases of `strategy` this instance admits at once now.
    pub fn limit_of(&self, strategy: Strategy) -> u32 {
        self.lanes[strategy as usize].limit.limit()
    }

    /// Watches the door and the runtime for [`Shedding`], for as long as the service runs.
    pub async fn watch(self: Arc<Limiter>, metrics: Arc<Metrics>) {
        self.shedding.watch(&metrics).await;
    }

    /// The limits of `strategies`, and whether purchases are shed now, in the Prometheus text
    /// format.
    pub fn render(&self, strategies: &[Strategy]) -> String {
        let mut out = format!(
            "# HELP seckill_admission_shedding 1 while purchases are shed: a crowd has stayed and the runtime is later than its target.\n\
             # TYPE seckill_admission_shedding gauge\n\
             seckill_admission_shedding {}\n",
            u8::from(self.shedding.sheds())
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
        out
    }
}

/// A purchase's place among those in flight: given back when dropped, and its time inside
/// handed to its strategy's limit.
#[derive(Debug)]
pub struct Place {
    _permit: OwnedSemaphorePermit,
    lane: Arc<Lane>,
    since: Instant,
    answered: bool,
}

impl Place {
    /// The strategy refused the purchase for want of room (its bounded queue full): the
    /// door's refusal, made late; see [`Ended::answered`].
    pub fn turned_away(&mut self) {
        self.answered = false;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let at = Instant::now();
        let in_flight = self.lane.in_flight.fetch_sub(1, Ordering::AcqRel) - 1;
        self.lane.limit.update(Sample {
            at,
            in_flight,
            ended: Some(Ended {
                inside: at.duration_since(self.since),
                answered: self.answered,
            }),
        });
    }
}

#[cfg(test)]
mod tests {
    use futures::future::BoxFuture;

    use super::*;
    use crate::strategy::{Purchase, PurchaseError, Purchased};

    /// A strategy that is never run: only its queue and its bounds are read.
    struct Shape {
        queue_full: bool,
        at_once: AtOnce,
    }

    impl StockStrategy for Shape {
        fn purchase<'a>(
            &'a self,
            _: &'a Purchase,
        ) -> BoxFuture<'a, Result<Purchased, PurchaseError>> {
            unreachable!("the limiter runs no purchase")
        }

        fn queue_full(&self) -> bool {
            self.queue_full
        }

        fn at_once(&self) -> AtOnce {
            self.at_once
        }
    }

    const ANY: Shape = Shape {
        queue_full: false,
        at_once: AtOnce::DEFAULT,
    };

    /// 256 in flight, a budget of 200 ms, `optimistic` admitted at most `optimistic` at once
    /// and `batched` at least 64.
    fn limiter(optimistic: u32) -> Limiter {
        Limiter::new(
            256,
            Duration::from_millis(200),
            Duration::from_millis(4),
            |strategy| match strategy {
                Strategy::Optimistic => AtOnce {
                    most: Some(optimistic),
                    ..AtOnce::DEFAULT
                },
                Strategy::Batched => AtOnce {
                    least: 64,
                    ..AtOnce::DEFAULT
                },
                _ => AtOnce::DEFAULT,
            },
        )
    }

    #[test]
    fn a_strategy_is_admitted_no_more_than_its_most_and_places_come_back_when_purchases_end() {
        let limiter = limiter(3);
        assert_eq!(limiter.limit_of(Strategy::Optimistic), 3);
        let held: Vec<_> = (0..3)
            .map(|_| limiter.admit(Strategy::Optimistic, &ANY).expect("a place"))
            .collect();
        assert!(
            limiter.admit(Strategy::Optimistic, &ANY).is_none(),
            "a fourth"
        );
        assert!(
            limiter.admit(Strategy::Conditional, &ANY).is_some(),
            "another strategy"
        );
        drop(held);
        assert!(
            limiter.admit(Strategy::Optimistic, &ANY).is_some(),
            "places come back"
        );
    }

    #[test]
    fn past_max_in_flight_no_strategy_is_admitted() {
        let limiter = Limiter::new(2, Duration::ZERO, Duration::ZERO, |_| AtOnce::DEFAULT);
        assert_eq!(limiter.limit_of(Strategy::Conditional), 2, "a fixed limit");
        let held: Vec<_> = (0..2)
            .map(|_| limiter.admit(Strategy::Conditional, &ANY).expect("a place"))
            .collect();
        assert!(limiter.admit(Strategy::Pessimistic, &ANY).is_none());
        drop(held);
        assert!(limiter.admit(Strategy::Pessimistic, &ANY).is_some());
    }

    #[test]
    fn a_strategy_whose_queue_is_believed_full_is_refused_at_the_door() {
        let limiter = limiter(4);
        let full = Shape {
            queue_full: true,
            ..ANY
        };
        assert!(limiter.admit(Strategy::RedisLuaStream, &full).is_none());
        assert!(limiter.admit(Strategy::RedisLuaStream, &ANY).is_some());
    }

    #[test]
    fn each_strategys_bounds_come_from_the_strategy() {
        let limiter = limiter(4);
        assert_eq!(limiter.lanes[Strategy::Batched as usize].least, 64);
        assert_eq!(limiter.lanes[Strategy::Pessimistic as usize].least, 4);
        assert_eq!(limiter.limit_of(Strategy::Optimistic), 4);
        assert_eq!(limiter.limit_of(Strategy::Pessimistic), 256);
        let small = Limiter::new(2, Duration::from_millis(200), Duration::ZERO, |_| AtOnce {
            least: 4,
            most: Some(8),
        });
        assert_eq!(
            small.limit_of(Strategy::Optimistic),
            2,
            "a strategy's most never passes what the instance may hold"
        );
    }

    #[test]
    fn while_shedding_a_strategy_is_admitted_only_up_to_its_least() {
        let limiter = limiter(4).with_shedding(Shedding::late_under_a_crowd());
        let held: Vec<_> = (0..4)
            .map(|_| limiter.admit(Strategy::Conditional, &ANY).expect("a place"))
            .collect();
        assert!(
            limiter.admit(Strategy::Pessimistic, &ANY).is_none(),
            "a fifth"
        );
        // A batch is admitted whole: 64 at once for `batched`.
        let batch: Vec<_> = (4..64)
            .map(|_| limiter.admit(Strategy::Batched, &ANY).expect("a place"))
            .collect();
        assert!(limiter.admit(Strategy::Batched, &ANY).is_none());
        drop((held, batch));
        assert!(limiter.admit(Strategy::Pessimistic, &ANY).is_some());
    }
}
