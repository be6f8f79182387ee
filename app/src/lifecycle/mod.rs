//! An order's life: a purchase makes it `reserved`; its buyer pays it (`paid`) before its
//! payment deadline, or cancels it, or lets the deadline pass and it expires; an expired or
//! cancelled order's units go back to the product's home — the row, a bucket, or the Redis
//! counter — exactly once, with the buyer's per-user quota, and every instance forgets that
//! the product was sold out.
//!
//! **One conditional state change decides each transition** ([`crate::db::order_life`]):
//! `UPDATE … WHERE state = 'reserved' [AND pay_by > NOW(6)]`. Whatever races on one order — a
//! late payment and the expiry, a cancellation and the expiry, two cancellations, two
//! instances' sweeps — exactly one changes the row; the others find 0 rows, change nothing,
//! and answer what happened instead (`order_expired`, `order_cancelled`, `order_paid`). A
//! payment after the deadline is refused even before the sweep got to the order: the deadline
//! is in the payment's own `WHERE`, by the database clock.
//!
//! **Why the units come back exactly once.** The return rides on the transition:
//!
//! * *A home in the database* (the row, the buckets): the quota decrement, the stock increment
//!   and the state change are one transaction, taken in the order a purchase takes its locks
//!   (quota row, stock, order) so that the two never deadlock. The conditional state change
//!   comes last and decides: a transaction whose `UPDATE` changed nothing rolls its increment
//!   back. A crash anywhere rolls all of it back and leaves the order `reserved` and due, for
//!   any instance's sweep to expire again. (Units an unfenced locked strategy sold take two
//!   transactions, see the last paragraph.)
//! * *The Redis counter*: the state change and the `INCRBY` are two writes in two systems and
//!   cannot be one transaction. So the change goes to an intermediate state first (`expiring`,
//!   `cancelling`: "left `reserved`, units on their way"), committed; then the give-back script
//!   ([`crate::redis_stock::scripts::GIVE_BACK`]) increments the counter *only if the
//!   purchase's charge record still holds its charge, and marks it ended in the same atomic
//!   step*; then the order becomes `expired` / `cancelled`. The charge record is the once-only
//!   token on the Redis side: the script may run any number of times — by the instance that
//!   made the change, by another instance's sweep after it died, by `reconcile` — and adds the
//!   units once. The record is marked, not deleted, because the purchase's key stays taken by
//!   its ended order: sent again, the purchase must be a duplicate answered with that order, not
//!   a new charge that no order could ever hold ([`crate::redis_stock::charge`]). A
//!   crash between the state change and the script leaves the order `expiring` with its units
//!   stranded (undersell, never oversell: the units are in no order and not on sale), which the
//!   sweep of every instance finishes after `--return-grace-ms`, and `reconcile` at once.
//!
//!   The sweep takes the same three steps for a batch of a product's due orders at once, and
//!   the argument holds order by order: the batch's state change is one transaction that locks
//!   the orders still `reserved` and due and moves exactly those to `expiring` (an order a
//!   payment or a cancellation got to first is left out; one they reach later is no longer
//!   `reserved`); the batch's give-back
//!   ([`GIVE_BACK_ALL`](crate::redis_stock::scripts::GIVE_BACK_ALL)) is one atomic script that
//!   gives each order's charge back only if that order's record still holds it, marking it;
//!   the final update moves only orders still `expiring`. A crash between two steps leaves
//!   each order of the batch where a crash leaves a single one.
//!
//! Units that come back make this instance forget what it remembered of the product (its
//! sold-out flag, see [`crate::product_memory`]) and announce it to the others; the Redis
//! give-back announces from inside its script.
//!
//! **The unchecked variants** ([`Check::Unchecked`], fault injection only) read the state, then
//! write it, with time between (the injected pause): the check-then-act every race slips
//! through. A late payment turns an expired order, whose units were resold, back into a paid
//! one (oversell); a cancellation and an expiry that both read `reserved` both give the units
//! back (phantom units). The Redis home's give-back still returns once even then: its charge
//! record is checked inside the script.
//!
//! **Returns under the seller's lock.** A strategy that reads the stock and writes back an
//! absolute value under a lock, with no version check (the unfenced locked strategies), would
//! write over a return made between its read and its write: the returned units would vanish
//! (undersell). So the units of an order such a strategy sold go back holding its lock
//! (the order records the strategy; [`crate::strategy::StockStrategy::lock_for_return`]), one
//! acquisition per batch. The fenced and `optimistic` strategies see the version bump and read
//! again, and need no lock; `naive` writes over returns as it writes over other buyers (it is
//! the unsafe baseline).
//!
//! Every purchase of such a strategy waits for whatever runs under its lock, so these returns
//! take two transactions, as the Redis counter's do: the conditional state change to `expiring`
//! / `cancelling` with the buyer's quota, committed without the lock; then the order's arrival
//! (`expiring` → `expired`, conditional: the once-only token) and, under the lock, the row's
//! increment, committed together. The lock covers the write that needs it and the commit, not
//! the batch's bookkeeping nor its orders, which every purchase queued for the lock would
//! otherwise wait behind. A crash between the two leaves the order on its way, finished by a
//! sweep after the return grace.

mod home;
pub mod sweep;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::Db;

use crate::api::{Home, OrderStage};
use crate::db::order_life;
use crate::db::orders::{self, Order, OrderState, PurchaseKey};
use crate::metrics::Metrics;
use crate::product_memory::ProductMemory;
use crate::redis_stock::{News, RedisStock, RedisStockError};
use crate::strategy::{PurchaseError, Registry, ReturnLock, Strategy};

/// How an order ends without being paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Its payment deadline passed.
    Expire,
    /// Its buyer cancelled it.
    Cancel,
}

impl End {
    /// The state an order ends in once its units are home.
    fn done(self) -> OrderState {
        match self {
            End::Expire => OrderState::Expired,
            End::Cancel => OrderState::Cancelled,
        }
    }

    /// The state of an order whose units are on their way to a home outside the database.
    fn on_the_way(self) -> OrderState {
        match self {
            End::Expire => OrderState::Expiring,
            End::Cancel => OrderState::Cancelling,
        }
    }
}

/// How a transition checks the order's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// One conditional `UPDATE`: the safe way, always used outside fault injection.
    Conditional,
    /// Read, pause, write: the check-then-act race (fault scenarios only).
    Unchecked,
}

/// Why a transition was refused: the order is not where it would have to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No order of that purchase.
    NoOrder,
    /// Accepted and not yet placed in the database (waiting in the stream).
    Pending,
    /// Fenced out by a reconciliation: nothing was bought.
    Voided,
    /// Its deadline passed (swept or not yet).
    Expired,
    Cancelled,
    Paid,
}

/// Why a transition failed.
#[derive(Debug, thiserror::Error)]
pub enum LifeError {
    #[error("refused: {0:?}")]
    Refused(Refused),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Redis(#[from] RedisStockError),
    /// The lock a return must hold could not be taken (busy, or its service down).
    #[error("the product's lock: {0}")]
    Lock(#[source] PurchaseError),
}

/// What an order's life needs: the stores, what the instance remembers, its counters.
#[derive(Clone)]
pub struct Lifecycle {
    pool: Db,
    redis: Option<RedisStock>,
    memory: Arc<ProductMemory>,
    metrics: Arc<Metrics>,
    /// The strategies, for the locks returns of their units hold.
    strategies: Arc<Registry>,
    /// Whether units that come back make the instance forget the product was sold out (off
    /// only as a fault switch: `--keep-sold-out-on-return`).
    forget_on_return: bool,
    /// Whether this instance's expiry sweep is paused, and the round it is running.
    sweep: Arc<sweep::Switch>,
}

impl Lifecycle {
    pub fn new(
        pool: Db,
        redis: Option<RedisStock>,
        memory: Arc<ProductMemory>,
        metrics: Arc<Metrics>,
        strategies: Arc<Registry>,
        forget_on_return: bool,
    ) -> Lifecycle {
        Lifecycle {
            pool,
            redis,
            memory,
            metrics,
            strategies,
            forget_on_return,
            sweep: Arc::default(),
        }
    }

    /// Pauses (`true`) or resumes this instance's expiry sweep; returns once no round of it is
    /// running, so nothing it does is seen after a pause is answered.
    pub async fn pause_sweep(&self, paused: bool) {
        self.sweep.set(paused).await;
    }

    /// Whether this instance's expiry sweep is paused.
    pub fn sweep_paused(&self) -> bool {
        self.sweep.paused()
    }

    /// Pays the buyer's reserved order before its deadline; the order as it now stands.
    pub async fn pay(&self, key: PurchaseKey<'_>, check: Check) -> Result<Order, LifeError> {
        let order = self.order(key).await?;
        match check {
            Check::Conditional => {
                if order.state() == OrderState::Reserved {
                    if order_life::pay(&self.pool, order.order_id).await? {
                        self.metrics.order_paid();
                        return self.order(key).await;
                    }
                    return Err(LifeError::Refused(self.why_not(key).await?));
                }
                Err(LifeError::Refused(refusal(&order)))
            }
            Check::Unchecked => {
                let mut conn = self.pool.acquire().await?;
                order_life::force_state(conn.conn(), order.order_id, OrderState::Paid).await?;
                self.metrics.order_paid();
                drop(conn);
                self.order(key).await
            }
        }
    }

    /// Cancels the buyer's reserved order and gives its units back; the order as it now
    /// stands. `hold` pauses inside the transition (fault injection).
    pub async fn cancel(
        &self,
        key: PurchaseKey<'_>,
        check: Check,
        hold: Option<Duration>,
    ) -> Result<Order, LifeError> {
        let order = self.order(key).await?;
        if order.state() != OrderState::Reserved {
            return Err(LifeError::Refused(refusal(&order)));
        }
        let home = self.home_of(order.product_id).await?;
        let target = home::Target::of(&order, home);
        if !self.end(&target, End::Cancel, check, hold).await? {
            return Err(LifeError::Refused(self.why_not(key).await?));
        }
        self.order(key).await
    }

    /// Ends one order (`Expire`: only if it is due) and gives its units back: whether this
    /// call made the transition.
    pub(crate) async fn end(
        &self,
        target: &home::Target,
        end: End,
        check: Check,
        hold: Option<Duration>,
    ) -> Result<bool, LifeError> {
        let ended = home::end(self, target, end, check, hold).await?;
        if ended {
            match end {
                End::Expire => self.metrics.orders_expired(1),
                End::Cancel => self.metrics.order_cancelled(),
            }
        }
        Ok(ended)
    }

    /// The order of the purchase, or why there is none to act on.
    async fn order(&self, key: PurchaseKey<'_>) -> Result<Order, LifeError> {
        let found = match orders::find(&self.pool, key).await? {
            Some(order) => Some(order),
            None => {
                let waiting = match &self.redis {
                    Some(redis) => redis.is_waiting(key).await?,
                    None => false,
                };
                if waiting {
                    return Err(LifeError::Refused(Refused::Pending));
                }
                // A consumer commits the order before it forgets the entry as waiting: one
                // that placed it between the two reads above left it in the database.
                orders::find(&self.pool, key).await?
            }
        };
        match found {
            Some(order) if order.state() == OrderState::Voided => {
                Err(LifeError::Refused(Refused::Voided))
            }
            Some(order) => Ok(order),
            None => Err(LifeError::Refused(Refused::NoOrder)),
        }
    }

    /// Why a conditional transition of a reserved order changed nothing: where it is now.
    async fn why_not(&self, key: PurchaseKey<'_>) -> Result<Refused, LifeError> {
        Ok(refusal(&self.order(key).await?))
    }

    /// The lock a return of `product`'s units sold through `strategy` must hold, taken; `None`
    /// if it needs none (see the module docs). Its wait is counted in the metrics.
    async fn lock_for_return(
        &self,
        product: u64,
        strategy: Option<Strategy>,
    ) -> Result<Option<HeldForReturn>, LifeError> {
        let Some(strategy) = strategy else {
            return Ok(None);
        };
        let asked = Instant::now();
        let lock = (self.strategies.get(strategy).lock_for_return(product).await)
            .map_err(LifeError::Lock)?;
        let granted = Instant::now();
        Ok(lock.map(|lock| {
            self.metrics.return_lock_waited(granted - asked);
            HeldForReturn { lock, granted }
        }))
    }

    async fn home_of(&self, product: u64) -> Result<Home, LifeError> {
        let rules = crate::db::products::rules(&self.pool, product).await?;
        Ok(rules.map_or(Home::Row, |r| r.home))
    }

    /// Units of `product` came back: this instance forgets it was sold out, and tells the
    /// others (see [`crate::product_memory`]). The telling goes on apart: a return to the
    /// database waits for no Redis, which may not answer.
    fn stock_back(&self, product: u64) {
        if !self.forget_on_return {
            return;
        }
        self.memory.restocked(product);
        let Some(redis) = self.redis.clone() else {
            return;
        };
        tokio::spawn(async move {
            if let Err(e) = redis.announce(product, News::Restocked).await {
                tracing::warn!(product, error = %e,
                    "could not announce returned units; other instances forget within their memory's lifetime");
            }
        });
    }
}

/// A seller's lock a return holds, and when it was granted: what the purchases queued for the
/// same lock wait behind is this hold (`seckill_return_lock_held_seconds_total`).
pub(super) struct HeldForReturn {
    lock: ReturnLock,
    granted: Instant,
}

impl HeldForReturn {
    /// Commits the return's transaction under the lock, then gives it back.
    pub(super) async fn commit(
        self,
        tx: crate::db::engine::Tx<'_>,
        metrics: &Metrics,
    ) -> Result<(), sqlx::Error> {
        let committed = self.lock.commit(tx).await;
        metrics.return_lock_held(self.granted.elapsed());
        committed
    }

    /// Gives the lock back after a return that changed nothing.
    pub(super) async fn release(self, metrics: &Metrics) {
        self.lock.release().await;
        metrics.return_lock_held(self.granted.elapsed());
    }
}

/// Why an order in its current state refuses a transition.
fn refusal(order: &Order) -> Refused {
    match order.state().stage() {
        None => Refused::Voided,
        Some(OrderStage::Paid) => Refused::Paid,
        Some(OrderStage::Expired) => Refused::Expired,
        Some(OrderStage::Cancelled) => Refused::Cancelled,
        // Still reserved after a conditional transition changed nothing: its deadline passed
        // (the sweep has not got to it yet).
        Some(OrderStage::Reserved) => Refused::Expired,
    }
}
