//! `redis-split`: `redis-lua` on a product whose stock is split over several counters in
//! different slots (home `redis-split`, its `buckets` the number of parts), so that on a Redis
//! Cluster one hot product's purchases are decided on several shards instead of queueing on one.
//!
//! **Safe** (never oversells, never sells a buyer past the limit). A script touches keys of one
//! slot only, so each buyer is charged in one part, her *home* (a fixed hash of her user id):
//! the check, the take, her charge record and her count against the limit are one atomic
//! script there, as `redis-lua`'s are on one counter, and the order insert, the give-backs, the
//! settling of a lost answer and the replay of a duplicate are `redis-lua`'s, on that part.
//! A buyer's purchases always land in the same part, so her limit is counted in one place.
//!
//! **What the split costs: undersell.** Buyers do not hash evenly, so a part runs dry while
//! others still hold units. Told "sold out" there, a buyer is refused units that exist. So a
//! buyer whose home is empty moves units home from the other parts in turn and takes them
//! there, and hears "sold out" only once a pass over every part found them all empty. A move is two scripts,
//! each idempotent by the move's id: nothing is created or lost between them, and a move left
//! half-way is finished by `reconcile` (see [`crate::redis_stock::split`]). With
//! `--split-fallback false` the buyer is told "sold out" at her empty home: the scenario
//! `split-undersell` counts the units left unsold that way.
//!
//! Everything `redis-lua` says of failures holds part by part: a process killed between the
//! take and the insert leaves a charge no order names (undersell until `reconcile`); a shard's
//! failover to a replica that missed decrements offers them again (oversell until
//! `reconcile`, or never with `--redis-wait-replicas 1`, whose `WAIT` goes to the part's own
//! shard).

use std::sync::Arc;

use super::redis_lua::{RedisLua, configured, refused, take_at, unavailable};
use super::{Deps, Purchase, PurchaseError, Purchasing, StockStrategy};
use crate::redis_stock::scripts::{NO_COUNTER, SOLD_OUT};
use crate::redis_stock::split::home_part;

/// Most passes over the other parts a buyer makes before she is told "sold out": each pass
/// after the first follows one whose moved units other buyers of her part took.
const MOST_PASSES: u32 = 4;

pub struct RedisSplit {
    lua: RedisLua,
    /// Whether a buyer whose home is empty moves units home from the other parts.
    fallback: bool,
}

pub fn build(deps: &Deps) -> Arc<dyn StockStrategy> {
    Arc::new(RedisSplit {
        lua: RedisLua::new(deps),
        fallback: deps.split_fallback,
    })
}

impl StockStrategy for RedisSplit {
    fn purchase<'a>(&'a self, purchase: &'a Purchase) -> Purchasing<'a> {
        Box::pin(async move {
            let redis = configured(&self.lua.redis)?;
            let parts = purchase.redis_parts;
            if parts == 0 {
                // Not split: its stock lives in another home (or it does not exist).
                refused(&self.lua.pool, purchase, NO_COUNTER).await?;
                return Err(PurchaseError::SoldOut);
            }
            let home = home_part(&purchase.user_id, parts);
            let keys = redis.keys().part(purchase.product_id, home).counter;
            let mut taken = take_at(redis, purchase, &keys).await?;
            let mut passes = 0;
            while taken.left == SOLD_OUT && self.fallback && passes < MOST_PASSES {
                passes += 1;
                let mut moved_any = false;
                for offset in 1..parts {
                    let from = (home + offset) % parts;
                    let moved = redis
                        .move_units(
                            purchase.product_id,
                            from,
                            home,
                            purchase.quantity,
                            purchase.redis_epoch,
                        )
                        .await
                        .map_err(unavailable)?;
                    if moved == 0 {
                        continue;
                    }
                    moved_any = true;
                    taken = take_at(redis, purchase, &keys).await?;
                    if taken.left != SOLD_OUT {
                        break;
                    }
                }
                // A pass that found every other part empty: nothing is left anywhere she
                // looked. One that moved units and lost them to other buyers of her part may
                // have passed parts that were refilled meanwhile: she looks again.
                if !moved_any {
                    break;
                }
            }
            refused(&self.lua.pool, purchase, taken.left).await?;
            self.lua.place_taken(redis, purchase, &keys, taken).await
        })
    }
}
