//! `naive`: read the stock, decide in the application, write the *absolute* new value back.
//!
//! **Unsafe.** The read is a plain snapshot read that takes no lock, so two buyers can both
//! read `stock = 1`, both decide there is a unit left, and both write `stock = 0`: the second
//! write silently overwrites the first (a *lost update*). Both orders are recorded, so the shop
//! sells more units than it had (`sold > initial_stock`) while the stock column still looks
//! plausible — the inventory is "phantom". Wrapping the read and the write in one transaction
//! does not help: InnoDB's default REPEATABLE READ lets the write go through on a row another
//! transaction changed after our snapshot. This is the textbook bug every other strategy fixes.

use futures::future::BoxFuture;
use sqlx::MySqlPool;

use super::{Placed, Purchase, PurchaseError, StockStrategy};
use crate::db::{orders, products};

pub struct Naive {
    pool: MySqlPool,
}

impl Naive {
    pub fn new(pool: MySqlPool) -> Naive {
        Naive { pool }
    }
}

impl StockStrategy for Naive {
    fn purchase<'a>(
        &'a self,
        purchase: &'a Purchase,
    ) -> BoxFuture<'a, Result<Placed, PurchaseError>> {
        Box::pin(read_compute_write(&self.pool, purchase))
    }
}

/// The racy read-modify-write, shared with `local-mutex` (which serialises it in-process).
pub(crate) async fn read_compute_write(
    pool: &MySqlPool,
    purchase: &Purchase,
) -> Result<Placed, PurchaseError> {
    let mut tx = pool.begin().await?;
    let stock = products::stock(&mut tx, purchase.product_id)
        .await?
        .ok_or(PurchaseError::UnknownProduct)?;
    let quantity = i64::from(purchase.quantity);
    if stock < quantity {
        return Err(PurchaseError::SoldOut);
    }
    purchase.hold().await;
    products::set_stock(&mut tx, purchase.product_id, stock - quantity).await?;
    let order_id = orders::insert(&mut tx, purchase, None).await?;
    tx.commit().await?;
    Ok(Placed {
        order_id,
        fencing_token: None,
    })
}
