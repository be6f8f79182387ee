//! The admission limiter: the one place a purchase is admitted or refused `503 overloaded`
//! before its strategy runs.

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

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
    /// Wakes the purchases waiting their turn when a place is given back.
    freed: Arc<Freed>,
}

/// Places given back, told to those waiting for one.
#[derive(Debug, Default)]
struct Freed {
    notify: Notify,
    /// Purchases waiting: a place given back tells no one while there are none.
    waiting: AtomicUsize,
}

/// One purchase waiting its turn, counted while it waits.
struct Waiting<'a>(&'a Freed);

impl<'a> Waiting<'a> {
    fn on(freed: &'a Freed) -> Waiting<'a> {
        freed.waiting.fetch_add(1, Ordering::AcqRel);
        Waiting(freed)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How often a purchase waiting its turn looks again without being told: a strategy's queue
/// (a stream a consumer drains) empties without a place given back.
const LOOK_AGAIN: Duration = Duration::from_millis(5);

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
    /// within `budget`, within the bounds `at_once` gives (a zero budget, or a strategy whose
    /// limit is not [adaptive](AtOnce::adaptive): a [`Fixed`] limit at its most); under a crowd
    /// that stays, none while the runtime is later than `lag_target` (zero: never).
    pub fn new(
        max_in_flight: u32,
        budget: Duration,
        lag_target: Duration,
        at_once: impl Fn(Strategy) -> AtOnce,
    ) -> Limiter {
        let max_in_flight = max_in_flight.max(1);
        let lane = |strategy: Strategy| {
            let AtOnce {
                least,
                most,
                adaptive,
            } = at_once(strategy);
            let most = most.unwrap_or(max_in_flight).min(max_in_flight);
            let limit: Box<dyn Limit> = match adaptive && !budget.is_zero() {
                false => Box::new(Fixed::new(most)),
                true => Box::new(Little::new(budget, least, most)),
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
            freed: Arc::default(),
        }
    }

    /// A place among the purchases in flight for one of `strategy`, built as `built`, held
    /// until the purchase ends; `None`: refuse it `503 overloaded`.
    pub fn admit(&self, strategy: Strategy, built: &dyn StockStrategy) -> Option<Place> {
        self.try_admit(strategy, built, true)
    }

    /// A place for a purchase that has its place in a first-come queue
    /// ([`crate::first_come`]): it is never refused for the runtime's lag — the queue bounds how
    /// many come, a product's units — but waits for room (a place given back, its strategy's
    /// queue no longer full) until `deadline`; `None` past it.
    pub async fn admit_in_turn(
        &self,
        strategy: Strategy,
        built: &dyn StockStrategy,
        deadline: tokio::time::Instant,
    ) -> Option<Place> {
        let _waiting = Waiting::on(&self.freed);
        loop {
            let freed = self.freed.notify.notified();
            tokio::pin!(freed);
            // Told of a place given back from now on, before looking: none is missed.
            freed.as_mut().enable();
            if let Some(place) = self.try_admit(strategy, built, false) {
                return Some(place);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return None;
            }
            let _ = tokio::time::timeout_at(deadline.min(now + LOOK_AGAIN), freed).await;
        }
    }

    /// A place, unless refused; `shed`: refused while [`Shedding`] sheds.
    fn try_admit(
        &self,
        strategy: Strategy,
        built: &dyn StockStrategy,
        shed: bool,
    ) -> Option<Place> {
        if built.queue_full() {
            return None;
        }
        let lane = &self.lanes[strategy as usize];
        let free = u32::try_from(self.in_flight.available_permits()).unwrap_or(u32::MAX);
        let held = self.max_in_flight.saturating_sub(free);
        // Never below the strategy's least: fewer than a batch at once only makes the batches
        // smaller, not the cores less busy.
        if shed && held >= lane.least && self.shedding.sheds() {
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
            permit: Some(permit),
            lane: Arc::clone(lane),
            freed: Arc::clone(&self.freed),
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
        let _ = writeln!(
            out,
            "# HELP seckill_admission_waiting Purchases with a first-come place waiting for room.\n\
             # TYPE seckill_admission_waiting gauge\n\
             seckill_admission_waiting {}",
            self.freed.waiting.load(Ordering::Acquire)
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
    /// Given back when dropped, before those waiting are told.
    permit: Option<OwnedSemaphorePermit>,
    lane: Arc<Lane>,
    freed: Arc<Freed>,
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
        drop(self.permit.take());
        if self.freed.waiting.load(Ordering::Acquire) > 0 {
            self.freed.notify.notify_waiters();
        }
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
    /// and `batched` at least 64, its limit not adaptive.
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
                    most: None,
                    adaptive: false,
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
            adaptive: true,
        });
        assert_eq!(
            small.limit_of(Strategy::Optimistic),
            2,
            "a strategy's most never passes what the instance may hold"
        );
    }

    #[test]
    fn a_strategy_whose_limit_is_not_adaptive_keeps_its_most_however_slow_its_answers() {
        let limiter = limiter(4);
        let start = Instant::now();
        // Ten seconds of purchases each a second inside: a limit following the rate would
        // have fallen to what the strategy answers within the budget.
        for tenth in 1..=100 {
            let at = start + Duration::from_millis(tenth * 100);
            for lane in [Strategy::Batched, Strategy::Pessimistic] {
                let lane = &limiter.lanes[lane as usize];
                lane.limit.update(Sample {
                    at,
                    in_flight: 256,
                    ended: Some(Ended {
                        inside: Duration::from_secs(1),
                        answered: true,
                    }),
                });
            }
        }
        assert_eq!(limiter.limit_of(Strategy::Batched), 256);
        assert!(
            limiter.limit_of(Strategy::Pessimistic) < 256,
            "an adaptive limit falls"
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
    #[tokio::test]
    async fn a_purchase_in_turn_is_not_shed_and_waits_for_a_place_given_back() {
        let limiter = Arc::new(limiter(4).with_shedding(Shedding::late_under_a_crowd()));
        let held: Vec<_> = (0..4)
            .map(|_| limiter.admit(Strategy::Optimistic, &ANY).expect("a place"))
            .collect();
        assert!(limiter.admit(Strategy::Pessimistic, &ANY).is_none(), "shed");
        let far = tokio::time::Instant::now() + Duration::from_secs(600);
        let in_turn = limiter
            .admit_in_turn(Strategy::Pessimistic, &ANY, far)
            .await;
        assert!(
            in_turn.is_some(),
            "shedding refuses the crowd, not a click in turn"
        );
        let waiting = {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let far = tokio::time::Instant::now() + Duration::from_secs(600);
                limiter
                    .admit_in_turn(Strategy::Optimistic, &ANY, far)
                    .await
                    .is_some()
            })
        };
        while limiter.freed.waiting.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(
            !waiting.is_finished(),
            "no room for the fifth of optimistic's four"
        );
        drop(held);
        assert!(
            waiting.await.expect("waited"),
            "a place given back is taken"
        );
    }

    #[tokio::test]
    async fn a_purchase_in_turn_with_no_room_by_its_deadline_is_refused() {
        let limiter = Limiter::new(1, Duration::ZERO, Duration::ZERO, |_| AtOnce::DEFAULT);
        let _held = limiter.admit(Strategy::Conditional, &ANY).expect("a place");
        let now = tokio::time::Instant::now();
        assert!(
            limiter
                .admit_in_turn(Strategy::Conditional, &ANY, now)
                .await
                .is_none()
        );
    }
}
