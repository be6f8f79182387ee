//! The expiry sweep: a task in every instance that expires the reserved orders past their
//! payment deadline, and finishes the returns a dead instance left half-way.
//!
//! **Several instances, no coordinator.** Every instance sweeps every product: each reads a
//! bounded batch of due orders (oldest deadline first, one range of the index `orders_due`) and
//! ends each with the conditional transition, so an order two sweeps find at once is expired by
//! exactly one of them (the other's `UPDATE` changes 0 rows). An instance that dies mid-sweep
//! leaves each order either untouched (its transaction rolled back: still due, the next sweep
//! of any instance takes it) or, for Redis-held stock and for the units of a row that an
//! unfenced locked strategy sold, `expiring` with its units on the way:
//! any instance's sweep gives them back once they have been on their way longer than the
//! return grace (a live instance is normally done in milliseconds; running the give-back twice
//! is harmless, the grace only spares the work). Nothing is forgotten and nothing is done twice.
//!
//! The due orders of a product whose stock is its row are expired together, in one
//! transaction that writes the row once
//! ([`expire`](crate::db::order_life::expire)): every return is a write of
//! the very row the purchases queue on, and one per order would put a batch of them in that
//! queue. (One batch per strategy that sold them: the units an unfenced locked strategy
//! sold go back holding its lock, in a second step in which the lock covers only the row's
//! write and the commit, see [`home::expire_in_database`].) Those of a product whose stock is
//! in Redis are expired together too, each step once for the batch
//! ([`home::expire_from_redis`]): one transaction moves them to `expiring`, one script gives
//! every charge back, one update records the arrivals — three round trips instead of three per
//! order, on the Redis connection every purchase of the product shares.
//! Returns a dead instance left half-way are finished the same way, a batch per product. Those
//! of a product whose stock is in buckets are expired together as well, in one transaction that
//! writes each bucket it gives units to once, last
//! ([`expire`](crate::db::order_life::expire)): one by one,
//! each return a transaction queued on a bucket behind its purchases, the sweep of a busy
//! product fell ever further behind the orders falling due.
//!
//! **Each store on its own.** The stock kept in the database (rows, buckets) and the stock kept
//! in Redis are swept by two loops, each reading only the orders of the products it keeps: a
//! Redis that does not answer, whose every give-back waits out its timeout, holds up no return
//! to a row. Within a round, each batch (a product's due orders, or its returns left half-way)
//! is tried whatever happened to the others; one that fails is logged, counted
//! (`seckill_expiry_failures_total`) and left for a later round. Redis-held orders moved to
//! `expiring` before Redis failed to take their units are finished after the return grace, as
//! a dead instance's are: once, by their charge records. An instance without Redis leaves the
//! Redis-held orders to the instances that have it.
//!
//! A full batch is followed at once by the next; otherwise the loop sleeps its interval. Each
//! round sets the metrics: orders expired (a counter, per instance) and how late the oldest
//! overdue order is (a gauge: a sweep falling behind shows here first).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::{RwLock, RwLockReadGuard, watch};

pub use crate::api::ExpiryRound as Round;

use super::home::{self, Target};
use super::{Check, End, LifeError, Lifecycle};
use crate::api::{Home, Strategy};
use crate::db::due;
use crate::db::orders::OrderState;

/// How the sweep runs.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Pause between rounds that found less than a batch.
    pub interval: Duration,
    /// Most orders one round reads (and ends).
    pub batch: u32,
    /// How long an order's units must have been on their way back before a sweep finishes
    /// the return (the instance that started it is presumed dead).
    pub return_grace: Duration,
}

/// Pauses and resumes the sweep (`PUT /api/expiry`: an operator holding expiry while the
/// payment provider is down, the benchmark measuring what the sweep costs the purchases beside
/// it). A paused sweep runs no round and no query; the orders wait, still due, and the first
/// round after the resume takes them.
#[derive(Debug, Default)]
pub struct Switch {
    paused: watch::Sender<bool>,
    /// Read through a round (each store's loop runs its own), so that a pause can wait for
    /// the rounds in progress.
    running: RwLock<()>,
}

impl Switch {
    pub(super) fn paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Sets the switch; returns when no round is running.
    pub(super) async fn set(&self, paused: bool) {
        self.paused.send_replace(paused);
        drop(self.running.write().await);
    }

    /// Waits until the sweep may run, and holds the round's guard.
    async fn next_round(&self) -> RwLockReadGuard<'_, ()> {
        loop {
            let mut resumed = self.paused.subscribe();
            // The sender lives as long as `self`: `wait_for` cannot fail while it is borrowed.
            let _ = resumed.wait_for(|paused| !paused).await;
            let guard = self.running.read().await;
            if !self.paused() {
                return guard;
            }
        }
    }
}

/// Where a sweep gives units back: each store is swept by a loop of its own, reading only the
/// orders of the products it keeps (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    /// The database: a product's row, or its buckets.
    Database,
    /// The Redis counter.
    Redis,
}

impl Store {
    fn homes(self) -> &'static [Home] {
        match self {
            Store::Database => &[Home::Row, Home::Buckets],
            Store::Redis => &[Home::Redis, Home::RedisSplit],
        }
    }
}

/// Sweeps for ever at `pace`, but for the time it is paused: a loop for the stock kept in the
/// database and, with Redis configured, one for the stock kept in Redis.
pub async fn run(life: Lifecycle, pace: Pace) {
    let redis = async {
        if life.redis.is_some() {
            sweep(&life, Store::Redis, pace).await;
        }
    };
    tokio::join!(sweep(&life, Store::Database, pace), redis);
}

/// The rounds of one store's loop.
async fn sweep(life: &Lifecycle, store: Store, pace: Pace) {
    loop {
        let running = life.sweep.next_round().await;
        let full = match pass(life, store, None, pace, Check::Conditional, None).await {
            Ok(pass) => pass.done.expired + pass.done.lost_races >= u64::from(pace.batch),
            Err(e) => {
                tracing::warn!(?store, error = %e, "an expiry sweep failed; trying again");
                false
            }
        };
        if store == Store::Database {
            match life.oldest_overdue().await {
                Ok(late) => life.metrics.set_oldest_overdue(late),
                Err(e) => tracing::warn!(error = %e, "could not read the oldest overdue order"),
            }
        }
        drop(running);
        if !full {
            tokio::time::sleep(pace.interval).await;
        }
    }
}

/// One round over the due orders (of `product`, or of all) and the returns left half-way, in
/// every store. Each batch is tried, whatever happened to the others; the first that failed
/// is the answer then.
pub async fn round(
    life: &Lifecycle,
    product: Option<u64>,
    pace: Pace,
    check: Check,
    hold: Option<Duration>,
) -> Result<Round, LifeError> {
    let mut done = Round::default();
    for store in [Store::Database, Store::Redis] {
        let pass = pass(life, store, product, pace, check, hold).await?;
        if let Some(failed) = pass.failed {
            return Err(failed);
        }
        done.expired += pass.done.expired;
        done.lost_races += pass.done.lost_races;
        done.returns_finished += pass.done.returns_finished;
    }
    Ok(done)
}

/// What one store's round did, and the first of its batches that failed.
#[derive(Default)]
struct Pass {
    done: Round,
    failed: Option<LifeError>,
}

impl Pass {
    /// A batch of `product`'s orders failed: it is logged and counted, its orders wait for a
    /// later round, and the round goes on with the other batches.
    fn failed(&mut self, life: &Lifecycle, product: u64, what: &str, e: LifeError) {
        tracing::warn!(product, error = %e, "{what} failed; left for a later round");
        life.metrics.sweep_failed();
        self.failed.get_or_insert(e);
    }
}

/// One round over the orders of the products `store` keeps: their returns left half-way, then
/// their due orders, a batch per product. Fails only when the orders cannot be read.
async fn pass(
    life: &Lifecycle,
    store: Store,
    product: Option<u64>,
    pace: Pace,
    check: Check,
    hold: Option<Duration>,
) -> Result<Pass, LifeError> {
    let mut pass = Pass::default();
    let grace_ms = u64::try_from(pace.return_grace.as_millis()).unwrap_or(u64::MAX);
    // The returns left half-way, a batch per product, state and (for a row) the seller,
    // whose lock the row's give-back may have to hold.
    type Stuck = BTreeMap<(u64, &'static str, Option<Strategy>), (OrderState, Vec<Target>)>;
    let mut stuck = Stuck::new();
    let homes = store.homes();
    for due in due::returning(&life.pool, homes, product, grace_ms, pace.batch).await? {
        let Some(target) = Target::of_due(&due) else {
            continue;
        };
        let state = due.state();
        (stuck.entry((target.product_id, state.name(), target.row_seller())))
            .or_insert_with(|| (state, Vec::new()))
            .1
            .push(target);
    }
    for ((product, _, seller), (state, targets)) in stuck {
        let finished = match targets[0].home {
            Home::Redis | Home::RedisSplit => {
                let targets: Vec<&Target> = targets.iter().collect();
                home::finish_returns(life, product, &targets, state).await
            }
            Home::Row => {
                let orders: Vec<(u64, u32)> =
                    targets.iter().map(|t| (t.order_id, t.quantity)).collect();
                home::finish_in_row(life, product, seller, &orders, state).await
            }
            Home::Buckets => {
                // Never on their way: a bucket's return is one transaction.
                tracing::error!(
                    product,
                    "bucketed stock's orders on their way: left as they are"
                );
                continue;
            }
        };
        match finished {
            Ok(()) => {
                life.metrics.returns_finished(targets.len() as u64);
                pass.done.returns_finished += targets.len() as u64;
            }
            Err(e) => pass.failed(life, product, "finishing returns left half-way", e),
        }
    }
    // The due orders of each product, to end together (a product has one home); a row's by
    // the strategy that sold them, whose lock their return may have to hold.
    let mut batches: BTreeMap<(u64, Option<Strategy>), Vec<Target>> = BTreeMap::new();
    for due in due::due(&life.pool, homes, product, pace.batch).await? {
        let Some(target) = Target::of_due(&due) else {
            tracing::error!(order = due.order_id, home = %due.home, "an order of an unknown home");
            continue;
        };
        if check == Check::Conditional && hold.is_none() {
            (batches
                .entry((target.product_id, target.row_seller()))
                .or_default())
            .push(target);
            continue;
        }
        match life.end(&target, End::Expire, check, hold).await {
            Ok(true) => pass.done.expired += 1,
            Ok(false) => pass.done.lost_races += 1,
            Err(e) => pass.failed(life, target.product_id, "expiring a due order", e),
        }
    }
    for ((product, seller), targets) in batches {
        let expired = match targets[0].home {
            Home::Redis | Home::RedisSplit => {
                home::expire_from_redis(life, product, &targets).await
            }
            _ => home::expire_in_database(life, product, seller, &targets).await,
        };
        match expired {
            Ok(expired) => {
                pass.done.expired += expired;
                pass.done.lost_races += targets.len() as u64 - expired;
            }
            Err(e) => pass.failed(life, product, "expiring due orders", e),
        }
    }
    Ok(pass)
}

impl Lifecycle {
    async fn oldest_overdue(&self) -> Result<Duration, sqlx::Error> {
        let ms = due::oldest_overdue_ms(&self.pool).await?;
        Ok(Duration::from_millis(ms))
    }
}
