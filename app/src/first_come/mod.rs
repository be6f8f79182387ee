//! First come, first served: a product whose rules say `first_come` gives each click its place
//! in one queue, kept in Redis, when the click comes in — before the instance decides whether it
//! has room for it — and lets only as many clicks through to buy as there are units.
//!
//! Why: without it, an instance that works on as many purchases as it may refuses the rest
//! `503 overloaded` as they come, so in a flood a click at the opening is refused as readily as
//! one a second later, and the units go to whoever happened to find room — a lottery the people
//! in the sale call unfair. With it:
//!
//! - a click's place is decided once, against every click of every instance ([`scripts::TAKE`],
//!   one atomic script): the first clicks, up to the units, have a place; a click behind them is
//!   refused `sold_out` at once — every unit is promised to someone earlier;
//! - a click with a place is not refused for want of room: it waits for one
//!   ([`crate::overload::Limiter::admit_in_turn`]), up to the request's deadline, and its
//!   strategy then sells it the unit kept for it — the queue decides who buys, the strategy still
//!   guards the stock (a queue that promised too much is refused by the stock, never oversold);
//! - a click that did not buy (refused by its strategy, out of time, a duplicate whose original
//!   bought) gives its unit back to the clicks after it ([`scripts::SETTLE`]); so do the units of
//!   orders that expire or are cancelled ([`crate::db::orders::units_back_home`], counted at most
//!   every [`COUNT_BACK_EVERY`] by each instance, when a click finds every unit promised);
//! - once every unit is promised and no click is being served, a click goes the ordinary way:
//!   the stock refuses it `sold_out`, and the instance remembers the product sold out.
//!
//! What it costs: one Redis script per click that reaches it (a second, to settle, per click
//! with a place), until the instance remembers the product sold out; clicks that must wait for
//! room wait. A buyer with a click being served is refused `limit_reached` for a second click
//! past the per-user limit, without a place (the stock's own count is the limit's guard; this
//! one keeps a double-click from holding two places). A product whose queue Redis does not have
//! (Redis restarted empty) is served the ordinary way.

pub mod scripts;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::db::Db;

use crate::db::orders;
use crate::redis_stock::{RedisStock, RedisStockError, charge};
use crate::strategy::Purchase;

/// How often an instance counts, at most, the units of a product back home.
pub const COUNT_BACK_EVERY: Duration = Duration::from_millis(200);

/// The queue could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error(transparent)]
    Redis(#[from] RedisStockError),
    #[error("counting the units back home: {0}")]
    Database(#[from] sqlx::Error),
}

/// A click's place in the queue, as [`FirstCome::take`] found it.
#[derive(Debug)]
pub enum Turn {
    /// A unit is kept for it: serve it, then [settle](Ticket::settle) the ticket.
    Yours(Ticket),
    /// Every unit is promised to earlier clicks, some still being served: `sold_out`.
    Behind,
    /// Every unit is promised and none is being served: the ordinary way decides.
    Settled,
    /// This click is being served already (a resend while its first is on its way).
    Pending,
    /// The buyer's clicks being served hold the per-user limit already.
    OverLimit,
    /// The product has no queue: the ordinary way.
    NotOpened,
}

/// A click with a place, to be [settled](Ticket::settle) once it is answered. One dropped
/// unsettled — its buyer hung up while it waited for room — gives its place to the next.
pub struct Ticket {
    product: u64,
    field: String,
    /// Its place in the queue, from 1.
    pub place: u64,
    /// The queue, until settled.
    queue: Option<Arc<FirstCome>>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("product", &self.product)
            .field("place", &self.place)
            .finish_non_exhaustive()
    }
}

impl Ticket {
    /// Its click was answered: its unit stays promised if `kept` (sold to it), or goes to the
    /// clicks after it.
    pub async fn settle(mut self, kept: bool) -> Result<(), QueueError> {
        let Some(queue) = self.queue.take() else {
            return Ok(());
        };
        queue.settle(self.product, &self.field, kept).await
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let Some(queue) = self.queue.take() else {
            return;
        };
        let (product, field) = (self.product, std::mem::take(&mut self.field));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = queue.settle(product, &field, false).await {
                    tracing::warn!(product, error = %e,
                        "could not give back a place; it is given up at its deadline");
                }
            });
        }
    }
}

/// The first-come queues of every product sold so, in Redis.
pub struct FirstCome {
    redis: RedisStock,
    pool: Db,
    /// How long a place is kept for a click its instance never settles.
    keep_place: Duration,
    /// When this instance last counted the units of each product back home.
    counted: Mutex<HashMap<u64, Instant>>,
}

impl FirstCome {
    /// Queues kept in `redis`; a place given up `keep_place` after it was given if its click is
    /// never settled (its instance died serving it).
    pub fn new(redis: RedisStock, pool: Db, keep_place: Duration) -> FirstCome {
        FirstCome {
            redis,
            pool,
            keep_place,
            counted: Mutex::new(HashMap::new()),
        }
    }

    /// Opens `product`'s queue afresh for `stock` units (a reset).
    pub async fn open(&self, product: u64, stock: i64) -> Result<(), QueueError> {
        let keys = self.redis.keys();
        let _: i64 = (self.redis)
            .invoke(
                scripts::OPEN
                    .key(keys.arrivals(product))
                    .key(keys.serving(product))
                    .arg(stock),
            )
            .await?;
        self.forget_count(product);
        Ok(())
    }

    /// Removes `product`'s queue (a reset to a product not sold first come).
    pub async fn close(&self, product: u64) -> Result<(), QueueError> {
        let keys = self.redis.keys();
        let mut del = deadpool_redis::redis::cmd("DEL");
        del.arg(keys.arrivals(product)).arg(keys.serving(product));
        let _: i64 = self.redis.query(&del).await?;
        Ok(())
    }

    /// The place of `purchase`'s click. A click that finds every unit promised has the units
    /// back home counted first, if this instance has not counted them lately.
    pub async fn take(self: &Arc<Self>, purchase: &Purchase) -> Result<Turn, QueueError> {
        let turn = self.take_counted(purchase, None).await?;
        if !matches!(turn, Turn::Behind | Turn::Settled) || !self.count_due(purchase.product_id) {
            return Ok(turn);
        }
        let back = orders::units_back_home(&self.pool, purchase.product_id).await?;
        self.take_counted(purchase, Some(back)).await
    }

    async fn take_counted(
        self: &Arc<Self>,
        purchase: &Purchase,
        back: Option<i64>,
    ) -> Result<Turn, QueueError> {
        let keys = self.redis.keys();
        let product = purchase.product_id;
        let field = charge::field(&purchase.user_id, &purchase.request_id);
        let (code, place): (i64, u64) = (self.redis)
            .invoke(
                scripts::TAKE
                    .key(keys.arrivals(product))
                    .key(keys.serving(product))
                    .arg(&field)
                    .arg(&purchase.user_id)
                    .arg(purchase.quantity)
                    .arg(purchase.per_user_limit)
                    .arg(back.unwrap_or(-1))
                    .arg(u64::try_from(self.keep_place.as_millis()).unwrap_or(u64::MAX)),
            )
            .await?;
        Ok(match code {
            scripts::YOURS => Turn::Yours(Ticket {
                product,
                field,
                place,
                queue: Some(Arc::clone(self)),
            }),
            scripts::BEHIND => Turn::Behind,
            scripts::SETTLED => Turn::Settled,
            scripts::PENDING => Turn::Pending,
            scripts::OVER_LIMIT => Turn::OverLimit,
            _ => Turn::NotOpened,
        })
    }

    /// Whether this instance is to count `product`'s units back home now; if so, it is counted
    /// as done.
    fn count_due(&self, product: u64) -> bool {
        let mut counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match counted.get(&product) {
            Some(at) if now.duration_since(*at) < COUNT_BACK_EVERY => false,
            _ => {
                // One entry per product sold first come that a click found full; a
                // deployment with more of them than this forgets the oldest counts at once.
                if counted.len() >= 10_000 {
                    counted.retain(|_, at| now.duration_since(*at) < COUNT_BACK_EVERY);
                }
                counted.insert(product, now);
                true
            }
        }
    }

    /// The next click to find `product` full counts its units back home (a reset).
    fn forget_count(&self, product: u64) {
        let mut counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        counted.remove(&product);
    }

    async fn settle(&self, product: u64, field: &str, kept: bool) -> Result<(), QueueError> {
        let keys = self.redis.keys();
        let _: i64 = (self.redis)
            .invoke(
                scripts::SETTLE
                    .key(keys.arrivals(product))
                    .key(keys.serving(product))
                    .arg(field)
                    .arg(u8::from(kept)),
            )
            .await?;
        Ok(())
    }
}
