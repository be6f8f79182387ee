//! A Redisson-like lock: a lease renewed by a watchdog while the holder lives, reentrant,
//! waiters woken by pub/sub.
//!
//! **Layout in Redis.** The lock is a hash `owner → hold count` with a TTL, so the same
//! acquisition can re-enter ([`RedisWatchdogLock::reenter`]) and must release as often as it
//! entered. `<key>:fence` is `INCR`ed on each fresh grant (not on re-entry, which keeps the
//! guard's token) in the same Lua script as the grant.
//!
//! **Why it is safe across long critical sections.** The lease is not a guess about the
//! critical section any more: while the guard lives, the client's watchdog (one task per
//! client, see `renewal.rs`) renews the lease every third of it, so a slow holder keeps
//! its lock, and a holder whose process dies stops renewing and loses it within one lease. A
//! renewal refused by Redis, or impossible for a whole lease, fires the guard's `lost()` — at
//! the latest one lease after the last renewal Redis confirmed, even while the connection hangs
//! or reconnects (each renewal request is bounded by that deadline).
//! Unlock is a script that decrements this owner's count and deletes the hash only at zero, so
//! it never touches another owner's lock.
//!
//! **Why it is still not safe in every case.** The lock only lives while the *process* lives
//! and reaches Redis: a holder paused longer than the lease (a stop-the-world pause, SIGSTOP)
//! cannot renew, loses the lock, and resumes believing it holds it until `lost()` tells it; a
//! failover to a replica that missed the grant breaks exclusion as for the plain lock (and the
//! promoted replica's fencing counter may repeat the token): [`RedisWatchdogLock::connect_replicated`]
//! makes each grant wait for replicas to confirm it, and gives back one they do not. Use the
//! fencing token. A leaked guard (`mem::forget`) keeps its lock renewed as long as the client
//! lives.
//!
//! **How it waits.** A failed attempt returns the holder's remaining `PTTL`. The waiter queues
//! locally and sleeps until woken by the release message (`wakeups.rs`: one subscriber
//! connection per client, a FIFO per key, one waiter woken per release) or until that `PTTL`
//! ends, whichever comes first: no polling, and a crashed holder delays waiters by at most its
//! lease. A newcomer does not barge past waiters of the same client: it queues behind them, so
//! a task that releases and immediately re-acquires cannot starve the others. A hand-off costs
//! about 2.5 round trips: the unlock, the message, the winning attempt. The whole acquire gives
//! up at the end of its budget plus one attempt's grace ([`AcquireOptions::give_up_at`]): after a
//! server dies, the connection manager reconnects with growing pauses (≈ 6 s in all) and every
//! request waits for that, so an unbounded attempt would overrun any budget. An attempt given
//! up on may still be granted by Redis; nobody renews that grant, so it lapses within a lease.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use deadpool_redis::redis::Script;
use futures::future::BoxFuture;

use super::hash_client::{Background, HashClient};
use super::replicated::Replication;
use super::wakeups::{Ticket, Wakeups};
use super::{fence_key, millis};
use crate::options::within_budget;
use crate::{AcquireOptions, DistributedLock, Guard, Held, LockError, new_owner_id};

/// Grants a free lock to a new owner. KEYS: lock, fence. ARGV: owner, lease (ms).
/// Returns `{1, token}`, or `{0, pttl}` while someone holds it.
static LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('exists', KEYS[1]) == 0 then
  local token = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end
return {0, redis.call('pttl', KEYS[1])}",
    )
});

/// Leaves the lock once. KEYS: lock. ARGV: owner, channel, lease (ms). Returns -1 if the owner
/// does not hold it, else the holds left; at 0 deletes it and publishes the release.
static UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local left = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if left > 0 then
  redis.call('pexpire', KEYS[1], ARGV[3])
  return left
end
redis.call('del', KEYS[1])
redis.call('publish', ARGV[2], 'released')
return 0",
    )
});

/// Retry delay when the holder's remaining lease is unknown (no TTL, or gone meanwhile).
const UNKNOWN_TTL_RETRY: Duration = Duration::from_millis(10);

/// A Redisson-like lock client; see the module docs. Dropping it stops its watchdog and its
/// subscriber: locks it still holds then lapse within their lease (their guards' `lost()`
/// fires then).
pub struct RedisWatchdogLock {
    shared: Arc<Shared>,
    _background: Background,
}

struct Shared {
    client: Arc<HashClient>,
    /// Replicas that must confirm each grant before `acquire` returns it.
    replication: Option<Replication>,
}

impl std::ops::Deref for Shared {
    type Target = HashClient;

    fn deref(&self) -> &HashClient {
        &self.client
    }
}

enum Attempt {
    Granted(Guard),
    /// Held by someone else for about this much longer.
    Held(Duration),
}

impl RedisWatchdogLock {
    /// A lock client for the Redis at `url`: one multiplexed command connection, one subscriber
    /// connection, both connected lazily. Must be called inside a Tokio runtime (it starts the
    /// client's watchdog and subscriber tasks).
    pub fn connect(url: &str) -> Result<RedisWatchdogLock, LockError> {
        Self::connect_with(url, None)
    }

    /// [`RedisWatchdogLock::connect`], with every grant confirmed by `replication.replicas`
    /// replicas (`WAIT`) before `acquire` returns it. A grant too few replicas confirm in time
    /// is given back and the acquire fails with [`LockError::Unreplicated`]: the caller learns
    /// that a failover could hand its lock to someone else, and does not act on it (see
    /// [`Replication`] for the cost and the limits).
    pub fn connect_replicated(
        url: &str,
        replication: Replication,
    ) -> Result<RedisWatchdogLock, LockError> {
        Self::connect_with(url, Some(replication))
    }

    fn connect_with(
        url: &str,
        replication: Option<Replication>,
    ) -> Result<RedisWatchdogLock, LockError> {
        let (client, background) = HashClient::start(url, Wakeups::released)?;
        Ok(RedisWatchdogLock {
            shared: Arc::new(Shared {
                client,
                replication,
            }),
            _background: background,
        })
    }

    /// Enters the lock `guard` holds once more (same owner, same fencing token), as a
    /// reentrant mutex would; each returned guard must be released too, and the lock is freed
    /// when the last one is. `Ok(None)` if `guard` no longer holds the lock or was not acquired
    /// through this client.
    pub async fn reenter(&self, guard: &Guard) -> Result<Option<Guard>, LockError> {
        let shared = &self.shared;
        let (key, owner) = (guard.key(), guard.owner());
        let Some((lost, lease)) = shared.reenter(key, owner).await? else {
            return Ok(None);
        };
        let held = WatchdogHeld::new(shared, key, owner, lease);
        Ok(Some(Guard::new(
            key,
            owner,
            guard.fencing_token(),
            lost,
            held,
        )))
    }

    /// Locks this client is renewing now (a leak shows up here).
    pub fn renewing(&self) -> usize {
        self.shared.renewals.len()
    }

    /// Local waiters queued now, over all keys (a cancelled waiter that stayed shows up here).
    pub fn waiting(&self) -> usize {
        self.shared.wakeups.len()
    }
}

impl Shared {
    async fn try_lock(self: &Arc<Self>, key: &str, lease: Duration) -> Result<Attempt, LockError> {
        let owner = new_owner_id();
        let sent = Instant::now();
        self.requests.add(1);
        let (granted, value): (i64, i64) = self
            .conn
            .invoke(
                LOCK.key(key)
                    .key(fence_key(key))
                    .arg(&owner)
                    .arg(millis(lease)),
            )
            .await?;
        if granted == 0 {
            return Ok(Attempt::Held(match u64::try_from(value) {
                Ok(ms) if ms > 0 => Duration::from_millis(ms + 1),
                _ => UNKNOWN_TTL_RETRY,
            }));
        }
        let lost = self.renewals.register(key, &owner, lease, sent);
        let held = WatchdogHeld::new(self, key, &owner, lease);
        let guard = Guard::new(key, owner, value as u64, lost, held);
        match self.replication {
            None => Ok(Attempt::Granted(guard)),
            Some(replication) => replication
                .confirm(guard, &self.conn, &self.requests, lease)
                .await
                .map(Attempt::Granted),
        }
    }

    async fn acquire(
        self: &Arc<Self>,
        key: &str,
        options: AcquireOptions,
    ) -> Result<Guard, LockError> {
        let start = Instant::now();
        let budget = options.wait.unwrap_or(Duration::ZERO);
        let timeout = || LockError::Timeout {
            key: key.to_owned(),
            waited: start.elapsed(),
        };
        let remaining = || budget.saturating_sub(start.elapsed());
        let (mut ticket, mut retry_in): (Ticket, Duration);
        if budget > Duration::ZERO && self.wakeups.has_waiters(key) {
            // Others of this client wait already: queue behind them, try when woken.
            ticket = self.wakeups.enqueue(key);
            retry_in = options.lease;
        } else {
            let ttl = match self.try_lock(key, options.lease).await? {
                Attempt::Granted(guard) => return Ok(guard),
                Attempt::Held(_) if budget.is_zero() => return Err(timeout()),
                Attempt::Held(ttl) => ttl,
            };
            // Subscribe, then try again: a release between the first attempt and the
            // subscription would otherwise go unheard.
            ticket = self.wakeups.enqueue(key);
            let subscribed = ticket.subscribed();
            let _ = tokio::time::timeout(ttl.min(remaining()), subscribed).await;
            match self.try_lock(key, options.lease).await? {
                Attempt::Granted(guard) => {
                    ticket.granted();
                    return Ok(guard);
                }
                Attempt::Held(ttl) => retry_in = ttl,
            }
        }
        loop {
            if remaining().is_zero() {
                return Err(timeout());
            }
            tokio::select! {
                () = ticket.woken() => {}
                () = tokio::time::sleep(retry_in.min(remaining())) => {}
            }
            match self.try_lock(key, options.lease).await? {
                Attempt::Granted(guard) => {
                    ticket.granted();
                    return Ok(guard);
                }
                Attempt::Held(ttl) => retry_in = ttl,
            }
        }
    }
}

struct WatchdogHeld {
    shared: Arc<Shared>,
    key: String,
    owner: String,
    lease: Duration,
}

impl WatchdogHeld {
    fn new(shared: &Arc<Shared>, key: &str, owner: &str, lease: Duration) -> Box<WatchdogHeld> {
        Box::new(WatchdogHeld {
            shared: Arc::clone(shared),
            key: key.to_owned(),
            owner: owner.to_owned(),
            lease,
        })
    }
}

impl Held for WatchdogHeld {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        Box::pin(async move {
            let shared = &self.shared;
            shared.renewals.release(&self.key, &self.owner);
            shared.requests.add(1);
            let left: i64 = shared
                .conn
                .invoke(
                    UNLOCK
                        .key(&self.key)
                        .arg(&self.owner)
                        .arg(shared.wakeups.channel(&self.key))
                        .arg(millis(self.lease)),
                )
                .await?;
            Ok(left >= 0)
        })
    }
}

impl DistributedLock for RedisWatchdogLock {
    fn backend(&self) -> &'static str {
        "redis-watchdog"
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        options: AcquireOptions,
    ) -> BoxFuture<'a, Result<Guard, LockError>> {
        Box::pin(within_budget(
            key,
            options,
            self.shared.acquire(key, options),
        ))
    }

    fn backend_requests(&self) -> u64 {
        self.shared.requests.get()
    }
}
