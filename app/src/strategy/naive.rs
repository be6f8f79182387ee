//! `naive`: read the stock, decide in the application, write the *absolute* new value back.
//!
//! **Unsafe.** The read is a plain snapshot read that takes no lock, so two buyers can both
//! read `stock = 1`, both decide there is a unit left, and both write `stock = 0`: the second
//! write silently overwrites the first (a *lost update*). Both orders are recorded, so the shop
//! sells more units than it had (`sold > initial_stock`) while the stock column still looks
//! plausible — the inventory is "phantom". Wrapping the read and the write in one transaction
//! does not help: InnoDB's default REPEATABLE READ lets the write go through on a row another
//! transaction changed after our snapshot. This is the textbook bug every other strategy fixes.
//!
//! **On PostgreSQL** the same: its default, READ COMMITTED, reads each statement's own
//! snapshot and lets the absolute write overwrite a newer value. (At its REPEATABLE READ it
//! would refuse the second writer, `could not serialize access due to concurrent update`:
//! `seckill-bench isolation` shows that cell; the service runs at each engine's default.)

use std::sync::Arc;

use crate::db::Db;

use super::outcome::{claim_quota, decide, place_under_row_lock};
use super::{Deps, Placed, Purchase, PurchaseError, Purchased, Purchasing, StockStrategy};
use crate::db::products;

pub struct Naive {
    pool: Db,
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
    pool: &Db,
    purchase: &Purchase,
) -> Result<Placed, PurchaseError> {
    let mut tx = pool.begin().await?;
    claim_quota(tx.conn(), purchase).await?;
    let left = decide(
        products::stock(tx.conn(), purchase.product_id).await?,
        purchase,
    )?;
    purchase.hold().await;
    products::set_stock(tx.conn(), purchase.product_id, left).await?;
    place_under_row_lock(tx, purchase).await
}
