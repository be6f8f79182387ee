//! Stock split over parts ([`Home::RedisSplit`](crate::api::Home::RedisSplit)): one product's
//! units kept in several counters, each in a lane of its own, so that on a Redis Cluster one hot
//! product's purchases spread over several shards instead of queueing on one.
//!
//! **A buyer's home part.** A script may only touch keys of one slot, and the per-user limit
//! must be checked in the same atomic step as the take. So each buyer has one *home part* — a
//! fixed hash of her user id — where all her purchases of the product are charged: her charge
//! records, her count against the limit and the units she takes all live there, and one script
//! decides, exactly as `redis-lua`'s does on an unsplit counter. A give-back (a failed insert,
//! an expiry, a cancel, a reconcile) finds the charge in the same part by the same hash.
//!
//! **Moves.** Buyers do not spread evenly over the parts, so a part runs dry while others still
//! hold stock. A buyer whose home is empty does not take from another part (her limit lives at
//! home): she *moves* units home and takes them there. A move is two scripts, one per part,
//! each idempotent by the move's id: [`MOVE_OUT`] takes units off the other part and records
//! the move in its `sent` hash; [`MOVE_IN`] adds them home unless its `received` hash already
//! has the move. Between the two the units are in neither counter and in the record of the
//! move: nothing is created or lost, and a move left half-way (the instance died, Redis did
//! not answer) is finished by `reconcile`, which delivers every sent move its destination has
//! not received. Each part also keeps `allotted` — its share at the reset, plus the units moved
//! in, less the units moved out, changed in the same step as the counter — so that a part's
//! counter can be checked against its own orders alone.
//!
//! **Sold out** is said only when the buyer's home and every other part were found empty in
//! turn, in a pass over them that moved nothing: units move while a buyer looks, so a part she
//! found empty may hold some by the time she has looked at the others, and a pass that moved
//! units but lost them to other buyers of her part is followed by another. Without that fallback (`--split-fallback false`) a buyer whose home is empty is told
//! "sold out" while other parts still hold units: **undersell**, the failure the scenario
//! `split-undersell` counts.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use deadpool_redis::redis::{self, Script, ScriptInvocation};

use super::keys::CounterKeys;
use super::scripts::GIVE_BACK_ALL;
use super::{RedisStock, RedisStockError, charge};
use crate::api::SaleRules;

/// [`MOVE_OUT`] and [`MOVE_IN`]: the part lost its data (its counter or its marker gone, or the
/// marker behind the epoch the move expects): nothing moved.
pub const MOVE_LOST: i64 = -7;

/// Takes units off a part for a move to another, once per move id: the `wanted` units, or as
/// many as it has. No more: a unit moved to a part whose buyers have all been served would sit
/// there while a buyer of another part, which she had already found empty, is told "sold out".
/// Records the move in the part's `sent` hash with its units and destination; a move id
/// already recorded answers its units again and takes nothing. KEYS: stock, epoch, allotted, sent. ARGV: move id, units
/// wanted, destination part, expected epoch. Returns the units taken (0: the part is empty),
/// or [`MOVE_LOST`].
pub static MOVE_OUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local done = redis.call('hget', KEYS[4], ARGV[1])
if done then return tonumber(string.match(done, '^(%d+):')) end
local left = redis.call('get', KEYS[1])
if not left or tonumber(redis.call('get', KEYS[2]) or '0') < tonumber(ARGV[4]) then return -7 end
left = tonumber(left)
local n = math.min(left, tonumber(ARGV[2]))
if n <= 0 then return 0 end
redis.call('decrby', KEYS[1], n)
redis.call('decrby', KEYS[3], n)
redis.call('hset', KEYS[4], ARGV[1], n .. ':' .. ARGV[3])
return n",
    )
});

/// Adds the units of a move to its destination part, once per move id (recorded in the part's
/// `received` hash). KEYS: stock, epoch, allotted, received. ARGV: move id, units, expected
/// epoch. Returns 1 if they arrived now, 0 if they had arrived before, or [`MOVE_LOST`].
pub static MOVE_IN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('hexists', KEYS[4], ARGV[1]) == 1 then return 0 end
if not redis.call('get', KEYS[1]) or tonumber(redis.call('get', KEYS[2]) or '0') < tonumber(ARGV[3]) then
  return -7
end
redis.call('incrby', KEYS[1], ARGV[2])
redis.call('incrby', KEYS[3], ARGV[2])
redis.call('hset', KEYS[4], ARGV[1], ARGV[2])
return 1",
    )
});

/// Tries a script of a move before it is left to `reconcile`: both are idempotent by the
/// move's id, so an answer lost to a broken connection is asked again.
const MOVE_TRIES: usize = 3;

/// The home part of `user` among `parts`: a fixed hash, the same in every instance and every
/// release, so a buyer's charges are always found where they were made. FNV-1a of the user id,
/// then MurmurHash3's finaliser: FNV's low bits depend only on the low bits of each byte, so
/// `u-1 … u-999` taken modulo 8 alone would spread far more evenly than real buyers do.
pub fn home_part(user: &str, parts: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in user.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    u32::try_from(hash % u64::from(parts.max(1))).unwrap_or(0)
}

/// `stock` split into `parts` shares as even as can be, the first ones a unit larger.
pub fn shares(stock: i64, parts: u32) -> Vec<i64> {
    let parts = i64::from(parts.max(1));
    (0..parts)
        .map(|p| stock / parts + i64::from(p < stock % parts))
        .collect()
}

/// One part's counter as found (`None`: gone) and what it was allotted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartState {
    pub counter: Option<i64>,
    pub allotted: i64,
}

impl RedisStock {
    /// The keys of `user`'s home part of `product`, split in `parts`.
    pub fn home_of(&self, product: u64, parts: u32, user: &str) -> CounterKeys {
        self.keys.part(product, home_part(user, parts)).counter
    }

    /// Makes Redis the home of `stock` units of `product` split over `parts` parts, at its
    /// Redis `epoch`: each part's share, limit, marker and allotment, then the product's rules,
    /// marker and part count — last, so an instance that reads the rules finds the parts. What
    /// Redis held of the product before is removed first.
    pub async fn seed_split(
        &self,
        product: u64,
        epoch: u64,
        stock: i64,
        parts: u32,
        rules: &SaleRules,
    ) -> Result<(), RedisStockError> {
        self.remove(product).await?;
        for (part, share) in (0..parts).zip(shares(stock, parts)) {
            let keys = self.keys.part(product, part);
            self.query::<()>(
                redis::cmd("MSET")
                    .arg(&keys.counter.limit)
                    .arg(rules.per_user_limit)
                    .arg(&keys.counter.stock)
                    .arg(share)
                    .arg(&keys.allotted)
                    .arg(share)
                    .arg(&keys.counter.epoch)
                    .arg(epoch),
            )
            .await?;
        }
        let text = serde_json::to_string(rules).expect("sale rules serialise");
        self.query::<()>(
            redis::cmd("MSET")
                .arg(self.keys.rules(product))
                .arg(&text)
                .arg(self.keys.parts(product))
                .arg(parts)
                .arg(self.keys.epoch(product))
                .arg(epoch),
        )
        .await
    }

    /// The parts `product`'s stock is split in (`None`: it is not split, or not here).
    pub async fn parts_of(&self, product: u64) -> Result<Option<u32>, RedisStockError> {
        self.query(redis::cmd("GET").arg(self.keys.parts(product)))
            .await
    }

    /// Deletes every part of `product` and its part count, if it is split.
    pub(super) async fn remove_parts(&self, product: u64) -> Result<(), RedisStockError> {
        let Some(parts) = self.parts_of(product).await? else {
            return Ok(());
        };
        for part in 0..parts {
            let keys = self.keys.part(product, part);
            self.query::<()>(
                redis::cmd("DEL")
                    .arg(&keys.counter.stock)
                    .arg(&keys.counter.requests)
                    .arg(&keys.counter.charges)
                    .arg(&keys.counter.buyers)
                    .arg(&keys.counter.limit)
                    .arg(&keys.counter.epoch)
                    .arg(&keys.allotted)
                    .arg(&keys.sent)
                    .arg(&keys.received),
            )
            .await?;
        }
        self.query(redis::cmd("DEL").arg(self.keys.parts(product)))
            .await
    }

    /// Each part's counter and allotment, in part order.
    pub async fn part_states(
        &self,
        product: u64,
        parts: u32,
    ) -> Result<Vec<PartState>, RedisStockError> {
        let mut states = Vec::with_capacity(parts as usize);
        for part in 0..parts {
            states.push(self.part_state(product, part).await?);
        }
        Ok(states)
    }

    /// Part `part`'s counter and allotment, read in one step: a move changes both at once.
    pub async fn part_state(&self, product: u64, part: u32) -> Result<PartState, RedisStockError> {
        let keys = self.keys.part(product, part);
        let (counter, allotted): (Option<i64>, Option<i64>) = self
            .query(
                redis::cmd("MGET")
                    .arg(&keys.counter.stock)
                    .arg(&keys.allotted),
            )
            .await?;
        Ok(PartState {
            counter,
            allotted: allotted.unwrap_or(0),
        })
    }

    /// The units on sale in all of `product`'s parts and the charges they made ever (`None`:
    /// the product is not split here, or a part lost its counter).
    pub async fn split_counter_and_charges(
        &self,
        product: u64,
    ) -> Result<Option<(i64, u64)>, RedisStockError> {
        let Some(parts) = self.parts_of(product).await? else {
            return Ok(None);
        };
        let (mut units, mut charges) = (0, 0);
        for part in 0..parts {
            let keys = self.keys.part(product, part);
            let (counter, charged): (Option<i64>, Option<u64>) = self
                .query(
                    redis::cmd("MGET")
                        .arg(&keys.counter.stock)
                        .arg(&keys.counter.charges),
                )
                .await?;
            let Some(counter) = counter else {
                return Ok(None);
            };
            units += counter;
            charges += charged.unwrap_or(0);
        }
        Ok(Some((units, charges)))
    }

    /// The purchases every part of `product` charged: field → charge record.
    pub async fn split_charged(
        &self,
        product: u64,
    ) -> Result<HashMap<String, String>, RedisStockError> {
        let mut charged = HashMap::new();
        for part in 0..self.parts_of(product).await?.unwrap_or(0) {
            let requests = self.keys.part(product, part).counter.requests;
            charged.extend(self.charged_at(&requests).await?);
        }
        Ok(charged)
    }

    /// [`RedisStock::give_back`] in the part that charged the purchase `field`: its buyer's
    /// home part.
    pub fn give_back_in_part(
        &self,
        product: u64,
        parts: u32,
        field: &str,
        attempt: Option<&str>,
        afterwards: charge::Afterwards,
    ) -> ScriptInvocation<'static> {
        let user = charge::parse_field(field).map_or("", |(user, _)| user);
        let keys = self.home_of(product, parts, user);
        self.give_back_at(&keys, product, field, attempt, afterwards)
    }

    /// Gives back the units of the ended orders `fields` of a split `product`, each in its
    /// buyer's home part (one script per part they fall in). The units given back in all.
    pub async fn give_back_all_split(
        &self,
        product: u64,
        fields: &[String],
    ) -> Result<i64, RedisStockError> {
        let parts = self.parts_of(product).await?.unwrap_or(1);
        let mut by_part: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
        for field in fields {
            let user = charge::parse_field(field).map_or("", |(user, _)| user);
            (by_part.entry(home_part(user, parts)).or_default()).push(field);
        }
        let mut given = 0;
        for (part, fields) in by_part {
            let keys = self.keys.part(product, part);
            let mut script = GIVE_BACK_ALL.prepare_invoke();
            script
                .key(&keys.counter.stock)
                .key(&keys.counter.requests)
                .key(&keys.counter.buyers)
                .arg(self.keys.restocked())
                .arg(product);
            for field in fields {
                script.arg(field);
            }
            given += self.invoke::<i64>(&script).await?;
        }
        Ok(given)
    }

    /// Moves units of `product` from part `from` into part `to` (`wanted`, or as many as
    /// `from` has): the units that arrived. A move the scripts could not finish is left to
    /// `reconcile`, its units in the record of the move, and answered as an error.
    pub async fn move_units(
        &self,
        product: u64,
        from: u32,
        to: u32,
        wanted: u32,
        epoch: u64,
    ) -> Result<u32, RedisStockError> {
        let id = charge::Attempt::new().name();
        let source = self.keys.part(product, from);
        let mut out = MOVE_OUT.prepare_invoke();
        out.key(&source.counter.stock)
            .key(&source.counter.epoch)
            .key(&source.allotted)
            .key(&source.sent)
            .arg(&id)
            .arg(wanted)
            .arg(to)
            .arg(epoch);
        let taken: i64 = retried(|| self.invoke(&out)).await?;
        if taken <= 0 {
            return Ok(0);
        }
        self.deliver(product, to, &id, taken, epoch).await?;
        Ok(u32::try_from(taken).unwrap_or(0))
    }

    /// Adds a sent move's `units` to part `to` unless they arrived before ([`MOVE_IN`]).
    pub async fn deliver(
        &self,
        product: u64,
        to: u32,
        id: &str,
        units: i64,
        epoch: u64,
    ) -> Result<(), RedisStockError> {
        let home = self.keys.part(product, to);
        let mut into = MOVE_IN.prepare_invoke();
        into.key(&home.counter.stock)
            .key(&home.counter.epoch)
            .key(&home.allotted)
            .key(&home.received)
            .arg(id)
            .arg(units)
            .arg(epoch);
        let arrived: i64 = retried(|| self.invoke(&into)).await?;
        if arrived == MOVE_LOST {
            tracing::warn!(
                product,
                part = to,
                "a move's units could not arrive: left to reconcile"
            );
        }
        Ok(())
    }

    /// The moves out of each part of `product` that their destination has not received:
    /// (destination part, move id, units). What `reconcile` delivers.
    pub async fn undelivered(
        &self,
        product: u64,
        parts: u32,
    ) -> Result<Vec<(u32, String, i64)>, RedisStockError> {
        let mut received = Vec::with_capacity(parts as usize);
        for part in 0..parts {
            let found: HashMap<String, i64> = self
                .query(redis::cmd("HGETALL").arg(&self.keys.part(product, part).received))
                .await?;
            received.push(found);
        }
        let mut undelivered = Vec::new();
        for part in 0..parts {
            let sent: HashMap<String, String> = self
                .query(redis::cmd("HGETALL").arg(&self.keys.part(product, part).sent))
                .await?;
            for (id, record) in sent {
                let Some((units, to)) = record.split_once(':') else {
                    continue;
                };
                let (Ok(units), Ok(to)) = (units.parse::<i64>(), to.parse::<u32>()) else {
                    continue;
                };
                if to < parts && !received[to as usize].contains_key(&id) {
                    undelivered.push((to, id, units));
                }
            }
        }
        Ok(undelivered)
    }
}

/// Runs `op` up to [`MOVE_TRIES`] times while Redis is unreachable.
async fn retried<T, F, Fut>(mut op: F) -> Result<T, RedisStockError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, RedisStockError>>,
{
    let mut tries = 1;
    loop {
        match op().await {
            Err(e) if e.is_unavailable() && tries < MOVE_TRIES => tries += 1,
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buyer_s_home_part_is_the_same_every_time_and_within_the_parts() {
        for user in ["u1", "buyer-42", "", "张三"] {
            let part = home_part(user, 8);
            assert!(part < 8);
            assert_eq!(home_part(user, 8), part);
        }
        assert_eq!(home_part("anyone", 1), 0);
    }

    #[test]
    fn buyers_spread_over_every_part() {
        let mut seen = [0u32; 8];
        for n in 0..800 {
            seen[home_part(&format!("user-{n}"), 8) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
    }

    #[test]
    fn shares_add_up_to_the_stock_and_differ_by_at_most_one() {
        for (stock, parts) in [(10, 3), (0, 4), (1000, 8), (7, 7), (3, 8)] {
            let shares = shares(stock, parts);
            assert_eq!(shares.len(), parts as usize);
            assert_eq!(shares.iter().sum::<i64>(), stock);
            let (min, max) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(max - min <= 1, "{shares:?}");
        }
    }
}
