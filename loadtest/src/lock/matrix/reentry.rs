//! Reentrancy: the holder asks for the lock it holds once more.
//!
//! The watchdog and fair Redis locks offer it, as Redisson's locks do, and so do the database
//! locks the seed articles make reentrant (the unique-key lock's owner column and count, the
//! row-lock and blocking-insert locks' own transaction): `reenter(&guard)` counts one more hold
//! of the same owner, and the lock is free only when every guard was released.
//! That is checked, not assumed: after the inner release another client must still be refused,
//! after the outer one granted. Every other backend follows the crate's contract (an owner per
//! acquisition), so a second `acquire` by the holder's own client is just another contender:
//! it must wait and time out, never be granted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use locks::database::{DbInsertLock, DbLock, DbReentrantLock, DbRowLock};
use locks::redis::{RedisFairLock, RedisWatchdogLock};
use locks::{AcquireOptions, Backend, DistributedLock, Guard, LockError};
use serde::Serialize;

use super::{LEASE, WAIT, busy, duration, fresh_key, is_busy};
use crate::lock::connect_backend;

/// What the holder's second request got.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Reentry {
    /// Entered again; whether another client was refused after the inner release and granted
    /// after the outer one.
    Reentered {
        held_after_inner_release: bool,
        free_after_outer_release: bool,
    },
    /// The second acquire waited `waited_ms` and timed out, as another client's would.
    NotReentrant { waited_ms: f64 },
    /// The second acquire was granted: two owners at once.
    SecondGrant,
    /// `reenter` said the guard no longer holds the lock.
    Refused,
}

impl Reentry {
    pub fn cell(&self) -> String {
        match self {
            Reentry::Reentered {
                held_after_inner_release: true,
                free_after_outer_release: true,
            } => "re-entered; held until the 2nd release".to_string(),
            Reentry::Reentered {
                held_after_inner_release,
                free_after_outer_release,
            } => format!(
                "re-entered, but {}",
                match (held_after_inner_release, free_after_outer_release) {
                    (false, _) => "freed by the 1st release",
                    _ => "still held after the 2nd release",
                }
            ),
            Reentry::NotReentrant { waited_ms } => format!(
                "not reentrant: 2nd acquire timed out ({})",
                duration(*waited_ms)
            ),
            Reentry::SecondGrant => "2nd acquire GRANTED: two owners".to_string(),
            Reentry::Refused => "reenter refused a live guard".to_string(),
        }
    }
}

/// A lock that can enter a held lock again.
trait Reentrant: DistributedLock {
    async fn enter_again(&self, guard: &Guard) -> Result<Option<Guard>, LockError>;
}

/// Each lock that offers `reenter(&guard)`, as a [`Reentrant`].
macro_rules! reentrant {
    ($($lock:ty),+) => {$(
        impl Reentrant for $lock {
            async fn enter_again(&self, guard: &Guard) -> Result<Option<Guard>, LockError> {
                self.reenter(guard).await
            }
        }
    )+};
}

reentrant!(
    RedisWatchdogLock,
    RedisFairLock,
    DbReentrantLock,
    DbRowLock,
    DbInsertLock
);

/// A pool of the lock database, its tables created: what the database locks are made over.
async fn lock_pool(endpoints: &sandbox::Endpoints) -> Result<sqlx::MySqlPool> {
    let pool = crate::lock::lock_database(&endpoints.database_url).await?;
    DbLock::create_table(&pool).await?;
    Ok(pool)
}

pub async fn measure(
    backend: Backend,
    endpoints: &sandbox::Endpoints,
    wait: Duration,
) -> Result<Reentry> {
    let url = endpoints.redis_url.as_str();
    match backend {
        Backend::RedisWatchdog => {
            reentered(&RedisWatchdogLock::connect(url)?, backend, endpoints).await
        }
        Backend::RedisFair => reentered(&RedisFairLock::connect(url)?, backend, endpoints).await,
        Backend::DbLockReentrant => {
            let lock = DbReentrantLock::new(lock_pool(endpoints).await?);
            reentered(&lock, backend, endpoints).await
        }
        Backend::DbRowLock => {
            let lock = DbRowLock::new(lock_pool(endpoints).await?);
            reentered(&lock, backend, endpoints).await
        }
        Backend::DbBlockingInsert => {
            let lock = DbInsertLock::new(lock_pool(endpoints).await?);
            reentered(&lock, backend, endpoints).await
        }
        _ => second_acquire(connect_backend(backend, endpoints).await?, wait).await,
    }
}

async fn reentered(
    lock: &impl Reentrant,
    backend: Backend,
    endpoints: &sandbox::Endpoints,
) -> Result<Reentry> {
    let other = connect_backend(backend, endpoints).await?;
    let key = fresh_key("reentry");
    let outer = lock
        .acquire(&key, AcquireOptions::new(LEASE).wait(WAIT))
        .await?;
    let Some(inner) = lock.enter_again(&outer).await? else {
        outer.release().await?;
        return Ok(Reentry::Refused);
    };
    inner.release().await?;
    let held_after_inner_release = busy(other.as_ref(), &key).await?;
    outer.release().await?;
    let free_after_outer_release = !busy(other.as_ref(), &key).await?;
    Ok(Reentry::Reentered {
        held_after_inner_release,
        free_after_outer_release,
    })
}

async fn second_acquire(lock: Arc<dyn DistributedLock>, wait: Duration) -> Result<Reentry> {
    let key = fresh_key("reentry");
    let outer = lock
        .acquire(&key, AcquireOptions::new(LEASE).wait(WAIT))
        .await?;
    let start = Instant::now();
    let reentry = match lock
        .acquire(&key, AcquireOptions::new(LEASE).wait(wait))
        .await
    {
        Ok(second) => {
            let _ = second.release().await;
            Reentry::SecondGrant
        }
        Err(e) if is_busy(&e) => Reentry::NotReentrant {
            waited_ms: start.elapsed().as_secs_f64() * 1000.0,
        },
        Err(e) => {
            let _ = outer.release().await;
            return Err(e.into());
        }
    };
    outer.release().await?;
    Ok(reentry)
}
