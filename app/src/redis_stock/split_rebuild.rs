//! Rebuilding a split product's parts after Redis lost them (see [`super::epoch`] for the
//! marker that tells, and [`super::split`] for the parts).
//!
//! A Redis that restarts without its data loses every part at once, and with them the
//! product's own marker: every purchase of the product is refused (each part's take finds its
//! marker gone) until `reconcile` writes the parts again from the orders. Each order's record,
//! and its units against its buyer's limit, go to its buyer's home part; the units on sale —
//! the initial stock less what the orders hold — are dealt over the parts as at a reset, each
//! part's allotment being its buyers' held units plus its share. Moves recorded before the loss
//! are gone with it, and their units are in the shares.
//!
//! Only a loss of every part is rebuilt. A Redis Cluster shard that lost its data while the
//! others kept theirs leaves some parts selling: the lost part's units cannot be told from the
//! others' allotments, which change with every move, so reconcile refuses the product rather
//! than guess ([`super::reconcile::ReconcileError::PartLost`]); reset it.

use std::collections::HashMap;
use std::sync::LazyLock;

use crate::db::Db;
use deadpool_redis::redis::{self, Script};

use super::RedisStock;
use super::epoch::rebuilt_charge;
use super::reconcile::ReconcileError;
use super::split::{home_part, shares};
use crate::db::orders;
use crate::db::products::{self, Rules};

/// Writes one part as its orders say it should be, unless its marker is (by now) at the epoch
/// or past it. Charge records are replaced, but the tombstones of takes settled as not made
/// stay; the buyers' counts and the moves' records are written anew. KEYS: stock, requests,
/// buyers, limit, epoch, allotted, sent, received. ARGV: epoch, counter, limit, allotment, the
/// number of records, then field and record of each, then buyer and units of each. Returns 1
/// if it wrote.
static REBUILD_PART: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if tonumber(redis.call('get', KEYS[5]) or '0') >= tonumber(ARGV[1]) then return 0 end
local charged = redis.call('hgetall', KEYS[2])
for i = 1, #charged, 2 do
  if charged[i + 1] ~= 'cancelled' then redis.call('hdel', KEYS[2], charged[i]) end
end
redis.call('del', KEYS[3], KEYS[7], KEYS[8])
local i = 6
for _ = 1, tonumber(ARGV[5]) do
  redis.call('hset', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i < #ARGV do
  redis.call('hset', KEYS[3], ARGV[i], ARGV[i + 1])
  i = i + 2
end
redis.call('set', KEYS[4], ARGV[3])
redis.call('set', KEYS[6], ARGV[4])
redis.call('set', KEYS[1], ARGV[2])
redis.call('set', KEYS[5], ARGV[1])
return 1",
    )
});

/// One part as the orders say it should be.
#[derive(Debug, Default)]
struct Part {
    /// Units its buyers' orders hold.
    held: i64,
    records: Vec<(String, String)>,
    buyers: HashMap<String, i64>,
}

/// Rebuilds every part of `product` from its orders if Redis lost them all; refuses it if it
/// lost only some. Whether it rebuilt.
pub(super) async fn rebuild_if_lost(
    pool: &Db,
    redis: &RedisStock,
    product: u64,
    rules: &Rules,
) -> Result<bool, ReconcileError> {
    let parts = rules.redis_parts;
    let mut lost = Vec::new();
    for part in 0..parts {
        let marker: Option<u64> = redis
            .query(redis::cmd("GET").arg(&redis.keys().part(product, part).counter.epoch))
            .await?;
        if marker.unwrap_or(0) < rules.redis_epoch {
            lost.push(part);
        }
    }
    match lost.first() {
        None => return Ok(false),
        Some(&part) if lost.len() < parts as usize => {
            return Err(ReconcileError::PartLost(product, part));
        }
        Some(_) => {}
    }
    let view = products::view(pool, product)
        .await?
        .ok_or(ReconcileError::UnknownProduct(product))?;
    let now = redis.now_ms().await?;
    let mut rebuilt: Vec<Part> = (0..parts).map(|_| Part::default()).collect();
    for order in orders::states_of(pool, product).await? {
        let part = &mut rebuilt[home_part(&order.user_id, parts) as usize];
        let (field, record, holds) = rebuilt_charge(&order, now);
        if holds {
            part.held += i64::from(order.quantity);
            *part.buyers.entry(order.user_id.clone()).or_default() += i64::from(order.quantity);
        }
        part.records.push((field, record));
    }
    let held: i64 = rebuilt.iter().map(|p| p.held).sum();
    if held > view.initial_stock {
        tracing::error!(product, held, "orders beyond the stock: oversold");
    }
    let on_sale = shares((view.initial_stock - held).max(0), parts);
    let text = serde_json::to_string(&rules.sale).expect("sale rules serialise");
    for (n, (part, share)) in rebuilt.iter().zip(on_sale).enumerate() {
        let keys = redis.keys().part(product, u32::try_from(n).unwrap_or(0));
        let mut script = REBUILD_PART.prepare_invoke();
        script
            .key(&keys.counter.stock)
            .key(&keys.counter.requests)
            .key(&keys.counter.buyers)
            .key(&keys.counter.limit)
            .key(&keys.counter.epoch)
            .key(&keys.allotted)
            .key(&keys.sent)
            .key(&keys.received)
            .arg(rules.redis_epoch)
            .arg(share)
            .arg(rules.sale.per_user_limit)
            .arg(part.held + share)
            .arg(part.records.len());
        for (field, record) in &part.records {
            script.arg(field).arg(record);
        }
        for (buyer, units) in &part.buyers {
            script.arg(buyer).arg(units);
        }
        redis.invoke::<i64>(&script).await?;
    }
    redis
        .query::<()>(
            redis::cmd("MSET")
                .arg(redis.keys().rules(product))
                .arg(&text)
                .arg(redis.keys().parts(product))
                .arg(parts)
                .arg(redis.keys().epoch(product))
                .arg(rules.redis_epoch),
        )
        .await?;
    tracing::warn!(
        product,
        epoch = rules.redis_epoch,
        "Redis had lost the split product's parts: rebuilt from its orders"
    );
    Ok(true)
}
