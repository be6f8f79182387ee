//! Order rows: insert (the idempotency arbiter) and look-up by request id.

use serde::Serialize;
use sqlx::{MySqlConnection, MySqlPool};

use crate::strategy::{Purchase, PurchaseError};

/// An order as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Order {
    pub order_id: u64,
    pub product_id: u64,
    pub user_id: String,
    pub quantity: u32,
    pub strategy: String,
    pub request_id: String,
    pub fencing_token: Option<u64>,
}

/// Inserts the order of `purchase`; a request id that is already taken fails with
/// [`PurchaseError::Duplicate`] (the caller's transaction must then roll back).
pub async fn insert(
    conn: &mut MySqlConnection,
    purchase: &Purchase,
    fencing_token: Option<u64>,
) -> Result<u64, PurchaseError> {
    let done = sqlx::query(
        "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, fencing_token) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(purchase.product_id)
    .bind(&purchase.user_id)
    .bind(purchase.quantity)
    .bind(&purchase.strategy)
    .bind(&purchase.request_id)
    .bind(fencing_token)
    .execute(conn)
    .await?;
    Ok(done.last_insert_id())
}

/// The order made under `request_id`, if any.
pub async fn by_request_id(
    pool: &MySqlPool,
    request_id: &str,
) -> Result<Option<Order>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id AS order_id, product_id, user_id, quantity, strategy, request_id, fencing_token \
         FROM orders WHERE request_id = ?",
    )
    .bind(request_id)
    .fetch_optional(pool)
    .await
}
