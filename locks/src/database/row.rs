//! A held lock row: its lease clock (or renewal task), and its release by id and owner (one hold
//! at a time for the reentrant lock).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::tables::{Release, Tables};
use super::{Variant, is_busy};
use crate::{Held, LockError};

/// Release attempts when InnoDB picks the delete as a deadlock victim.
const RELEASE_ATTEMPTS: u32 = 3;

/// A held row: released by its id and owner, never by name.
pub(super) struct RowHeld {
    pool: Tables,
    requests: Arc<AtomicU64>,
    id: u64,
    owner: String,
    /// Whether a release gives back one hold (the row goes with the last) or the row.
    counted: bool,
    lost: watch::Receiver<bool>,
    /// The lease clock or the renewal task; `None` for a re-entry, which shares its owner's.
    watcher: Option<JoinHandle<()>>,
}

impl RowHeld {
    /// Starts watching the row: counting its lease down, or renewing it.
    pub(super) fn start(
        pool: Tables,
        requests: Arc<AtomicU64>,
        id: u64,
        owner: String,
        lease: Duration,
        variant: Variant,
        client: watch::Receiver<()>,
    ) -> RowHeld {
        let (lost_tx, lost) = watch::channel(false);
        let watcher = match variant {
            Variant::Renewed => tokio::spawn(renew(
                pool.clone(),
                Arc::clone(&requests),
                id,
                owner.clone(),
                lease,
                lost_tx,
                client,
            )),
            Variant::Leased | Variant::Reentrant => tokio::spawn(async move {
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
            counted: variant == Variant::Reentrant,
            lost,
            watcher: Some(watcher),
        }
    }

    /// One more hold of row `id` by `owner`, whose loss `lost` already reports: released by
    /// giving the hold back.
    pub(super) fn reentered(
        pool: Tables,
        requests: Arc<AtomicU64>,
        id: u64,
        owner: String,
        lost: watch::Receiver<bool>,
    ) -> RowHeld {
        RowHeld {
            pool,
            requests,
            id,
            owner,
            counted: true,
            lost,
            watcher: None,
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
            if !self.counted {
                if let Some(watcher) = &self.watcher {
                    watcher.abort();
                }
                return self.run(Release::Row).await;
            }
            // Reentrant: the last hold deletes the row; an earlier one gives its hold back, and
            // the lease clock keeps running for the holds that remain. A second round covers
            // another hold of the same owner released at the same moment.
            for _ in 0..2 {
                if self.run(Release::LastHold).await? {
                    if let Some(watcher) = &self.watcher {
                        watcher.abort();
                    }
                    return Ok(true);
                }
                if self.run(Release::OneHold).await? {
                    return Ok(true);
                }
            }
            Ok(false)
        })
    }
}

impl RowHeld {
    /// Gives back what `release` says of this row; whether it changed the row. A deadlock
    /// victim is tried again: the row is still there.
    async fn run(&self, release: Release) -> Result<bool, LockError> {
        let mut attempt = 0;
        loop {
            self.requests.fetch_add(1, Ordering::Relaxed);
            let done = self.pool.release(self.id, &self.owner, release).await;
            match done {
                Ok(changed) => return Ok(changed),
                Err(e) if is_busy(&e) && attempt < RELEASE_ATTEMPTS => attempt += 1,
                Err(e) => return Err(LockError::unavailable(e)),
            }
        }
    }
}

/// Extends the lease every third of it while the lock client lives; reports loss when the row
/// is gone, the lease passed without a successful renewal, or the client was dropped (as its
/// process would vanish: renewal stops, and the lease runs out).
async fn renew(
    pool: Tables,
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
        match pool.extend(id, &owner, lease).await {
            Ok(true) => renewed_at = Instant::now(),
            Ok(false) => break,
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
