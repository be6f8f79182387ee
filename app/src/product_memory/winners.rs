//! The purchases that hold a sold-out product's units (its winners), and how a renewal tells,
//! without reading them, that they cannot have changed.
//!
//! A sold-out product's winners change only when a purchase takes a unit, and with no unit
//! left none can until a unit comes back. So with the winners the memory keeps the product's
//! *mark*, read with its stock before them ([`inventory::left_and_mark`]): a number that moves
//! whenever a purchase may have taken a unit since — the row's version, which every stock
//! write bumps; for buckets, the product row's version too, which a reset and every return to
//! a bucket bump (nothing is taken from empty buckets but what came back); for Redis, the count
//! of charges its take scripts keep. A renewal that finds no unit back and the mark where it was
//! keeps the winners it has, in two small reads; one that finds it moved reads them all again.
//! Read after the mark, the winners may include a purchase made after it (the next renewal
//! then reads them again, for nothing), never miss one made before it: a purchase's unit and
//! its order (or its charge record) are written in one transaction (one script).
//!
//! A winner that returned its units stays in the set until the set is read again: its retry
//! goes to its strategy, which answers it as it should; only a missing winner would be wrong
//! (refused from memory, where its retry gets its order back).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::ProductMemory;
use crate::api::Home;
use crate::inventory::{self, ReadError};
use crate::redis_stock::{RedisStockError, charge};

/// Most winners remembered for one sold-out product; a product with more is known sold out
/// but refused by its strategy instead.
const MAX_WINNERS: usize = 200_000;

/// The purchases that hold a sold-out product's units, and the product's mark when they were
/// read.
#[derive(Debug)]
pub(super) struct Winners {
    home: Home,
    mark: u64,
    /// Request ids by user, so that a refusal looks itself up without building a key; `None`:
    /// more than [`MAX_WINNERS`], none refused from memory.
    by_user: Option<HashMap<String, HashSet<String>>>,
}

impl Winners {
    pub(super) fn of(home: Home, mark: u64, purchases: Vec<(String, String)>) -> Winners {
        let by_user = (purchases.len() <= MAX_WINNERS).then(|| {
            let mut by_user: HashMap<String, HashSet<String>> = HashMap::new();
            for (user, request) in purchases {
                by_user.entry(user).or_default().insert(request);
            }
            by_user
        });
        Winners {
            home,
            mark,
            by_user,
        }
    }

    /// Whether the purchase may hold units (always, when there were too many to remember).
    pub(super) fn holds(&self, user_id: &str, request_id: &str) -> bool {
        self.by_user.as_ref().is_none_or(|by_user| {
            by_user
                .get(user_id)
                .is_some_and(|requests| requests.contains(request_id))
        })
    }
}

impl ProductMemory {
    /// The winners of a product remembered sold out with `known`, if it is still sold out:
    /// `known` themselves if its mark has not moved, else read again. `None` also when they
    /// cannot be read (the product is then refused by its strategy until learnt again).
    pub(super) async fn winners_again(
        &self,
        id: u64,
        home: Home,
        known: Arc<Winners>,
    ) -> Option<Arc<Winners>> {
        let read = async {
            let Some((left, mark)) =
                inventory::left_and_mark(&self.pool, self.redis.as_ref(), id, home).await?
            else {
                return Ok(None);
            };
            if left != 0 {
                return Ok(None);
            }
            if (known.home, known.mark) == (home, mark) {
                return Ok(Some(known));
            }
            self.read_winners(id, home, mark)
                .await
                .map(|w| Some(Arc::new(w)))
        };
        read.await.ok().flatten()
    }

    /// The product's winners, if no unit of it is left (a `sold_out` answer may only mean that
    /// fewer units are left than one buyer asked for); `None` if it is not. Once none is
    /// left no purchase can take a unit until one comes back, so the set read after it is
    /// final.
    pub(super) async fn winners(&self, id: u64, home: Home) -> Result<Option<Winners>, ReadError> {
        let left = inventory::left_and_mark(&self.pool, self.redis.as_ref(), id, home).await?;
        match left {
            Some((0, mark)) => self.read_winners(id, home, mark).await.map(Some),
            _ => Ok(None),
        }
    }

    /// Reads the purchases that hold the product's units, its mark having been read as `mark`.
    async fn read_winners(&self, id: u64, home: Home, mark: u64) -> Result<Winners, ReadError> {
        let (read, winners): (usize, Vec<(String, String)>) = match home {
            Home::Redis | Home::RedisSplit => {
                let redis = (self.redis.as_ref()).ok_or(RedisStockError::NotConfigured)?;
                let charged = match home {
                    Home::RedisSplit => redis.split_charged(id).await?,
                    _ => redis.charged(id).await?,
                };
                let read = charged.len();
                let winners = charged
                    .into_iter()
                    .filter(|(_, record)| record != charge::CANCELLED)
                    .filter_map(|(field, _)| {
                        charge::parse_field(&field).map(|(u, r)| (u.to_string(), r.to_string()))
                    })
                    .collect();
                (read, winners)
            }
            Home::Row | Home::Buckets => {
                let purchases = crate::db::orders::purchases_of(&self.pool, id).await?;
                let read = purchases.len();
                let winners = purchases
                    .into_iter()
                    .filter(|(_, _, state)| state.holds_units())
                    .map(|(user, request, _)| (user, request))
                    .collect();
                (read, winners)
            }
        };
        self.winners_read.fetch_add(read as u64, Ordering::Relaxed);
        Ok(Winners::of(home, mark, winners))
    }
}
