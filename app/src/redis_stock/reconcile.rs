//! Reconciliation of a Redis-held stock counter with the database (`POST
//! /api/products/{id}/reconcile`).
//!
//! The counter should always equal `initial − ordered − pending`: units in orders, units
//! accepted and waiting in the stream, and the rest on sale. A process killed between the Lua
//! deduction and the order insert (`redis-lua`) leaves the counter lower than that: units sold
//! to nobody. Reconciling sets the counter back to the expected value — with a compare-and-set,
//! so a purchase that moves the counter meanwhile makes it answer `busy` instead of writing a
//! stale value — and forgets the request ids charged without an order, so the retry of such a
//! click can buy.
//!
//! The waiting entries are read before the orders: an entry placed in between is then counted
//! twice (the counter comes out low, undersell) rather than not at all (oversell). A purchase
//! between its deduction and its insert looks exactly like a lost one, so reconcile a product
//! when no `redis-lua` purchase of it is in flight (after the sale, or after a crash).

use std::collections::HashSet;

use sqlx::MySqlPool;

use super::scripts::REPAIR;
use super::{RedisStock, RedisStockError};
use crate::api::{Home, Reconciliation};
use crate::db::{orders, products};

/// Why a product could not be reconciled.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("no product {0}")]
    UnknownProduct(u64),
    #[error("product {0} keeps its stock in `{1}`; only Redis-held stock is reconciled")]
    NotInRedis(u64, Home),
    #[error("the counter moved while it was being reconciled; retry")]
    Moved,
    #[error(transparent)]
    Redis(#[from] RedisStockError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Compares the product's counter with its orders and waiting entries and repairs it.
pub async fn reconcile(
    pool: &MySqlPool,
    redis: &RedisStock,
    product: u64,
) -> Result<Reconciliation, ReconcileError> {
    let view = products::view(pool, product)
        .await?
        .ok_or(ReconcileError::UnknownProduct(product))?;
    if view.home != Home::Redis {
        return Err(ReconcileError::NotInRedis(product, view.home));
    }
    let counter_found = redis.counter(product).await?;
    let waiting = redis.waiting(Some(product)).await?;
    let ordered_ids: HashSet<String> = orders::request_ids_of(pool, product)
        .await?
        .into_iter()
        .collect();
    let ordered = products::view(pool, product)
        .await?
        .map_or(view.sold, |v| v.sold);
    let pending: i64 = waiting.iter().map(|o| i64::from(o.quantity)).sum();
    let expected = (view.initial_stock - ordered - pending).max(0);

    let keys = redis.keys();
    let repaired = counter_found != Some(expected);
    if repaired {
        let found = counter_found.map(|c| c.to_string()).unwrap_or_default();
        let set: i64 = redis
            .invoke(REPAIR.key(keys.stock(product)).arg(found).arg(expected))
            .await?;
        if set == 0 {
            return Err(ReconcileError::Moved);
        }
    }

    let waiting_ids: HashSet<&str> = waiting.iter().map(|o| &*o.request_id).collect();
    let orphans: Vec<String> = redis
        .charged(product)
        .await?
        .into_keys()
        .filter(|id| !ordered_ids.contains(id) && !waiting_ids.contains(&**id))
        .collect();
    if !orphans.is_empty() {
        redis
            .query::<()>(
                deadpool_redis::redis::cmd("HDEL")
                    .arg(keys.requests(product))
                    .arg(&orphans),
            )
            .await?;
    }
    Ok(Reconciliation {
        product_id: product,
        initial_stock: view.initial_stock,
        ordered,
        pending,
        counter_found,
        counter_after: expected,
        repaired,
        released_requests: orphans.len() as u64,
    })
}
