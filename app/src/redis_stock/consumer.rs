//! The stream consumer of `redis-lua-stream`: moves accepted orders from the Redis Stream into
//! the database, exactly once each.
//!
//! Every instance runs `--stream-consumers` consumers, dealt over the lanes of the stock's keys
//! (one lane on one Redis, at least one consumer per lane; see [`super::Keys`]), each lane's
//! consumers in one consumer group, so each entry is delivered to one of them. A consumer waits
//! for its batch's commit before it reads the next, so one consumer places orders no faster
//! than one commit at a time; several commit side by side, and the database flushes their
//! commits to its log together. A consumer reads a batch (`XREADGROUP`), inserts its orders in
//! one statement that ignores request ids already present, commits, and only then acknowledges
//! and deletes the entries (one script). A consumer that dies between the read and the
//! acknowledgement leaves its entries pending in the group; every consumer periodically claims
//! entries idle longer than the claim time (`XAUTOCLAIM`) and places them. If the dead one had
//! committed, the second insert finds the request ids and adds nothing: at-least-once delivery
//! plus an idempotent write is exactly-once in the database.
//!
//! An entry whose insert finds its purchase's order already there is counted as placed only
//! if that order holds its units (reserved or paid, of the entry's terms): it is this entry's
//! own, placed by a consumer before. An order that ended — expired, cancelled, voided — holds
//! nothing and never will again, and no insert can replace it; so the entry's charge is given
//! back, by the entry's attempt and once (the give-back script acts only while the record is
//! that attempt's charge, and marks it ended). If the entry is the ended order's own, placed
//! before and claimed again, its units went back with the order, the record is marked already,
//! and nothing more is given; if the order is on its way back (`expiring`, `cancelling`), this
//! give-back is that return, done first, and the order's own finds nothing left to give. If the
//! entry is a later charge of the purchase (sent again after the order ended, with the record
//! gone), its units come back instead of being counted as placed and held by no order.
//!
//! Because entries are deleted once placed, the stream's length is the lag: orders accepted and
//! not yet in the database (`seckill_stream_lag_entries`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::engine::{Db, Sql, each_engine, signed};
use crate::db::orders::PAY_BY;
use deadpool_redis::redis::{self, streams};

use super::charge;
use super::scripts::PLACED;
use super::{GROUP, RedisStock, RedisStockError, StreamOrder};
use crate::metrics::Metrics;

/// How long one read waits for new entries: well under the Redis client's own response
/// timeout (redis-rs gives up on an answer after 500 ms by default), which a read blocking as
/// long outlives whenever nothing comes — every idle round then failed and warned.
const BLOCK_MS: u64 = 200;
/// Pause after a failed round before the next.
const BACKOFF: Duration = Duration::from_millis(200);

/// Why a round failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error(transparent)]
    Redis(#[from] RedisStockError),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// One consumer of the group.
pub struct Consumer {
    redis: RedisStock,
    pool: Db,
    name: String,
    /// The lane whose stream it reads.
    lane: u64,
    batch: usize,
    claim_idle: Duration,
    last_claim: Option<Instant>,
    /// A batch read by this consumer whose placing failed: retried first in the next round
    /// (rather than left for a claim after the claim time).
    unplaced: Vec<StreamOrder>,
    metrics: Option<Arc<Metrics>>,
}

impl Consumer {
    /// A consumer with a unique name, placing up to `batch` orders per transaction, claiming
    /// entries idle longer than `claim_idle`.
    pub fn new(redis: RedisStock, pool: Db, batch: usize, claim_idle: Duration) -> Consumer {
        Consumer {
            redis,
            pool,
            name: format!("consumer-{}", uuid::Uuid::new_v4().simple()),
            lane: 0,
            batch: batch.max(1),
            claim_idle,
            last_claim: None,
            unplaced: Vec::new(),
            metrics: None,
        }
    }

    /// Names the consumer after its instance (`<instance>/<unique>`), so an operator reading
    /// `XINFO CONSUMERS` can tell whose entries are pending.
    pub fn named(mut self, instance: &str) -> Consumer {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        self.name = format!("{instance}/{}", &unique[..8]);
        self
    }

    /// Reads the stream of `lane` rather than the first lane's.
    pub fn in_lane(mut self, lane: u64) -> Consumer {
        self.lane = lane;
        self
    }

    /// Reports the stream's lag to `metrics` after each round.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Consumer {
        self.metrics = Some(metrics);
        self
    }

    /// Runs until the task is dropped, retrying failed rounds.
    pub async fn run(mut self) {
        loop {
            if let Err(e) = self.round().await {
                tracing::warn!(consumer = %self.name, error = %e, "stream round failed; retrying");
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }

    /// One round: claims entries left by dead consumers (at most every half claim time), reads
    /// new ones, places them, and reports the lag. Returns the orders placed.
    pub async fn round(&mut self) -> Result<usize, ConsumerError> {
        self.redis.ensure_group(self.lane).await?;
        let mut placed = 0;
        if !self.unplaced.is_empty() {
            let retry = std::mem::take(&mut self.unplaced);
            placed += self.place_or_keep(retry).await?;
        }
        let claim_due = self
            .last_claim
            .is_none_or(|at| at.elapsed() >= self.claim_idle / 2);
        if claim_due {
            self.last_claim = Some(Instant::now());
            let claimed = self.claim().await?;
            placed += self.place_or_keep(claimed).await?;
        }
        let read = self.read(Some(BLOCK_MS)).await?;
        placed += self.place_or_keep(read).await?;
        // The first lane's consumer reports every lane's lag (one gauge, counted once).
        if let Some(metrics) = self.metrics.as_ref().filter(|_| self.lane == 0) {
            metrics.set_stream_lag(self.redis.stream_len().await?);
        }
        Ok(placed)
    }

    /// Reads up to a batch of new entries for this consumer (they stay pending, owned by it,
    /// until [`Consumer::place`] acknowledges them), waiting up to `block_ms` for the first.
    pub async fn read(&self, block_ms: Option<u64>) -> Result<Vec<StreamOrder>, ConsumerError> {
        let keys = self.redis.keys();
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(&self.name)
            .arg("COUNT")
            .arg(self.batch);
        if let Some(ms) = block_ms {
            cmd.arg("BLOCK").arg(ms);
        }
        cmd.arg("STREAMS").arg(keys.stream(self.lane)).arg(">");
        let reply: Option<streams::StreamReadReply> = self.redis.query(&cmd).await?;
        let entries = reply
            .into_iter()
            .flat_map(|r| r.keys)
            .flat_map(|k| k.ids)
            .collect::<Vec<_>>();
        self.parse(&entries).await
    }

    /// Takes over up to a batch of entries that another consumer read and has not acknowledged
    /// for longer than the claim time.
    pub async fn claim(&self) -> Result<Vec<StreamOrder>, ConsumerError> {
        let keys = self.redis.keys();
        let idle = u64::try_from(self.claim_idle.as_millis()).unwrap_or(u64::MAX);
        let reply: streams::StreamAutoClaimReply = self
            .redis
            .query(
                redis::cmd("XAUTOCLAIM")
                    .arg(keys.stream(self.lane))
                    .arg(GROUP)
                    .arg(&self.name)
                    .arg(idle)
                    .arg("0-0")
                    .arg("COUNT")
                    .arg(self.batch),
            )
            .await?;
        if !reply.claimed.is_empty() {
            tracing::info!(consumer = %self.name, entries = reply.claimed.len(),
                "claimed stream entries left unacknowledged by another consumer");
        }
        self.parse(&reply.claimed).await
    }

    /// Inserts the orders (purchases already present are left as they are), commits, gives
    /// back the units of entries whose purchase has an order that does not hold them, then
    /// acknowledges and deletes the entries. Returns the number of orders given.
    pub async fn place(&self, orders: &[StreamOrder]) -> Result<usize, ConsumerError> {
        if orders.is_empty() {
            return Ok(0);
        }
        // Each order's payment deadline runs from its placement, by its product's window.
        let mut windows = HashMap::new();
        for o in orders {
            if let std::collections::hash_map::Entry::Vacant(slot) = windows.entry(o.product_id) {
                let rules = crate::db::products::rules(&self.pool, o.product_id).await?;
                let window = rules.map_or(crate::api::DEFAULT_PAYMENT_WINDOW_MS, |r| {
                    r.sale.payment_window_ms
                });
                slot.insert(window.saturating_mul(1000));
            }
        }
        // `IGNORE` (PostgreSQL's `ON CONFLICT DO NOTHING`) skips a row whose purchase exists
        // (the input was validated at the door, so nothing else is there to ignore), and
        // counts only the rows it inserted.
        const INSERT: Sql = Sql {
            mysql: "INSERT IGNORE INTO orders (product_id, user_id, quantity, strategy, \
                                               request_id, pay_by) ",
            postgres: "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, \
                                           pay_by) ",
        };
        const IGNORING: Sql = Sql {
            mysql: "",
            postgres: " ON CONFLICT (product_id, user_id, request_id) DO NOTHING",
        };
        let inserted = each_engine!(self.pool.pool(), |c, e| {
            let mut insert = e.builder(e.sql(INSERT));
            insert.push_values(orders, |mut row, o| {
                row.push_bind(signed(o.product_id))
                    .push_bind(&o.user_id)
                    .push_bind(i64::from(o.quantity))
                    .push_bind(&o.strategy)
                    .push_bind(&o.request_id)
                    .push(e.sql(PAY_BY[0]))
                    .push_bind_unseparated(windows.get(&o.product_id).copied().unwrap_or(0))
                    .push_unseparated(e.sql(PAY_BY[1]));
            });
            insert.push(e.sql(IGNORING));
            insert
                .build()
                .execute(c)
                .await
                .map(|done| done.rows_affected())
        })?;
        if inserted < orders.len() as u64 {
            self.give_back_strangers(orders).await?;
        }
        let keys = self.redis.keys();
        let fields: Vec<String> = orders
            .iter()
            .map(|o| charge::pending_field(o.key()))
            .collect();
        self.acknowledge(orders.iter().zip(&fields).map(|(o, field)| Done {
            entry_id: &o.entry_id,
            pending_field: field,
            waiting: keys.waiting(o.product_id),
            quantity: o.quantity,
        }))
        .await?;
        Ok(orders.len())
    }

    /// Gives back the units of each entry whose purchase's order does not hold them (other
    /// terms, or ended: see the module docs): the script charged them, and no order will ever
    /// hold them. The give-back acts on the entry's own charge only, once.
    async fn give_back_strangers(&self, orders: &[StreamOrder]) -> Result<(), ConsumerError> {
        for order in orders {
            let Some(stored) = crate::db::orders::find(&self.pool, order.key()).await? else {
                continue;
            };
            let holds_them = stored.state().holds_units()
                && stored.quantity == order.quantity
                && stored.strategy == order.strategy;
            if holds_them {
                continue;
            }
            let field = charge::field(&order.user_id, &order.request_id);
            let given: i64 = self
                .redis
                .invoke(&self.redis.give_back(
                    order.product_id,
                    &field,
                    order.attempt.as_deref(),
                    charge::Afterwards::Ended,
                ))
                .await?;
            if given > 0 {
                tracing::info!(product = order.product_id, request_id = %order.request_id,
                    state = stored.state().name(),
                    "a queued purchase met an order that does not hold its units; gave them back");
            }
        }
        Ok(())
    }

    /// [`Consumer::place`], keeping the batch for the next round if it fails.
    async fn place_or_keep(&mut self, batch: Vec<StreamOrder>) -> Result<usize, ConsumerError> {
        match self.place(&batch).await {
            Ok(placed) => Ok(placed),
            Err(e) => {
                self.unplaced = batch;
                Err(e)
            }
        }
    }

    async fn acknowledge<'a>(
        &self,
        entries: impl Iterator<Item = Done<'a>>,
    ) -> Result<(), RedisStockError> {
        let keys = self.redis.keys();
        let mut placed = PLACED.prepare_invoke();
        placed
            .key(keys.stream(self.lane))
            .key(keys.pending(self.lane))
            .arg(GROUP);
        for done in entries {
            placed
                .key(done.waiting)
                .arg(done.entry_id)
                .arg(done.pending_field)
                .arg(done.quantity);
        }
        self.redis.invoke::<i64>(&placed).await?;
        Ok(())
    }

    /// The orders of `entries`; a malformed entry (nothing of ours writes one) is logged and
    /// dropped, so it cannot block the stream.
    async fn parse(
        &self,
        entries: &[streams::StreamId],
    ) -> Result<Vec<StreamOrder>, ConsumerError> {
        let mut orders = Vec::with_capacity(entries.len());
        for entry in entries {
            match StreamOrder::parse(entry) {
                Ok(order) => orders.push(order),
                Err(e) => {
                    tracing::error!(error = %e, "dropping a malformed stream entry");
                    // Its purchase and its product's waiting count cannot be told; the key of
                    // no product leaves every count as it is.
                    self.acknowledge(std::iter::once(Done {
                        entry_id: &entry.id,
                        pending_field: "",
                        waiting: self.redis.keys().no_product_waiting(self.lane),
                        quantity: 0,
                    }))
                    .await?;
                }
            }
        }
        Ok(orders)
    }
}

/// An entry whose order is placed (or that is dropped): what [`PLACED`] needs to forget it.
struct Done<'a> {
    entry_id: &'a str,
    /// Its field in the `pending` hash.
    pending_field: &'a str,
    /// The waiting count of the entry's product.
    waiting: String,
    quantity: u32,
}
