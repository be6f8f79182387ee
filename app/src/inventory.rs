//! A product as its buyers and its accountants see it: the stock read from wherever it lives —
//! the row, the buckets, or the Redis counter and the orders still queued in the stream — beside
//! its orders. Above both kinds of storage ([`crate::db`], [`crate::redis_stock`]), below the
//! handlers and the benchmark that read it.

use crate::db::Db;

use crate::accounting::Ledger;
use crate::api::{Home, ProductView};
use crate::db::products;
use crate::redis_stock::{RedisStock, RedisStockError};

/// Why a product could not be read from its home.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Redis(#[from] RedisStockError),
}

/// The product as [`products::view`] reads it, with the stock read from its home (the Redis
/// counter, and the units waiting in the stream, for [`Home::Redis`]; the sum of the parts'
/// counters for [`Home::RedisSplit`]).
///
/// For a Redis home the orders are read again after the units waiting in the stream: a unit
/// moves from waiting to ordered, never back, so an order placed between the two reads is
/// counted twice (waiting, then ordered), never zero times. With the orders read only before,
/// it would be in neither, and a caller waiting for `pending == 0` would stop at a short count.
pub async fn view(
    pool: &Db,
    redis: Option<&RedisStock>,
    id: u64,
) -> Result<Option<ProductView>, ReadError> {
    let Some(first) = products::view(pool, id).await? else {
        return Ok(None);
    };
    if !first.home.in_redis() {
        return Ok(Some(first));
    }
    let redis = redis.ok_or(RedisStockError::NotConfigured)?;
    let pending = redis.waiting_units(id).await?;
    let stock = match first.home {
        Home::RedisSplit => redis
            .split_counter_and_charges(id)
            .await?
            .map(|(left, _)| left),
        _ => redis.counter(id).await?,
    };
    let stock = stock.unwrap_or(0);
    let Some(mut view) = products::view(pool, id).await? else {
        return Ok(None);
    };
    view.pending = pending;
    view.stock = stock;
    Ok(Some(view.with_stranded()))
}

/// The product's stock (read from its home) and its orders, as the accounting reads them after
/// a sale, or `None` if the product does not exist.
pub async fn ledger(
    pool: &Db,
    redis: Option<&RedisStock>,
    id: u64,
) -> Result<Option<Ledger>, ReadError> {
    Ok(view(pool, redis, id).await?.map(Ledger::of))
}

/// The units left of the product, read from its home alone (no orders) — the row, the sum of
/// the buckets, or the Redis counter — with its *mark*: a number read in the same step that
/// moves whenever a purchase may have taken a unit since. For the row it is the row's version,
/// which every stock write bumps; for buckets, the product row's version, which a reset and
/// every return to a bucket bump (empty buckets give a purchase nothing but what came back);
/// for Redis, the count of charges the take scripts keep, which no reset sets back. So while
/// the units left stay 0 and the mark stays where it was, nobody has bought: the winners of a
/// sold-out product are the same (see [`crate::product_memory`]). `None` if the product does
/// not exist.
pub async fn left_and_mark(
    pool: &Db,
    redis: Option<&RedisStock>,
    id: u64,
    home: Home,
) -> Result<Option<(i64, u64)>, ReadError> {
    match home {
        Home::Row => {
            let mut conn = pool.acquire().await?;
            Ok(products::stock_and_version(conn.conn(), id).await?)
        }
        Home::Buckets => {
            let mut conn = pool.acquire().await?;
            Ok(crate::db::buckets::left_and_version(conn.conn(), id).await?)
        }
        Home::Redis => {
            let redis = redis.ok_or(RedisStockError::NotConfigured)?;
            Ok(redis.counter_and_charges(id).await?)
        }
        Home::RedisSplit => {
            let redis = redis.ok_or(RedisStockError::NotConfigured)?;
            Ok(redis.split_counter_and_charges(id).await?)
        }
    }
}
