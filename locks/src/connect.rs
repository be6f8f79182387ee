//! Connecting a [`Backend`] from where the services are: what the app's strategies and the
//! benchmark's `--backend` flag use.

use std::sync::Arc;
use std::time::Duration;

use crate::etcd::EtcdLock;
use crate::redis::{
    GetThenSetLock, RedisLock, RedisWatchdogLock, Redlock, SetnxNoTtlLock, UnsafeReleaseLock,
};
use crate::zookeeper::ZooKeeperLock;
use crate::{Backend, DistributedLock, LockError};

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

/// Why [`connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("lock backend `{backend}` needs {what}, which is not configured")]
    NotConfigured {
        backend: Backend,
        what: &'static str,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// Connects `backend` at `endpoints`.
pub async fn connect(
    backend: Backend,
    endpoints: &Endpoints,
) -> Result<Arc<dyn DistributedLock>, ConnectError> {
    let missing = |what| ConnectError::NotConfigured { backend, what };
    let redis = || endpoints.redis.as_deref().ok_or(missing("a Redis URL"));
    let lock: Arc<dyn DistributedLock> = match backend {
        Backend::Redis => Arc::new(RedisLock::connect(redis()?)?),
        Backend::RedisWatchdog => Arc::new(RedisWatchdogLock::connect(redis()?)?),
        Backend::RedisSetnxNoTtl => Arc::new(SetnxNoTtlLock::connect(redis()?)?),
        Backend::RedisGetThenSet => Arc::new(GetThenSetLock::connect(redis()?)?),
        Backend::RedisUnsafeRelease => Arc::new(UnsafeReleaseLock::connect(redis()?)?),
        Backend::Redlock if endpoints.redlock.is_empty() => {
            return Err(missing("independent Redis URLs"));
        }
        Backend::Redlock => Arc::new(Redlock::connect(&endpoints.redlock)?),
        Backend::ZooKeeper => {
            let connect_string =
                (endpoints.zookeeper.as_deref()).ok_or(missing("a ZooKeeper connect string"))?;
            Arc::new(
                ZooKeeperLock::connect(connect_string, endpoints.zookeeper_session_timeout).await?,
            )
        }
        Backend::Etcd if endpoints.etcd.is_empty() => return Err(missing("etcd endpoints")),
        Backend::Etcd => Arc::new(EtcdLock::connect(&endpoints.etcd).await?),
    };
    Ok(lock)
}
