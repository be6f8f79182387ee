//! `pessimistic` and `pessimistic-nowait`: lock the row first (`SELECT … FOR UPDATE`), then
//! decide and write inside the same transaction.
//!
//! **Safe.** The locking read takes the row's exclusive lock and reads the latest committed
//! value; until the transaction commits, every other buyer's locking read waits, so the
//! read-modify-write cannot interleave. The cost is that buyers queue on the row for the whole
//! transaction (two extra round trips compared with `conditional`), and a queue longer than
//! `innodb_lock_wait_timeout` turns into `busy` answers. The `NOWAIT` variant refuses to queue:
//! if the row is locked it fails at once (`busy`), trading waiting for retries by the client —
//! the shape of a flash sale where most buyers lose anyway.

use futures::future::BoxFuture;
use sqlx::MySqlPool;

use super::{Placed, Purchase, PurchaseError, StockStrategy};
use crate::db::{orders, products};

pub struct Pessimistic {
    pool: MySqlPool,
    nowait: bool,
}

impl Pessimistic {
    pub fn new(pool: MySqlPool, nowait: bool) -> Pessimistic {
        Pessimistic { pool, nowait }
    }
}

impl StockStrategy for Pessimistic {
    fn purchase<'a>(
        &'a self,
        purchase: &'a Purchase,
    ) -> BoxFuture<'a, Result<Placed, PurchaseError>> {
        Box::pin(async move {
            let sql = match self.nowait {
                false => "SELECT stock FROM products WHERE id = ? FOR UPDATE",
                true => "SELECT stock FROM products WHERE id = ? FOR UPDATE NOWAIT",
            };
            let mut tx = self.pool.begin().await?;
            let stock: i64 = sqlx::query_scalar(sql)
                .bind(purchase.product_id)
                .fetch_optional(&mut *tx)
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
        })
    }
}
