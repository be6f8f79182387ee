//! Connecting a [`Backend`] from where the services are: what the app's strategies and the
//! benchmark's `--backend` flag use.

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "mysql")]
use crate::database::{DbInsertLock, DbLock, DbReentrantLock, DbRowLock};
use crate::etcd::EtcdLock;
use crate::memcached::MemcachedLock;
#[cfg(feature = "postgres")]
use crate::postgres::{PgAdvisoryLock, PgAdvisoryXactLock, PgInsertLock, PgRowLock};
use crate::redis::{
    GetThenSetLock, RedisFairLock, RedisLock, RedisWatchdogLock, Redlock, SetnxNoTtlLock,
    UnsafeReleaseLock,
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
    /// memcached address, `host:port`.
    pub memcached: Option<String>,
    /// ZooKeeper's session timeout plays the role of a lease: a holder whose session expires
    /// loses its lock.
    pub zookeeper_session_timeout: Duration,
    /// The database of the lock tables (`db-lock`, `db-lock-renewed`, `db-lock-reentrant`,
    /// `db-row-lock`, `db-blocking-insert`). The locks held by a transaction keep one of its
    /// connections per holder and per waiter.
    pub database: Option<Database>,
    /// The PostgreSQL database whose advisory locks `pg-advisory` and `pg-advisory-xact` take
    /// (a [`Database::Postgres`]): a connection of its pool per holder and per waiter.
    pub postgres: Option<Database>,
}

/// A database that can hold locks. Its variants exist only with the matching cargo feature of
/// this crate (`mysql`, `postgres`): the [`Endpoints`] fields are there in every build, so code
/// that leaves them `None` compiles whichever features are on.
#[derive(Debug, Clone)]
pub enum Database {
    /// A MySQL or MariaDB pool; see [`crate::database`] for the table it uses.
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
    /// A PostgreSQL pool; see [`crate::postgres`] for the sequence it uses.
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
}

#[cfg(feature = "mysql")]
impl From<sqlx::MySqlPool> for Database {
    fn from(pool: sqlx::MySqlPool) -> Database {
        Database::MySql(pool)
    }
}

#[cfg(feature = "postgres")]
impl From<sqlx::PgPool> for Database {
    fn from(pool: sqlx::PgPool) -> Database {
        Database::Postgres(pool)
    }
}

/// Why [`connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("lock backend `{backend}` needs {what}, which is not configured")]
    NotConfigured {
        backend: Backend,
        what: &'static str,
    },
    #[error("lock backend `{backend}` needs the `{feature}` feature of the locks crate")]
    FeatureDisabled {
        backend: Backend,
        feature: &'static str,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// Connects `backend` at `endpoints`. For the database locks this also creates their tables if
/// missing.
pub async fn connect(
    backend: Backend,
    endpoints: &Endpoints,
) -> Result<Arc<dyn DistributedLock>, ConnectError> {
    let missing = |what| ConnectError::NotConfigured { backend, what };
    let redis = || endpoints.redis.as_deref().ok_or(missing("a Redis URL"));
    let lock: Arc<dyn DistributedLock> = match backend {
        Backend::Redis => Arc::new(RedisLock::connect(redis()?)?),
        Backend::RedisWatchdog => Arc::new(RedisWatchdogLock::connect(redis()?)?),
        Backend::RedisFair => Arc::new(RedisFairLock::connect(redis()?)?),
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
        Backend::Memcached => Arc::new(MemcachedLock::connect(
            (endpoints.memcached.as_deref()).ok_or(missing("a memcached address"))?,
        )),
        #[cfg(feature = "postgres")]
        Backend::DbRowLock if endpoints.database.is_none() && endpoints.postgres.is_some() => {
            Arc::new(PgRowLock::new(postgres_pool(backend, endpoints).await?))
        }
        #[cfg(feature = "postgres")]
        Backend::DbBlockingInsert
            if endpoints.database.is_none() && endpoints.postgres.is_some() =>
        {
            Arc::new(PgInsertLock::new(postgres_pool(backend, endpoints).await?))
        }
        #[cfg(all(feature = "mysql", feature = "postgres"))]
        Backend::DbLock | Backend::DbLockRenewed | Backend::DbLockReentrant
            if endpoints.database.is_none() && endpoints.postgres.is_some() =>
        {
            let pool = postgres_pool(backend, endpoints).await?;
            match backend {
                Backend::DbLock => Arc::new(DbLock::leased(pool)),
                Backend::DbLockRenewed => Arc::new(DbLock::renewed(pool)),
                _ => Arc::new(DbReentrantLock::new(pool)),
            }
        }
        #[cfg(feature = "mysql")]
        Backend::DbLock => Arc::new(DbLock::leased(lock_table(backend, endpoints).await?)),
        #[cfg(feature = "mysql")]
        Backend::DbLockRenewed => Arc::new(DbLock::renewed(lock_table(backend, endpoints).await?)),
        #[cfg(feature = "mysql")]
        Backend::DbLockReentrant => {
            Arc::new(DbReentrantLock::new(lock_table(backend, endpoints).await?))
        }
        #[cfg(feature = "mysql")]
        Backend::DbRowLock => Arc::new(DbRowLock::new(lock_table(backend, endpoints).await?)),
        #[cfg(feature = "mysql")]
        Backend::DbBlockingInsert => {
            Arc::new(DbInsertLock::new(lock_table(backend, endpoints).await?))
        }
        #[cfg(feature = "postgres")]
        Backend::PgAdvisory => Arc::new(PgAdvisoryLock::new(
            postgres_pool(backend, endpoints).await?,
        )),
        #[cfg(feature = "postgres")]
        Backend::PgAdvisoryXact => Arc::new(PgAdvisoryXactLock::new(
            postgres_pool(backend, endpoints).await?,
        )),
        #[cfg(not(feature = "postgres"))]
        Backend::PgAdvisory | Backend::PgAdvisoryXact => {
            return Err(ConnectError::FeatureDisabled {
                backend,
                feature: "postgres",
            });
        }
        #[cfg(not(feature = "mysql"))]
        Backend::DbLock
        | Backend::DbLockRenewed
        | Backend::DbLockReentrant
        | Backend::DbRowLock
        | Backend::DbBlockingInsert => {
            return Err(ConnectError::FeatureDisabled {
                backend,
                feature: "mysql",
            });
        }
    };
    Ok(lock)
}

/// The pool of the database locks, their tables created if missing.
#[cfg(feature = "mysql")]
async fn lock_table(
    backend: Backend,
    endpoints: &Endpoints,
) -> Result<sqlx::MySqlPool, ConnectError> {
    let Some(Database::MySql(pool)) = endpoints.database.clone() else {
        return Err(ConnectError::NotConfigured {
            backend,
            what: "a database pool",
        });
    };
    DbLock::create_table(&pool).await?;
    Ok(pool)
}

/// The pool of the locks kept in PostgreSQL, their tables and tokens' sequence created if
/// missing.
#[cfg(feature = "postgres")]
async fn postgres_pool(
    backend: Backend,
    endpoints: &Endpoints,
) -> Result<sqlx::PgPool, ConnectError> {
    let Some(Database::Postgres(pool)) = endpoints.postgres.clone() else {
        return Err(ConnectError::NotConfigured {
            backend,
            what: "a PostgreSQL pool",
        });
    };
    crate::postgres::create_schema(&pool).await?;
    Ok(pool)
}
