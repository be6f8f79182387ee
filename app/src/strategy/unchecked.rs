//! `unchecked`: check the stock with one statement, deduct it with another that has no guard.
//!
//! **Unsafe.** `SELECT stock` says there is one unit left; `UPDATE … SET stock = stock - q`
//! then deducts *relative to the current value*, so unlike `naive` no update is lost — every
//! sale is counted — but nothing stops the count going below zero: all buyers that passed the
//! check before the last unit went each take one, and the stock ends negative. It is the
//! "check-then-act" race: the check and the act are two steps, and the condition the check saw
//! is not part of the act. `conditional` puts it there.

use futures::future::BoxFuture;
use sqlx::MySqlPool;

use super::{Placed, Purchase, PurchaseError, StockStrategy};
use crate::db::{orders, products};

pub struct Unchecked {
    pool: MySqlPool,
}

impl Unchecked {
    pub fn new(pool: MySqlPool) -> Unchecked {
        Unchecked { pool }
    }
}

impl StockStrategy for Unchecked {
    fn purchase<'a>(
        &'a self,
        purchase: &'a Purchase,
    ) -> BoxFuture<'a, Result<Placed, PurchaseError>> {
        Box::pin(async move {
            let mut conn = self.pool.acquire().await?;
            let stock = products::stock(&mut conn, purchase.product_id)
                .await?
                .ok_or(PurchaseError::UnknownProduct)?;
            if stock < i64::from(purchase.quantity) {
                return Err(PurchaseError::SoldOut);
            }
            purchase.hold().await;
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            // Bound as signed: in MySQL, signed minus unsigned is unsigned, and could not go
            // below zero to show the bug.
            sqlx::query("UPDATE products SET stock = stock - ? WHERE id = ?")
                .bind(i64::from(purchase.quantity))
                .bind(purchase.product_id)
                .execute(&mut *tx)
                .await?;
            let order_id = orders::insert(&mut tx, purchase, None).await?;
            tx.commit().await?;
            Ok(Placed {
                order_id,
                fencing_token: None,
            })
        })
    }
}
