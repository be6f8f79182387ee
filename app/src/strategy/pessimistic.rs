//! `pessimistic` and `pessimistic-nowait`: lock the row first (`SELECT … FOR UPDATE`), then
//! decide and write inside the same transaction.
//!
//! **Safe.** The locking read takes the row's exclusive lock and reads the latest committed
//! value; until the transaction commits, every other buyer's locking read waits, so the
//! read-modify-write cannot interleave. The cost is that buyers queue on the row for the whole
//! transaction (two extra round trips compared with `conditional`), and a queue longer than
//! the row lock wait (MariaDB's `innodb_lock_wait_timeout`, PostgreSQL's `lock_timeout`) turns
//! into `busy` answers. The `NOWAIT` variant refuses to queue:
//! if the row is locked it fails at once (`busy`), trading waiting for retries by the client —
//! the shape of a flash sale where most buyers lose anyway.

use std::sync::Arc;

use crate::db::engine::{Db, each_engine, signed, sql};

use super::outcome::{claim_quota, decide, place, roll_back};
use super::{Deps, Purchase, Purchased, Purchasing, StockStrategy, under_lock};
use crate::db::products;

/// What a buyer does when another holds the row lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnLocked {
    /// Queue (up to `innodb_lock_wait_timeout`).
    Wait,
    /// Fail at once (`NOWAIT`).
    Refuse,
}

pub struct Pessimistic {
    pool: Db,
    on_locked: OnLocked,
}

/// `pessimistic`: queue on the row lock.
pub fn build_waiting(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(Pessimistic {
        pool: deps.pool.clone(),
        on_locked: OnLocked::Wait,
    })
}

/// `pessimistic-nowait`: refuse instead of queueing.
pub fn build_nowait(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(Pessimistic {
        pool: deps.pool.clone(),
        on_locked: OnLocked::Refuse,
    })
}

impl StockStrategy for Pessimistic {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            let sql = match self.on_locked {
                OnLocked::Wait => sql!("SELECT stock FROM products WHERE id = ? FOR UPDATE"),
                OnLocked::Refuse => {
                    sql!("SELECT stock FROM products WHERE id = ? FOR UPDATE NOWAIT")
                }
            };
            let mut tx = self.pool.begin().await?;
            let decided = async {
                claim_quota(tx.conn(), purchase).await?;
                let stock: Option<i64> =
                    each_engine!(tx.conn(), |c, e| sqlx::query_scalar(e.sql(sql))
                        .bind(signed(purchase.product_id))
                        .fetch_optional(c)
                        .await)?;
                decide(stock, purchase)
            }
            .await;
            let left = match decided {
                Ok(left) => left,
                Err(refusal) => return Err(roll_back(tx, refusal).await),
            };
            let section = async {
                purchase.hold().await;
                products::set_stock(tx.conn(), purchase.product_id, left).await?;
                place(tx, purchase, None).await
            };
            under_lock::counted(&purchase.stats, section)
                .await
                .map(Purchased::from)
        })
    }
}
