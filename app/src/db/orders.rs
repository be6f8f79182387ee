//! Order rows: insert (the idempotency arbiter) and look-up by request id.

use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder};

/// An order about to be written.
#[derive(Debug, Clone, Copy)]
pub struct NewOrder<'a> {
    pub product_id: u64,
    pub user_id: &'a str,
    pub quantity: u32,
    /// The strategy's wire name.
    pub strategy: &'a str,
    pub request_id: &'a str,
    pub fencing_token: Option<u64>,
}

/// An order as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Order {
    pub order_id: u64,
    pub product_id: u64,
    pub user_id: String,
    pub quantity: u32,
    pub strategy: String,
    pub request_id: String,
    pub fencing_token: Option<u64>,
}

/// Inserts `order` and returns its id. A request id that is already taken fails with the
/// unique-constraint error `orders_request_id` (the caller's transaction must then roll back).
pub async fn insert(conn: &mut MySqlConnection, order: &NewOrder<'_>) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, fencing_token) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(order.product_id)
    .bind(order.user_id)
    .bind(order.quantity)
    .bind(order.strategy)
    .bind(order.request_id)
    .bind(order.fencing_token)
    .execute(conn)
    .await?;
    Ok(done.last_insert_id())
}

/// Inserts `orders` with one multi-row statement and returns each new order's id with its
/// request id (`INSERT … RETURNING`: the ids of one multi-row insert need not be consecutive).
/// A request id that is already taken fails the whole statement, like [`insert`].
pub async fn insert_all(
    conn: &mut MySqlConnection,
    orders: &[NewOrder<'_>],
) -> Result<Vec<(u64, String)>, sqlx::Error> {
    let mut insert = QueryBuilder::<MySql>::new(
        "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, fencing_token) ",
    );
    insert.push_values(orders, |mut row, order| {
        row.push_bind(order.product_id)
            .push_bind(order.user_id)
            .push_bind(order.quantity)
            .push_bind(order.strategy)
            .push_bind(order.request_id)
            .push_bind(order.fencing_token);
    });
    insert.push(" RETURNING id, request_id");
    insert.build_query_as().fetch_all(conn).await
}

/// Which of `request_ids` already have an order (plain, non-locking read).
pub async fn existing(
    conn: &mut MySqlConnection,
    request_ids: &[&str],
) -> Result<Vec<String>, sqlx::Error> {
    let mut select =
        QueryBuilder::<MySql>::new("SELECT request_id FROM orders WHERE request_id IN (");
    let mut ids = select.separated(", ");
    for id in request_ids {
        ids.push_bind(*id);
    }
    select.push(")");
    select.build_query_scalar().fetch_all(conn).await
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

/// The request ids of the product's orders.
pub async fn request_ids_of(pool: &MySqlPool, product_id: u64) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT request_id FROM orders WHERE product_id = ?")
        .bind(product_id)
        .fetch_all(pool)
        .await
}
