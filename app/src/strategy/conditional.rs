//! `conditional`: the check is part of the write — `UPDATE … SET stock = stock - q WHERE id = ?
//! AND stock >= q`.
//!
//! **Safe.** InnoDB executes an `UPDATE` as a *current read* under the row's exclusive lock:
//! the `stock >= q` condition is evaluated against the latest committed value while no other
//! writer can change it, so the check and the act are one atomic step and the stock can never
//! go below zero. Concurrent buyers queue on the row lock only for the length of their own
//! short transaction (the UPDATE plus the order INSERT), which makes this the cheapest correct
//! strategy: one round trip decides, and "0 rows affected" means sold out. Its limit is the
//! hot row itself — every sale of one product is serialised on one row of one database.
//!
//! **On PostgreSQL** the same statement is safe by another mechanism: a second updater waits
//! for the first to commit and then evaluates the `WHERE` again on the row's new version
//! (EvalPlanQual), so `stock >= q` is checked against the stock the first one left.

use std::sync::Arc;

use crate::db::engine::{Conn, Db};

use super::outcome::{claim_quota, place_under_row_lock, roll_back};
use super::{Deps, Purchase, PurchaseError, Purchased, Purchasing, StockStrategy};
use crate::db::products;

pub struct Conditional {
    pool: Db,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(Conditional {
        pool: deps.pool.clone(),
    })
}

/// The purchase's units off the stock in one conditional `UPDATE`, or why not: sold out, or
/// no such product.
pub(super) async fn deduct(mut conn: Conn<'_>, purchase: &Purchase) -> Result<(), PurchaseError> {
    let units = i64::from(purchase.quantity);
    if products::take_if_left(conn.reborrow(), purchase.product_id, units).await? {
        return Ok(());
    }
    Err(match products::exists(conn, purchase.product_id).await? {
        true => PurchaseError::SoldOut,
        false => PurchaseError::UnknownProduct,
    })
}

impl StockStrategy for Conditional {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            let mut tx = self.pool.begin().await?;
            let deducted = async {
                claim_quota(tx.conn(), purchase).await?;
                deduct(tx.conn(), purchase).await
            }
            .await;
            if let Err(refusal) = deducted {
                return Err(roll_back(tx, refusal).await);
            }
            // The row lock is held from here to the commit: this is the critical section.
            purchase.hold().await;
            place_under_row_lock(tx, purchase)
                .await
                .map(Purchased::from)
        })
    }
}
