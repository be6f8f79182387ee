//! Reconciliation of a product whose stock is split over parts (see [`super::split`]), safe at
//! any moment of a sale, as the one counter's is (see [`mod@super::reconcile`]).
//!
//! First the moves left half-way are finished: every move a part sent and its destination has
//! not received is delivered ([`super::split::MOVE_IN`] is idempotent, so a move that is
//! arriving meanwhile arrives once). Then each part is reconciled exactly as one counter is, with
//! two changes: what the part must account for is its *allotment* — its share at the reset plus
//! the units moved in, less the units moved out, read in one step with its counter — not the
//! product's initial stock; and its orders are those of the buyers whose home it is, the only
//! ones it can have charged. So each part's lost charges are fenced out and given back to it,
//! and a part found above what its orders account for (a shard's failover that lost decrements)
//! is lowered, each by a compare-and-set of its own.
//!
//! Before all of it, parts Redis lost (their markers gone or behind the database's epoch) are
//! rebuilt from the orders if every part was lost; if only some were, the product is refused
//! (see [`super::split_rebuild`]).

use std::time::Duration;

use crate::db::Db;

use super::RedisStock;
use super::reconcile::{ReconcileError, Scope, reconcile_in};
use super::split_rebuild::rebuild_if_lost;
use crate::api::Reconciliation;
use crate::db::products::Rules;

/// Delivers the moves left half-way, then reconciles each part of `product` as one counter.
pub async fn reconcile(
    pool: &Db,
    redis: &RedisStock,
    product: u64,
    rules: &Rules,
    grace: Duration,
) -> Result<Reconciliation, ReconcileError> {
    let parts = rules.redis_parts;
    let found = redis.split_counter_and_charges(product).await?;
    let rebuilt = rebuild_if_lost(pool, redis, product, rules).await?;
    for (to, id, units) in redis.undelivered(product, parts).await? {
        redis
            .deliver(product, to, &id, units, rules.redis_epoch)
            .await?;
    }
    let mut total = Reconciliation {
        product_id: product,
        initial_stock: 0,
        ordered: 0,
        pending: 0,
        counter_found: Some(0),
        counter_after: 0,
        rebuilt,
        repaired: rebuilt,
        released_requests: 0,
        in_flight: 0,
    };
    for part in 0..parts {
        let scope = Scope {
            product,
            keys: redis.keys().part(product, part).counter,
            part: Some((part, parts)),
        };
        let (done, found) = reconcile_in(pool, redis, &scope, grace).await?;
        total.initial_stock += done.initial_stock;
        total.ordered += done.ordered;
        total.counter_found = total.counter_found.zip(found).map(|(a, b)| a + b);
        total.counter_after += done.counter_after;
        total.repaired |= done.repaired;
        total.released_requests += done.released_requests;
        total.in_flight += done.in_flight;
    }
    if rebuilt {
        total.counter_found = found.map(|(left, _)| left);
    }
    Ok(total)
}
