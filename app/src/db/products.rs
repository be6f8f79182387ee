//! Product rows: reset, summary, and the stock reads and writes the strategies share.

use time::OffsetDateTime;

use super::buckets;
use super::engine::{Conn, Db, Sql, Whole, each_engine, execute, signed, sql};
use crate::api::{DEFAULT_BUCKETS, Home, ProductView, SaleRules, Strategies};

/// Creates the product or resets it to `stock` units kept in `home`, under the default rules
/// ([`SaleRules::default`]), and deletes its orders, atomically. The row's `stock` holds the
/// units only when the home is the row; otherwise it holds none, so the row strategies find the
/// product sold out. The fence goes back to 0 so that any lock backend's tokens are accepted
/// again. Buckets-home products get [`DEFAULT_BUCKETS`] buckets (see [`reset_with`]).
pub async fn reset(db: &Db, id: u64, stock: i64, home: Home) -> Result<(), sqlx::Error> {
    reset_with(db, id, stock, home, DEFAULT_BUCKETS, &SaleRules::default())
        .await
        .map(|_| ())
}

/// [`reset`], splitting the stock of a buckets-home product evenly over `buckets` buckets (any
/// other home deletes the product's buckets), under `rules`. The buyers' claimed units are
/// forgotten with the orders. Returns the product's new Redis epoch (see [`Rules::redis_epoch`]),
/// which a reset to Redis writes there beside the counter.
pub async fn reset_with(
    db: &Db,
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
        match reset_once(db, id, row_stock, stock, home, parts, rules).await {
            Err(e) if attempt < ATTEMPTS && super::errors::deadlocked(&e) => attempt += 1,
            done => return done,
        }
    }
}

/// The reset's upsert of the product row.
const UPSERT: Sql = sql!(
    mysql: "INSERT INTO products (id, stock, initial_stock, home, per_user_limit, sale_starts_ms, \
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
    postgres: "INSERT INTO products (id, stock, initial_stock, home, per_user_limit, \
                                     sale_starts_ms, sale_ends_ms, token_required, first_come, \
                                     payment_window_ms, strategies, redis_epoch, redis_parts) \
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?) \
               ON CONFLICT (id) DO UPDATE SET stock = EXCLUDED.stock, \
               initial_stock = EXCLUDED.initial_stock, home = EXCLUDED.home, \
               per_user_limit = EXCLUDED.per_user_limit, \
               sale_starts_ms = EXCLUDED.sale_starts_ms, sale_ends_ms = EXCLUDED.sale_ends_ms, \
               token_required = EXCLUDED.token_required, first_come = EXCLUDED.first_come, \
               payment_window_ms = EXCLUDED.payment_window_ms, \
               strategies = EXCLUDED.strategies, version = products.version + 1, fence = 0, \
               redis_epoch = products.redis_epoch + 1, redis_parts = EXCLUDED.redis_parts"
);

/// One attempt of [`reset_with`], in one transaction.
async fn reset_once(
    db: &Db,
    id: u64,
    row_stock: i64,
    stock: i64,
    home: Home,
    (bucket_stocks, redis_parts): (&[i64], u32),
    rules: &SaleRules,
) -> Result<u64, sqlx::Error> {
    let mut tx = db.begin().await?;
    execute!(
        tx.conn(),
        UPSERT,
        signed(id),
        row_stock,
        stock,
        home.name(),
        rules.per_user_limit,
        rules.sale_starts_at.map(millis),
        rules.sale_ends_at.map(millis),
        rules.token_required,
        rules.first_come,
        rules.payment_window_ms,
        rules.strategies.names(),
        i64::from(redis_parts)
    )?;
    buckets::replace(tx.conn(), id, bucket_stocks).await?;
    const FORGET: [Sql; 2] = [
        sql!("DELETE FROM orders WHERE product_id = ?"),
        sql!("DELETE FROM purchase_quota WHERE product_id = ?"),
    ];
    for forget in FORGET {
        execute!(tx.conn(), forget, signed(id))?;
    }
    const EPOCH: Sql = sql!("SELECT redis_epoch FROM products WHERE id = ?");
    let epoch: Whole = each_engine!(tx.conn(), |c, e| sqlx::query_scalar(e.sql(EPOCH))
        .bind(signed(id))
        .fetch_one(c)
        .await)?;
    tx.commit().await?;
    epoch.get()
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

/// The text of [`view`]'s statement, with `$int` the engine's name of a signed 64-bit integer
/// (MariaDB's `SIGNED`, PostgreSQL's `BIGINT`): both sum into decimals.
macro_rules! view_text {
    ($int:literal) => {
        concat!(
            "SELECT p.id, p.home, p.initial_stock, p.per_user_limit, p.sale_starts_ms, \
                    p.sale_ends_ms, p.token_required, p.first_come, p.payment_window_ms, \
                    p.strategies, \
                    CASE WHEN p.home = 'buckets' THEN \
                        (SELECT CAST(COALESCE(SUM(b.stock), 0) AS ", $int, ") FROM stock_buckets b \
                         WHERE b.product_id = p.id) \
                    ELSE p.stock END AS stock, \
                    CAST(COALESCE(o.reserved, 0) AS ", $int, ") AS reserved, \
                    CAST(COALESCE(o.paid, 0) AS ", $int, ") AS paid, \
                    CAST(COALESCE(o.expired, 0) AS ", $int, ") AS expired, \
                    CAST(COALESCE(o.cancelled, 0) AS ", $int, ") AS cancelled, \
                    CAST(COALESCE(o.on_the_way, 0) AS ", $int, ") AS on_the_way, \
                    CAST(COALESCE(o.holding, 0) AS ", $int, ") AS orders \
             FROM products p LEFT JOIN ( \
                 SELECT product_id, \
                    SUM(CASE WHEN state = 'reserved' THEN quantity ELSE 0 END) AS reserved, \
                    SUM(CASE WHEN state = 'paid' THEN quantity ELSE 0 END) AS paid, \
                    SUM(CASE WHEN state IN ('expired', 'expiring') THEN quantity ELSE 0 END) \
                        AS expired, \
                    SUM(CASE WHEN state IN ('cancelled', 'cancelling') THEN quantity ELSE 0 END) \
                        AS cancelled, \
                    SUM(CASE WHEN state IN ('expiring', 'cancelling') THEN quantity ELSE 0 END) \
                        AS on_the_way, \
                    SUM(CASE WHEN state IN ('reserved', 'paid') THEN 1 ELSE 0 END) AS holding \
                 FROM orders WHERE product_id = ? GROUP BY product_id) o ON o.product_id = p.id \
             WHERE p.id = ?"
        )
    };
}

/// A product row with its orders' totals, as [`view`] reads it.
#[derive(sqlx::FromRow)]
struct ViewRow {
    #[sqlx(try_from = "Whole")]
    id: u64,
    #[sqlx(flatten)]
    rules: RulesRow,
    stock: i64,
    initial_stock: i64,
    reserved: i64,
    paid: i64,
    expired: i64,
    cancelled: i64,
    on_the_way: i64,
    orders: i64,
}

/// The product's stock and order totals, by the orders' states (`sold` and `orders` count the
/// orders that hold units, reserved and paid: expired, cancelled and voided ones do not), or
/// `None` if it does not exist. The stock is read from the product's home: the row, or the sum
/// of its buckets — in one statement, so the stock and the orders are one consistent snapshot.
pub async fn view(db: &Db, id: u64) -> Result<Option<ProductView>, sqlx::Error> {
    const VIEW: Sql = sql!(mysql: view_text!("SIGNED"), postgres: view_text!("BIGINT"));
    let row: Option<ViewRow> = each_engine!(db.pool(), |c, e| sqlx::query_as(e.sql(VIEW))
        .bind(signed(id))
        .bind(signed(id))
        .fetch_optional(c)
        .await)?;
    row.map(|r| {
        let (home, rules) = r.rules.decode()?;
        Ok(ProductView {
            id: r.id,
            home,
            rules,
            stock: r.stock,
            initial_stock: r.initial_stock,
            sold: r.reserved + r.paid,
            orders: r.orders,
            reserved: r.reserved,
            paid: r.paid,
            expired: r.expired,
            cancelled: r.cancelled,
            returning: r.on_the_way,
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

/// The columns of a product row that make its home and its sale rules, for `concat!`.
macro_rules! rules_columns {
    () => {
        "home, per_user_limit, sale_starts_ms, sale_ends_ms, token_required, first_come, \
         payment_window_ms, strategies"
    };
}

/// A product row's [`rules_columns`].
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
    #[sqlx(try_from = "Whole")]
    redis_epoch: u64,
    #[sqlx(try_from = "Whole")]
    redis_parts: u32,
}

/// The product's home, sale rules and Redis epoch (one indexed row, none of its orders), or
/// `None` if it does not exist.
pub async fn rules(db: &Db, id: u64) -> Result<Option<Rules>, sqlx::Error> {
    const RULES: Sql = sql!(concat!(
        "SELECT ",
        rules_columns!(),
        ", redis_epoch, redis_parts FROM products WHERE id = ?"
    ));
    let row: Option<EpochRulesRow> = each_engine!(db.pool(), |c, e| sqlx::query_as(e.sql(RULES))
        .bind(signed(id))
        .fetch_optional(c)
        .await)?;
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
pub async fn page(db: &Db, id: u64) -> Result<Option<PageRow>, sqlx::Error> {
    macro_rules! page_text {
        ($int:literal) => {
            concat!(
                "SELECT ",
                rules_columns!(),
                ", initial_stock, \
                 CASE WHEN home = 'buckets' THEN \
                     (SELECT CAST(COALESCE(SUM(b.stock), 0) AS ",
                $int,
                ") FROM stock_buckets b \
                      WHERE b.product_id = products.id) \
                 ELSE stock END AS stock \
                 FROM products WHERE id = ?"
            )
        };
    }
    const PAGE: Sql = sql!(mysql: page_text!("SIGNED"), postgres: page_text!("BIGINT"));
    let row: Option<PageColumns> = each_engine!(db.pool(), |c, e| sqlx::query_as(e.sql(PAGE))
        .bind(signed(id))
        .fetch_optional(c)
        .await)?;
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
pub async fn exists(conn: Conn<'_>, id: u64) -> Result<bool, sqlx::Error> {
    const EXISTS: Sql = sql!("SELECT id FROM products WHERE id = ?");
    let found: Option<Whole> = each_engine!(conn, |c, e| sqlx::query_scalar(e.sql(EXISTS))
        .bind(signed(id))
        .fetch_optional(c)
        .await)?;
    Ok(found.is_some())
}

/// Takes `units` of the product if that many are left, in one conditional `UPDATE` (which
/// locks the row either way); whether it took them.
pub async fn take_if_left(conn: Conn<'_>, id: u64, units: i64) -> Result<bool, sqlx::Error> {
    const TAKE: Sql = sql!(
        "UPDATE products SET stock = stock - ?, version = version + 1 WHERE id = ? AND stock >= ?"
    );
    let taken = execute!(conn, TAKE, units, signed(id), units)?;
    Ok(taken == 1)
}

/// The product's stock and version (plain, non-locking read), or `None` if it does not exist.
pub async fn stock_and_version(conn: Conn<'_>, id: u64) -> Result<Option<(i64, u64)>, sqlx::Error> {
    const READ: Sql = sql!("SELECT stock, version FROM products WHERE id = ?");
    let row: Option<(i64, Whole)> = each_engine!(conn, |c, e| sqlx::query_as(e.sql(READ))
        .bind(signed(id))
        .fetch_optional(c)
        .await)?;
    row.map(|(stock, version)| Ok((stock, version.get()?)))
        .transpose()
}

/// The product's stock, its row locked for update until the transaction ends, or `None` if it
/// does not exist.
pub async fn lock_stock(conn: Conn<'_>, id: u64) -> Result<Option<i64>, sqlx::Error> {
    const LOCK: Sql = sql!("SELECT stock FROM products WHERE id = ? FOR UPDATE");
    each_engine!(conn, |c, e| sqlx::query_scalar(e.sql(LOCK))
        .bind(signed(id))
        .fetch_optional(c)
        .await)
}

/// The product's stock (plain, non-locking read), or `None` if it does not exist.
pub async fn stock(conn: Conn<'_>, id: u64) -> Result<Option<i64>, sqlx::Error> {
    const READ: Sql = sql!("SELECT stock FROM products WHERE id = ?");
    each_engine!(conn, |c, e| sqlx::query_scalar(e.sql(READ))
        .bind(signed(id))
        .fetch_optional(c)
        .await)
}

/// Writes an absolute stock value: whoever computed it is trusted to have read the current one.
/// Like every stock write, it bumps `version`, so a buyer who read before it (`optimistic`, a
/// fenced holder) cannot write over it.
pub async fn set_stock(conn: Conn<'_>, id: u64, stock: i64) -> Result<(), sqlx::Error> {
    const WRITE: Sql = sql!("UPDATE products SET stock = ?, version = version + 1 WHERE id = ?");
    execute!(conn, WRITE, stock, signed(id)).map(|_| ())
}
