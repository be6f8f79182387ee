//! The marker of a product's Redis-held stock, and what writes the product's keys as a whole:
//! seeding them at a reset, removing them, and rebuilding them after Redis lost them.
//!
//! **Why a marker.** Redis keeps the stock in memory. Restarted without an append-only file
//! (or failed over to a replica that never had the data, or restored from an older backup), it
//! comes back without the counter, the purchases' charge records, the buyers' counts and the
//! stream's accepted orders — or with older ones. Read as it stands, a missing counter is "sold
//! out", a missing count is "bought nothing" and a missing record is "never charged": a buyer
//! at her limit buys again, and a purchase sent again is charged anew. So a reset writes the
//! product's *Redis epoch* beside the counter, in the same command: a number the database
//! records too (`products.redis_epoch`) and every reset raises. A purchase passes the epoch its
//! instance knows the product by, and the take script compares it with the marker in the same
//! atomic step as the take, no round trip added: a marker gone or behind it — or a counter with
//! no marker at all — answers [`super::scripts::LOST`], and the purchase is refused `503
//! backend_unavailable`, with nothing taken. A product of another home has no epoch to expect
//! (the instance passes 0): its missing counter means what it always meant, sold out here.
//!
//! **Until reconcile.** `reconcile` finds the marker gone or behind the database's epoch and
//! rebuilds the product's keys from the orders in one script ([`REBUILD`]): a charge record for
//! every order that holds units or is on its way back, the ended mark of every order that ended
//! (so a purchase sent again is answered with its order, as before), the buyers' counts from
//! those, the entries the stream still holds, the counter as what is left, the limit, the rules
//! — and the marker, in the same step, so a purchase finds either the loss or all of it rebuilt.
//!
//! What no marker brings back: the accepted orders the stream lost before a consumer read them
//! (`redis-lua-stream`'s `202`s). While the loss stands, their status answers `503`; rebuilt,
//! they are absent (`404`: nothing was bought) and the same purchase sent again buys. And a
//! purchase in flight when Redis lost its data — a `redis-lua` purchase between its take and its
//! insert, a batch a consumer had read — can still place its order after the rebuild counted
//! its units as on sale: reconcile once those have ended, and run Redis with an append-only
//! file (see `docker-compose.yml`).

use std::collections::HashMap;
use std::sync::LazyLock;

use deadpool_redis::redis::{self, Script};

use super::{RedisStock, RedisStockError, bounded, charge};
use crate::api::SaleRules;
use crate::db::orders::{OrderState, ProductOrder};

/// What a rebuilt charge record names as the attempt that charged it: no attempt of a
/// purchase is named so, so a give-back or a settling of one never takes it for its own.
pub const REBUILT: &str = "rebuilt";

/// The charge a rebuild records for a stored order — its field and its record — and whether
/// the order holds its units (charged against the stock and its buyer's limit).
pub fn rebuilt_charge(order: &ProductOrder, now: u64) -> (String, String, bool) {
    let field = charge::field(&order.user_id, &order.request_id);
    let terms = charge::terms(order.quantity, &order.strategy);
    match order.state {
        OrderState::Voided | OrderState::Expired | OrderState::Cancelled => {
            (field, format!("{terms}ended"), false)
        }
        // Holds its units, or they are on their way back: a charge, given back by the return
        // that is under way.
        OrderState::Reserved | OrderState::Paid | OrderState::Expiring | OrderState::Cancelling => {
            (field, format!("{terms}{now}:{REBUILT}"), true)
        }
    }
}

/// A product's keys as its orders and the stream say they should be ([`RedisStock::rebuild`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuild {
    /// The database's epoch of the product: the marker written.
    pub epoch: u64,
    /// Units on sale.
    pub counter: i64,
    pub rules: SaleRules,
    /// Units of the product's entries still in the stream.
    pub waiting: i64,
    /// Purchase field → charge record (see [`charge`]).
    pub records: Vec<(String, String)>,
    /// Buyer → units held, against the per-user limit.
    pub buyers: HashMap<String, i64>,
}

/// Writes a product's keys as [`Rebuild`] has them, unless its marker is (by now) at the
/// epoch or past it: a reset or another rebuild came first. Charge records are replaced, but
/// the tombstones of takes settled as not made stay (a lost take arriving late must still
/// charge nothing); a rebuilt record overwrites one. KEYS: stock, requests, buyers, limit,
/// rules, waiting, epoch. ARGV: epoch, counter, limit, rules, waiting units, the number of
/// records, then field and record of each, then buyer and units of each. Returns 1 if it wrote.
pub static REBUILD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if tonumber(redis.call('get', KEYS[7]) or '0') >= tonumber(ARGV[1]) then return 0 end
local charged = redis.call('hgetall', KEYS[2])
for i = 1, #charged, 2 do
  if charged[i + 1] ~= 'cancelled' then redis.call('hdel', KEYS[2], charged[i]) end
end
redis.call('del', KEYS[3])
local i = 7
for _ = 1, tonumber(ARGV[6]) do
  redis.call('hset', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i < #ARGV do
  redis.call('hset', KEYS[3], ARGV[i], ARGV[i + 1])
  i = i + 2
end
redis.call('set', KEYS[4], ARGV[3])
redis.call('set', KEYS[5], ARGV[4])
if tonumber(ARGV[5]) > 0 then redis.call('set', KEYS[6], ARGV[5]) else redis.call('del', KEYS[6]) end
redis.call('set', KEYS[1], ARGV[2])
redis.call('set', KEYS[7], ARGV[1])
return 1",
    )
});

impl RedisStock {
    /// Makes Redis the home of `stock` units of `product` sold by `rules`, at its Redis
    /// `epoch`: the counter, the limit, the rules and the marker are set in one command, the
    /// purchases it charged before, their buyers and its waiting stream entries are forgotten.
    /// The rules are kept beside the counter so that a purchase of Redis-held stock is admitted
    /// without the database (the point of `redis-lua-stream`: it sells while the database is
    /// away).
    pub async fn seed(
        &self,
        product: u64,
        epoch: u64,
        stock: i64,
        rules: &SaleRules,
    ) -> Result<(), RedisStockError> {
        self.remove(product).await?;
        let text = serde_json::to_string(rules).expect("sale rules serialise");
        self.query::<()>(
            redis::cmd("MSET")
                .arg(self.keys.limit(product))
                .arg(rules.per_user_limit)
                .arg(self.keys.rules(product))
                .arg(&text)
                .arg(self.keys.stock(product))
                .arg(stock)
                .arg(self.keys.epoch(product))
                .arg(epoch),
        )
        .await
    }

    /// The sale rules [`RedisStock::seed`] (or [`RedisStock::seed_split`]) kept for `product`,
    /// the epoch they were written at and the parts its stock is split in (0: one counter);
    /// `None`: its stock is not here, or Redis lost its marker.
    pub async fn sale_rules(
        &self,
        product: u64,
    ) -> Result<Option<(SaleRules, u64, u32)>, RedisStockError> {
        let (text, epoch, parts): (Option<String>, Option<u64>, Option<u32>) = self
            .query(
                redis::cmd("MGET")
                    .arg(self.keys.rules(product))
                    .arg(self.keys.epoch(product))
                    .arg(self.keys.parts(product)),
            )
            .await?;
        let rules = text.and_then(|t| serde_json::from_str(&t).ok());
        Ok(rules
            .zip(epoch)
            .map(|(rules, epoch)| (rules, epoch, parts.unwrap_or(0))))
    }

    /// The epoch the product's keys were written at (`None`: no marker).
    pub async fn marker(&self, product: u64) -> Result<Option<u64>, RedisStockError> {
        self.query(redis::cmd("GET").arg(self.keys.epoch(product)))
            .await
    }

    /// Writes the product's keys as `rebuild` has them ([`REBUILD`]); whether it did (not if
    /// its marker had reached the epoch meanwhile).
    pub async fn rebuild(&self, product: u64, rebuild: &Rebuild) -> Result<bool, RedisStockError> {
        let text = serde_json::to_string(&rebuild.rules).expect("sale rules serialise");
        let mut script = REBUILD.prepare_invoke();
        script
            .key(self.keys.stock(product))
            .key(self.keys.requests(product))
            .key(self.keys.buyers(product))
            .key(self.keys.limit(product))
            .key(self.keys.rules(product))
            .key(self.keys.waiting(product))
            .key(self.keys.epoch(product))
            .arg(rebuild.epoch)
            .arg(rebuild.counter)
            .arg(rebuild.rules.per_user_limit)
            .arg(text)
            .arg(rebuild.waiting)
            .arg(rebuild.records.len());
        for (field, record) in &rebuild.records {
            script.arg(field).arg(record);
        }
        for (buyer, units) in &rebuild.buyers {
            script.arg(buyer).arg(units);
        }
        let wrote: i64 = self.invoke(&script).await?;
        Ok(wrote == 1)
    }

    /// Makes Redis hold none of `product`: no counter, no marker, no charge records, no
    /// waiting entries.
    pub async fn remove(&self, product: u64) -> Result<(), RedisStockError> {
        self.remove_parts(product).await?;
        self.query::<()>(
            redis::cmd("DEL")
                .arg(self.keys.stock(product))
                .arg(self.keys.epoch(product))
                .arg(self.keys.requests(product))
                .arg(self.keys.buyers(product))
                .arg(self.keys.limit(product))
                .arg(self.keys.rules(product)),
        )
        .await?;
        // The stream is scanned only when the product has entries in it, and its waiting
        // count goes after them (an entry placed meanwhile is counted off while it exists).
        if self.waiting_units(product).await? == 0 {
            return self
                .query(redis::cmd("DEL").arg(self.keys.waiting(product)))
                .await;
        }
        let waiting = self.waiting(Some(product)).await?;
        let mut pipe = redis::pipe();
        for order in &waiting {
            pipe.cmd("XDEL")
                .arg(self.keys.stream(self.keys.lane(product)))
                .arg(&order.entry_id)
                .ignore();
            pipe.cmd("HDEL")
                .arg(self.keys.pending(self.keys.lane(product)))
                .arg(charge::pending_field(order.key()))
                .ignore();
        }
        pipe.cmd("DEL").arg(self.keys.waiting(product)).ignore();
        bounded(async {
            let mut conn = self.connections.pooled().await?;
            let answer = pipe.query_async::<()>(&mut conn).await;
            conn.settle(answer)
        })
        .await
    }
}
