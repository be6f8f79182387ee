//! Distributed locks with fencing tokens, hand-written over Redis, ZooKeeper, etcd, memcached,
//! MariaDB (a lock table, and row locks held by open transactions) and PostgreSQL (its advisory
//! locks).
//!
//! Every backend implements one trait, [`DistributedLock`], whose contract is below, and is
//! named by one [`Backend`]; [`connect()`] opens any of them from [`Endpoints`]. The library
//! stands alone: it knows nothing of the flash-sale app that uses it.
//!
//! Cargo features: `mysql` (the database locks, [`Backend::DbLock`] and its kin), `postgres`
//! (PostgreSQL's advisory locks, `postgres::PgAdvisoryLock` and `postgres::PgAdvisoryXactLock`),
//! `conformance` (the contract as a test suite any backend can run), `clap` (`Backend` as a CLI
//! value). Its tests start their own servers: `cargo nextest run -p locks`.
//!
//! ```no_run
//! # async fn demo(lock: &dyn locks::DistributedLock) -> Result<(), locks::LockError> {
//! use std::time::Duration;
//! let guard = lock
//!     .acquire("product:42", locks::AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_millis(500)))
//!     .await?;
//! // Hand the token to the resource, so it can refuse writes from a holder that lost the lock.
//! let token = guard.fencing_token();
//! # let _ = token;
//! let still_ours = guard.release().await?;
//! # let _ = still_ours;
//! # Ok(()) }
//! ```
//!
//! # Contract
//!
//! * **Acquired** means: at the moment `acquire` returned, the backend recorded this
//!   acquisition as the only holder of `key`, with a lease of at least `options.lease` from the
//!   moment the request was sent (less clock drift where the backend accounts for it). Nothing
//!   more: a holder that outlives its lease — a long GC-like pause, a stalled critical section —
//!   may find someone else holding the lock. That is why the guard carries a fencing token.
//! * **Waiting.** `options.wait == None` tries once; `Some(d)` keeps trying for up to `d` and
//!   then fails with [`LockError::Timeout`]. How a backend waits (polling, pub/sub, watches) is
//!   its own business and part of what the project measures.
//! * **Fencing token.** [`Guard::fencing_token`] strictly increases with every grant of the same
//!   `key` by the same backend. A resource that remembers the highest token it has seen and
//!   refuses lower ones cannot be written by a stale holder.
//! * **Loss.** [`Guard::lost`] resolves when the library *knows* the lock is gone: a renewal
//!   failed, the session expired, the lease passed without renewal. It never resolves early;
//!   it may resolve late (the backend can only know what it hears).
//! * **Release.** [`Guard::release`] reports whether this guard still owned the lock; it never
//!   removes another holder's lock. Dropping a guard without releasing releases it in the
//!   background (when a Tokio runtime is running); otherwise the lease ends it.
//! * **Owner identity** is per acquisition (a random token), never per thread or task: async
//!   tasks move between threads, and two acquisitions by one task are two owners.
//! * **Cancellation.** Dropping a pending `acquire` leaves nothing that blocks others for
//!   longer than one lease.

pub mod backend;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod connect;
#[cfg(feature = "mysql")]
pub mod database;
pub mod etcd;
pub mod guard;
#[cfg(any(feature = "mysql", feature = "postgres"))]
mod held_session;
pub mod history;
mod line;
pub mod memcached;
pub mod options;
mod polling;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod recorded;
pub mod redis;
pub mod zookeeper;

pub use backend::{Backend, UnknownBackend};
pub use connect::{ConnectError, Database, Endpoints, connect};
pub use guard::{Guard, Held};
pub use options::AcquireOptions;

use futures::future::BoxFuture;

/// What [`DistributedLock::acquire`] returns: a grant, or why there was none.
pub type Acquiring<'a> = BoxFuture<'a, Result<Guard, LockError>>;

/// A lock service: hands out [`Guard`]s for named locks. See the crate docs for the contract.
pub trait DistributedLock: Send + Sync {
    /// The backend's name, e.g. `redis` or `zookeeper`.
    fn backend(&self) -> &'static str;

    /// Acquires the lock named `key`, waiting as `options` allow.
    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a>;

    /// How many requests this client has sent to its backend so far (commands, scripts,
    /// reads, writes; not the replies or pushed notifications it received). Divided by the
    /// number of grants, it tells how a backend waits: polling costs requests per waiter per
    /// interval, notifications cost none while waiting.
    fn backend_requests(&self) -> u64;
}

/// Why a lock was not acquired or released.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Someone else held the lock for the whole wait budget.
    #[error("lock `{key}` is held by someone else (waited {waited:?})")]
    Timeout {
        key: String,
        waited: std::time::Duration,
    },
    /// Not enough independent instances granted the lock (Redlock).
    #[error("lock `{key}`: only {granted} of {needed} instances granted it in time")]
    NoQuorum {
        key: String,
        granted: usize,
        needed: usize,
    },
    /// The lock was granted, but fewer replicas than the client requires confirmed the grant
    /// in time (Redis `WAIT`, [`redis::Replication`]). The grant was given back: a failover to
    /// a replica that missed it would hand the lock to someone else.
    #[error(
        "lock `{key}` was granted, but only {acked} of the {needed} required replica(s) confirmed \
         it in time; the grant was given back"
    )]
    Unreplicated {
        key: String,
        acked: u32,
        needed: u32,
    },
    /// The backend could not be reached or answered with an error.
    #[error("lock backend unavailable: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl LockError {
    /// Wraps any backend error as [`LockError::Unavailable`].
    pub fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> LockError {
        LockError::Unavailable(Box::new(e))
    }

    /// [`LockError::Timeout`] for lock `key`, waited for since `started`.
    pub(crate) fn waited_since(key: &str, started: std::time::Instant) -> LockError {
        LockError::Timeout {
            key: key.to_owned(),
            waited: started.elapsed(),
        }
    }
}

/// A random per-acquisition owner id.
pub fn new_owner_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
