//! A fair Redis lock in the manner of Redisson's `RedissonFairLock`: first come, first served
//! across every client, each waiter woken when its turn comes, a lease renewed by the same
//! watchdog as `redis-watchdog`, and the same fencing token.
//!
//! **Layout in Redis.** The lock is the watchdog lock's hash `owner → hold count` with a TTL
//! (so the watchdog's renewal and re-entry serve it unchanged: `renewal.rs`), and
//! `<key>:fence` is `INCR`ed in the granting script. Beside it, `<key>:queue` is the wait queue
//! (a list of owners, oldest first) and `<key>:timeouts` a sorted set of each waiter's timeout.
//! All of it is changed only by the Lua scripts of `fair/scripts.rs`.
//!
//! **Why it is safe — while leases hold, and fenced when they do not.** A grant is the same
//! atomic script step as the watchdog lock's: the hash must not exist, and the token is drawn
//! in the same script. The queue only decides *who* may take a free lock, never lets two take
//! it. A holder is renewed every third of its lease while its client lives, and its `lost()`
//! fires when a renewal is refused or impossible for a lease; past that, as for every lease
//! lock, only the fencing token protects the resource from a paused holder that woke up late.
//!
//! **Why it is fair.** A free lock goes to the queue's head only; everybody else who asks joins
//! the back (once: asking again only refreshes the timeout). The order is the order in which
//! Redis ran the waiters' first attempts, whichever client they came from, so a client close to
//! Redis, or one that releases and asks again at once, cannot barge past older waiters — the
//! watchdog lock lets them, and with 16 clients its grants pile up on a few of them.
//!
//! **How it waits, and why there is no herd.** The unlock script publishes the head's name on
//! the channel of the head's own client (`locks:turn:<client>:<key>`, see `wakeups.rs`): one
//! message, one client, one waiter woken, which then takes the lock. Each waiter also tries
//! again at the latest when the script said (the holder's `PTTL`, or the head's timeout), in
//! case a message was lost.
//!
//! **Dead waiters.** A waiter that gives up or is dropped leaves the queue at once (a `LEAVE`
//! script, sent in the background when its acquire future is dropped). One that vanished
//! without a word (its process died) keeps its place only until its timeout: the moment it
//! should have tried again plus a grace (a third of the lease, at least 100 ms). Every script
//! first prunes the waiters whose timeout passed, by the Redis clock, and if the lock is free
//! tells the new head. So a crashed waiter delays the queue by at most one lease and the grace.
//! A live waiter later than its grace (a long pause) loses its place and joins at the back.
//!
//! **What it costs.** More round trips than the watchdog lock: a contended acquire takes a
//! queueing attempt, a subscription (per client and key) and a second attempt before it
//! sleeps, then the winning attempt; every hand-off waits for the message to reach the one
//! client whose turn it is, while the lock stays free — no barging means no free grant to
//! whoever happens to be fastest. The scripts also do more work (prune, queue bookkeeping).
//!
//! **The failure it still has.** Everything lives in one Redis: a failover to a replica that
//! missed the grant (or the queue) lets a second holder in and may reorder or lose waiters, as
//! for every single-instance lock here; the fencing counter, replicated the same way, may even
//! go back. A holder paused longer than its lease loses the lock as with the watchdog lock.

mod scripts;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::hash_client::{Background, HashClient};
use super::wakeups::{TURN_PREFIX, Ticket, Wakeups};
use super::{fence_key, millis};
use crate::options::budgeted;
use crate::{AcquireOptions, Acquiring, DistributedLock, Guard, Held, LockError, new_owner_id};
use scripts::{ACQUIRE, LEAVE, UNLOCK};

/// The wait queue of lock `key`: a list of owners, oldest first.
pub fn queue_key(key: &str) -> String {
    format!("{key}:queue")
}

/// The waiters' timeouts of lock `key`: a sorted set, owner → Redis time (ms) after which the
/// waiter is pruned.
pub fn timeouts_key(key: &str) -> String {
    format!("{key}:timeouts")
}

/// How late a waiter may be for its next attempt before it is taken for dead.
fn grace(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(100))
}

/// A fair lock client; see the module docs. Dropping it stops its watchdog and its subscriber:
/// locks it still holds then lapse within their lease (their guards' `lost()` fires then).
pub struct RedisFairLock {
    shared: Arc<Shared>,
    _background: Background,
}

struct Shared {
    /// This client's name: the first part of its owners, and of its turn channel.
    id: String,
    client: Arc<HashClient>,
}

impl std::ops::Deref for Shared {
    type Target = HashClient;

    fn deref(&self) -> &HashClient {
        &self.client
    }
}

enum Attempt {
    Granted(u64),
    /// Queued (or refused, when not joining); try again after this at the latest.
    Wait(Duration),
}

impl RedisFairLock {
    /// A lock client for the Redis at `url`: one multiplexed command connection, one subscriber
    /// connection, both connected lazily. Must be called inside a Tokio runtime (it starts the
    /// client's watchdog and subscriber tasks).
    pub fn connect(url: &str) -> Result<RedisFairLock, LockError> {
        let id = new_owner_id();
        let (client, background) =
            HashClient::start(url, |redis, requests| Wakeups::turns(redis, requests, &id))?;
        Ok(RedisFairLock {
            shared: Arc::new(Shared { id, client }),
            _background: background,
        })
    }

    /// Enters the lock `guard` holds once more (same owner, same fencing token, no queueing):
    /// each returned guard must be released too, and the lock is freed when the last one is.
    /// `Ok(None)` if `guard` no longer holds the lock or was not acquired through this client.
    pub async fn reenter(&self, guard: &Guard) -> Result<Option<Guard>, LockError> {
        let held =
            |lease| FairHeld::new(&self.shared, guard.key(), guard.owner(), lease) as Box<dyn Held>;
        self.shared.client.reenter(guard, held).await
    }

    /// Locks this client is renewing now (a leak shows up here).
    pub fn renewing(&self) -> usize {
        self.shared.renewals.len()
    }

    /// Local waiters subscribed for their turn now, over all keys.
    pub fn waiting(&self) -> usize {
        self.shared.wakeups.len()
    }
}

/// A waiter's place in the Redis queue: dropped before the grant (cancelled, timed out, failed),
/// it leaves the queue in the background.
struct Place {
    shared: Arc<Shared>,
    key: String,
    owner: String,
    granted: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (shared, key, owner) = (
            Arc::clone(&self.shared),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.owner),
        );
        runtime.spawn(async move {
            shared.requests.add(1);
            let mut leave = LEAVE.call(&[key.clone(), queue_key(&key), timeouts_key(&key)]);
            leave.arg(TURN_PREFIX).arg(&owner);
            let left: Result<i64, _> = shared.conn.query(&leave).await;
            if let Err(error) = left {
                tracing::warn!(%key, %error, "fair lock: leaving the queue failed; the timeout will");
            }
        });
    }
}

impl Shared {
    async fn attempt(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        join: bool,
    ) -> Result<Attempt, LockError> {
        self.requests.add(1);
        let keys = [
            key.to_owned(),
            queue_key(key),
            timeouts_key(key),
            fence_key(key),
        ];
        let mut grant = ACQUIRE.call(&keys);
        grant
            .arg(TURN_PREFIX)
            .arg(owner)
            .arg(millis(lease))
            .arg(u8::from(join))
            .arg(millis(grace(lease)));
        let (granted, value): (i64, i64) = self.conn.query(&grant).await?;
        Ok(if granted == 1 {
            Attempt::Granted(value as u64)
        } else {
            Attempt::Wait(Duration::from_millis(value.max(1) as u64))
        })
    }

    async fn acquire(
        self: &Arc<Self>,
        key: &str,
        options: AcquireOptions,
    ) -> Result<Guard, LockError> {
        let start = Instant::now();
        let budget = options.wait.unwrap_or(Duration::ZERO);
        let remaining = || budget.saturating_sub(start.elapsed());
        let join = !budget.is_zero();
        let owner = format!("{}.{}", self.id, new_owner_id());
        let mut place = join.then(|| Place {
            shared: Arc::clone(self),
            key: key.to_owned(),
            owner: owner.clone(),
            granted: false,
        });
        let mut ticket: Option<Ticket> = None;
        loop {
            self.connected().await?;
            let sent = Instant::now();
            let retry = match self.attempt(key, &owner, options.lease, join).await? {
                Attempt::Granted(token) => {
                    if let Some(place) = &mut place {
                        place.granted = true;
                    }
                    if let Some(ticket) = ticket {
                        ticket.granted();
                    }
                    let lost = self.renewals.register(key, &owner, options.lease, sent);
                    let held = FairHeld::new(self, key, &owner, options.lease);
                    return Ok(Guard::new(key, owner, token, lost, held));
                }
                Attempt::Wait(retry) => retry,
            };
            if remaining().is_zero() {
                return Err(LockError::waited_since(key, start));
            }
            match &mut ticket {
                // Queued in Redis: subscribe, then try again at once, since the turn message
                // may have been published before the subscription was up.
                None => {
                    let mut fresh = self.wakeups.enqueue_as(key, &owner);
                    let subscribed = fresh.subscribed();
                    let _ = tokio::time::timeout(retry.min(remaining()), subscribed).await;
                    ticket = Some(fresh);
                }
                Some(ticket) => {
                    tokio::select! {
                        () = ticket.woken() => {}
                        () = tokio::time::sleep(retry.min(remaining())) => {}
                    }
                }
            }
        }
    }
}

struct FairHeld {
    shared: Arc<Shared>,
    key: String,
    owner: String,
    lease: Duration,
}

impl FairHeld {
    fn new(shared: &Arc<Shared>, key: &str, owner: &str, lease: Duration) -> Box<FairHeld> {
        Box::new(FairHeld {
            shared: Arc::clone(shared),
            key: key.to_owned(),
            owner: owner.to_owned(),
            lease,
        })
    }
}

impl Held for FairHeld {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        Box::pin(async move {
            let shared = &self.shared;
            shared.renewals.release(&self.key, &self.owner);
            shared.requests.add(1);
            let keys = [
                self.key.clone(),
                queue_key(&self.key),
                timeouts_key(&self.key),
            ];
            let mut unlock = UNLOCK.call(&keys);
            unlock
                .arg(TURN_PREFIX)
                .arg(&self.owner)
                .arg(millis(self.lease));
            let left: i64 = shared.conn.query(&unlock).await?;
            Ok(left >= 0)
        })
    }
}

impl DistributedLock for RedisFairLock {
    fn backend(&self) -> &'static str {
        "redis-fair"
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        budgeted(key, options, self.shared.acquire(key, options))
    }

    fn backend_requests(&self) -> u64 {
        self.shared.requests.get()
    }
}
