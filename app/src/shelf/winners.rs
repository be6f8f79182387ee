//! The purchases that hold a sold-out product's units: its winners.

use std::collections::{HashMap, HashSet};

use super::Shelf;
use crate::api::Home;
use crate::inventory::{self, ReadError};
use crate::redis_stock::{RedisStockError, charge};

/// Most winners remembered for one sold-out product; a product with more is refused by its
/// strategy instead.
const MAX_WINNERS: usize = 200_000;

/// The purchases that hold a sold-out product's units: request ids by user, so that a
/// refusal looks itself up without building a key.
#[derive(Debug, Default)]
pub(super) struct Winners(HashMap<String, HashSet<String>>);

impl Winners {
    fn of(purchases: Vec<(String, String)>) -> Winners {
        let mut by_user: HashMap<String, HashSet<String>> = HashMap::new();
        for (user, request) in purchases {
            by_user.entry(user).or_default().insert(request);
        }
        Winners(by_user)
    }

    pub(super) fn holds(&self, user_id: &str, request_id: &str) -> bool {
        self.0
            .get(user_id)
            .is_some_and(|requests| requests.contains(request_id))
    }
}

impl Shelf {
    /// The purchases that hold the product's units, if its shelf is empty (a `sold_out` answer
    /// may only mean that fewer units are left than one buyer asked for); `None` if it is not,
    /// or if there are too many to remember. Once the shelf is empty no purchase can take a
    /// unit until one comes back, so the set read after it is final.
    pub(super) async fn winners(&self, id: u64, home: Home) -> Result<Option<Winners>, ReadError> {
        let left = inventory::left(&self.pool, self.redis.as_ref(), id, home).await?;
        if left != Some(0) {
            return Ok(None);
        }
        let winners: Vec<(String, String)> = match home {
            Home::Redis => {
                let redis = (self.redis.as_ref()).ok_or(RedisStockError::NotConfigured)?;
                redis
                    .charged(id)
                    .await?
                    .into_iter()
                    .filter(|(_, record)| record != charge::CANCELLED)
                    .filter_map(|(field, _)| {
                        charge::parse_field(&field).map(|(u, r)| (u.to_string(), r.to_string()))
                    })
                    .collect()
            }
            Home::Row | Home::Buckets => crate::db::orders::purchases_of(&self.pool, id)
                .await?
                .into_iter()
                .filter(|(_, _, state)| state.holds_units())
                .map(|(user, request, _)| (user, request))
                .collect(),
        };
        Ok((winners.len() <= MAX_WINNERS).then(|| Winners::of(winners)))
    }
}
