//! Stock-deduction strategies: one trait, one file per strategy, and the registry that builds
//! them from the catalogue's lines ([`crate::catalogue`]).
//!
//! A flash sale is many buyers racing for a few units of one hot row. Every strategy here
//! answers the same question — "may this buyer have `quantity` units, and if so record the
//! order" — in a different way, and the differences are the point of the project: some are
//! wrong under concurrency on purpose (`naive`, `unchecked`, `local-mutex`), the others are
//! correct at different costs.
//!
//! Adding a strategy is one file implementing [`StockStrategy`] and one line in
//! [`crate::catalogue`].

pub mod batched;
pub mod conditional;
mod full_queue;
mod held_lock;
pub mod local_mutex;
pub mod locked;
pub mod naive;
pub mod optimistic;
mod outcome;
pub mod pessimistic;
pub mod racy_limit;
pub mod redis_lua;
pub mod redis_lua_stream;
pub mod redis_split;
pub mod registry;
pub mod sharded;
pub mod unchecked;
pub mod under_lock;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::db::engine::{Db, Tx};
use futures::future::BoxFuture;

pub use crate::catalogue::{Fencing, Home, Kind, Safety, Service, Strategy};
pub use registry::{Locks, Registry};

use crate::db::errors::{DbFailure, classify};
use crate::db::orders::NewOrder;
use crate::metrics::Stage;
use crate::redis_stock::RedisStock;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What [`StockStrategy::purchase`] returns: the order, or why there is none.
pub type Purchasing<'a> = BoxFuture<'a, Result<Purchased, PurchaseError>>;

/// A stock-deduction strategy.
///
/// # Contract
///
/// * **Success** (`Ok(Purchased::Placed)`, answered `201`) means: `purchase.quantity` units
///   were taken from the product's stock and exactly one order row with `purchase.request_id`
///   was inserted, *in one transaction* — both are visible to every later reader, or neither is. Whether two
///   concurrent successes can both have taken "the last unit" is exactly what separates the
///   safe strategies from the unsafe ones; [`Safety`] says which is which. Where the stock
///   lives outside the order's transaction ([`Home::Redis`]), "one transaction" becomes "one
///   decision and a compensation": the units were taken from the counter and the order row is
///   committed; had the insert failed, the units would have been given back before answering.
/// * **Acceptance** (`Ok(Purchased::Accepted)`, answered `202` with the order's status URL)
///   means: the units were taken and the order was durably queued, in one atomic step; it is
///   placed in the database later, exactly once (by its purchase key), by a consumer. Until
///   then `GET /api/products/{id}/orders/{request_id}` says `pending`, afterwards `placed`.
/// * **Accounting.** The sale's truth is the database plus the stock's home: units in orders
///   are sold; units taken from the home without an order (and not waiting in the stream) are
///   undersell; orders beyond the initial stock are oversell (see [`crate::accounting`]).
/// * **Failure** leaves the stock and the orders as they were: [`PurchaseError::SoldOut`] and
///   [`PurchaseError::UnknownProduct`] are answers, [`PurchaseError::Busy`] means "not within
///   the wait budget, try again", [`PurchaseError::Overloaded`] "a bounded line is full, try
///   again later", [`PurchaseError::Unavailable`] means a backend could not be reached,
///   [`PurchaseError::StockLost`] that the backend holding the stock lost it, and
///   [`PurchaseError::LockLost`] means a fenced write was refused because a newer lock holder
///   had claimed the product (the purchase did not happen). The one exception is
///   [`PurchaseError::OutcomeUnknown`]: the `COMMIT` was sent and its answer lost, so the
///   purchase may or may not have happened; the caller looks the request id up.
/// * **Idempotency.** A purchase is named by its product, buyer and request id, compared byte
///   for byte ([`Purchase::key`]). An order of a purchase that already has one fails with
///   [`PurchaseError::Duplicate`] and its deduction is rolled back; the caller then answers with
///   the original order. The unique constraint is the only arbiter, so twenty concurrent
///   retries of one click still make one order: a strategy may look purchases up first
///   (`batched` does, so that one duplicate does not fail a whole batch; the Redis scripts
///   record the purchases their counter charged), but it names them exactly as the database
///   does, and never relies on that look-up alone.
/// * **Fault injection.** A strategy calls [`Purchase::hold`] once, inside its critical section
///   (after it decided there is stock, before that decision is written), so tests and
///   scenarios can widen race windows or outlive a lock lease.
/// * **Cancellation.** The service runs every purchase in a task of its own, so a buyer who
///   hangs up (or a request timeout) never cancels one: it finishes, or gives its stock back,
///   as if the buyer were still there. Dropping the future anyway — what a process killed in
///   the middle does — rolls back the open transaction (sqlx does so when the connection
///   returns to the pool) and drops any lock guard (which releases it); units taken from a
///   home outside the transaction (Redis) then stay taken without an order until `reconcile`.
pub trait StockStrategy: Send + Sync {
    /// Takes `purchase.quantity` units and records the order, or says why not.
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a>;

    /// The lock a return of units to the product's home must hold when the units were sold
    /// through this strategy, or `None` if a return needs none (the default).
    ///
    /// A strategy whose purchases read the stock and write back an absolute value under a
    /// lock, with nothing in the database checking what changed since the read (the unfenced
    /// locked strategies), keeps out only the writers that take its lock: a return made
    /// between a holder's read and its write is written over, and its units vanish. Taken by
    /// the return, the lock puts the return between two holders instead. Strategies whose
    /// writes are relative, conditional or checked against a version need no lock: a return
    /// lands in the row, and the next write builds on it or reads again.
    fn lock_for_return(
        &self,
        product_id: u64,
    ) -> BoxFuture<'_, Result<Option<ReturnLock>, PurchaseError>> {
        let _ = product_id;
        Box::pin(async { Ok(None) })
    }

    /// Whether the bounded queue this strategy's purchases wait in is believed full now, so
    /// that the admission limiter refuses the next purchase `503 overloaded` without running
    /// it, as it refuses past the limit. Never, by default: a queue the strategy sees without a
    /// round trip (`batched`'s) refuses as cheaply itself. See [`full_queue::FullQueue`].
    fn queue_full(&self) -> bool {
        false
    }

    /// How many of its purchases an instance admits at once whatever its admission limit
    /// says: never fewer than [`AtOnce::least`], never more than [`AtOnce::most`]. The limit
    /// (the admission limiter's, in `overload::limit`) learns how a strategy answers; these
    /// are what it cannot learn from the answers, the strategy's own shape. By default
    /// [`AtOnce::DEFAULT`].
    fn at_once(&self) -> AtOnce {
        AtOnce::DEFAULT
    }
}

/// How many of a strategy's purchases an instance admits at once, at the fewest and at the
/// most, whatever its admission limit says, and whether that limit follows its answers (see
/// [`StockStrategy::at_once`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtOnce {
    /// The limit never falls below it: a strategy that answers slower than the budget (a lock
    /// holder paused) stays reachable by a few purchases, and can show that it answers again.
    pub least: u32,
    /// The limit never rises past it; `None`: all the instance may hold (`--max-in-flight`).
    pub most: Option<u32>,
    /// Whether the limit follows the strategy's answers (Little's law, within the latency
    /// budget) or stays at its most. It may follow them when the purchases in flight wait on
    /// each other — a lock's holders one after another, a hot row's updates — so that fewer
    /// in flight spend less time inside each. Where the time inside is the strategy's own work
    /// — a batch's round trip, as long for one purchase as for two hundred on busy cores —
    /// admitting fewer only answers fewer: the rate falls, the limit with it, and so on down to
    /// the least.
    pub adaptive: bool,
}

impl AtOnce {
    /// At least four, at most all the instance may hold, as many as answer within the budget.
    pub const DEFAULT: AtOnce = AtOnce {
        least: 4,
        most: None,
        adaptive: true,
    };
}

/// A product's lock, held by a return of units sold through a strategy that needs it (see
/// [`StockStrategy::lock_for_return`]).
pub struct ReturnLock(held_lock::HeldLock);

impl ReturnLock {
    pub(crate) fn new(held: held_lock::HeldLock) -> ReturnLock {
        ReturnLock(held)
    }

    /// Commits the return's transaction under the lock, then gives the lock back: one lease
    /// later if the commit's outcome is unknown, as a purchase's (a return that commits after
    /// the next holder's read would be written over).
    pub async fn commit(self, tx: Tx<'_>) -> Result<(), sqlx::Error> {
        let committed = held_lock::commit_in_doubt(tx, &self.0.in_doubt).await;
        self.0.finish().await;
        committed
    }

    /// Gives the lock back after a return that changed nothing.
    pub async fn release(self) {
        self.0.finish().await;
    }
}

/// What a successful purchase did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purchased {
    /// The order is recorded (`201`).
    Placed(Placed),
    /// The units are taken and the order is queued; it is recorded later (`202`).
    Accepted,
}

impl From<Placed> for Purchased {
    fn from(placed: Placed) -> Purchased {
        Purchased::Placed(placed)
    }
}

/// Whether a per-user limit of `limit` can refuse anyone (see [`Purchase::counts_buyers`]).
pub fn limits_buyers(limit: i64) -> bool {
    limit < crate::api::MAX_STOCK
}

/// One purchase as a strategy sees it (already validated).
#[derive(Debug)]
pub struct Purchase {
    pub product_id: u64,
    pub user_id: String,
    pub quantity: u32,
    pub request_id: String,
    /// Recorded in the order row.
    pub strategy: Strategy,
    /// Units the buyer may hold of the product in all (its rules as the instance knows them).
    pub per_user_limit: i64,
    /// How long the buyer has to pay the order (the product's payment window).
    pub pay_within: Duration,
    /// The Redis epoch the instance knows the product's stock by (0: not kept in Redis, as far
    /// as it knows): the take scripts refuse a purchase whose product's marker is gone or
    /// behind it (see [`crate::redis_stock::epoch`]).
    pub redis_epoch: u64,
    /// The parts the product's Redis-held stock is split in (0: one counter; see
    /// [`crate::redis_stock::split`]).
    pub redis_parts: u32,
    /// Injected pause inside the critical section (`X-Seckill-Hold-Ms`, when allowed).
    pub hold: Option<Duration>,
    /// What the strategy had to do, for the metrics.
    pub stats: PurchaseStats,
}

impl Purchase {
    /// Whether the product's per-user limit can refuse anyone, and its buyers' units are
    /// counted: a limit of [`MAX_STOCK`](crate::api::MAX_STOCK) or more never can, since no
    /// product holds more units, and a product's limit changes only with a reset, which forgets
    /// its orders and counts. A count is a row the purchase locks until it commits, one
    /// statement more in every purchase's transaction, and for a batch the rows of all its
    /// buyers: a product nobody is limited on pays for none of it.
    pub fn counts_buyers(&self) -> bool {
        limits_buyers(self.per_user_limit)
    }

    /// The name of this purchase: product, buyer, request id.
    pub fn key(&self) -> crate::db::orders::PurchaseKey<'_> {
        crate::db::orders::PurchaseKey {
            product_id: self.product_id,
            user_id: &self.user_id,
            request_id: &self.request_id,
        }
    }

    /// The order row this purchase writes.
    pub fn new_order(&self, fencing_token: Option<u64>) -> NewOrder<'_> {
        NewOrder {
            product_id: self.product_id,
            user_id: &self.user_id,
            quantity: self.quantity,
            strategy: self.strategy.name(),
            request_id: &self.request_id,
            fencing_token,
            pay_within: self.pay_within,
        }
    }

    /// Sleeps for the injected pause, if any. Called once, inside the critical section.
    pub async fn hold(&self) {
        if let Some(pause) = self.hold {
            tokio::time::sleep(pause).await;
        }
    }
}

/// Counters a strategy fills in while it works.
#[derive(Debug, Default)]
pub struct PurchaseStats {
    retries: AtomicU32,
    lock_wait_us: AtomicU64,
    /// Calls sent while holding a lock, plus one (0: it held none whose calls were counted;
    /// see [`mod@under_lock`]).
    under_lock: AtomicU32,
    /// Nanoseconds spent in each [`Stage`] (0: not gone through), by its place in
    /// [`Stage::ALL`]; the lock's wait is `lock_wait_us`.
    stage_ns: [AtomicU64; Stage::COUNT],
}

impl PurchaseStats {
    pub fn add_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub fn retries(&self) -> u32 {
        self.retries.load(Ordering::Relaxed)
    }

    pub fn set_lock_wait(&self, waited: Duration) {
        self.lock_wait_us
            .store(crate::metrics::micros(waited), Ordering::Relaxed);
    }

    /// Adds `calls` sent while holding a lock ([`under_lock::counted`]).
    pub fn add_under_lock(&self, calls: u32) {
        let _ = (self.under_lock).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            Some(n.max(1).saturating_add(calls))
        });
    }

    /// The calls the purchase sent while holding a lock, if it held one and they were counted.
    pub fn under_lock(&self) -> Option<u32> {
        self.under_lock.load(Ordering::Relaxed).checked_sub(1)
    }

    /// How long the strategy waited for its lock, if it took one.
    pub fn lock_wait(&self) -> Option<Duration> {
        match self.lock_wait_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Adds `spent` to the purchase's time in `stage`.
    pub fn time(&self, stage: Stage, spent: Duration) {
        let ns = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.stage_ns[stage as usize].fetch_add(ns, Ordering::Relaxed);
    }

    /// The purchase's time in each stage it went through, as [`crate::metrics::Observation`]
    /// takes it.
    pub fn stages(&self) -> [Option<Duration>; Stage::COUNT] {
        let mut stages = [None; Stage::COUNT];
        for (spent, ns) in stages.iter_mut().zip(&self.stage_ns) {
            *spent = match ns.load(Ordering::Relaxed) {
                0 => None,
                ns => Some(Duration::from_nanos(ns)),
            };
        }
        stages[Stage::LockWait as usize] = self.lock_wait();
        stages
    }
}

/// A recorded order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub order_id: u64,
    /// The fencing token of the lock the purchase was made under, for lock-based strategies.
    pub fencing_token: Option<u64>,
}

/// Why a purchase did not happen.
#[derive(Debug, thiserror::Error)]
pub enum PurchaseError {
    #[error("not enough stock left")]
    SoldOut,
    /// The buyer would hold more units than the product's per-user limit.
    #[error("this buyer has bought as many units of this product as it allows")]
    LimitReached,
    #[error("no such product")]
    UnknownProduct,
    #[error("an order of this purchase (product, buyer, request id) already exists")]
    Duplicate,
    /// The purchase was charged already with other terms (quantity or strategy).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Busy(String),
    /// The database rolled the purchase's transaction back and said so — a deadlock victim, a
    /// write set a Galera cluster's certification refused (`1213`): nothing happened, and
    /// running it again is what the server asks. Answered `busy`, after the service's own
    /// retries (`--rollback-retries`).
    #[error("the database rolled the transaction back: {0}")]
    RolledBack(String),
    /// A bounded line this purchase would wait in (the batch's, the stream's) is full:
    /// refused at once, as the door refuses past capacity, and nothing was taken.
    #[error("the service is at capacity")]
    Overloaded,
    #[error("{0}")]
    LockLost(String),
    #[error("backend unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// Redis lost the product's stock (see [`crate::redis_stock::epoch`]): refused, nothing
    /// taken, until `reconcile` rebuilds it.
    #[error("Redis lost the product's stock; refused until it is reconciled")]
    StockLost,
    /// The `COMMIT` failed in transit: the server may have committed.
    #[error("the commit's outcome is unknown: {0}")]
    OutcomeUnknown(#[source] BoxError),
    #[error("internal error: {0}")]
    Internal(#[source] BoxError),
}

impl From<sqlx::Error> for PurchaseError {
    fn from(e: sqlx::Error) -> PurchaseError {
        match classify(&e) {
            DbFailure::RolledBack => PurchaseError::RolledBack(e.to_string()),
            DbFailure::Unavailable => PurchaseError::Unavailable(Box::new(e)),
            DbFailure::Busy => PurchaseError::Busy(format!("row lock not obtained: {e}")),
            DbFailure::Duplicate => PurchaseError::Duplicate,
            DbFailure::Other => PurchaseError::Internal(Box::new(e)),
        }
    }
}

/// What strategies are built from.
#[derive(Debug, Clone)]
pub struct Deps {
    pub pool: Db,
    /// The pool of the database lock table (see [`crate::db::lock_pool`]).
    pub lock_pool: Db,
    pub lock_lease: Duration,
    pub lock_wait: Duration,
    /// Prepended to every lock name.
    pub lock_prefix: String,
    pub optimistic_retries: u32,
    /// Where Redis-held stock lives, if Redis is configured.
    pub redis: Option<RedisStock>,
    /// How long `batched` collects purchases of one product before committing them.
    pub batch_window: Duration,
    /// Most purchases in one `batched` transaction.
    pub batch_max: u32,
    /// Purchases one `batched` line holds waiting (0: four batches' worth).
    pub batch_queue: u32,
    /// Most orders `redis-lua-stream` lets wait in the stream before it refuses purchases.
    pub stream_max_lag: u64,
    /// How long `redis-lua-stream` believes the stream full once found so.
    pub full_queue_memory: Duration,
    /// Most `optimistic` purchases an instance admits at once.
    pub optimistic_in_flight: u32,
    /// Whether `redis-split` moves units home from the other parts before it says sold out.
    pub split_fallback: bool,
}
