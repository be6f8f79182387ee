//! One etcd lease and the task that keeps it alive and knows when it is gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tokio::sync::{Notify, oneshot, watch};

use super::{ATTEMPT, timed_out};
use crate::LockError;

/// Pause before reopening the renewal stream after it failed.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// A granted lease, renewed every TTL/3 until dropped. Dropping stops renewing without
/// revoking; the `lost` flag still turns `true` once the lease has run out.
pub(super) struct Lease {
    id: i64,
    /// The TTL the server granted.
    ttl: Duration,
    lost: watch::Receiver<bool>,
    /// When the lease runs out at the earliest, as far as this client knows.
    expires: watch::Receiver<Instant>,
    /// Asks the renewal task for a renewal now.
    renew_now: Arc<Notify>,
    _stop: oneshot::Sender<()>,
}

impl Lease {
    /// Grants a lease of `ttl` seconds and starts renewing it.
    pub(super) async fn grant(
        mut client: Client,
        ttl: i64,
        requests: Arc<AtomicU64>,
    ) -> Result<Lease, LockError> {
        let sent = Instant::now();
        requests.fetch_add(1, Ordering::Relaxed);
        let granted = client
            .lease_grant(ttl, None)
            .await
            .map_err(LockError::unavailable)?;
        // The server may raise a short TTL to its minimum; renew at the TTL it granted.
        let ttl = seconds(granted.ttl()).ok_or_else(|| {
            LockError::Unavailable(format!("lease granted with TTL {}", granted.ttl()).into())
        })?;
        let (lost_tx, lost) = watch::channel(false);
        let (expires_tx, expires) = watch::channel(sent + ttl);
        let (stop, stopped) = oneshot::channel();
        let renew_now = Arc::new(Notify::new());
        let renewal = Renewal {
            client,
            id: granted.id(),
            ttl,
            expires: expires_tx,
            renew_now: Arc::clone(&renew_now),
            stream: None,
            requests,
        };
        tokio::spawn(renewal.run(lost_tx, stopped));
        Ok(Lease {
            id: granted.id(),
            ttl,
            lost,
            expires,
            renew_now,
            _stop: stop,
        })
    }

    pub(super) fn id(&self) -> i64 {
        self.id
    }

    pub(super) fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// The flag a guard of a key on this lease watches.
    pub(super) fn lost_flag(&self) -> watch::Receiver<bool> {
        self.lost.clone()
    }

    /// Resolves once the lease is known to last until `since + needed`, asking for a renewal at
    /// once when it is not: that holds once a renewal sent at or after `since` was acknowledged
    /// (the TTL is at least `needed`). Fails once the lease is lost. Bound it: while renewals
    /// keep failing, it waits.
    pub(super) async fn lasts(&self, since: Instant, needed: Duration) -> Result<(), LockError> {
        if self.ttl < needed {
            return Err(LockError::Unavailable(
                format!("etcd granted a {:?} lease, less than {needed:?}", self.ttl).into(),
            ));
        }
        let mut expires = self.expires.clone();
        loop {
            let until = *expires.borrow_and_update();
            if self.is_lost() {
                break;
            }
            if until >= since + needed {
                return Ok(());
            }
            self.renew_now.notify_one();
            tokio::select! {
                changed = expires.changed() => if changed.is_err() { break },
                () = self.lost() => break,
            }
        }
        Err(LockError::Unavailable(
            "the etcd lease ran out before the lock could be granted".into(),
        ))
    }

    /// Resolves once the lease is known gone.
    pub(super) async fn lost(&self) {
        let mut lost = self.lost.clone();
        if lost.wait_for(|lost| *lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

fn seconds(ttl: i64) -> Option<Duration> {
    u64::try_from(ttl)
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

/// The renewing side of a [`Lease`].
struct Renewal {
    client: Client,
    id: i64,
    ttl: Duration,
    /// When the server's lease runs out at the earliest: the last acknowledged renewal's send
    /// time plus the TTL it answered.
    expires: watch::Sender<Instant>,
    renew_now: Arc<Notify>,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    requests: Arc<AtomicU64>,
}

impl Renewal {
    async fn run(mut self, lost: watch::Sender<bool>, mut stop: oneshot::Receiver<()>) {
        let mut next = Instant::now() + self.ttl / 3;
        let mut stopped = false;
        loop {
            let expires = *self.expires.borrow();
            let wake = if stopped { expires } else { next.min(expires) };
            tokio::select! {
                () = tokio::time::sleep_until(wake.into()) => {}
                // A grant found too little of the lease left.
                () = self.renew_now.notified(), if !stopped => {}
                _ = &mut stop, if !stopped => {
                    stopped = true;
                    continue;
                }
                // No lease handle and no guard left: nobody to tell.
                () = lost.closed() => return,
            }
            if Instant::now() >= expires {
                break;
            }
            let sent = Instant::now();
            let answer = tokio::select! {
                // A renewal forwarded to a leader that just died waits for etcd's request
                // timeout; a new stream reaches the new leader.
                answer = tokio::time::timeout(ATTEMPT, self.renew()) => {
                    answer.unwrap_or_else(|_| Err(timed_out()))
                }
                () = tokio::time::sleep_until(expires.into()) => break,
            };
            match answer {
                Ok(Some(ttl)) => {
                    self.expires.send_replace(sent + ttl);
                    next = sent + self.ttl / 3;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(lease = self.id, error = %e, "lease renewal failed");
                    self.stream = None;
                    next = Instant::now() + RETRY_PAUSE;
                }
            }
        }
        tracing::debug!(lease = self.id, "lease gone: its locks are lost");
        let _ = lost.send(true);
    }

    /// Sends one renewal. `Some(ttl)`: renewed for `ttl`; `None`: the lease no longer exists.
    async fn renew(&mut self) -> Result<Option<Duration>, etcd_client::Error> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let Some((keeper, responses)) = &mut self.stream else {
            // Opening the stream sends a renewal and reads its answer (an error if the lease
            // is gone: then the deadline decides).
            self.stream = Some(self.client.lease_keep_alive(self.id).await?);
            return Ok(Some(self.ttl));
        };
        keeper.keep_alive().await?;
        match responses.message().await? {
            Some(answer) => Ok(seconds(answer.ttl())),
            None => Err(etcd_client::Error::LeaseKeepAliveError(
                "renewal stream closed".into(),
            )),
        }
    }
}
