//! `naive`: read the stock, decide in the application, write the *absolute* new value back.
//!
//! **Unsafe.** The read is a plain snapshot read that takes no lock, so two buyers can both
//! read `stock = 1`, both decide there is a unit left, and both write `stock = 0`: the second
//! write silently overwrites the first (a *lost update*). Both orders are recorded, so the shop
//! sells more units than it had (`sold > initial_stock`) while the stock column still looks
//! plausible — the inventory is "phantom". Wrapping the read and the write in one transaction
//! does not help: InnoDB's default REPEATABLE READ lets the write go through on a row another
//! transaction changed after our snapshot. This is the textbook bug every other strategy fixes.

use std::sync::Arc;

use sqlx::MySqlPool;

use super::outcome::{claim_quota, decide, place_under_row_lock};
use super::{Deps, Placed, Purchase, PurchaseError, Purchased, Purchasing, StockStrategy};
use crate::db::products;

pub struct Naive {
    pool: MySqlPool,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(Naive {
        pool: deps.pool.clone(),
    })
}

impl StockStrategy for Naive {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            read_compute_write(&self.pool, purchase)
                .await
                .map(Purchased::from)
        })
    }
}

/// The racy read-modify-write, shared with `local-mutex` (which serialises it in-process).
pub(crate) async fn read_compute_write(
    pool: &MySqlPool,
    purchase: &Purchase,
) -> Result<Placed, PurchaseError> {
    let mut tx = pool.begin().await?;
    claim_quota(&mut tx, purchase).await?;
    let left = decide(
        products::stock(&mut tx, purchase.product_id).await?,
        purchase,
    )?;
    purchase.hold().await;
    products::set_stock(&mut tx, purchase.product_id, left).await?;
    place_under_row_lock(tx, purchase).await
}
