//! `racy-limit`: `conditional` for the stock, but the per-user limit checked the way many
//! seckill projects check it — a plain read of what the buyer has bought, then the purchase.
//!
//! **Unsafe (for the limit; the stock stays safe).** The check and the purchase are two steps
//! with nothing between them: one buyer's concurrent clicks (a double click, a script, the
//! same account on several devices) all read "nothing bought yet" before any of them commits,
//! and all buy. The stock never goes below zero — the conditional `UPDATE` still guards it —
//! but one buyer walks away with several units of a one-per-customer sale, taken from the
//! buyers behind them. The safe strategies claim the buyer's units on the buyer's own row, in
//! the purchase's transaction, before the stock ([`crate::db::quota`]): the clicks then queue
//! on that row and see each other. This is write skew, on PostgreSQL as on MariaDB: only
//! SERIALIZABLE would stop it (`seckill-bench isolation`), and the service runs at each
//! engine's default.

use std::sync::Arc;

use crate::db::engine::{Db, Sql, each_engine, signed, sql};

use super::conditional;
use super::outcome::place_under_row_lock;
use super::{Deps, Purchase, PurchaseError, Purchased, Purchasing, StockStrategy};

pub struct RacyLimit {
    pool: Db,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(RacyLimit {
        pool: deps.pool.clone(),
    })
}

impl StockStrategy for RacyLimit {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            // Check: what has this buyer bought, and what may they hold?
            macro_rules! check_text {
                ($int:literal) => {
                    concat!(
                        "SELECT CAST(COALESCE(SUM(quantity), 0) AS ",
                        $int,
                        "), \
                                (SELECT per_user_limit FROM products WHERE id = ?) \
                         FROM orders WHERE product_id = ? AND user_id = ? \
                           AND state IN ('reserved', 'paid')"
                    )
                };
            }
            const CHECK: Sql = sql!(mysql: check_text!("SIGNED"), postgres: check_text!("BIGINT"));
            let (bought, limit): (i64, Option<i64>) =
                each_engine!(self.pool.pool(), |c, e| sqlx::query_as(e.sql(CHECK))
                    .bind(signed(purchase.product_id))
                    .bind(signed(purchase.product_id))
                    .bind(&purchase.user_id)
                    .fetch_one(c)
                    .await)?;
            if limit.is_some_and(|limit| bought + i64::from(purchase.quantity) > limit) {
                return Err(PurchaseError::LimitReached);
            }
            // The window: every concurrent click of this buyer has passed the check by now.
            purchase.hold().await;
            // Act: `conditional`.
            let mut tx = self.pool.begin().await?;
            conditional::deduct(tx.conn(), purchase).await?;
            place_under_row_lock(tx, purchase)
                .await
                .map(Purchased::from)
        })
    }
}
