//! etcd lock: the revision-ordered queue of `clientv3/concurrency.Mutex`, written out by hand.
//!
//! # Why not etcd's own `Lock` RPC
//! etcd ships a lock service (`v3lock`) that runs this same recipe on the server. It names the
//! contender's key after the *lease*, so two acquisitions sharing a lease are one owner: two
//! tasks of one client would both "hold" the lock. It would need a lease per acquisition
//! (an extra consensus write per grant), and it hides the waiting inside one long call, which
//! is what this project wants to show and count. So the recipe is written here.
//!
//! # The recipe
//! 1. Each acquisition puts `/locks/<key>/<owner>` (`<owner>` random per acquisition) attached
//!    to this client's lease. The put's revision is the key's *create revision*: etcd's global,
//!    strictly increasing write counter, so the keys under the prefix form a queue.
//! 2. Range the prefix for the key with the largest create revision *below* ours, reading our
//!    own key in the same transaction (if the lease took it, there is no place to wait in).
//!    No key below ours: the lock is ours.
//! 3. Otherwise watch that predecessor's key from the revision of the range answer onwards (so
//!    a deletion between the range and the watch is still delivered), and re-range once it is
//!    deleted — the predecessor may have given up rather than been granted. Each waiter watches
//!    one key: a release wakes one waiter, and waiting sends nothing (the tests count).
//! 4. Wait budget spent, or `acquire` dropped: delete our key (from `Drop`, on the runtime).
//!    A put whose reply was lost is covered the same way: the key's name is known before the
//!    put, so it can be deleted by name whether or not the put landed. That delete waits for
//!    the put's outcome (the put runs in a task of its own that outlives a dropped `acquire`):
//!    sent while the put is in flight, it could commit first and leave the put's key behind.
//! 5. Every delete — release, withdrawal, cleanup — is retried until etcd answers it or the
//!    lease is known gone (`delete.rs`), each attempt bounded by [`ATTEMPT`] (after a leader's
//!    death, etcd would hold it for 7 s, and every waiter with it). A delete lost with a broken connection would otherwise
//!    leave a key that the reconnected client keeps renewing with its lease: the lock would
//!    stay blocked for as long as the process lives.
//!
//! # Why it is safe, and where it stops being
//! Every put, delete and lease grant is committed by Raft on a quorum before the reply, and
//! revisions are totally ordered, so a grant survives any failover and two contenders can never
//! both see "no key before mine". Like ZooKeeper's session, the lease frees a crashed holder's
//! lock with no clock in the client. And like it, it cannot stop a holder that stalls or is cut
//! off for longer than the lease's remaining TTL: the server expires the lease, deletes the key,
//! the next waiter's watch fires and it is granted — while the old holder's renewal task, in the
//! same stalled process or behind the same cut, can only report the loss afterwards (the
//! partitioned-holder test shows the order). Hence the fencing token.
//!
//! # Fencing token: the key's create revision
//! Grant order is create-revision order, and revisions never repeat or go back (they survive
//! compaction, restarts and leader changes), so the token strictly increases per lock name.
//!
//! # The lease: one per client and TTL, kept alive in the background
//! All keys of one [`EtcdLock`] with the same TTL hang off one lease, renewed every TTL/3 by one
//! task: waiting and holding cost no renewals per lock, and a dead client's keys all vanish
//! when its lease expires. etcd leases are whole seconds, so the TTL is `ceil(options.lease)`
//! seconds (at least 1; the server may raise it to its minimum, ≈ 2 s by default): a crashed
//! holder's lock comes free at most that long after its last renewal (plus etcd's expiry sweep,
//! every 500 ms), like the other leased locks. A TTL of 1.5 × the lease would let a grant rely on
//! a renewal up to TTL/3 old, but then blocks everyone for up to 1.5 leases after a crash.
//! Instead a grant makes sure the lease lasts `options.lease` from when the acquire began: it
//! does once a renewal (or the grant of the lease) sent since then was acknowledged; if none
//! was, the grant renews at once and waits for that renewal before handing out the guard — one
//! keep-alive round trip on the lease's stream, no consensus write. That also covers renewals
//! that failed for a while (a broken connection, retried every 200 ms, each attempt bounded by
//! [`ATTEMPT`]): a lock granted on the old renewal would expire early with no one having
//! stalled. How long the lease lasts is the client's own reckoning: the last acknowledged
//! renewal's TTL, counted from when that renewal was *sent*, so the server's expiry is never
//! earlier than ours. `lost()` fires when the lease is known gone: a renewal answered "not
//! found", or that reckoning ran out. Dropping the [`EtcdLock`] stops the renewals without
//! revoking, as a crash would: locks of leaked guards end with the lease.
//!
//! # Wait budget
//! The etcd client sets no deadline on requests: on a connection that went silent, a put or a
//! range waits forever. An `acquire` therefore gives up at the end of its budget plus one
//! attempt's grace ([`AcquireOptions::give_up_at`]), and its key is cleaned up as for a dropped
//! `acquire` (4 and 5 above).
//!
//! Requests counted: grants, renewals, puts, ranges, watch streams opened, deletes.

mod delete;
mod lease;
mod queue;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::Client;

use crate::options::budgeted;
use crate::{AcquireOptions, Acquiring, DistributedLock, Guard, LockError};
use lease::Lease;
use queue::Contender;

/// A bound on one delete or lease renewal, which are retried: far above a commit's time, far
/// below etcd's own request timeout (5 s + two election timeouts, 7 s by default). A follower
/// holds a write it forwarded to a leader that has just died until that timeout, while the
/// surviving majority elects a new leader in about a second.
const ATTEMPT: Duration = Duration::from_secs(1);

/// The error of an attempt abandoned after [`ATTEMPT`].
fn timed_out() -> etcd_client::Error {
    etcd_client::Error::IoError(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {ATTEMPT:?}"),
    ))
}

/// Every lock's keys live under this prefix.
pub const LOCK_ROOT: &str = "/locks/";

/// The prefix under which contenders for lock `key` queue: `/locks/<key>/`, with `%` and `/`
/// escaped so that one lock's prefix never contains another's keys.
pub fn lock_prefix(key: &str) -> String {
    format!(
        "{LOCK_ROOT}{}/",
        key.replace('%', "%25").replace('/', "%2F")
    )
}

/// The lease TTL for a requested lease: whole seconds, `ceil(lease)`, at least 1.
pub fn lease_ttl(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis().div_ceil(1000))
        .unwrap_or(i64::MAX)
        .max(1)
}

/// An etcd lock service over one client connection.
pub struct EtcdLock {
    client: Client,
    leases: tokio::sync::Mutex<HashMap<i64, Arc<Lease>>>,
    requests: Arc<AtomicU64>,
}

impl EtcdLock {
    /// Connects to the cluster at `endpoints` (`http://host:port`).
    pub async fn connect(endpoints: &[String]) -> Result<EtcdLock, LockError> {
        let client = Client::connect(endpoints, None)
            .await
            .map_err(LockError::unavailable)?;
        Ok(EtcdLock {
            client,
            leases: tokio::sync::Mutex::new(HashMap::new()),
            requests: Arc::new(AtomicU64::new(0)),
        })
    }

    /// This client's live lease of `ttl` seconds; a new one if there is none or it was lost.
    async fn lease(&self, ttl: i64) -> Result<Arc<Lease>, LockError> {
        let mut leases = self.leases.lock().await;
        if let Some(lease) = leases.get(&ttl).filter(|lease| !lease.is_lost()) {
            return Ok(Arc::clone(lease));
        }
        let lease = Arc::new(Lease::grant(self.client.clone(), ttl, self.requests.clone()).await?);
        leases.insert(ttl, Arc::clone(&lease));
        Ok(lease)
    }

    async fn acquire_inner(&self, key: &str, options: AcquireOptions) -> Result<Guard, LockError> {
        let started = Instant::now();
        let deadline = options.wait.map(|wait| started + wait);
        let lease = self.lease(lease_ttl(options.lease)).await?;
        let contender =
            Contender::enqueue(self.client.clone(), key, &lease, self.requests.clone()).await?;
        loop {
            let (predecessor, revision) = match contender.predecessor().await? {
                None => return contender.into_guard(lease, started, options.lease).await,
                Some(found) => found,
            };
            let timed_out = || LockError::waited_since(key, started);
            let Some(deadline) = deadline.filter(|d| Instant::now() < *d) else {
                contender.withdraw().await;
                return Err(timed_out());
            };
            let deleted = tokio::select! {
                deleted = contender.deleted(&predecessor, revision) => deleted?,
                () = tokio::time::sleep_until(deadline.into()) => false,
                () = lease.lost() => {
                    return Err(LockError::Unavailable(
                        "the etcd lease expired while waiting for the lock".into(),
                    ));
                }
            };
            if !deleted && Instant::now() >= deadline {
                contender.withdraw().await;
                return Err(timed_out());
            }
        }
    }
}

impl DistributedLock for EtcdLock {
    fn backend(&self) -> &'static str {
        "etcd"
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        budgeted(key, options, self.acquire_inner(key, options))
    }

    fn backend_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_ttl_is_the_requested_lease_in_whole_seconds() {
        assert_eq!(lease_ttl(Duration::ZERO), 1);
        assert_eq!(lease_ttl(Duration::from_millis(500)), 1);
        assert_eq!(lease_ttl(Duration::from_secs(1)), 1);
        assert_eq!(lease_ttl(Duration::from_secs(10)), 10);
        assert_eq!(lease_ttl(Duration::from_millis(10_001)), 11);
    }

    #[test]
    fn one_locks_prefix_never_holds_another_locks_keys() {
        assert_eq!(lock_prefix("product:42"), "/locks/product:42/");
        assert!(!lock_prefix("a/b").starts_with(&lock_prefix("a")));
        assert_ne!(lock_prefix("a/b"), lock_prefix("a%2Fb"));
    }
}
