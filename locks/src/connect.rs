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

/// A lock backend: every lock this crate can connect, by the name reports and flags use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    Redis,
    RedisWatchdog,
    Redlock,
    ZooKeeper,
    Etcd,
    RedisSetnxNoTtl,
    RedisGetThenSet,
    RedisUnsafeRelease,
    /// The database lock table (connected by the app, which owns the pool).
    DbLock,
    /// The database lock table with a renewal task.
    DbLockRenewed,
}

impl Backend {
    /// Every backend, in the order reports list them.
    pub const ALL: &[Backend] = &[
        Backend::Redis,
        Backend::RedisWatchdog,
        Backend::Redlock,
        Backend::ZooKeeper,
        Backend::Etcd,
        Backend::RedisSetnxNoTtl,
        Backend::RedisGetThenSet,
        Backend::RedisUnsafeRelease,
        Backend::DbLock,
        Backend::DbLockRenewed,
    ];

    /// The stable name used in reports, flags and the app's strategy names.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::RedisWatchdog => "redis-watchdog",
            Backend::Redlock => "redlock",
            Backend::ZooKeeper => "zookeeper",
            Backend::Etcd => "etcd",
            Backend::RedisSetnxNoTtl => "redis-setnx-no-ttl",
            Backend::RedisGetThenSet => "redis-get-then-set",
            Backend::RedisUnsafeRelease => "redis-unsafe-release",
            Backend::DbLock => "db-lock",
            Backend::DbLockRenewed => "db-lock-renewed",
        }
    }

    /// What it is, in one line.
    pub fn description(self) -> &'static str {
        match self {
            Backend::Redis => {
                "SET NX PX + compare-and-delete; safe while the holder beats its lease"
            }
            Backend::RedisWatchdog => {
                "Redisson-like reentrant hash lock, renewed by a watchdog, pub/sub hand-off"
            }
            Backend::Redlock => {
                "majority of independent Redis instances; survives a minority's loss"
            }
            Backend::ZooKeeper => {
                "ephemeral sequential nodes, each waiter watching its predecessor"
            }
            Backend::Etcd => "leased keys ordered by create revision, waiting on the predecessor",
            Backend::RedisSetnxNoTtl => {
                "SETNX then a separate EXPIRE: a crash in between locks out everyone"
            }
            Backend::RedisGetThenSet => "GET, then SET if empty: two round trips, two holders",
            Backend::RedisUnsafeRelease => {
                "release by plain DEL: deletes the next holder's lock after an expiry"
            }
            Backend::DbLock => "a row in a lock table: unique name, expiry, release by row id",
            Backend::DbLockRenewed => {
                "the lock-table row, its lease extended while the holder lives"
            }
        }
    }

    /// `true` for the variants that exist to show a failure (no mutual exclusion).
    pub fn is_broken(self) -> bool {
        matches!(
            self,
            Backend::RedisSetnxNoTtl | Backend::RedisGetThenSet | Backend::RedisUnsafeRelease
        )
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Backend {
    type Err = ConnectError;

    fn from_str(name: &str) -> Result<Backend, ConnectError> {
        Backend::ALL
            .iter()
            .copied()
            .find(|b| b.name() == name)
            .ok_or_else(|| ConnectError::Unknown(name.to_string()))
    }
}

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

/// The names of every [`Backend`].
pub fn names() -> Vec<&'static str> {
    Backend::ALL.iter().map(|b| b.name()).collect()
}

/// Connects `backend`.
pub async fn connect(
    backend: Backend,
    endpoints: &Endpoints,
) -> Result<Arc<dyn DistributedLock>, ConnectError> {
    let name = backend.name();
    let redis = || {
        endpoints
            .redis
            .as_deref()
            .ok_or(ConnectError::NotConfigured {
                backend: name,
                what: "a Redis URL",
            })
    };
    let lock: Arc<dyn DistributedLock> = match backend {
        Backend::Redis => Arc::new(RedisLock::connect(redis()?)?),
        Backend::RedisWatchdog => Arc::new(RedisWatchdogLock::connect(redis()?)?),
        Backend::RedisSetnxNoTtl => Arc::new(SetnxNoTtlLock::connect(redis()?)?),
        Backend::RedisGetThenSet => Arc::new(GetThenSetLock::connect(redis()?)?),
        Backend::RedisUnsafeRelease => Arc::new(UnsafeReleaseLock::connect(redis()?)?),
        Backend::Redlock if endpoints.redlock.is_empty() => {
            return Err(ConnectError::NotConfigured {
                backend: name,
                what: "independent Redis URLs",
            });
        }
        Backend::Redlock => Arc::new(Redlock::connect(&endpoints.redlock)?),
        Backend::ZooKeeper => {
            let connect_string =
                endpoints
                    .zookeeper
                    .as_deref()
                    .ok_or(ConnectError::NotConfigured {
                        backend: name,
                        what: "a ZooKeeper connect string",
                    })?;
            Arc::new(
                ZooKeeperLock::connect(connect_string, endpoints.zookeeper_session_timeout).await?,
            )
        }
        Backend::Etcd if endpoints.etcd.is_empty() => {
            return Err(ConnectError::NotConfigured {
                backend: name,
                what: "etcd endpoints",
            });
        }
        Backend::Etcd => Arc::new(EtcdLock::connect(&endpoints.etcd).await?),
        Backend::DbLock | Backend::DbLockRenewed => {
            return Err(ConnectError::NotConfigured {
                backend: name,
                what: "a database pool (the app connects its lock table itself)",
            });
        }
    };
    Ok(lock)
}
