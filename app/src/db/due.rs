//! What the expiry sweep reads: the orders past their deadline, the returns left half-way,
//! how late the oldest overdue order is. The first two read the products of some homes only:
//! the stock kept in the database and the stock kept in Redis are swept apart, so that a store
//! that does not answer holds up no return to the other
//! ([`crate::lifecycle::sweep`]).

use super::engine::{Db, Sql, Whole, each_engine, signed, sql};

use super::orders::OrderState;
use crate::api::Home;

/// An order due for expiry, or one whose units are on their way back: what the sweep works on.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Due {
    #[sqlx(try_from = "Whole")]
    pub order_id: u64,
    #[sqlx(try_from = "Whole")]
    pub product_id: u64,
    pub user_id: String,
    pub request_id: String,
    #[sqlx(try_from = "Whole")]
    pub quantity: u32,
    /// The product's home (`row`, `buckets`, `redis`).
    pub home: String,
    /// The strategy that sold it.
    pub strategy: String,
    state: String,
}

impl Due {
    pub fn state(&self) -> OrderState {
        OrderState::of(&self.state)
    }
}

const DUE_COLUMNS: &str = "o.id AS order_id, o.product_id, o.user_id, o.request_id, o.quantity, \
    p.home, o.strategy, o.state";

/// At most `limit` reserved orders past their deadline of products kept in one of `homes` (of
/// `product`, or of all), oldest deadline first: one range of the index `orders_due`.
pub async fn due(
    db: &Db,
    homes: &[Home],
    product: Option<u64>,
    limit: u32,
) -> Result<Vec<Due>, sqlx::Error> {
    const DUE: Sql = Sql {
        mysql: "o.state = 'reserved' AND o.pay_by <= NOW(6)",
        postgres: "o.state = 'reserved' AND o.pay_by <= clock_timestamp()",
    };
    let (mysql, postgres) = select_due(DUE, homes, product, "o.pay_by");
    let (product, limit) = (product.map(signed), i64::from(limit));
    each_engine!(db.pool(), |c, e| {
        let mut query = sqlx::query_as(e.text(e.pick(mysql, postgres)));
        if let Some(product) = product {
            query = query.bind(product);
        }
        query.bind(limit).fetch_all(c).await
    })
}

/// At most `limit` orders whose units are on their way back (`expiring`, `cancelling`) to one
/// of `homes` and left `reserved` at least `older_than_ms` ago (of `product`, or of all).
pub async fn returning(
    db: &Db,
    homes: &[Home],
    product: Option<u64>,
    older_than_ms: u64,
    limit: u32,
) -> Result<Vec<Due>, sqlx::Error> {
    const ENDED_BEFORE: Sql = Sql {
        mysql: "o.state IN ('expiring', 'cancelling') \
                AND o.ended_at <= NOW(6) - INTERVAL ? MICROSECOND",
        postgres: "o.state IN ('expiring', 'cancelling') \
                   AND o.ended_at <= clock_timestamp() - INTERVAL '1 microsecond' * ?",
    };
    let (mysql, postgres) = select_due(ENDED_BEFORE, homes, product, "o.ended_at");
    let older_than_us = i64::try_from(older_than_ms.saturating_mul(1000)).unwrap_or(i64::MAX);
    let (product, limit) = (product.map(signed), i64::from(limit));
    each_engine!(db.pool(), |c, e| {
        let mut query = sqlx::query_as(e.text(e.pick(mysql, postgres))).bind(older_than_us);
        if let Some(product) = product {
            query = query.bind(product);
        }
        query.bind(limit).fetch_all(c).await
    })
}

/// The orders `condition` picks of products kept in one of `homes` (of `product`, or of all),
/// ordered by `order_by`, as many as the last parameter allows. Parameters (MariaDB's `?`): the
/// condition's, the product (when one is named), the limit.
fn select_due(
    condition: Sql,
    homes: &[Home],
    product: Option<u64>,
    order_by: &str,
) -> (String, String) {
    let only = match product {
        Some(_) => " AND o.product_id = ?",
        None => "",
    };
    let kept = kept_in(homes);
    let text = |condition: &str| {
        format!(
            "SELECT {DUE_COLUMNS} FROM orders o JOIN products p ON p.id = o.product_id \
             WHERE {condition} AND {kept}{only} ORDER BY {order_by} LIMIT ?"
        )
    };
    (text(condition.mysql), text(condition.postgres))
}

/// `p.home IN ('…', …)`: the product is kept in one of `homes` (names of this build's own
/// enum, never a client's text).
fn kept_in(homes: &[Home]) -> String {
    let names: Vec<String> = homes.iter().map(|h| format!("'{}'", h.name())).collect();
    match names.is_empty() {
        true => "FALSE".to_string(),
        false => format!("p.home IN ({})", names.join(", ")),
    }
}

/// How late the oldest reserved order past its deadline is, in milliseconds (0: none is).
pub async fn oldest_overdue_ms(db: &Db) -> Result<u64, sqlx::Error> {
    const LATE: Sql = sql!(
        mysql: "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, MIN(pay_by), NOW(6)) / 1000 AS SIGNED) \
                FROM orders WHERE state = 'reserved' AND pay_by <= NOW(6)",
        postgres: "SELECT CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp() - MIN(pay_by)) * 1000) \
                          AS BIGINT) \
                   FROM orders WHERE state = 'reserved' AND pay_by <= clock_timestamp()",
    );
    let late: Option<i64> = each_engine!(db.pool(), |c, e| sqlx::query_scalar(e.sql(LATE))
        .fetch_one(c)
        .await)?;
    Ok(late.map_or(0, |ms| u64::try_from(ms).unwrap_or(0)))
}
