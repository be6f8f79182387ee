//! `unchecked`: check the stock with one statement, deduct it with another that has no guard.
//!
//! **Unsafe.** `SELECT stock` says there is one unit left; `UPDATE … SET stock = stock - q`
//! then deducts *relative to the current value*, so unlike `naive` no update is lost — every
//! sale is counted — but nothing stops the count going below zero: all buyers that passed the
//! check before the last unit went each take one, and the stock ends negative. It is the
//! "check-then-act" race: the check and the act are two steps, and the condition the check saw
//! is not part of the act. `conditional` puts it there.

use std::sync::Arc;

use sqlx::MySqlPool;

use super::outcome::{claim_quota, decide, place_under_row_lock};
use super::{Deps, Purchase, Purchased, Purchasing, StockStrategy};
use crate::db::products;

pub struct Unchecked {
    pool: MySqlPool,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(Unchecked {
        pool: deps.pool.clone(),
    })
}

impl StockStrategy for Unchecked {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            let mut conn = self.pool.acquire().await?;
            decide(
                products::stock(&mut conn, purchase.product_id).await?,
                purchase,
            )?;
            purchase.hold().await;
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            claim_quota(&mut tx, purchase).await?;
            // Bound as signed: in MySQL, signed minus unsigned is unsigned, and could not go
            // below zero to show the bug.
            sqlx::query(
                "UPDATE products SET stock = stock - ?, version = version + 1 WHERE id = ?",
            )
            .bind(i64::from(purchase.quantity))
            .bind(purchase.product_id)
            .execute(&mut *tx)
            .await?;
            place_under_row_lock(tx, purchase)
                .await
                .map(Purchased::from)
        })
    }
}
