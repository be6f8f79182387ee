//! Backends by name: what the app's strategies and the benchmark's `--backend` flag use.

use std::sync::Arc;
use std::time::Duration;

use crate::etcd::EtcdLock;
use crate::redis::{
    GetThenSetLock, RedisLock, RedisWatchdogLock, Redlock, SetnxNoTtlLock, UnsafeReleaseLock,
};
use crate::zookeeper::ZooKeeperLock;
use crate::{DistributedLock, LockError};

/// Where the backends are. A backend whose address is missing cannot be connected.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    pub redis: Option<String>,
    pub redlock: Vec<String>,
    pub zookeeper: Option<String>,
    pub etcd: Vec<String>,
    /// ZooKeeper's session timeout plays the role of a lease: a holder whose session expires
    /// loses its lock.
    pub zookeeper_session_timeout: Duration,
}

/// A backend's name, what it is, and whether it gives mutual exclusion.
#[derive(Debug, Clone, Copy)]
pub struct Backend {
    pub name: &'static str,
    pub description: &'static str,
    /// `false` for the variants that exist to show a failure.
    pub safe: bool,
}

/// Every backend, in the order reports list them.
pub const BACKENDS: &[Backend] = &[
    Backend {
        name: "redis",
        description: "SET NX PX + compare-and-delete; safe while the holder beats its lease",
        safe: true,
    },
    Backend {
        name: "redis-watchdog",
        description: "Redisson-like reentrant hash lock, renewed by a watchdog, pub/sub hand-off",
        safe: true,
    },
    Backend {
        name: "redlock",
        description: "majority of independent Redis instances; survives a minority's loss",
        safe: true,
    },
    Backend {
        name: "zookeeper",
        description: "ephemeral sequential nodes, each waiter watching its predecessor",
        safe: true,
    },
    Backend {
        name: "etcd",
        description: "leased keys ordered by create revision, waiting on the predecessor",
        safe: true,
    },
    Backend {
        name: "redis-setnx-no-ttl",
        description: "SETNX then a separate EXPIRE: a crash in between locks out everyone",
        safe: false,
    },
    Backend {
        name: "redis-get-then-set",
        description: "GET, then SET if empty: two round trips, two holders",
        safe: false,
    },
    Backend {
        name: "redis-unsafe-release",
        description: "release by plain DEL: deletes the next holder's lock after an expiry",
        safe: false,
    },
];

/// Why [`connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("unknown lock backend `{0}` (known: {known})", known = names().join(", "))]
    Unknown(String),
    #[error("lock backend `{backend}` needs {what}, which is not configured")]
    NotConfigured {
        backend: &'static str,
        what: &'static str,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// The names of [`BACKENDS`].
pub fn names() -> Vec<&'static str> {
    BACKENDS.iter().map(|b| b.name).collect()
}

/// Connects the backend called `name`.
pub async fn connect(
    name: &str,
    endpoints: &Endpoints,
) -> Result<Arc<dyn DistributedLock>, ConnectError> {
    let backend = BACKENDS
        .iter()
        .find(|b| b.name == name)
        .ok_or_else(|| ConnectError::Unknown(name.to_string()))?
        .name;
    let redis = || {
        endpoints
            .redis
            .as_deref()
            .ok_or(ConnectError::NotConfigured {
                backend,
                what: "a Redis URL",
            })
    };
    let lock: Arc<dyn DistributedLock> = match backend {
        "redis" => Arc::new(RedisLock::connect(redis()?)?),
        "redis-watchdog" => Arc::new(RedisWatchdogLock::connect(redis()?)?),
        "redis-setnx-no-ttl" => Arc::new(SetnxNoTtlLock::connect(redis()?)?),
        "redis-get-then-set" => Arc::new(GetThenSetLock::connect(redis()?)?),
        "redis-unsafe-release" => Arc::new(UnsafeReleaseLock::connect(redis()?)?),
        "redlock" if endpoints.redlock.is_empty() => {
            return Err(ConnectError::NotConfigured {
                backend,
                what: "independent Redis URLs",
            });
        }
        "redlock" => Arc::new(Redlock::connect(&endpoints.redlock)?),
        "zookeeper" => {
            let connect_string =
                endpoints
                    .zookeeper
                    .as_deref()
                    .ok_or(ConnectError::NotConfigured {
                        backend,
                        what: "a ZooKeeper connect string",
                    })?;
            Arc::new(
                ZooKeeperLock::connect(connect_string, endpoints.zookeeper_session_timeout).await?,
            )
        }
        "etcd" if endpoints.etcd.is_empty() => {
            return Err(ConnectError::NotConfigured {
                backend,
                what: "etcd endpoints",
            });
        }
        "etcd" => Arc::new(EtcdLock::connect(&endpoints.etcd).await?),
        _ => unreachable!("every name in BACKENDS has a constructor"),
    };
    Ok(lock)
}
