//! `redis-lua-stream`: the asynchronous form most seckill systems ship. One Lua script checks
//! and decrements the Redis counter, records the request id *and* appends the order to a Redis
//! Stream; the buyer is answered `202 Accepted` at once, and consumers (`--stream-consumers` per
//! instance, one consumer group) place the orders in MariaDB in batches.
//!
//! **Safe** (never oversells): the decision is the same atomic script as `redis-lua`, and the
//! order cannot be lost between the decision and the database, because the decision and the
//! queued order are one write. The database sees each order exactly once: the consumer inserts
//! a batch idempotently by request id and acknowledges the entries only after the commit, so a
//! consumer that dies with a batch read but not acknowledged leaves it pending, and a live
//! consumer claims it (`XAUTOCLAIM`) after it has been idle long enough — inserting it again
//! changes nothing if the first consumer had committed.
//!
//! The stream is bounded (`--stream-max-lag` entries): the script that would append past it
//! refuses the purchase (`503 overloaded`, as the door refuses past capacity) and takes
//! nothing; the instance then believes the stream full for a moment and refuses the next
//! purchases at the door, without a round trip each ([`FullQueue`]). Unbounded, a crowd that arrives faster than the consumers place orders is answered
//! `202` at the script's speed while the orders arrive in the database ever later; buyers told
//! to pay within minutes find their order missing when they try, and a kill loses more
//! accepted work. The bound turns that lag into refusals a buyer can retry.
//!
//! What it gives up: `202` is a promise, not a receipt. The order exists in the database only
//! after the lag (reported as `seckill_stream_lag_entries`); until then `GET
//! /api/products/{id}/orders/{request_id}` says `pending`; units taken while entries are pending are not
//! undersell until the stream has drained. A failover to a replica that missed the last
//! scripts breaks both promises of Redis-held stock: entries a consumer had already placed
//! from the old primary leave their units on sale again on the new one (**oversell**), and
//! entries no consumer had read are lost with their `202` (an accepted order that never comes).
//! With `--redis-wait-replicas 1` a script no replica acknowledged in time is answered `503`
//! with an unknown outcome (the old primary's consumer may still place it; the order's
//! status tells), never `202`.
//!
//! Idempotency is the script's: a purchase (product, buyer, request id, byte for byte, as the
//! database names it) the counter already charged takes nothing again and is answered with its
//! order once placed (`200`), or `202` while it is still queued; a reuse with another quantity
//! or strategy is refused as a conflict at once, from the charge record's terms. That holds
//! after the order ended too: its units go back with its record marked ended, not deleted, so
//! the purchase sent again is answered with its expired or cancelled order and charged
//! nothing. (Charged anew, its entry would meet the ended order, which no insert can replace:
//! units no order could ever hold. The consumer gives such an entry's units back all the same,
//! see [`crate::redis_stock::consumer`].) A script whose answer was lost (a timeout, a broken
//! connection) is settled, not guessed: the purchase is accepted if the script ran, and made
//! impossible (a tombstone record) if it did not, so a `503` never hides a queued order. A
//! Redis that restarts without its data loses the entries no consumer had read, with the
//! charges and the buyers' counts: the product is refused `503` until `reconcile` rebuilds
//! them from the orders, and the status of a purchase it lost says so meanwhile (see
//! [`crate::redis_stock::epoch`]); afterwards the purchase sent again buys. A
//! product reset while its entries are being placed can receive them after the reset: reset a
//! product between sales, not during one.

use std::sync::Arc;
use std::time::Instant;

use crate::db::Db;

use super::full_queue::FullQueue;
use super::redis_lua::{configured, refused, unavailable};
use super::{Deps, Purchase, PurchaseError, Purchased, Purchasing, StockStrategy};
use crate::db::orders;
use crate::metrics::Stage;
use crate::redis_stock::charge;
use crate::redis_stock::scripts::{DUPLICATE, STREAM_FULL, TAKE_AND_APPEND};
use crate::redis_stock::{Attempt, RedisStock, RedisStockError, Replicated, Settled};

pub struct RedisLuaStream {
    pool: Db,
    redis: Option<RedisStock>,
    /// Most entries the stream may hold before a purchase is refused.
    max_lag: u64,
    /// Whether the stream was just found at its bound.
    full: FullQueue,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(RedisLuaStream {
        pool: deps.pool.clone(),
        redis: deps.redis.clone(),
        max_lag: deps.stream_max_lag,
        full: FullQueue::new(deps.full_queue_memory),
    })
}

impl StockStrategy for RedisLuaStream {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            let redis = configured(&self.redis)?;
            let keys = redis.keys();
            // The pause comes before the script: once it has run, the order is as good as
            // placed, so there is no window to widen after it.
            purchase.hold().await;
            let field = charge::field(&purchase.user_id, &purchase.request_id);
            let attempt = Attempt::new();
            let script = Instant::now();
            let taken = redis
                .take(
                    &keys.stock(purchase.product_id),
                    TAKE_AND_APPEND
                        .key(keys.stock(purchase.product_id))
                        .key(keys.requests(purchase.product_id))
                        .key(keys.buyers(purchase.product_id))
                        .key(keys.limit(purchase.product_id))
                        .key(keys.stream(keys.lane(purchase.product_id)))
                        .key(keys.pending(keys.lane(purchase.product_id)))
                        .key(keys.waiting(purchase.product_id))
                        .key(keys.epoch(purchase.product_id))
                        .key(keys.charges(purchase.product_id))
                        .arg(&field)
                        .arg(purchase.quantity)
                        .arg(charge::terms(purchase.quantity, purchase.strategy.name()))
                        .arg(&purchase.request_id)
                        .arg(purchase.product_id)
                        .arg(&purchase.user_id)
                        .arg(purchase.strategy.name())
                        .arg(charge::pending_field(purchase.key()))
                        .arg(attempt.name())
                        .arg(self.max_lag)
                        .arg(purchase.redis_epoch),
                )
                .await;
            purchase.stats.time(Stage::Script, script.elapsed());
            let (taken, replicated) = match taken {
                Ok(taken) => taken,
                // The script may have run (and queued the order) with its answer lost: settle
                // it. Queued is accepted; not queued will never be.
                Err(e) => {
                    return match redis.settle(purchase.product_id, &field, attempt).await {
                        // Queued by this attempt.
                        Ok(Settled::Mine) => Ok(Purchased::Accepted),
                        // Charged by another attempt of the same purchase: queued, or placed
                        // (and perhaps ended since). Its order, if the database has it; a
                        // database out of reach must not turn a queued order into a refusal.
                        Ok(Settled::Other) => {
                            match orders::find(&self.pool, purchase.key()).await {
                                Ok(Some(_)) => Err(PurchaseError::Duplicate),
                                Ok(None) | Err(_) => Ok(Purchased::Accepted),
                            }
                        }
                        Ok(Settled::NotMade) => Err(unavailable(e)),
                        Err(_) => Err(PurchaseError::OutcomeUnknown(Box::new(e))),
                    };
                }
            };
            if taken == STREAM_FULL {
                self.full.found_full();
            }
            refused(&self.pool, purchase, taken).await?;
            if taken == DUPLICATE {
                // Charged before: the original order is placed (replay it) or still queued.
                return match orders::find(&self.pool, purchase.key()).await? {
                    Some(_) => Err(PurchaseError::Duplicate),
                    None => Ok(Purchased::Accepted),
                };
            }
            if let Replicated::Short { acked, wanted } = replicated {
                // The entry is in the primary's stream: its consumer may still place it, or a
                // failover may lose it with its deduction. Either way nothing is oversold, but
                // the buyer cannot be told which: the order's status will.
                return Err(PurchaseError::OutcomeUnknown(Box::new(
                    RedisStockError::NotReplicated { acked, wanted },
                )));
            }
            Ok(Purchased::Accepted)
        })
    }

    fn queue_full(&self) -> bool {
        self.full.is_full()
    }
}
