//! Where a read of a product asks for its home and rules: first where the product's stock lived
//! when it was last read — Redis for the stock it holds (it keeps that stock's rules beside the
//! counter, so that it sells while the database is away), the database for any other and for a
//! product not read yet (its row says where the stock lives). So a Redis that does not answer
//! holds up no purchase of stock kept in the database. The other store is asked when the first
//! cannot say — and, for a product not read yet, when the database has not answered within
//! [`DATABASE_FIRST`]: a database that does not answer (paused, partitioned: its reads wait with
//! no deadline of their own) then holds up no purchase of stock kept in Redis either.

use std::pin::pin;
use std::time::Duration;

use super::{Known, ProductMemory};
use crate::api::{Home, SaleRules};
use crate::db::products;

/// How long a read of a product not read yet waits for the database alone before it asks Redis
/// too. Far longer than a healthy database takes to read one row, so Redis is asked nothing
/// about a product of the database while the database answers.
pub(super) const DATABASE_FIRST: Duration = Duration::from_secs(1);

impl ProductMemory {
    /// The product's home and rules, asked first of where its stock lived when last read, so
    /// that each product's admission depends on its own home only. Redis, for stock it held:
    /// it keeps the rules beside the counter, and a purchase of that stock is admitted while
    /// the database is away. Otherwise the database, whose row says where the stock lives: a
    /// product of the database is not held up by a Redis that does not answer. The other
    /// store is asked when the first cannot say.
    pub(super) async fn ask(
        &self,
        id: u64,
        last_home: Option<Home>,
    ) -> Result<Option<Known>, sqlx::Error> {
        let in_redis = |(rules, redis_epoch, redis_parts)| Known {
            home: match redis_parts {
                0 => Home::Redis,
                _ => Home::RedisSplit,
            },
            rules,
            redis_epoch,
            redis_parts,
        };
        let redis_first = last_home.is_some_and(Home::in_redis);
        if redis_first && let Some(found) = self.rules_in_redis(id).await {
            return Ok(Some(in_redis(found)));
        }
        let from_database = async {
            let found = products::rules(&self.pool, id).await?;
            Ok(found.map(|r| Known {
                home: r.home,
                rules: r.sale,
                redis_epoch: if r.home.in_redis() { r.redis_epoch } else { 0 },
                redis_parts: r.redis_parts,
            }))
        };
        let mut from_database = pin!(from_database);
        let answered = match last_home {
            Some(_) => from_database.await,
            None => match tokio::time::timeout(DATABASE_FIRST, &mut from_database).await {
                Ok(answered) => answered,
                // Not read yet, and the database is slow to say where its stock lives: Redis
                // says so too, for the stock it holds.
                Err(_) => tokio::select! {
                    answered = &mut from_database => answered,
                    Some(found) = self.rules_in_redis(id) => return Ok(Some(in_redis(found))),
                },
            },
        };
        match answered {
            Ok(found) => Ok(found),
            Err(e) if redis_first => Err(e),
            Err(e) => self
                .rules_in_redis(id)
                .await
                .map(in_redis)
                .map(Some)
                .ok_or(e),
        }
    }

    /// The rules of a product whose stock Redis holds, kept there at its reset, and the epoch
    /// they were written at; `None` for any other product, or when Redis cannot say or lost
    /// them (the database is asked then).
    async fn rules_in_redis(&self, id: u64) -> Option<(SaleRules, u64, u32)> {
        self.redis.as_ref()?.sale_rules(id).await.ok().flatten()
    }
}
