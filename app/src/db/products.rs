//! Product rows: reset, summary, and the stock reads and writes the strategies share.

use sqlx::{MySqlConnection, MySqlPool, Row};

use super::buckets;
use crate::api::{DEFAULT_BUCKETS, Home, ProductView};

/// Creates the product or resets it to `stock` units kept in `home`, and deletes its orders,
/// atomically. The row's `stock` holds the units only when the home is the row; otherwise it
/// holds none, so the row strategies find the product sold out. The fence goes back to 0 so
/// that any lock backend's tokens are accepted again. Buckets-home products get
/// [`DEFAULT_BUCKETS`] buckets (see [`reset_split`]).
pub async fn reset(pool: &MySqlPool, id: u64, stock: i64, home: Home) -> Result<(), sqlx::Error> {
    reset_split(pool, id, stock, home, DEFAULT_BUCKETS).await
}

/// [`reset`], splitting the stock of a buckets-home product evenly over `buckets` buckets; any
/// other home deletes the product's buckets.
pub async fn reset_split(
    pool: &MySqlPool,
    id: u64,
    stock: i64,
    home: Home,
    buckets: u32,
) -> Result<(), sqlx::Error> {
    let row_stock = if home == Home::Row { stock } else { 0 };
    let bucket_stocks = match home {
        Home::Buckets => buckets::split(stock, buckets),
        Home::Row | Home::Redis => Vec::new(),
    };
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO products (id, stock, initial_stock, home) VALUES (?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE stock = VALUES(stock), initial_stock = VALUES(initial_stock), \
         home = VALUES(home), version = version + 1, fence = 0",
    )
    .bind(id)
    .bind(row_stock)
    .bind(stock)
    .bind(home.name())
    .execute(&mut *tx)
    .await?;
    buckets::replace(&mut tx, id, &bucket_stocks).await?;
    sqlx::query("DELETE FROM orders WHERE product_id = ?")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

/// The product's stock and order totals (orders that hold units: voided ones do not), or
/// `None` if it does not exist. The stock is read from the product's home: the row, or the sum
/// of its buckets — in one statement, so the stock and the orders are one consistent snapshot.
pub async fn view(pool: &MySqlPool, id: u64) -> Result<Option<ProductView>, sqlx::Error> {
    let row = sqlx::query(
        "SELECT p.id, p.home, p.initial_stock, \
                CASE WHEN p.home = 'buckets' THEN \
                    (SELECT CAST(COALESCE(SUM(b.stock), 0) AS SIGNED) FROM stock_buckets b \
                     WHERE b.product_id = p.id) \
                ELSE p.stock END AS stock, \
                (SELECT CAST(COALESCE(SUM(o.quantity), 0) AS SIGNED) FROM orders o \
                 WHERE o.product_id = p.id AND o.state = 'placed') AS sold, \
                (SELECT COUNT(*) FROM orders o \
                 WHERE o.product_id = p.id AND o.state = 'placed') AS orders \
         FROM products p WHERE p.id = ?",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    row.map(|r| {
        let home: String = r.try_get("home")?;
        Ok(ProductView {
            id: r.try_get("id")?,
            home: home
                .parse()
                .map_err(|e: String| sqlx::Error::Decode(e.into()))?,
            stock: r.try_get("stock")?,
            initial_stock: r.try_get("initial_stock")?,
            sold: r.try_get("sold")?,
            orders: r.try_get("orders")?,
            pending: 0,
            stranded: 0,
        }
        .with_stranded())
    })
    .transpose()
}

/// Whether the product exists.
pub async fn exists(conn: &mut MySqlConnection, id: u64) -> Result<bool, sqlx::Error> {
    let found: Option<u64> = sqlx::query_scalar("SELECT id FROM products WHERE id = ?")
        .bind(id)
        .fetch_optional(conn)
        .await?;
    Ok(found.is_some())
}

/// The product's stock and version (plain, non-locking read), or `None` if it does not exist.
pub async fn stock_and_version(
    conn: &mut MySqlConnection,
    id: u64,
) -> Result<Option<(i64, u64)>, sqlx::Error> {
    sqlx::query_as("SELECT stock, version FROM products WHERE id = ?")
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// The product's stock (plain, non-locking read), or `None` if it does not exist.
pub async fn stock(conn: &mut MySqlConnection, id: u64) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT stock FROM products WHERE id = ?")
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Writes an absolute stock value: whoever computed it is trusted to have read the current one.
/// Like every stock write, it bumps `version`, so a buyer who read before it (`optimistic`, a
/// fenced holder) cannot write over it.
pub async fn set_stock(conn: &mut MySqlConnection, id: u64, stock: i64) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE products SET stock = ?, version = version + 1 WHERE id = ?")
        .bind(stock)
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}
