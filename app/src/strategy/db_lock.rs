//! The database as a lock service: one row per held lock in `db_locks` (the `db-lock*`
//! strategies run [`super::locked::Locked`] over it).
//!
//! * **Acquire** = `INSERT` a row with the lock's name. The unique index on `name` lets
//!   exactly one concurrent insert win; the others get a duplicate-key error and poll, with
//!   jittered, growing sleeps, until their wait budget runs out (`busy`). Polling is the cost:
//!   every waiter queries the database on every interval, and those queries compete with the
//!   holder's own work for the same connections.
//! * **Fencing token** = the row's `AUTO_INCREMENT` id. InnoDB hands out ids in increasing
//!   order (persisted across restarts since MariaDB 10.2), so every grant of a name carries a
//!   larger id than the previous one — for free.
//! * **Expiry.** A holder that dies must not block the name forever, so each row carries
//!   `expires_at`, computed by the *database's* clock (no client clock drift enters). A waiter
//!   that finds an expired row deletes exactly that row — `DELETE … WHERE id = ? AND
//!   expires_at < NOW(6)`, a compare-and-set on the row it saw — and tries to insert again.
//!   Deleting by name instead could remove a fresh lock that a faster waiter had just inserted.
//! * **Release** deletes by the row's own id *and* owner, never by name: a holder whose lease
//!   expired and whose row was reaped and re-granted must not delete the new holder's row.
//! * **Renewal** (optional): a background task extends `expires_at` every third of the lease
//!   while the guard lives; if the row is gone (reaped) it reports the loss.
//!
//! **Safe while leases hold.** Without renewal, a critical section that outlives the lease
//! lets a second holder in (the lease-expiry fault); renewal keeps a slow but live holder's
//! lock, not a frozen one's. Fencing (`db-lock-fenced`) makes the stale write fail instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use locks::{AcquireOptions, DistributedLock, Guard, Held, LockError};
use rand::Rng;
use sqlx::MySqlPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::db::errors::{DbFailure, classify};

/// First and largest pause between two polls of a held lock.
const POLL_MIN: Duration = Duration::from_millis(4);
const POLL_MAX: Duration = Duration::from_millis(64);
/// Release attempts when InnoDB picks the delete as a deadlock victim.
const RELEASE_ATTEMPTS: u32 = 3;

/// Whether a held lock's lease is extended while its holder lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The lease ends `lease` after the grant, whatever the holder does.
    Off,
    /// A task extends the lease every third of it while the guard lives.
    WhileHeld,
}

/// A lock service backed by the `db_locks` table.
pub struct DbLock {
    pool: MySqlPool,
    renewal: Renewal,
    requests: Arc<AtomicU64>,
}

impl DbLock {
    /// A lock over `pool`'s database.
    pub fn new(pool: MySqlPool, renewal: Renewal) -> DbLock {
        DbLock {
            pool,
            renewal,
            requests: Arc::new(AtomicU64::new(0)),
        }
    }

    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// One attempt: the new row's id, or `None` if the name is taken.
    async fn try_insert(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<u64>, LockError> {
        self.count();
        let inserted = sqlx::query(
            "INSERT INTO db_locks (name, owner, expires_at) \
             VALUES (?, ?, NOW(6) + INTERVAL ? MICROSECOND)",
        )
        .bind(key)
        .bind(owner)
        .bind(micros(lease))
        .execute(&self.pool)
        .await;
        match inserted {
            Ok(done) => Ok(Some(done.last_insert_id())),
            Err(e) => match classify(&e) {
                // Taken. Or InnoDB picked us as the victim of the deadlock that concurrent
                // duplicate inserts into a unique index make around a delete: taken too.
                DbFailure::Duplicate | DbFailure::Busy => Ok(None),
                _ => Err(LockError::unavailable(e)),
            },
        }
    }

    /// Looks at the row holding `key`; if its lease has passed, deletes exactly that row.
    /// Returns whether the name may be free now (row gone or reaped).
    async fn reap_if_expired(&self, key: &str) -> Result<bool, LockError> {
        self.count();
        let holder: Option<(u64, bool)> =
            sqlx::query_as("SELECT id, expires_at < NOW(6) FROM db_locks WHERE name = ?")
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .map_err(LockError::unavailable)?;
        match holder {
            None => Ok(true),
            Some((_, false)) => Ok(false),
            Some((id, true)) => {
                self.count();
                let reaped =
                    sqlx::query("DELETE FROM db_locks WHERE id = ? AND expires_at < NOW(6)")
                        .bind(id)
                        .execute(&self.pool)
                        .await;
                match reaped {
                    Ok(_) => {
                        tracing::debug!(key, id, "reaped an expired lock row");
                        Ok(true)
                    }
                    Err(e) if classify(&e) == DbFailure::Busy => Ok(false),
                    Err(e) => Err(LockError::unavailable(e)),
                }
            }
        }
    }

    fn guard(&self, key: &str, owner: String, id: u64, lease: Duration) -> Guard {
        let (lost_tx, lost_rx) = watch::channel(false);
        let watcher = match self.renewal {
            Renewal::WhileHeld => tokio::spawn(renew(
                self.pool.clone(),
                self.requests.clone(),
                id,
                owner.clone(),
                lease,
                lost_tx,
            )),
            Renewal::Off => tokio::spawn(async move {
                tokio::time::sleep(lease).await;
                let _ = lost_tx.send(true);
                // Keep the sender alive so `lost()` stays resolved rather than pending.
                std::future::pending::<()>().await;
            }),
        };
        let held = RowHeld {
            pool: self.pool.clone(),
            requests: self.requests.clone(),
            id,
            owner: owner.clone(),
            watcher,
        };
        Guard::new(key, owner, id, lost_rx, Box::new(held))
    }
}

impl DistributedLock for DbLock {
    fn backend(&self) -> &'static str {
        "mariadb"
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        options: AcquireOptions,
    ) -> BoxFuture<'a, Result<Guard, LockError>> {
        Box::pin(async move {
            let owner = locks::new_owner_id();
            let started = Instant::now();
            let mut pause = POLL_MIN;
            loop {
                if let Some(id) = self.try_insert(key, &owner, options.lease).await? {
                    return Ok(self.guard(key, owner, id, options.lease));
                }
                if self.reap_if_expired(key).await? {
                    continue;
                }
                let waited = started.elapsed();
                let remaining = options
                    .wait
                    .and_then(|w| w.checked_sub(waited))
                    .unwrap_or_default();
                if remaining.is_zero() {
                    return Err(LockError::Timeout {
                        key: key.to_string(),
                        waited,
                    });
                }
                let jittered = rand::rng().random_range(pause / 2..=pause);
                tokio::time::sleep(jittered.min(remaining)).await;
                pause = (pause * 2).min(POLL_MAX);
            }
        })
    }

    fn backend_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// Extends the lease every third of it; reports loss when the row is gone or the lease passed
/// without a successful renewal.
async fn renew(
    pool: MySqlPool,
    requests: Arc<AtomicU64>,
    id: u64,
    owner: String,
    lease: Duration,
    lost: watch::Sender<bool>,
) {
    let mut renewed_at = Instant::now();
    loop {
        tokio::time::sleep(lease / 3).await;
        requests.fetch_add(1, Ordering::Relaxed);
        let extended = sqlx::query(
            "UPDATE db_locks SET expires_at = NOW(6) + INTERVAL ? MICROSECOND \
             WHERE id = ? AND owner = ? AND expires_at >= NOW(6)",
        )
        .bind(micros(lease))
        .bind(id)
        .bind(&owner)
        .execute(&pool)
        .await;
        match extended {
            Ok(done) if done.rows_affected() == 1 => renewed_at = Instant::now(),
            Ok(_) => break,
            Err(e) if renewed_at.elapsed() >= lease => {
                tracing::warn!(id, error = %e, "lock renewal kept failing past the lease");
                break;
            }
            Err(e) => tracing::debug!(id, error = %e, "lock renewal failed; retrying"),
        }
    }
    let _ = lost.send(true);
    std::future::pending::<()>().await;
}

/// A held row: released by its id and owner, never by name.
struct RowHeld {
    pool: MySqlPool,
    requests: Arc<AtomicU64>,
    id: u64,
    owner: String,
    watcher: JoinHandle<()>,
}

impl Held for RowHeld {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        Box::pin(async move {
            self.watcher.abort();
            let mut attempt = 0;
            loop {
                self.requests.fetch_add(1, Ordering::Relaxed);
                let deleted = sqlx::query("DELETE FROM db_locks WHERE id = ? AND owner = ?")
                    .bind(self.id)
                    .bind(&self.owner)
                    .execute(&self.pool)
                    .await;
                match deleted {
                    Ok(done) => return Ok(done.rows_affected() == 1),
                    // A deadlock victim: the row is still there; try again.
                    Err(e) if classify(&e) == DbFailure::Busy && attempt < RELEASE_ATTEMPTS => {
                        attempt += 1
                    }
                    Err(e) => return Err(LockError::unavailable(e)),
                }
            }
        })
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
