//! The lock services behind the locked strategies: connecting every lock backend the catalogue
//! uses, each bounded in time.
//!
//! A backend that is not configured, or cannot be reached at start-up, is recorded as absent:
//! its strategies stay in the catalogue and answer `503 backend_unavailable`, so the strategy
//! list is the same on every instance and a client learns *why* a strategy does not work.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use locks::redis::{RedisWatchdogLock, Replication};
use locks::{Backend, DistributedLock};

use crate::config::Config;
use crate::strategy::{Deps, Locks, Strategy};

/// How long start-up waits for one lock service.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects every lock backend of the catalogue (concurrently).
pub async fn connect_all(config: &Config, deps: &Deps) -> Locks {
    let endpoints = locks::Endpoints {
        redis: config.redis_address(),
        redlock: config.redlock_urls.clone(),
        zookeeper: config.zookeeper.clone(),
        etcd: config.etcd.clone(),
        memcached: config.memcached.clone(),
        zookeeper_session_timeout: Duration::from_millis(config.zookeeper_session_timeout_ms),
        // The lock table (MariaDB), or the advisory locks (PostgreSQL), live in the service's
        // database, reached through its own pool.
        database: match &deps.lock_pool {
            crate::db::Engines::MySql(pool) => Some(pool.clone().into()),
            crate::db::Engines::Postgres(_) => None,
        },
        postgres: match &deps.lock_pool {
            crate::db::Engines::MySql(_) => None,
            crate::db::Engines::Postgres(pool) => Some(pool.clone().into()),
        },
    };
    // The locks a deployment on this engine can hold: those in the service's database are
    // written for one engine.
    let backends: BTreeSet<Backend> = (Strategy::ALL.iter())
        .filter(|&&s| deps.lock_pool.engine().runs(s))
        .filter_map(|s| s.lock_backend())
        .collect();
    let (endpoints, replication) = (&endpoints, config.redis_lock_replication());
    let connected =
        futures::future::join_all(backends.into_iter().map(|backend| async move {
            (backend, connect(backend, endpoints, replication).await)
        }))
        .await;
    connected.into_iter().collect()
}

/// Connects one backend, bounded in time; logs why a lock is absent. With `replication`, the
/// watchdog lock confirms each grant with that many replicas before handing it out.
async fn connect(
    backend: Backend,
    endpoints: &locks::Endpoints,
    replication: Option<Replication>,
) -> Option<Arc<dyn DistributedLock>> {
    let connecting = async {
        match (backend, replication, endpoints.redis.as_deref()) {
            (Backend::RedisWatchdog, Some(replication), Some(url)) => {
                RedisWatchdogLock::connect_replicated(url, replication)
                    .map(|lock| Arc::new(lock) as Arc<dyn DistributedLock>)
                    .map_err(locks::ConnectError::from)
            }
            _ => locks::connect(backend, endpoints).await,
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
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
