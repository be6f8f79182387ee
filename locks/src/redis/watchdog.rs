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
//! a task that releases and immediately re-acquires cannot starve the others.
//!
//! **What a hand-off costs.** Across clients: the unlock, the message, the winning attempt —
//! about 2.5 round trips between a release and the next grant, two requests per grant. Within
//! one client (its tasks contending with each other), the release names the client's next
//! waiter to the unlock script, which grants the lock to it in the same step if no other client
//! listens on the release channel (nobody else waits, so nobody is passed over; when someone
//! does, the release is published and every client's front waiter tries, as across clients).
//! The waiter finds the guard when it wakes: one round trip per hand-off, one request per
//! grant. The release runs in a task of its own so that a caller who stops waiting cannot lose
//! a grant made to someone else; a waiter gone by then has its guard dropped, which releases
//! the lock again (and hands it on). If the unlock's answer is lost, the waiter is told so and
//! its next attempt claims the lock if the script did name it (`LOCK`'s claim).
//!
//! The whole acquire gives
//! up at the end of its budget plus one attempt's grace ([`AcquireOptions::give_up_at`]): after a
//! server dies, the connection manager reconnects with growing pauses (≈ 6 s in all) and every
//! request waits for that, so an unbounded attempt would overrun any budget. An attempt given
//! up on may still be granted by Redis; nobody renews that grant, so it lapses within a lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::hash_client::{Background, HashClient};
use super::replicated::Replication;
use super::wakeups::{Handed, Next, Ticket, Wakeups};
use super::{Whole, fence_key, millis};
use crate::options::budgeted;
use crate::{AcquireOptions, Acquiring, DistributedLock, Guard, Held, LockError, new_owner_id};

/// Grants a free lock to a new owner. KEYS: lock, fence. ARGV: owner, lease (ms), claim.
/// Returns `{1, token}`, or `{0, pttl}` while someone holds it. With claim `1`, a lock that
/// already names this owner (handed over by a release whose answer was lost) is its grant: its
/// lease starts again and the token is the fence's current value (no grant since drew one).
static LOCK: Whole = Whole(
    r"
if redis.call('exists', KEYS[1]) == 0 then
  local token = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end
if ARGV[3] == '1' and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('get', KEYS[2]))}
end
return {0, redis.call('pttl', KEYS[1])}",
);

/// Leaves the lock once. KEYS: lock, fence. ARGV: owner, channel, lease (ms), next owner (or
/// empty), next owner's lease (ms). Returns `{-1}` if the owner does not hold it, else `{holds
/// left}`; at 0 the lock is freed: handed over to the next owner, `{0, token}`, if one is named
/// and no other client listens on the channel (only this client waits, so nobody else is
/// passed over); else deleted and the release published, `{0}`.
static UNLOCK: Whole = Whole(
    r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return {-1}
end
local left = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if left > 0 then
  redis.call('pexpire', KEYS[1], ARGV[3])
  return {left}
end
redis.call('del', KEYS[1])
if ARGV[4] ~= '' and redis.call('pubsub', 'numsub', ARGV[2])[2] <= 1 then
  local token = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], ARGV[4], 1)
  redis.call('pexpire', KEYS[1], ARGV[5])
  return {0, token}
end
redis.call('publish', ARGV[2], 'released')
return {0}",
);

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
        let held = |lease| {
            WatchdogHeld::new(&self.shared, guard.key(), guard.owner(), lease) as Box<dyn Held>
        };
        self.shared.client.reenter(guard, held).await
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
    /// One attempt as `owner`; `claim`: a release may have handed the lock to `owner` already.
    async fn try_lock(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        lease: Duration,
        claim: bool,
    ) -> Result<Attempt, LockError> {
        self.connected().await?;
        let sent = Instant::now();
        self.requests.add(1);
        let (granted, value): (i64, i64) = self
            .conn
            .query(
                LOCK.call(&[key, &fence_key(key)])
                    .arg(owner)
                    .arg(millis(lease))
                    .arg(if claim { "1" } else { "0" }),
            )
            .await?;
        if granted == 0 {
            return Ok(Attempt::Held(match u64::try_from(value) {
                Ok(ms) if ms > 0 => Duration::from_millis(ms + 1),
                _ => UNKNOWN_TTL_RETRY,
            }));
        }
        let lost = self.renewals.register(key, owner, lease, sent);
        let held = WatchdogHeld::new(self, key, owner, lease);
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
        let timeout = || LockError::waited_since(key, start);
        let remaining = || budget.saturating_sub(start.elapsed());
        // One owner name for the whole acquisition: a release of this client may hand the lock
        // over to it by that name while it waits.
        let owner = new_owner_id();
        let lease = options.lease;
        let (mut ticket, mut retry_in): (Ticket, Duration);
        if budget > Duration::ZERO && self.wakeups.has_waiters(key) {
            // Others of this client wait already: queue behind them, try when woken.
            ticket = self.wakeups.enqueue_handing(key, &owner, lease);
            retry_in = lease;
        } else {
            let ttl = match self.try_lock(key, &owner, lease, false).await? {
                Attempt::Granted(guard) => return Ok(guard),
                Attempt::Held(_) if budget.is_zero() => return Err(timeout()),
                Attempt::Held(ttl) => ttl,
            };
            // Subscribe, then try again: a release between the first attempt and the
            // subscription would otherwise go unheard.
            ticket = self.wakeups.enqueue_handing(key, &owner, lease);
            let subscribed = ticket.subscribed();
            let _ = tokio::time::timeout(ttl.min(remaining()), subscribed).await;
            match self.try_lock(key, &owner, lease, false).await? {
                Attempt::Granted(guard) => {
                    ticket.granted();
                    return Ok(guard);
                }
                Attempt::Held(ttl) => retry_in = ttl,
            }
        }
        let mut woken = false;
        loop {
            let claim = match ticket.take_handed() {
                Some(Handed::Granted(guard)) => {
                    ticket.granted();
                    return Ok(guard);
                }
                Some(Handed::InDoubt) => true,
                // Woken, or the holder's lease ran out: try.
                None if woken => false,
                None if remaining().is_zero() => return Err(timeout()),
                None => {
                    tokio::select! {
                        () = ticket.woken() => {}
                        () = tokio::time::sleep(retry_in.min(remaining())) => {}
                    }
                    woken = true;
                    continue;
                }
            };
            woken = false;
            match self.try_lock(key, &owner, lease, claim).await? {
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

impl WatchdogHeld {
    /// Leaves the lock once; at the last hold, hands it over to this client's next waiter if
    /// the unlock script may (see [`UNLOCK`]).
    async fn release_now(self: Box<Self>) -> Result<bool, LockError> {
        let shared = &self.shared;
        shared.renewals.release(&self.key, &self.owner);
        // A lock that must be confirmed by replicas is never handed over in the unlock: the
        // next holder's grant goes through `try_lock`, which waits for the confirmation.
        let next: Option<Next> = match shared.replication {
            None => shared.wakeups.next_in_line(&self.key),
            Some(_) => None,
        };
        let (next_owner, next_lease) = next
            .as_ref()
            .map_or(("", 0), |n| (n.owner.as_str(), millis(n.lease)));
        let sent = Instant::now();
        shared.requests.add(1);
        let answer: Result<Vec<i64>, LockError> = shared
            .conn
            .query(
                UNLOCK
                    .call(&[&self.key, &fence_key(&self.key)])
                    .arg(&self.owner)
                    .arg(shared.wakeups.channel(&self.key))
                    .arg(millis(self.lease))
                    .arg(next_owner)
                    .arg(next_lease),
            )
            .await;
        let next = match (answer, next) {
            (Ok(answer), next) => match (answer.as_slice(), next) {
                ([left], _) => return Ok(*left >= 0),
                ([0, token], Some(next)) => (next, *token),
                (other, _) => {
                    return Err(LockError::Unavailable(
                        format!("unexpected answer to the unlock script: {other:?}").into(),
                    ));
                }
            },
            (Err(e), Some(next)) => {
                // Handed over or not, nobody can tell: the waiter claims it if it is its own.
                let _ = shared
                    .wakeups
                    .hand_over(&self.key, next.id, Handed::InDoubt);
                return Err(e);
            }
            (Err(e), None) => return Err(e),
        };
        let ((next, token), key) = (next, self.key.as_str());
        // Granted by a request sent at `sent`: the new holder's lease counts from then.
        let lost = shared.renewals.register(key, &next.owner, next.lease, sent);
        let held = WatchdogHeld::new(shared, key, &next.owner, next.lease);
        let guard = Guard::new(key, next.owner, token as u64, lost, held);
        // The waiter left meanwhile: dropping its guard releases the lock (handing it on).
        if let Err(untaken) = shared
            .wakeups
            .hand_over(key, next.id, Handed::Granted(guard))
        {
            drop(untaken);
        }
        Ok(true)
    }
}

impl Held for WatchdogHeld {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        // In a task of its own: a release that hands the lock over must deliver the grant even
        // if its caller stops waiting for it.
        let releasing = tokio::spawn(self.release_now());
        Box::pin(async move { releasing.await.map_err(LockError::unavailable)? })
    }
}

impl DistributedLock for RedisWatchdogLock {
    fn backend(&self) -> &'static str {
        "redis-watchdog"
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        budgeted(key, options, self.shared.acquire(key, options))
    }

    fn backend_requests(&self) -> u64 {
        self.shared.requests.get()
    }
}
