//! Lock-based strategies whose lock lives in an outside service (Redis, Redlock, ZooKeeper,
//! etcd): connecting to each configured service, and naming the strategies built on it.
//! The database lock needs no outside service and is registered with the built-ins.
//!
//! A service that is not configured, or cannot be reached at start-up, still gets its
//! strategies registered — they answer `503 backend_unavailable` — so the strategy list is the
//! same on every instance and a client learns *why* a strategy does not work.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use locks::{Backend, DistributedLock};

use crate::config::Config;
use crate::strategy::Registry;

/// One lock-based strategy to register (see [`Registry::register_locked`]).
pub struct LockedStrategy {
    pub name: &'static str,
    pub description: &'static str,
    pub backend: &'static str,
    pub safe: bool,
    /// `None` when the service is not configured or could not be reached: the strategy then
    /// answers `backend_unavailable`.
    pub lock: Option<Arc<dyn DistributedLock>>,
    pub fenced: bool,
}

/// A strategy built on a lock from [`locks::connect`]: its name, description, the lock
/// backend's name, the service it runs on, whether it is safe, whether its write is fenced.
type Spec = (
    &'static str,
    &'static str,
    Backend,
    &'static str,
    bool,
    bool,
);

#[rustfmt::skip]
const STRATEGIES: &[Spec] = &[
    ("redis-lock", "`SET NX PX` lock per product, stock read-modify-write inside; unsafe past its lease", Backend::Redis, "redis", true, false),
    ("redis-lock-fenced", "`redis-lock` with the stock write fenced by the lock's `INCR` token", Backend::Redis, "redis", true, true),
    ("redis-watchdog", "Redisson-like lock renewed by a watchdog, waiters woken by pub/sub", Backend::RedisWatchdog, "redis", true, false),
    ("redis-watchdog-fenced", "`redis-watchdog` with the stock write fenced by the lock's token", Backend::RedisWatchdog, "redis", true, true),
    ("redlock", "quorum lock over independent Redis instances", Backend::Redlock, "redlock", true, false),
    ("redis-setnx-no-ttl", "`SETNX` then a separate `EXPIRE`: a crash between them leaves the lock stuck", Backend::RedisSetnxNoTtl, "redis", false, false),
    ("redis-get-then-set", "`GET`, then `SET` if empty: two round trips, two holders", Backend::RedisGetThenSet, "redis", false, false),
    ("redis-unsafe-release", "release by plain `DEL`: deletes the next holder's lock after a lease expiry", Backend::RedisUnsafeRelease, "redis", false, false),
    ("zookeeper", "Curator-style ephemeral sequential nodes, waiting on the predecessor", Backend::ZooKeeper, "zookeeper", true, false),
    ("zookeeper-fenced", "`zookeeper` with the stock write fenced by the lock node's czxid", Backend::ZooKeeper, "zookeeper", true, true),
    ("etcd", "lease-bound keys, ownership by lowest create revision, watch on the predecessor", Backend::Etcd, "etcd", true, false),
    ("etcd-fenced", "`etcd` with the stock write fenced by the key's create revision", Backend::Etcd, "etcd", true, true),
];

/// Connects to every lock service `config` names (concurrently, each bounded in time) and
/// lists the strategies built on them.
pub async fn connect_locks(config: &Config) -> Vec<LockedStrategy> {
    let endpoints = locks::Endpoints {
        redis: config.redis_url.clone(),
        redlock: config.redlock_urls.clone(),
        zookeeper: config.zookeeper.clone(),
        etcd: config.etcd.clone(),
        zookeeper_session_timeout: Duration::from_millis(config.zookeeper_session_timeout_ms),
        database: None,
    };
    let endpoints = &endpoints;
    let mut backends: Vec<Backend> = STRATEGIES.iter().map(|s| s.2).collect();
    backends.dedup();
    let connected = futures::future::join_all(
        backends
            .iter()
            .map(|&backend| async move { (backend, connect(backend, endpoints).await) }),
    )
    .await;
    let locks: HashMap<Backend, Option<Arc<dyn DistributedLock>>> = connected.into_iter().collect();
    STRATEGIES
        .iter()
        .map(
            |&(name, description, lock, backend, safe, fenced)| LockedStrategy {
                name,
                description,
                backend,
                safe,
                lock: locks.get(&lock).cloned().flatten(),
                fenced,
            },
        )
        .collect()
}

/// Connects one backend, bounded in time; logs why a lock is absent.
async fn connect(
    backend: Backend,
    endpoints: &locks::Endpoints,
) -> Option<Arc<dyn DistributedLock>> {
    match tokio::time::timeout(CONNECT_TIMEOUT, locks::connect(backend, endpoints)).await {
        Ok(Ok(lock)) => Some(lock),
        Ok(Err(e)) => {
            tracing::warn!(%backend, error = %e, "no lock: its strategies answer backend_unavailable");
            None
        }
        Err(_) => {
            tracing::warn!(%backend, timeout = ?CONNECT_TIMEOUT, "connect timed out: its strategies answer backend_unavailable");
            None
        }
    }
}

/// How long start-up waits for one lock service.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Registers every strategy of [`connect_locks`].
pub async fn register_all(registry: &mut Registry, config: &Config) {
    for s in connect_locks(config).await {
        registry.register_locked(s.name, s.description, s.backend, s.safe, s.lock, s.fenced);
    }
}
