//! Stock-deduction strategies: one trait, one file per strategy, and the registry that names them.
//!
//! A flash sale is many buyers racing for a few units of one hot row. Every strategy here
//! answers the same question — "may this buyer have `quantity` units, and if so record the
//! order" — in a different way, and the differences are the point of the project: some are
//! wrong under concurrency on purpose (`naive`, `unchecked`, `local-mutex`), the others are
//! correct at different costs.
//!
//! Adding a strategy is one file implementing [`StockStrategy`] and one line in
//! [`Registry::with_builtins`] (or in `backends.rs` for one that needs an outside lock service).

pub mod conditional;
pub mod db_lock;
pub mod local_mutex;
pub mod locked;
pub mod naive;
pub mod optimistic;
pub mod pessimistic;
pub mod unchecked;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use locks::DistributedLock;
use serde::Serialize;
use sqlx::MySqlPool;

use crate::db::errors::{DbFailure, classify};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A stock-deduction strategy.
///
/// # Contract
///
/// * **Success** (`Ok(Placed)`) means: `purchase.quantity` units were taken from the product's
///   stock and exactly one order row with `purchase.request_id` was inserted, *in one
///   transaction* — both are visible to every later reader, or neither is. Whether two
///   concurrent successes can both have taken "the last unit" is exactly what separates the
///   safe strategies from the unsafe ones; [`StrategyInfo::safe`] says which is which.
/// * **Failure** leaves the stock and the orders as they were: [`PurchaseError::SoldOut`] and
///   [`PurchaseError::UnknownProduct`] are answers, [`PurchaseError::Busy`] means "not within
///   the wait budget, try again", [`PurchaseError::Unavailable`] means a backend could not be
///   reached, and [`PurchaseError::LockLost`] means a fenced write was refused because a newer
///   lock holder had claimed the product (the purchase did not happen).
/// * **Idempotency.** An order whose `request_id` already exists fails with
///   [`PurchaseError::Duplicate`] and its deduction is rolled back; the caller then answers with
///   the original order. No strategy checks for duplicates beforehand: the unique constraint
///   is the only arbiter, so twenty concurrent retries of one click still make one order.
/// * **Fault injection.** A strategy calls [`Purchase::hold`] once, inside its critical section
///   (after it decided there is stock, before that decision is written), so tests and
///   scenarios can widen race windows or outlive a lock lease.
/// * **Cancellation.** Dropping the future rolls back the open transaction (sqlx does so when
///   the connection returns to the pool) and drops any lock guard (which releases it).
pub trait StockStrategy: Send + Sync {
    /// Takes `purchase.quantity` units and records the order, or says why not.
    fn purchase<'a>(
        &'a self,
        purchase: &'a Purchase,
    ) -> BoxFuture<'a, Result<Placed, PurchaseError>>;
}

/// One purchase as a strategy sees it (already validated).
#[derive(Debug)]
pub struct Purchase {
    pub product_id: u64,
    pub user_id: String,
    pub quantity: u32,
    pub request_id: String,
    /// Recorded in the order row.
    pub strategy: String,
    /// Injected pause inside the critical section (`X-Seckill-Hold-Ms`, when allowed).
    pub hold: Option<Duration>,
    /// What the strategy had to do, for the metrics.
    pub stats: PurchaseStats,
}

impl Purchase {
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
}

impl PurchaseStats {
    pub fn add_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub fn retries(&self) -> u32 {
        self.retries.load(Ordering::Relaxed)
    }

    pub fn set_lock_wait(&self, waited: Duration) {
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.lock_wait_us.store(us, Ordering::Relaxed);
    }

    /// How long the strategy waited for its lock, if it took one.
    pub fn lock_wait(&self) -> Option<Duration> {
        match self.lock_wait_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
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
    #[error("no such product")]
    UnknownProduct,
    #[error("an order with this request id already exists")]
    Duplicate,
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    LockLost(String),
    #[error("backend unavailable: {0}")]
    Unavailable(#[source] BoxError),
    #[error("internal error: {0}")]
    Internal(#[source] BoxError),
}

impl From<sqlx::Error> for PurchaseError {
    fn from(e: sqlx::Error) -> PurchaseError {
        match classify(&e) {
            DbFailure::Unavailable => PurchaseError::Unavailable(Box::new(e)),
            DbFailure::Busy => PurchaseError::Busy(format!("row lock not obtained: {e}")),
            DbFailure::Duplicate => PurchaseError::Duplicate,
            DbFailure::Other => PurchaseError::Internal(Box::new(e)),
        }
    }
}

/// What `GET /api/strategies` shows about a strategy.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StrategyInfo {
    pub name: String,
    /// One line: what it does.
    pub description: String,
    /// What it needs: `mariadb`, `process`, `redis`, …
    pub backend: String,
    /// Whether it keeps `sold ≤ initial stock` under concurrency across instances.
    pub safe: bool,
}

/// What strategies are built from.
#[derive(Debug, Clone)]
pub struct Deps {
    pub pool: MySqlPool,
    /// The pool of the database lock table (see [`crate::db::lock_pool`]).
    pub lock_pool: MySqlPool,
    pub lock_lease: Duration,
    pub lock_wait: Duration,
    /// Prepended to every lock name.
    pub lock_prefix: String,
    pub optimistic_retries: u32,
}

/// Strategies by name, in registration order.
pub struct Registry {
    deps: Deps,
    entries: Vec<(StrategyInfo, Arc<dyn StockStrategy>)>,
}

impl Registry {
    /// An empty registry.
    pub fn new(deps: Deps) -> Registry {
        Registry {
            deps,
            entries: Vec::new(),
        }
    }

    /// Every strategy that needs nothing but the database (and the process).
    #[rustfmt::skip]
    pub fn with_builtins(deps: Deps) -> Registry {
        let pool = deps.pool.clone();
        let mut r = Registry::new(deps.clone());
        r.register("naive", "reads stock, computes in the app, writes the absolute value back", "mariadb", false, naive::Naive::new(pool.clone()));
        r.register("unchecked", "checks stock, then `SET stock = stock - q` with no guard in the UPDATE", "mariadb", false, unchecked::Unchecked::new(pool.clone()));
        r.register("local-mutex", "`naive` inside a per-product in-process mutex: correct with one instance only", "process", false, local_mutex::LocalMutex::new(pool.clone()));
        r.register("conditional", "`UPDATE … SET stock = stock - q WHERE stock >= q` in one statement", "mariadb", true, conditional::Conditional::new(pool.clone()));
        r.register("optimistic", "reads stock and version, `UPDATE … WHERE version = v`, bounded jittered retries", "mariadb", true, optimistic::Optimistic::new(pool.clone(), deps.optimistic_retries));
        r.register("pessimistic", "`SELECT … FOR UPDATE` in a transaction: buyers queue on the row lock", "mariadb", true, pessimistic::Pessimistic::new(pool.clone(), false));
        r.register("pessimistic-nowait", "`SELECT … FOR UPDATE NOWAIT`: answers busy instead of queueing", "mariadb", true, pessimistic::Pessimistic::new(pool.clone(), true));
        let lease_only = Arc::new(db_lock::DbLock::leased(deps.lock_pool.clone()));
        let renewed = Arc::new(db_lock::DbLock::renewed(deps.lock_pool.clone()));
        r.register_locked("db-lock", "lock row in a lock table (unique name, expiry, release by row id); stock read-modify-write inside", "mariadb", true, Some(lease_only.clone()), false);
        r.register_locked("db-lock-fenced", "`db-lock`, and the stock write is fenced by the lock row's id", "mariadb", true, Some(lease_only), true);
        r.register_locked("db-lock-renewed", "`db-lock` with a renewal task that extends the lease while the holder lives", "mariadb", true, Some(renewed), false);
        r
    }

    /// Adds a strategy; a later registration under the same name replaces the earlier one.
    pub fn register(
        &mut self,
        name: &str,
        description: &str,
        backend: &str,
        safe: bool,
        strategy: impl StockStrategy + 'static,
    ) {
        self.insert(name, description, backend, safe, Arc::new(strategy));
    }

    /// Adds a [`locked::Locked`] strategy over `lock`; with `None` (its backend is not
    /// configured or could not be reached at start-up) the strategy answers
    /// `backend_unavailable`.
    pub fn register_locked(
        &mut self,
        name: &str,
        description: &str,
        backend: &str,
        safe: bool,
        lock: Option<Arc<dyn DistributedLock>>,
        fenced: bool,
    ) {
        let strategy = locked::Locked::new(&self.deps, lock, fenced);
        self.insert(name, description, backend, safe, Arc::new(strategy));
    }

    fn insert(
        &mut self,
        name: &str,
        description: &str,
        backend: &str,
        safe: bool,
        strategy: Arc<dyn StockStrategy>,
    ) {
        let info = StrategyInfo {
            name: name.to_string(),
            description: description.to_string(),
            backend: backend.to_string(),
            safe,
        };
        match self.entries.iter_mut().find(|(i, _)| i.name == name) {
            Some(entry) => *entry = (info, strategy),
            None => self.entries.push((info, strategy)),
        }
    }

    /// The strategy registered under `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn StockStrategy>> {
        self.entries
            .iter()
            .find(|(info, _)| info.name == name)
            .map(|(_, s)| s)
    }

    /// Every strategy's description, in registration order.
    pub fn infos(&self) -> impl Iterator<Item = &StrategyInfo> {
        self.entries.iter().map(|(info, _)| info)
    }
}
