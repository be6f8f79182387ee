//! Where Redis-held stock finds its Redis: one fixed address (`--redis-url`), whichever
//! server a group of Sentinels names as primary now (`--redis-sentinels`, written
//! `redis+sentinel://host:port,…/<master name>` as for the locks, [`Target`]), or a Redis
//! Cluster (`--redis-url redis+cluster://host:port,…`, any of its members).
//!
//! Either way the stock gets the same two kinds of connection. A pool (deadpool-redis), for
//! whatever needs a connection of its own: the consumer's blocking read, a deduction followed
//! by `WAIT`, seeding and reading. Its Sentinel flavour asks the Sentinels for the primary and
//! checks its `ROLE` each time it opens a connection, and drops a connection whose `PING`
//! fails. And one shared multiplexed connection for the purchase scripts: a
//! `ConnectionManager` on a fixed address; on the Sentinels' primary, `locks`' [`Following`],
//! which forgets a failed connection and asks the Sentinels again.
//!
//! Why following a failover this way is safe: every operation reaches only a server that
//! answered `ROLE` as primary when its connection was opened, and a connection that fails
//! because its server died or was demoted (`READONLY`: a demoted primary keeps its clients
//! and refuses their writes) is never used again ([`primary_gone`]). From the primary's death
//! until the Sentinels name a promoted replica that answers, every operation fails and the
//! purchase answers `503 backend_unavailable`; afterwards the same instance sells from the
//! promoted replica, without a restart.
//!
//! On a cluster both kinds are redis-rs's cluster client, which learns which master serves
//! each slot, sends each command to the master of its keys' slot, follows `MOVED` when the
//! slots move, and asks the cluster again when a master stops answering. A command whose keys
//! span slots is refused (`CROSSSLOT`): the stock's keys are dealt into lanes for that
//! ([`super::Keys`]).
//!
//! What it cannot do: bring back what the promoted replica never received. Replication is
//! asynchronous, so deductions the old primary answered and had not shipped are gone, and
//! their units sell again (**oversell**; scenario `cluster-sale`, row `redis-lua`), unless
//! every deduction waits for replicas (`--redis-wait-replicas`): Sentinel moves the address,
//! it does not make the data safe.

use std::sync::Arc;

use deadpool_redis::cluster::{ClusterClient, ClusterConnection};
use deadpool_redis::redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use deadpool_redis::redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use deadpool_redis::redis::{self, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use deadpool_redis::{PoolConfig, Runtime, cluster, sentinel};
use locks::redis::{Following, Target, primary_gone};
use tokio::sync::OnceCell;

use super::RedisStockError;

/// The stock's connections to its Redis (see the module docs).
#[derive(Clone)]
pub(crate) struct Connections {
    pool: Pool,
    shared: Shared,
}

#[derive(Clone)]
enum Pool {
    Direct(deadpool_redis::Pool),
    Sentinel(sentinel::Pool),
    Cluster(cluster::Pool),
}

#[derive(Clone)]
enum Shared {
    /// A manager on the fixed address, opened on first use; it reconnects by itself.
    Direct {
        url: String,
        client: redis::Client,
        manager: Arc<OnceCell<ConnectionManager>>,
    },
    Following(Following),
    /// The cluster client's one connection (a connection per master, multiplexed), opened on
    /// first use; it follows the slots by itself.
    Cluster {
        members: Vec<String>,
        client: Box<ClusterClient>,
        connection: Arc<OnceCell<ClusterConnection>>,
    },
}

/// The scheme of a Redis Cluster's address: `redis+cluster://host:port,host:port,…`.
const CLUSTER_SCHEME: &str = "redis+cluster://";

impl Connections {
    /// Connections to the Redis at `url` (`redis://…` or `redis+sentinel://…`), at most
    /// `pool` of them in the pool; nothing is connected before the first use.
    pub(crate) fn open(url: &str, pool: PoolConfig) -> Result<Connections, String> {
        if let Some(members) = url.strip_prefix(CLUSTER_SCHEME) {
            return Self::open_cluster(members, pool);
        }
        let target = Target::parse(url).map_err(|e| e.to_string())?;
        match &target {
            Target::Direct(url) => {
                let mut config = deadpool_redis::Config::from_url(url.as_str());
                config.pool = Some(pool);
                let pool = config
                    .create_pool(Some(Runtime::Tokio1))
                    .map_err(|e| e.to_string())?;
                let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
                Ok(Connections {
                    pool: Pool::Direct(pool),
                    shared: Shared::Direct {
                        url: url.to_string(),
                        client,
                        manager: Arc::default(),
                    },
                })
            }
            Target::Sentinel { sentinels, master } => {
                let urls: Vec<String> = sentinels.iter().map(|s| format!("redis://{s}")).collect();
                let mut config = sentinel::Config::from_urls(
                    urls,
                    master.clone(),
                    sentinel::SentinelServerType::Master,
                );
                config.pool = Some(pool);
                let pool = config
                    .create_pool(Some(Runtime::Tokio1))
                    .map_err(|e| e.to_string())?;
                Ok(Connections {
                    pool: Pool::Sentinel(pool),
                    shared: Shared::Following(Following::new(target.clone())),
                })
            }
        }
    }

    /// Connections to the cluster whose members (`host:port`, comma-separated) are given.
    fn open_cluster(members: &str, pool: PoolConfig) -> Result<Connections, String> {
        let members: Vec<String> = members
            .split(',')
            .filter(|m| !m.is_empty())
            .map(|m| format!("redis://{m}"))
            .collect();
        if members.is_empty() {
            return Err(format!("{CLUSTER_SCHEME} names no member"));
        }
        let mut config = cluster::Config::from_urls(members.clone());
        config.pool = Some(pool);
        let pool = config
            .create_pool(Some(Runtime::Tokio1))
            .map_err(|e| e.to_string())?;
        let client = ClusterClient::new(members.clone()).map_err(|e| e.to_string())?;
        Ok(Connections {
            pool: Pool::Cluster(pool),
            shared: Shared::Cluster {
                members,
                client: Box::new(client),
                connection: Arc::default(),
            },
        })
    }

    /// Whether the Redis is a cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.shared, Shared::Cluster { .. })
    }

    /// The shared multiplexed connection (to the current primary).
    pub(crate) async fn shared(&self) -> Result<SharedConnection, RedisStockError> {
        match &self.shared {
            Shared::Direct {
                client, manager, ..
            } => {
                let manager = manager
                    .get_or_try_init(|| ConnectionManager::new(client.clone()))
                    .await?;
                Ok(SharedConnection::Manager(manager.clone()))
            }
            Shared::Following(following) => {
                let conn = following
                    .connection()
                    .await
                    .map_err(RedisStockError::NoPrimary)?;
                Ok(SharedConnection::Following(conn, following.clone()))
            }
            Shared::Cluster {
                client, connection, ..
            } => {
                let connection = connection
                    .get_or_try_init(|| client.get_async_connection())
                    .await?;
                Ok(SharedConnection::Cluster(connection.clone()))
            }
        }
    }

    /// The fixed address, when there is one: the server's, or a cluster's first member's
    /// (a message published on a cluster reaches every member); none behind Sentinels.
    pub(crate) fn fixed_url(&self) -> Option<&str> {
        match &self.shared {
            Shared::Direct { url, .. } => Some(url),
            Shared::Following(_) => None,
            Shared::Cluster { members, .. } => members.first().map(String::as_str),
        }
    }

    /// A connection of its own out of the pool.
    pub(crate) async fn pooled(&self) -> Result<PooledConnection, RedisStockError> {
        Ok(match &self.pool {
            Pool::Direct(pool) => PooledConnection::Direct(pool.get().await?),
            Pool::Sentinel(pool) => PooledConnection::Sentinel(pool.get().await?),
            Pool::Cluster(pool) => PooledConnection::Cluster(pool.get().await?),
        })
    }
}

/// The shared connection, for one operation: hand its answer to [`SharedConnection::settle`].
pub(crate) enum SharedConnection {
    Manager(ConnectionManager),
    Following(MultiplexedConnection, Following),
    Cluster(ClusterConnection),
}

impl SharedConnection {
    /// The operation's answer; a failure that says the primary is gone makes the next
    /// operation ask the Sentinels again.
    pub(crate) async fn settle<T>(self, answer: RedisResult<T>) -> Result<T, RedisStockError> {
        if let (Err(e), SharedConnection::Following(_, following)) = (&answer, &self) {
            following.failed(e).await;
        }
        Ok(answer?)
    }
}

/// A pooled connection, for one operation: hand its answer to [`PooledConnection::settle`].
pub(crate) enum PooledConnection {
    Direct(deadpool_redis::Connection),
    Sentinel(sentinel::Connection),
    Cluster(cluster::Connection),
}

impl PooledConnection {
    /// The operation's answer; a failed connection is dealt with as [`PooledConnection::failed`]
    /// says, a working one goes back to the pool.
    pub(crate) fn settle<T>(self, answer: RedisResult<T>) -> Result<T, RedisStockError> {
        answer.map_err(|e| self.failed(e))
    }

    /// `WAIT replicas timeout_ms` after a write made on this connection to `key`'s slot: the
    /// replicas that acknowledged every write the connection made before it. On a cluster it
    /// is sent to the master of that slot, where the write went: redis-rs sends a `WAIT`,
    /// which names no key, to every master and answers the least of their counts, so one
    /// shard whose replica is down would refuse the deductions of every product.
    pub(crate) async fn wait_replicas(
        &mut self,
        key: &str,
        replicas: u32,
        timeout_ms: u64,
    ) -> RedisResult<u32> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(timeout_ms);
        match self {
            PooledConnection::Cluster(conn) => {
                let master = Route::with_key(key, SlotAddr::Master);
                let at = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(master));
                let acked = conn.route_command(wait, at).await?;
                Ok(redis::from_redis_value(acked)?)
            }
            other => wait.query_async(other).await,
        }
    }

    /// The operation's error. A connection that failed because its server is gone or no longer
    /// the primary ([`primary_gone`]) is taken out of the pool rather than returned to it: the
    /// pool's `PING` check would pass a demoted primary's connection on to the next operation.
    pub(crate) fn failed(self, error: RedisError) -> RedisStockError {
        if primary_gone(&error) {
            match self {
                PooledConnection::Direct(conn) => drop(deadpool_redis::Connection::take(conn)),
                PooledConnection::Sentinel(conn) => drop(sentinel::Connection::take(conn)),
                PooledConnection::Cluster(conn) => drop(cluster::Connection::take(conn)),
            }
        }
        error.into()
    }
}

impl SharedConnection {
    fn conn(&mut self) -> &mut dyn ConnectionLike {
        match self {
            SharedConnection::Manager(c) => c,
            SharedConnection::Following(c, _) => c,
            SharedConnection::Cluster(c) => c,
        }
    }

    fn conn_ref(&self) -> &dyn ConnectionLike {
        match self {
            SharedConnection::Manager(c) => c,
            SharedConnection::Following(c, _) => c,
            SharedConnection::Cluster(c) => c,
        }
    }
}

impl PooledConnection {
    fn conn(&mut self) -> &mut dyn ConnectionLike {
        match self {
            PooledConnection::Direct(c) => c,
            PooledConnection::Sentinel(c) => c,
            PooledConnection::Cluster(c) => c,
        }
    }

    fn conn_ref(&self) -> &dyn ConnectionLike {
        match self {
            PooledConnection::Direct(c) => c,
            PooledConnection::Sentinel(c) => c,
            PooledConnection::Cluster(c) => c,
        }
    }
}

/// Both kinds run scripts and commands as the connection they hold does.
macro_rules! connection_like {
    ($type:ty) => {
        impl ConnectionLike for $type {
            fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
                self.conn().req_packed_command(cmd)
            }

            fn req_packed_commands<'a>(
                &'a mut self,
                pipeline: &'a Pipeline,
                offset: usize,
                count: usize,
            ) -> RedisFuture<'a, Vec<Value>> {
                self.conn().req_packed_commands(pipeline, offset, count)
            }

            fn get_db(&self) -> i64 {
                self.conn_ref().get_db()
            }
        }
    };
}

connection_like!(SharedConnection);
connection_like!(PooledConnection);
