//! `unchecked`: check the stock with one statement, deduct it with another that has no guard.
//!
//! **Unsafe.** `SELECT stock` says there is one unit left; `UPDATE … SET stock = stock - q`
//! then deducts *relative to the current value*, so unlike `naive` no update is lost — every
//! sale is counted — but nothing stops the count going below zero: all buyers that passed the
//! check before the last unit went each take one, and the stock ends negative. It is the
//! "check-then-act" race: the check and the act are two steps, and the condition the check saw
//! is not part of the act. `conditional` puts it there. The same on PostgreSQL: the relative
//! `UPDATE` waits for the row and subtracts from the newest value, never checking it.

use std::sync::Arc;

use crate::db::engine::{Db, Sql, execute, signed, sql};

use super::outcome::{claim_quota, decide, place_under_row_lock};
use super::{Deps, Purchase, Purchased, Purchasing, StockStrategy};
use crate::db::products;

pub struct Unchecked {
    pool: Db,
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
                products::stock(conn.conn(), purchase.product_id).await?,
                purchase,
            )?;
            purchase.hold().await;
            let mut tx = conn.begin().await?;
            claim_quota(tx.conn(), purchase).await?;
            // Bound as signed: in MySQL, signed minus unsigned is unsigned, and could not go
            // below zero to show the bug.
            const TAKE: Sql =
                sql!("UPDATE products SET stock = stock - ?, version = version + 1 WHERE id = ?");
            execute!(
                tx.conn(),
                TAKE,
                i64::from(purchase.quantity),
                signed(purchase.product_id)
            )?;
            place_under_row_lock(tx, purchase)
                .await
                .map(Purchased::from)
        })
    }
}
