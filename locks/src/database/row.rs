//! A held lock row: its lease clock (or renewal task), and its release by id and owner.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sqlx::MySqlPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Renewal, is_busy, micros};
use crate::{Held, LockError};

/// Release attempts when InnoDB picks the delete as a deadlock victim.
const RELEASE_ATTEMPTS: u32 = 3;

/// A held row: released by its id and owner, never by name.
pub(super) struct RowHeld {
    pool: MySqlPool,
    requests: Arc<AtomicU64>,
    id: u64,
    owner: String,
    lost: watch::Receiver<bool>,
    watcher: JoinHandle<()>,
}

impl RowHeld {
    /// Starts watching the row: counting its lease down, or renewing it.
    pub(super) fn start(
        pool: MySqlPool,
        requests: Arc<AtomicU64>,
        id: u64,
        owner: String,
        lease: Duration,
        renewal: Renewal,
        client: watch::Receiver<()>,
    ) -> RowHeld {
        let (lost_tx, lost) = watch::channel(false);
        let watcher = match renewal {
            Renewal::EveryThirdOfLease => tokio::spawn(renew(
                pool.clone(),
                Arc::clone(&requests),
                id,
                owner.clone(),
                lease,
                lost_tx,
                client,
            )),
            Renewal::Off => tokio::spawn(async move {
                tokio::time::sleep(lease).await;
                let _ = lost_tx.send(true);
                // Keep the sender alive so `lost()` stays resolved rather than pending.
                std::future::pending::<()>().await;
            }),
        };
        RowHeld {
            pool,
            requests,
            id,
            owner,
            lost,
            watcher,
        }
    }

    /// The flag that turns `true` when the lease is known to be gone.
    pub(super) fn lost(&self) -> watch::Receiver<bool> {
        self.lost.clone()
    }
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
                    Err(e) if is_busy(&e) && attempt < RELEASE_ATTEMPTS => attempt += 1,
                    Err(e) => return Err(LockError::unavailable(e)),
                }
            }
        })
    }
}

/// Extends the lease every third of it while the lock client lives; reports loss when the row
/// is gone, the lease passed without a successful renewal, or the client was dropped (as its
/// process would vanish: renewal stops, and the lease runs out).
async fn renew(
    pool: MySqlPool,
    requests: Arc<AtomicU64>,
    id: u64,
    owner: String,
    lease: Duration,
    lost: watch::Sender<bool>,
    mut client: watch::Receiver<()>,
) {
    let mut renewed_at = Instant::now();
    loop {
        tokio::select! {
            () = tokio::time::sleep(lease / 3) => {}
            // Only the client's drop closes the channel; nothing is ever sent on it.
            _ = client.changed() => {
                tokio::time::sleep_until((renewed_at + lease).into()).await;
                break;
            }
        }
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
