//! Stock buckets: the stock of a product whose home is [`Home::Buckets`](crate::api::Home),
//! split over several rows of `stock_buckets` so that concurrent buyers lock different rows.
//! The product's stock is the sum of its buckets (read by [`super::products::view`]).

use super::engine::{Conn, Sql, Whole, each_engine, execute, signed, sql};

/// `stock` split as evenly as possible over `buckets` buckets: the first `stock % buckets`
/// buckets hold one unit more than the others.
pub fn split(stock: i64, buckets: u32) -> Vec<i64> {
    let n = i64::from(buckets.max(1));
    (0..n)
        .map(|i| stock / n + i64::from(i < stock % n))
        .collect()
}

/// Replaces the product's buckets by `stocks` (bucket `i` holds `stocks[i]`); an empty slice
/// only deletes them.
pub async fn replace(
    mut conn: Conn<'_>,
    product_id: u64,
    stocks: &[i64],
) -> Result<(), sqlx::Error> {
    const DELETE: Sql = sql!("DELETE FROM stock_buckets WHERE product_id = ?");
    execute!(conn.reborrow(), DELETE, signed(product_id))?;
    if stocks.is_empty() {
        return Ok(());
    }
    each_engine!(conn, |c, e| {
        let mut insert = e.builder("INSERT INTO stock_buckets (product_id, bucket, stock) ");
        insert.push_values(stocks.iter().enumerate(), |mut row, (bucket, &stock)| {
            row.push_bind(signed(product_id))
                .push_bind(i64::try_from(bucket).unwrap_or(i64::MAX))
                .push_bind(stock);
        });
        insert.build().execute(c).await.map(|_| ())
    })
}

/// Buckets and their stock, as read.
fn buckets(rows: Vec<(Whole, i64)>) -> Result<Vec<(u16, i64)>, sqlx::Error> {
    rows.into_iter()
        .map(|(bucket, stock)| Ok((bucket.get()?, stock)))
        .collect()
}

/// Every bucket of the product and its stock, in bucket order (plain, non-locking read).
pub async fn all(conn: Conn<'_>, product_id: u64) -> Result<Vec<(u16, i64)>, sqlx::Error> {
    const ALL: Sql =
        sql!("SELECT bucket, stock FROM stock_buckets WHERE product_id = ? ORDER BY bucket");
    buckets(each_engine!(conn, |c, e| sqlx::query_as(e.sql(ALL))
        .bind(signed(product_id))
        .fetch_all(c)
        .await)?)
}

/// The units left in the product's buckets and the product row's version, in one statement
/// (one snapshot), or `None` if the product does not exist. The version moves at a reset and
/// at every return to a bucket (see [`crate::inventory::left_and_mark`]).
pub async fn left_and_version(
    conn: Conn<'_>,
    product_id: u64,
) -> Result<Option<(i64, u64)>, sqlx::Error> {
    macro_rules! left_text {
        ($int:literal) => {
            concat!(
                "SELECT CAST(COALESCE((SELECT SUM(b.stock) FROM stock_buckets b \
                                       WHERE b.product_id = p.id), 0) AS ",
                $int,
                "), p.version \
                 FROM products p WHERE p.id = ?"
            )
        };
    }
    const LEFT: Sql = sql!(mysql: left_text!("SIGNED"), postgres: left_text!("BIGINT"));
    let row: Option<(i64, Whole)> = each_engine!(conn, |c, e| sqlx::query_as(e.sql(LEFT))
        .bind(signed(product_id))
        .fetch_optional(c)
        .await)?;
    row.map(|(left, version)| Ok((left, version.get()?)))
        .transpose()
}

/// The non-empty buckets of the product, locked for update in bucket order (the one lock order
/// every multi-bucket purchase uses, so two of them cannot deadlock).
pub async fn lock_non_empty(
    conn: Conn<'_>,
    product_id: u64,
) -> Result<Vec<(u16, i64)>, sqlx::Error> {
    const LOCK: Sql = sql!(
        "SELECT bucket, stock FROM stock_buckets WHERE product_id = ? AND stock > 0 \
         ORDER BY bucket FOR UPDATE"
    );
    buckets(each_engine!(conn, |c, e| sqlx::query_as(e.sql(LOCK))
        .bind(signed(product_id))
        .fetch_all(c)
        .await)?)
}

/// Takes `quantity` units from one bucket if it holds that many: whether it did.
pub async fn take(
    conn: Conn<'_>,
    product_id: u64,
    bucket: u16,
    quantity: i64,
) -> Result<bool, sqlx::Error> {
    const TAKE: Sql = sql!(
        "UPDATE stock_buckets SET stock = stock - ? \
         WHERE product_id = ? AND bucket = ? AND stock >= ?"
    );
    let taken = execute!(
        conn,
        TAKE,
        quantity,
        signed(product_id),
        i64::from(bucket),
        quantity
    )?;
    Ok(taken == 1)
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn a_split_keeps_every_unit_and_differs_by_at_most_one_between_buckets() {
        for (stock, n) in [(100, 8), (7, 8), (0, 3), (1_000_000_000, 1024), (5, 1)] {
            let buckets = split(stock, n);
            assert_eq!(buckets.len(), n as usize);
            assert_eq!(buckets.iter().sum::<i64>(), stock);
            let (min, max) = (buckets.iter().min(), buckets.iter().max());
            assert!(max.zip(min).is_some_and(|(a, b)| a - b <= 1), "{buckets:?}");
        }
    }
}
