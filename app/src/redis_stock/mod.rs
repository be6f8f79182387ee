//! Stock kept in Redis ([`Home::Redis`](crate::api::Home::Redis)): the counter, the record of
//! charged request ids, the stream of accepted orders, the marker that tells a Redis that lost
//! them ([`epoch`]), and what the service does with them besides selling (seeding on reset,
//! reading for `GET`, draining, reconciling).
//!
//! A product whose home is Redis has a counter key; its database row keeps `stock = 0`, so the
//! row strategies find it sold out. A product of any other home has no counter, so the Redis
//! strategies find it sold out: a unit can only be sold from its one home.
//!
//! Every key starts with the instance's key prefix (`--lock-prefix`), so deployments and test
//! runs sharing one Redis stay apart. Every operation is bounded by a timeout: a Redis that
//! does not answer is `backend_unavailable`, never a guess. The Redis is one address, the
//! primary a group of Sentinels names, followed across a failover, or a Redis Cluster
//! (`connections.rs`), on which a product's keys and its lane's stream share one slot
//! ([`Keys`]).

pub mod announce;
pub mod charge;
mod connections;
pub mod consumer;
pub mod epoch;
mod keys;
pub mod reconcile;
pub mod scripts;
pub mod split;
mod split_rebuild;
mod split_reconcile;
mod stream;

use std::collections::HashMap;
use std::time::Duration;

use deadpool_redis::redis::{self, Cmd, FromRedisValue, ScriptInvocation};
use deadpool_redis::{PoolConfig, Timeouts};

use crate::config::Config;
pub use announce::News;
pub use charge::Attempt;
use connections::Connections;
pub use keys::{CLUSTER_LANES, CounterKeys, Keys, PartKeys};
pub use reconcile::ReconcileError;
pub use stream::StreamOrder;

/// Reconciles the Redis stock of `product` with the database (`POST /api/products/{id}/reconcile`):
/// its keys rebuilt if Redis lost them, its lost charges fenced out and given back, its counter
/// (or each part's) repaired; see [`mod@reconcile`] and [`split_reconcile`].
pub async fn reconcile(
    pool: &crate::db::Db,
    redis: &RedisStock,
    product: u64,
    grace: std::time::Duration,
) -> Result<crate::api::Reconciliation, ReconcileError> {
    let rules = crate::db::products::rules(pool, product)
        .await?
        .ok_or(ReconcileError::UnknownProduct(product))?;
    match rules.home {
        crate::api::Home::Redis => {
            reconcile::reconcile_counter(pool, redis, product, &rules, grace).await
        }
        crate::api::Home::RedisSplit => {
            split_reconcile::reconcile(pool, redis, product, &rules, grace).await
        }
        home => Err(ReconcileError::NotInRedis(product, home)),
    }
}

/// What settling a take whose answer was lost found ([`RedisStock::settle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The take ran and charged the purchase: its units are taken, for this attempt.
    Mine,
    /// Another attempt of the same purchase charged it (a concurrent copy, or a retry).
    Other,
    /// The take did not run, and now never will.
    NotMade,
}

/// How long one Redis operation may take before it counts as a failure.
const TIMEOUT: Duration = Duration::from_secs(2);

/// The consumer group that places the stream's orders in the database.
pub const GROUP: &str = "placers";

/// Why a Redis operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RedisStockError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("no redis connection: {0}")]
    Pool(#[from] deadpool_redis::PoolError),
    #[error("no redis primary: {0}")]
    NoPrimary(#[source] locks::LockError),
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    #[error("redis is not configured (--redis-url or --redis-sentinels)")]
    NotConfigured,
    #[error("{acked} of {wanted} replica(s) acknowledged the deduction in time")]
    NotReplicated { acked: u32, wanted: u32 },
    #[error("malformed stream entry {0}")]
    Malformed(String),
}

impl RedisStockError {
    /// Whether Redis could not be reached, or what it reached is no longer the primary
    /// (`READONLY`: nothing was written) — as opposed to a bug: a script error, a bad entry.
    pub fn is_unavailable(&self) -> bool {
        match self {
            RedisStockError::Redis(e) => locks::redis::primary_gone(e),
            RedisStockError::Pool(_)
            | RedisStockError::NoPrimary(_)
            | RedisStockError::Timeout(_)
            | RedisStockError::NotReplicated { .. }
            | RedisStockError::NotConfigured => true,
            RedisStockError::Malformed(_) => false,
        }
    }
}

/// The replication a deduction waits for: `WAIT replicas timeout` after its script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    pub replicas: u32,
    pub timeout: Duration,
}

impl Replication {
    /// The replication a deduction waits for under `config`, if any
    /// (`--redis-wait-replicas`).
    pub fn of(config: &Config) -> Option<Replication> {
        (config.redis_wait_replicas > 0).then(|| Replication {
            replicas: config.redis_wait_replicas,
            timeout: Duration::from_millis(config.redis_wait_timeout_ms),
        })
    }
}

/// Whether a deduction reached the replicas it had to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replicated {
    /// No replication was asked for (`--redis-wait-replicas 0`), or the script wrote nothing.
    NotAsked,
    /// Enough replicas acknowledged it: a failover to one of them keeps it.
    Acknowledged,
    /// Only `acked` replicas acknowledged it in time: a failover may lose it.
    Short { acked: u32, wanted: u32 },
}

/// The service's connections to the Redis that holds stock.
///
/// The purchase scripts go over one shared multiplexed connection: every concurrent purchase
/// of the instance is pipelined on it, one round trip each. (A pooled connection costs two:
/// deadpool-redis sends a `PING` each time it hands one out.) Everything else — the
/// consumer's blocking `XREADGROUP`, which would hold up every request queued behind it on a
/// shared connection, seeding, reading — takes a connection of its own from the pool.
#[derive(Clone)]
pub struct RedisStock {
    connections: Connections,
    keys: Keys,
    wait: Option<Replication>,
}

impl std::fmt::Debug for RedisStock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStock")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl RedisStock {
    /// Connections to the Redis of [`Config::redis_address`] (the Sentinels' primary if
    /// Sentinels are configured, else `--redis-url`; opened on first use), or `None` when no
    /// Redis is configured.
    pub fn from_config(config: &Config) -> Option<RedisStock> {
        let url = config.redis_address()?;
        match RedisStock::open(&url, &config.lock_prefix, config.redis_pool_size) {
            Ok(stock) => Some(stock.waiting_for(Replication::of(config))),
            Err(e) => {
                tracing::warn!(error = %e, "no redis stock: its strategies answer backend_unavailable");
                None
            }
        }
    }

    /// A pool of at most `size` connections (and the shared one) to the Redis at `url`, with
    /// keys under `prefix`. `url` is `redis://…`, or `redis+sentinel://host:port,…/<master
    /// name>` for the primary those Sentinels name, followed across failovers, or
    /// `redis+cluster://host:port,…` for a Redis Cluster (its keys dealt into lanes).
    pub fn open(url: &str, prefix: &str, size: usize) -> Result<RedisStock, String> {
        let mut pool = PoolConfig::new(size.max(1));
        pool.timeouts = Timeouts {
            wait: Some(TIMEOUT),
            create: Some(TIMEOUT),
            recycle: Some(TIMEOUT),
        };
        let connections = Connections::open(url, pool)?;
        let lanes = match connections.is_cluster() {
            true => keys::CLUSTER_LANES,
            false => 1,
        };
        Ok(RedisStock {
            connections,
            keys: Keys::in_lanes(prefix, lanes),
            wait: None,
        })
    }

    /// The same connections, with every deduction ([`RedisStock::take`]) waiting for `wait`.
    pub fn waiting_for(mut self, wait: Option<Replication>) -> RedisStock {
        self.wait = wait;
        self
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Runs a script on the shared connection, bounded by the timeout.
    pub async fn invoke<T: FromRedisValue>(
        &self,
        script: &ScriptInvocation<'_>,
    ) -> Result<T, RedisStockError> {
        bounded(async {
            let mut conn = self.connections.shared().await?;
            let answer = script.invoke_async(&mut conn).await;
            conn.settle(answer).await
        })
        .await
    }

    /// Runs a deduction script on the keys of the counter named `counter` (it answers the units
    /// left, or a negative refusal). With a [`Replication`] to wait for, a deduction that wrote is followed by
    /// `WAIT` on the same connection — `WAIT` counts the replicas that acknowledged every write
    /// made before it on its connection, and on a cluster it goes to the master of the
    /// counter's slot — so it goes over a pooled connection of its own: on the shared one,
    /// every purchase queued behind a `WAIT` would wait for it too.
    pub async fn take(
        &self,
        counter: &str,
        script: &ScriptInvocation<'_>,
    ) -> Result<(i64, Replicated), RedisStockError> {
        let Some(wait) = self.wait else {
            return Ok((self.invoke(script).await?, Replicated::NotAsked));
        };
        bounded(async {
            let mut conn = self.connections.pooled().await?;
            let left: i64 = match script.invoke_async(&mut conn).await {
                Ok(left) => left,
                Err(e) => return Err(conn.failed(e)),
            };
            if left < 0 {
                return Ok((left, Replicated::NotAsked));
            }
            // The deduction is made: a `WAIT` that fails (a lost answer, a dropped connection)
            // confirms nothing, which is a shortfall, not an error that would strand the units.
            let timeout_ms = u64::try_from(wait.timeout.as_millis()).unwrap_or(u64::MAX);
            let acked = (conn.wait_replicas(counter, wait.replicas, timeout_ms))
                .await
                .unwrap_or(0);
            let replicated = match acked >= wait.replicas {
                true => Replicated::Acknowledged,
                false => Replicated::Short {
                    acked,
                    wanted: wait.replicas,
                },
            };
            Ok((left, replicated))
        })
        .await
    }

    /// Whether the take `attempt` made of a purchase, its answer lost, charged it — or another
    /// attempt did; if neither, it never will be ([`scripts::SETTLE`]).
    pub async fn settle(
        &self,
        product: u64,
        field: &str,
        attempt: Attempt,
    ) -> Result<Settled, RedisStockError> {
        self.settle_at(&self.keys.requests(product), field, attempt)
            .await
    }

    /// [`RedisStock::settle`] by the charge records `requests` of a counter.
    pub async fn settle_at(
        &self,
        requests: &str,
        field: &str,
        attempt: Attempt,
    ) -> Result<Settled, RedisStockError> {
        let made: i64 = self
            .invoke(scripts::SETTLE.key(requests).arg(field).arg(attempt.name()))
            .await?;
        Ok(match made {
            scripts::SETTLED_MINE => Settled::Mine,
            scripts::SETTLED_OTHER => Settled::Other,
            _ => Settled::NotMade,
        })
    }

    /// Runs a command, bounded by the timeout.
    pub async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisStockError> {
        bounded(async {
            let mut conn = self.connections.pooled().await?;
            let answer = cmd.query_async(&mut conn).await;
            conn.settle(answer)
        })
        .await
    }

    /// Arguments of [`scripts::GIVE_BACK`] for the purchase `field` of `product`, ready to run:
    /// the charge of `attempt`, or whichever charged it when `None` (for a caller that read
    /// the record it gives back by, and no attempt in it); the record left `afterwards`.
    pub fn give_back(
        &self,
        product: u64,
        field: &str,
        attempt: Option<&str>,
        afterwards: charge::Afterwards,
    ) -> ScriptInvocation<'static> {
        self.give_back_at(
            &self.keys.counter(product),
            product,
            field,
            attempt,
            afterwards,
        )
    }

    /// [`RedisStock::give_back`] on the counter `keys` (a product's own, or a part of a split
    /// product's: see [`split`]).
    pub fn give_back_at(
        &self,
        keys: &CounterKeys,
        product: u64,
        field: &str,
        attempt: Option<&str>,
        afterwards: charge::Afterwards,
    ) -> ScriptInvocation<'static> {
        let mut script = scripts::GIVE_BACK.prepare_invoke();
        script
            .key(&keys.stock)
            .key(&keys.requests)
            .key(&keys.buyers)
            .arg(field)
            .arg(self.keys.restocked())
            .arg(product)
            .arg(attempt.unwrap_or(""))
            .arg(afterwards.as_arg());
        script
    }

    /// Arguments of [`scripts::GIVE_BACK_ALL`] for the purchases `fields` of `product` (of
    /// ended orders), each by whichever attempt charged it and marked ended, ready to run.
    pub fn give_back_all<'f>(
        &self,
        product: u64,
        fields: impl IntoIterator<Item = &'f str>,
    ) -> ScriptInvocation<'static> {
        let mut script = scripts::GIVE_BACK_ALL.prepare_invoke();
        script
            .key(self.keys.stock(product))
            .key(self.keys.requests(product))
            .key(self.keys.buyers(product))
            .arg(self.keys.restocked())
            .arg(product);
        for field in fields {
            script.arg(field);
        }
        script
    }

    /// Announces `news` of the product to every instance (see [`announce`]).
    pub async fn announce(&self, product: u64, news: News) -> Result<(), RedisStockError> {
        self.query::<()>(
            redis::cmd("PUBLISH")
                .arg(match news {
                    News::Restocked => self.keys.restocked(),
                    News::Changed => self.keys.forget(),
                })
                .arg(product),
        )
        .await
    }

    /// The address the stock's Redis was opened with, when it is one fixed server (pub/sub
    /// listens there); `None` behind Sentinels.
    pub fn fixed_url(&self) -> Option<&str> {
        self.connections.fixed_url()
    }

    /// The product's counter, or `None` if Redis holds none of its stock.
    pub async fn counter(&self, product: u64) -> Result<Option<i64>, RedisStockError> {
        self.query(redis::cmd("GET").arg(self.keys.stock(product)))
            .await
    }

    /// The product's counter and the charges it has made ever, read in one step (see
    /// [`crate::inventory::left_and_mark`]), or `None` if Redis holds none of its stock.
    pub async fn counter_and_charges(
        &self,
        product: u64,
    ) -> Result<Option<(i64, u64)>, RedisStockError> {
        let (counter, charges): (Option<i64>, Option<u64>) = self
            .query(
                redis::cmd("MGET")
                    .arg(self.keys.stock(product))
                    .arg(self.keys.charges(product)),
            )
            .await?;
        Ok(counter.map(|counter| (counter, charges.unwrap_or(0))))
    }

    /// Units of `product` accepted and not yet placed: the count the scripts keep, one `GET`
    /// whatever the stream holds.
    pub async fn waiting_units(&self, product: u64) -> Result<i64, RedisStockError> {
        let units: Option<i64> = self
            .query(redis::cmd("GET").arg(self.keys.waiting(product)))
            .await?;
        Ok(units.unwrap_or(0))
    }

    /// The Redis clock (`TIME`), in milliseconds: the clock the charge records are written by.
    pub async fn now_ms(&self) -> Result<u64, RedisStockError> {
        let (secs, micros): (u64, u64) = self.query(&redis::cmd("TIME")).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// The purchases the product's counter has charged: field → charge record (see
    /// [`charge`]).
    pub async fn charged(&self, product: u64) -> Result<HashMap<String, String>, RedisStockError> {
        self.charged_at(&self.keys.requests(product)).await
    }

    /// [`RedisStock::charged`] by the charge records `requests` of a counter.
    pub async fn charged_at(
        &self,
        requests: &str,
    ) -> Result<HashMap<String, String>, RedisStockError> {
        self.query(redis::cmd("HGETALL").arg(requests)).await
    }
}

async fn bounded<T>(
    work: impl Future<Output = Result<T, RedisStockError>>,
) -> Result<T, RedisStockError> {
    tokio::time::timeout(TIMEOUT, work)
        .await
        .unwrap_or(Err(RedisStockError::Timeout(TIMEOUT)))
}
