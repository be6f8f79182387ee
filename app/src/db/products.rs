//! Product rows: reset, summary, and the stock reads and writes the strategies share.

use sqlx::{MySqlConnection, MySqlPool, Row};

use time::OffsetDateTime;

use super::buckets;
use crate::api::{DEFAULT_BUCKETS, Home, ProductView, SaleRules, Strategies};

/// Creates the product or resets it to `stock` units kept in `home`, under the default rules
/// ([`SaleRules::default`]), and deletes its orders, atomically. The row's `stock` holds the
/// units only when the home is the row; otherwise it holds none, so the row strategies find the
/// product sold out. The fence goes back to 0 so that any lock backend's tokens are accepted
/// again. Buckets-home products get [`DEFAULT_BUCKETS`] buckets (see [`reset_with`]).
pub async fn reset(pool: &MySqlPool, id: u64, stock: i64, home: Home) -> Result<(), sqlx::Error> {
    reset_with(
        pool,
        id,
        stock,
        home,
        DEFAULT_BUCKETS,
        &SaleRules::default(),
    )
    .await
    .map(|_| ())
}

/// [`reset`], splitting the stock of a buckets-home product evenly over `buckets` buckets (any
/// other home deletes the product's buckets), under `rules`. The buyers' claimed units are
/// forgotten with the orders. Returns the product's new Redis epoch (see [`Rules::redis_epoch`]),
/// which a reset to Redis writes there beside the counter.
pub async fn reset_with(
    pool: &MySqlPool,
    id: u64,
    stock: i64,
    home: Home,
    buckets: u32,
    rules: &SaleRules,
) -> Result<u64, sqlx::Error> {
    let row_stock = if home == Home::Row { stock } else { 0 };
    let bucket_stocks = match home {
        Home::Buckets => buckets::split(stock, buckets),
        Home::Row | Home::Redis | Home::RedisSplit => Vec::new(),
    };
    let redis_parts = if home == Home::RedisSplit { buckets } else { 0 };
    // The reset locks the product row, then deletes its orders: an expiry batch of the same
    // product, which locks its orders and then writes the row, can close a cycle with it, and
    // InnoDB breaks it by rolling one back. A reset rolled back did nothing; it runs again.
    const ATTEMPTS: u32 = 3;
    let mut attempt = 1;
    loop {
        let parts = (&bucket_stocks[..], redis_parts);
        match reset_once(pool, id, row_stock, stock, home, parts, rules).await {
            Err(e) if attempt < ATTEMPTS && super::errors::deadlocked(&e) => attempt += 1,
            done => return done,
        }
    }
}

/// One attempt of [`reset_with`], in one transaction.
async fn reset_once(
    pool: &MySqlPool,
    id: u64,
    row_stock: i64,
    stock: i64,
    home: Home,
    (bucket_stocks, redis_parts): (&[i64], u32),
    rules: &SaleRules,
) -> Result<u64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO products (id, stock, initial_stock, home, per_user_limit, sale_starts_ms, \
                               sale_ends_ms, token_required, first_come, payment_window_ms, \
                               strategies, redis_epoch, redis_parts) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?) \
         ON DUPLICATE KEY UPDATE stock = VALUES(stock), initial_stock = VALUES(initial_stock), \
         home = VALUES(home), per_user_limit = VALUES(per_user_limit), \
         sale_starts_ms = VALUES(sale_starts_ms), sale_ends_ms = VALUES(sale_ends_ms), \
         token_required = VALUES(token_required), first_come = VALUES(first_come), \
         payment_window_ms = VALUES(payment_window_ms), \
         strategies = VALUES(strategies), version = version + 1, fence = 0, \
         redis_epoch = redis_epoch + 1, redis_parts = VALUES(redis_parts)",
    )
    .bind(id)
    .bind(row_stock)
    .bind(stock)
    .bind(home.name())
    .bind(rules.per_user_limit)
    .bind(rules.sale_starts_at.map(millis))
    .bind(rules.sale_ends_at.map(millis))
    .bind(rules.token_required)
    .bind(rules.first_come)
    .bind(rules.payment_window_ms)
    .bind(rules.strategies.names())
    .bind(redis_parts)
    .execute(&mut *tx)
    .await?;
    buckets::replace(&mut tx, id, bucket_stocks).await?;
    for table in ["orders", "purchase_quota"] {
        let sql = format!("DELETE FROM {table} WHERE product_id = ?");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    let epoch: u64 = sqlx::query_scalar("SELECT redis_epoch FROM products WHERE id = ?")
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(epoch)
}

/// Milliseconds since the Unix epoch.
fn millis(at: OffsetDateTime) -> i64 {
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// The instant `ms` milliseconds after the Unix epoch.
fn from_millis(ms: i64) -> Result<OffsetDateTime, sqlx::Error> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .map_err(|e| sqlx::Error::Decode(e.into()))
}

/// The product's stock and order totals, by the orders' states (`sold` and `orders` count the
/// orders that hold units, reserved and paid: expired, cancelled and voided ones do not), or
/// `None` if it does not exist. The stock is read from the product's home: the row, or the sum
/// of its buckets — in one statement, so the stock and the orders are one consistent snapshot.
pub async fn view(pool: &MySqlPool, id: u64) -> Result<Option<ProductView>, sqlx::Error> {
    let row = sqlx::query(
        "SELECT p.id, p.home, p.initial_stock, p.per_user_limit, p.sale_starts_ms, \
                p.sale_ends_ms, p.token_required, p.first_come, p.payment_window_ms, \
                p.strategies, \
                CASE WHEN p.home = 'buckets' THEN \
                    (SELECT CAST(COALESCE(SUM(b.stock), 0) AS SIGNED) FROM stock_buckets b \
                     WHERE b.product_id = p.id) \
                ELSE p.stock END AS stock, \
                CAST(COALESCE(o.reserved, 0) AS SIGNED) AS reserved, \
                CAST(COALESCE(o.paid, 0) AS SIGNED) AS paid, \
                CAST(COALESCE(o.expired, 0) AS SIGNED) AS expired, \
                CAST(COALESCE(o.cancelled, 0) AS SIGNED) AS cancelled, \
                CAST(COALESCE(o.on_the_way, 0) AS SIGNED) AS on_the_way, \
                CAST(COALESCE(o.holding, 0) AS SIGNED) AS orders \
         FROM products p LEFT JOIN ( \
             SELECT product_id, \
                    SUM(IF(state = 'reserved', quantity, 0)) AS reserved, \
                    SUM(IF(state = 'paid', quantity, 0)) AS paid, \
                    SUM(IF(state IN ('expired', 'expiring'), quantity, 0)) AS expired, \
                    SUM(IF(state IN ('cancelled', 'cancelling'), quantity, 0)) AS cancelled, \
                    SUM(IF(state IN ('expiring', 'cancelling'), quantity, 0)) AS on_the_way, \
                    SUM(state IN ('reserved', 'paid')) AS holding \
             FROM orders WHERE product_id = ? GROUP BY product_id) o ON o.product_id = p.id \
         WHERE p.id = ?",
    )
    .bind(id)
    .bind(id)
    .fetch_optional(pool)
    .await?;
    row.map(|r| {
        let home: String = r.try_get("home")?;
        let starts: Option<i64> = r.try_get("sale_starts_ms")?;
        let ends: Option<i64> = r.try_get("sale_ends_ms")?;
        let (reserved, paid): (i64, i64) = (r.try_get("reserved")?, r.try_get("paid")?);
        Ok(ProductView {
            id: r.try_get("id")?,
            home: home
                .parse()
                .map_err(|e: String| sqlx::Error::Decode(e.into()))?,
            rules: SaleRules {
                per_user_limit: r.try_get("per_user_limit")?,
                sale_starts_at: starts.map(from_millis).transpose()?,
                sale_ends_at: ends.map(from_millis).transpose()?,
                token_required: r.try_get("token_required")?,
                first_come: r.try_get("first_come")?,
                payment_window_ms: r.try_get("payment_window_ms")?,
                strategies: parse_strategies(r.try_get("strategies")?)?,
            },
            stock: r.try_get("stock")?,
            initial_stock: r.try_get("initial_stock")?,
            sold: reserved + paid,
            orders: r.try_get("orders")?,
            reserved,
            paid,
            expired: r.try_get("expired")?,
            cancelled: r.try_get("cancelled")?,
            returning: r.try_get("on_the_way")?,
            pending: 0,
            stranded: 0,
        }
        .with_stranded())
    })
    .transpose()
}

/// What a purchase needs to know of a product before it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub home: Home,
    pub sale: SaleRules,
    /// The generation of its Redis-held stock: raised by every reset, and written into Redis
    /// beside the counter as its marker. A Redis whose marker is gone or older lost the stock
    /// (see [`crate::redis_stock::epoch`]). 0 for a product never reset since it was kept.
    pub redis_epoch: u64,
    /// The parts its Redis-held stock is split in (`redis-split`; 0 for any other home).
    pub redis_parts: u32,
}

/// The columns of a product row that make its home and its sale rules.
const RULES_COLUMNS: &str = "home, per_user_limit, sale_starts_ms, sale_ends_ms, token_required, \
                             first_come, payment_window_ms, strategies";

/// A product row's [`RULES_COLUMNS`].
#[derive(sqlx::FromRow)]
struct RulesRow {
    home: String,
    per_user_limit: i64,
    sale_starts_ms: Option<i64>,
    sale_ends_ms: Option<i64>,
    token_required: bool,
    first_come: bool,
    payment_window_ms: i64,
    strategies: String,
}

impl RulesRow {
    /// The product's home and sale rules.
    fn decode(self) -> Result<(Home, SaleRules), sqlx::Error> {
        let home: Home = self
            .home
            .parse()
            .map_err(|e: String| sqlx::Error::Decode(e.into()))?;
        let rules = SaleRules {
            per_user_limit: self.per_user_limit,
            sale_starts_at: self.sale_starts_ms.map(from_millis).transpose()?,
            sale_ends_at: self.sale_ends_ms.map(from_millis).transpose()?,
            token_required: self.token_required,
            first_come: self.first_come,
            payment_window_ms: self.payment_window_ms,
            strategies: parse_strategies(self.strategies)?,
        };
        Ok((home, rules))
    }
}

/// A [`RulesRow`] with the product's Redis epoch and parts.
#[derive(sqlx::FromRow)]
struct EpochRulesRow {
    #[sqlx(flatten)]
    rules: RulesRow,
    redis_epoch: u64,
    redis_parts: u32,
}

/// The product's home, sale rules and Redis epoch (one indexed row, none of its orders), or
/// `None` if it does not exist.
pub async fn rules(pool: &MySqlPool, id: u64) -> Result<Option<Rules>, sqlx::Error> {
    let sql =
        format!("SELECT {RULES_COLUMNS}, redis_epoch, redis_parts FROM products WHERE id = ?");
    let row: Option<EpochRulesRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    row.map(|row| {
        let (home, sale) = row.rules.decode()?;
        Ok(Rules {
            home,
            sale,
            redis_epoch: row.redis_epoch,
            redis_parts: row.redis_parts,
        })
    })
    .transpose()
}

/// What a product's public page shows of its row: where its stock lives, its rules, the
/// units left and the units it started with.
pub type PageRow = (Home, SaleRules, i64, i64);

/// A [`RulesRow`] with the product's units left and initial stock.
#[derive(sqlx::FromRow)]
struct PageColumns {
    #[sqlx(flatten)]
    rules: RulesRow,
    stock: i64,
    initial_stock: i64,
}

/// The product's home, rules, units left and initial stock, or `None` if it does not exist:
/// its public page. One indexed row (with its buckets for the buckets home), none of its
/// orders; for the Redis home the row holds no units and the caller reads the counter.
pub async fn page(pool: &MySqlPool, id: u64) -> Result<Option<PageRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {RULES_COLUMNS}, initial_stock, \
                CASE WHEN home = 'buckets' THEN \
                    (SELECT CAST(COALESCE(SUM(b.stock), 0) AS SIGNED) FROM stock_buckets b \
                     WHERE b.product_id = products.id) \
                ELSE stock END AS stock \
         FROM products WHERE id = ?"
    );
    let row: Option<PageColumns> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    row.map(|row| {
        let (home, rules) = row.rules.decode()?;
        Ok((home, rules, row.stock, row.initial_stock))
    })
    .transpose()
}

/// The strategies of a product row.
fn parse_strategies(names: String) -> Result<Strategies, sqlx::Error> {
    Strategies::parse(&names).map_err(|e| sqlx::Error::Decode(e.into()))
}

/// Whether the product exists.
pub async fn exists(conn: &mut MySqlConnection, id: u64) -> Result<bool, sqlx::Error> {
    let found: Option<u64> = sqlx::query_scalar("SELECT id FROM products WHERE id = ?")
        .bind(id)
        .fetch_optional(conn)
        .await?;
    Ok(found.is_some())
}

/// Takes `units` of the product if that many are left, in one conditional `UPDATE` (which
/// locks the row either way); whether it took them.
pub async fn take_if_left(
    conn: &mut MySqlConnection,
    id: u64,
    units: i64,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE products SET stock = stock - ?, version = version + 1 \
         WHERE id = ? AND stock >= ?",
    )
    .bind(units)
    .bind(id)
    .bind(units)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
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
