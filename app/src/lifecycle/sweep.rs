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
//! transaction that writes the row once ([`order_life::expire_from_row`]): every return is a
//! write of the very row the purchases queue on, and one per order would put a batch of them in
//! that queue. (One batch per strategy that sold them: the units an unfenced locked strategy
//! sold go back holding its lock, in a second step in which the lock covers only the row's
//! write and the commit, see [`home::expire_in_database`].) Those of a product whose stock is
//! in Redis are expired together too, each step once for the batch
//! ([`home::expire_from_redis`]): one transaction moves them to `expiring`, one script gives
//! every charge back, one update records the arrivals — three round trips instead of three per
//! order, on the Redis connection every purchase of the product shares.
//! Returns a dead instance left half-way are finished the same way, a batch per product. Those
//! of a product whose stock is in buckets are expired together as well, in one transaction that
//! writes each bucket it gives units to once, last ([`order_life::expire_from_buckets`]): one by one,
//! each return a transaction queued on a bucket behind its purchases, the sweep of a busy
//! product fell ever further behind the orders falling due.
//!
//! A full batch is followed at once by the next; otherwise the sweep sleeps its interval. Each
//! round sets the metrics: orders expired (a counter, per instance) and how late the oldest
//! overdue order is (a gauge: a sweep falling behind shows here first).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::{Mutex, MutexGuard, watch};

pub use crate::api::ExpiryRound as Round;

use super::home::{self, Target};
use super::{Check, End, LifeError, Lifecycle};
use crate::api::{Home, Strategy};
use crate::db::order_life;
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
    /// Held through a round, so that a pause can wait for the round in progress.
    running: Mutex<()>,
}

impl Switch {
    pub(super) fn paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Sets the switch; returns when no round is running.
    pub(super) async fn set(&self, paused: bool) {
        self.paused.send_replace(paused);
        drop(self.running.lock().await);
    }

    /// Waits until the sweep may run, and holds the round's guard.
    async fn next_round(&self) -> MutexGuard<'_, ()> {
        loop {
            let mut resumed = self.paused.subscribe();
            // The sender lives as long as `self`: `wait_for` cannot fail while it is borrowed.
            let _ = resumed.wait_for(|paused| !paused).await;
            let guard = self.running.lock().await;
            if !self.paused() {
                return guard;
            }
        }
    }
}

/// Sweeps for ever at `pace`, but for the time it is paused.
pub async fn run(life: Lifecycle, pace: Pace) {
    loop {
        let running = life.sweep.next_round().await;
        let full = match round(&life, None, pace, Check::Conditional, None).await {
            Ok(round) => round.expired + round.lost_races >= u64::from(pace.batch),
            Err(e) => {
                tracing::warn!(error = %e, "an expiry sweep failed; trying again");
                false
            }
        };
        match life.oldest_overdue().await {
            Ok(late) => life.metrics.set_oldest_overdue(late),
            Err(e) => tracing::warn!(error = %e, "could not read the oldest overdue order"),
        }
        drop(running);
        if !full {
            tokio::time::sleep(pace.interval).await;
        }
    }
}

/// One round over the due orders (of `product`, or of all) and the returns left half-way.
pub async fn round(
    life: &Lifecycle,
    product: Option<u64>,
    pace: Pace,
    check: Check,
    hold: Option<Duration>,
) -> Result<Round, LifeError> {
    let mut done = Round::default();
    let grace_ms = u64::try_from(pace.return_grace.as_millis()).unwrap_or(u64::MAX);
    // The returns left half-way, a batch per product, state and (for a row) the seller,
    // whose lock the row's give-back may have to hold.
    type Stuck = BTreeMap<(u64, &'static str, Option<Strategy>), (OrderState, Vec<Target>)>;
    let mut stuck = Stuck::new();
    for due in order_life::returning(&life.pool, product, grace_ms, pace.batch).await? {
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
            Home::Redis => {
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
            Err(LifeError::Lock(e)) => {
                // They stay on their way, for a later round; the other batches go on.
                tracing::warn!(product, error = %e,
                    "could not take the lock these returns hold; they stay on their way");
                continue;
            }
            finished => finished?,
        }
        life.metrics.returns_finished(targets.len() as u64);
        done.returns_finished += targets.len() as u64;
    }
    // The due orders of each product, to end together (a product has one home); a row's by
    // the strategy that sold them, whose lock their return may have to hold.
    let mut batches: BTreeMap<(u64, Option<Strategy>), Vec<Target>> = BTreeMap::new();
    for due in order_life::due(&life.pool, product, pace.batch).await? {
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
        match life.end(&target, End::Expire, check, hold).await? {
            true => done.expired += 1,
            false => done.lost_races += 1,
        }
    }
    for ((product, seller), targets) in batches {
        let expired = match targets[0].home {
            Home::Redis => home::expire_from_redis(life, product, &targets).await?,
            _ => home::expire_in_database(life, product, seller, &targets).await?,
        };
        done.expired += expired;
        done.lost_races += targets.len() as u64 - expired;
    }
    Ok(done)
}

impl Lifecycle {
    async fn oldest_overdue(&self) -> Result<Duration, sqlx::Error> {
        let ms = order_life::oldest_overdue_ms(&self.pool).await?;
        Ok(Duration::from_millis(ms))
    }
}
