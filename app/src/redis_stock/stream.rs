//! The streams of accepted orders (`redis-lua-stream`), one per lane of the keys: the orders
//! they hold, their length, and the consumer group that places them.

use deadpool_redis::redis;

use super::{GROUP, RedisStock, RedisStockError, charge};

/// An order waiting in the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOrder {
    pub entry_id: String,
    pub request_id: String,
    pub product_id: u64,
    pub user_id: String,
    pub quantity: u32,
    pub strategy: String,
    /// The attempt that charged it (absent in an entry written without one).
    pub attempt: Option<String>,
}

impl StreamOrder {
    /// The purchase this entry places.
    pub fn key(&self) -> crate::db::orders::PurchaseKey<'_> {
        crate::db::orders::PurchaseKey {
            product_id: self.product_id,
            user_id: &self.user_id,
            request_id: &self.request_id,
        }
    }

    pub(super) fn parse(entry: &redis::streams::StreamId) -> Result<StreamOrder, RedisStockError> {
        let field = |name: &str| {
            entry
                .get::<String>(name)
                .ok_or_else(|| RedisStockError::Malformed(format!("{}: no {name}", entry.id)))
        };
        let number = |name: &str| {
            field(name)?
                .parse::<u64>()
                .map_err(|e| RedisStockError::Malformed(format!("{}: {name}: {e}", entry.id)))
        };
        Ok(StreamOrder {
            entry_id: entry.id.clone(),
            request_id: field("request_id")?,
            product_id: number("product_id")?,
            user_id: field("user_id")?,
            quantity: u32::try_from(number("quantity")?).unwrap_or(u32::MAX),
            strategy: field("strategy")?,
            attempt: entry.get::<String>("attempt"),
        })
    }
}

impl RedisStock {
    /// The orders in the streams (of `product`, or of all products), oldest first in each
    /// lane: accepted, their units taken from the counter, not yet placed in the database.
    pub async fn waiting(&self, product: Option<u64>) -> Result<Vec<StreamOrder>, RedisStockError> {
        let mut orders = Vec::new();
        for lane in self.lanes_of(product) {
            let reply: redis::streams::StreamRangeReply = self
                .query(
                    redis::cmd("XRANGE")
                        .arg(self.keys.stream(lane))
                        .arg("-")
                        .arg("+"),
                )
                .await?;
            for entry in &reply.ids {
                let order = StreamOrder::parse(entry)?;
                if product.is_none_or(|p| p == order.product_id) {
                    orders.push(order);
                }
            }
        }
        Ok(orders)
    }

    /// The lane of `product`, or every lane.
    fn lanes_of(&self, product: Option<u64>) -> Vec<u64> {
        match product {
            Some(p) => vec![self.keys.lane(p)],
            None => (0..self.keys.lanes()).collect(),
        }
    }

    /// Entries in the streams (accepted orders not yet placed), all products.
    pub async fn stream_len(&self) -> Result<u64, RedisStockError> {
        let mut entries = 0;
        for lane in self.lanes_of(None) {
            entries += self
                .query::<u64>(redis::cmd("XLEN").arg(self.keys.stream(lane)))
                .await?;
        }
        Ok(entries)
    }

    /// Whether the order of the purchase `key` waits in the stream.
    pub async fn is_waiting(
        &self,
        key: crate::db::orders::PurchaseKey<'_>,
    ) -> Result<bool, RedisStockError> {
        self.query(
            redis::cmd("HEXISTS")
                .arg(self.keys.pending(self.keys.lane(key.product_id)))
                .arg(charge::pending_field(key)),
        )
        .await
    }

    /// Creates the consumer group (and the stream) of `lane` if missing.
    pub async fn ensure_group(&self, lane: u64) -> Result<(), RedisStockError> {
        let created = self
            .query::<()>(
                redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(self.keys.stream(lane))
                    .arg(GROUP)
                    .arg("0")
                    .arg("MKSTREAM"),
            )
            .await;
        match created {
            Err(RedisStockError::Redis(e)) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => other,
        }
    }
}
