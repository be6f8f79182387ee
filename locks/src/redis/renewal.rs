//! The watchdog of the hash locks (`redis-watchdog`, `redis-fair`): one task per client keeps
//! every lock the client holds alive, all of them in one round trip per renewal round; and
//! re-entry, which counts one more hold on a lock the client renews.
//!
//! Both locks keep a lock as a hash `owner → hold count` with a TTL, so one renewal script and
//! one re-entry script serve both.
//!
//! Each held lock is renewed once a third of its lease has passed since the last confirmed
//! renewal; a round also takes along every lock that would fall due within the next sixth of
//! its lease, so locks acquired at about the same time share round trips instead of each
//! costing one. A lock whose renewal Redis refuses (the hash no longer names its owner: the lease
//! ran out during a stall, or someone deleted it) is reported lost at once. A lock that cannot
//! be renewed because Redis does not answer is retried quickly and reported lost when a full
//! lease has passed since the last renewal that Redis confirmed (counted from when that
//! renewal was *sent*): from then on the client can no longer claim it holds the lock.
//!
//! That deadline must hold whatever the connection does, so a round's request is itself bounded
//! by the earliest lease end among the held locks. Without that bound, the loss would be
//! reported only when the request returns: after a server dies, the connection manager
//! reconnects with growing pauses (about 6 s in all) and requests wait for it; a lock granted to
//! someone else meanwhile would still look held here. A request given up on may still reach
//! Redis later and extend a lock already reported lost: that only delays the next holder (by at
//! most a lease, or until the guard's release deletes it), it never lets two in.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use deadpool_redis::redis::Script;
use tokio::sync::{Notify, watch};

use crate::LockError;
use crate::redis::{Conn, Requests, Whole, millis};

/// Renews many locks at once. KEYS: locks. ARGV: owner and lease (ms) per key, in key order.
/// Returns 1 per lock still held by that owner (now renewed), 0 per lock it no longer holds.
static RENEW_ALL: Whole = Whole(
    r"
local renewed = {}
for i, key in ipairs(KEYS) do
  if redis.call('hexists', key, ARGV[2 * i - 1]) == 1 then
    redis.call('pexpire', key, ARGV[2 * i])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed",
);

/// Re-enters a lock the owner holds. KEYS: lock. ARGV: owner, lease (ms). Returns 1, or 0 if
/// the owner no longer holds it.
static REENTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0",
    )
});

/// Pause before retrying a renewal round that failed to reach Redis.
const RETRY: Duration = Duration::from_millis(100);

type Id = (String, String);

/// The locks one client holds, by `(key, owner)`.
#[derive(Default)]
pub(super) struct Renewals {
    held: Mutex<HashMap<Id, Entry>>,
    changed: Notify,
}

struct Entry {
    lease: Duration,
    /// Guards alive for this acquisition: 1 plus re-entries.
    holds: usize,
    lost: watch::Sender<bool>,
    /// When the last grant or renewal that Redis confirmed was sent.
    confirmed: Instant,
    /// When the next renewal is due; never later than [`Entry::expires`].
    due: Instant,
}

impl Entry {
    /// When the last confirmed lease runs out: from then on the lock may be someone else's.
    fn expires(&self) -> Instant {
        self.confirmed + self.lease
    }
}

impl Renewals {
    /// Starts renewing a lock granted by a request sent at `sent`; returns its `lost` flag.
    pub(super) fn register(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        sent: Instant,
    ) -> watch::Receiver<bool> {
        let (lost, lost_rx) = watch::channel(false);
        let entry = Entry {
            lease,
            holds: 1,
            lost,
            confirmed: sent,
            due: sent + lease / 3,
        };
        self.lock()
            .insert((key.to_owned(), owner.to_owned()), entry);
        self.changed.notify_one();
        lost_rx
    }

    /// Counts one more guard for a held lock; its `lost` flag and lease, or `None` if this
    /// client no longer renews it.
    fn reenter(&self, key: &str, owner: &str) -> Option<(watch::Receiver<bool>, Duration)> {
        let mut held = self.lock();
        let entry = held.get_mut(&(key.to_owned(), owner.to_owned()))?;
        entry.holds += 1;
        Some((entry.lost.subscribe(), entry.lease))
    }

    /// Enters `owner`'s lock of `key` once more, in Redis and here: its `lost` flag and lease,
    /// or `None` if this client does not renew that lock or Redis says the owner no longer
    /// holds it. The local count is undone if this future is dropped or fails: a count that
    /// never comes down would renew the lock for as long as the client lives.
    pub(super) async fn reenter_held(
        &self,
        conn: &Conn,
        requests: &Requests,
        key: &str,
        owner: &str,
    ) -> Result<Option<(watch::Receiver<bool>, Duration)>, LockError> {
        let Some((lost, lease)) = self.reenter(key, owner) else {
            return Ok(None);
        };
        let pending = PendingHold {
            renewals: self,
            key,
            owner,
        };
        requests.add(1);
        let entered: i64 = conn
            .invoke(REENTER.key(key).arg(owner).arg(millis(lease)))
            .await?;
        if entered != 1 {
            return Ok(None);
        }
        std::mem::forget(pending);
        Ok(Some((lost, lease)))
    }

    /// Counts one guard less; the last one stops the renewal.
    pub(super) fn release(&self, key: &str, owner: &str) {
        let mut held = self.lock();
        let id = (key.to_owned(), owner.to_owned());
        if let Some(entry) = held.get_mut(&id) {
            entry.holds -= 1;
            if entry.holds == 0 {
                held.remove(&id);
            }
        }
    }

    /// How many locks are being renewed.
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    /// The client is going away and renewal stops: each lock's `lost` fires when its last
    /// confirmed lease runs out (needs a running Tokio runtime; otherwise they never fire).
    pub(super) fn abandon(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for (_, entry) in self.lock().drain() {
            let end = entry.expires();
            runtime.spawn(async move {
                tokio::time::sleep_until(end.into()).await;
                let _ = entry.lost.send(true);
            });
        }
    }

    /// The renewal task: sleeps until the next lock falls due, renews, repeats. Runs until
    /// aborted.
    pub(super) async fn run(&self, conn: &Conn, requests: &Requests) {
        loop {
            let changed = self.changed.notified();
            match self.next_due() {
                Some(due) if due <= Instant::now() => self.renew_due(conn, requests).await,
                Some(due) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(due.into()) => {}
                        () = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.lock().values().map(|e| e.due).min()
    }

    async fn renew_due(&self, conn: &Conn, requests: &Requests) {
        let now = Instant::now();
        let (batch, deadline) = {
            let mut held = self.lock();
            Self::expire(&mut held, now);
            let batch: Vec<(Id, Duration)> = held
                .iter()
                .filter(|(_, e)| e.due <= now + e.lease / 6)
                .map(|(id, e)| (id.clone(), e.lease))
                .collect();
            // The round must be over before the first lease it could save runs out — of any
            // held lock, not only those in this round — or that lock's loss would wait for it.
            let deadline = held.values().map(Entry::expires).min();
            (batch, deadline)
        };
        let Some(deadline) = deadline.filter(|_| !batch.is_empty()) else {
            return;
        };
        // Sent whole: a renewal is one round trip even on its client's first (see [`Whole`]).
        let keys: Vec<&str> = batch.iter().map(|((key, _), _)| key.as_str()).collect();
        let mut script = RENEW_ALL.call(&keys);
        for ((_, owner), lease) in &batch {
            script.arg(owner).arg(millis(*lease));
        }
        let sent = Instant::now();
        requests.add(1);
        let outcome: Result<Vec<i64>, String> =
            match tokio::time::timeout_at(deadline.into(), conn.query(&script)).await {
                Ok(answer) => answer.map_err(|e| e.to_string()),
                Err(_) => Err("no answer before the first lease ran out".to_owned()),
            };
        let mut held = self.lock();
        match outcome {
            Ok(renewed) => {
                for ((id, _), renewed) in batch.into_iter().zip(renewed) {
                    // Released while the round was in flight: nothing to do.
                    let Some(entry) = held.get_mut(&id) else {
                        continue;
                    };
                    if renewed == 1 {
                        entry.confirmed = sent;
                        entry.due = sent + entry.lease / 3;
                    } else if let Some(entry) = held.remove(&id) {
                        tracing::warn!(key = %id.0, "watchdog: lock lost, renewal refused");
                        let _ = entry.lost.send(true);
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "watchdog: renewal round failed");
                let now = Instant::now();
                Self::expire(&mut held, now);
                for (id, _) in batch {
                    if let Some(entry) = held.get_mut(&id) {
                        entry.due = (now + RETRY).min(entry.expires());
                    }
                }
            }
        }
    }

    /// Reports every lock whose last confirmed lease has run out as lost, and stops renewing it.
    fn expire(held: &mut HashMap<Id, Entry>, now: Instant) {
        held.retain(|(key, _), entry| {
            let alive = now < entry.expires();
            if !alive {
                tracing::warn!(%key, "watchdog: lock lost, no renewal confirmed for a lease");
                let _ = entry.lost.send(true);
            }
            alive
        });
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Id, Entry>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A re-entry counted locally but not yet confirmed by Redis.
struct PendingHold<'a> {
    renewals: &'a Renewals,
    key: &'a str,
    owner: &'a str,
}

impl Drop for PendingHold<'_> {
    fn drop(&mut self) {
        self.renewals.release(self.key, self.owner);
    }
}
