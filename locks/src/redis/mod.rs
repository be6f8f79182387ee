//! Redis locks, from the correct minimal one to three deliberately broken ones.
//!
//! | type | file | acquire | how it waits | what it teaches |
//! |---|---|---|---|---|
//! | [`RedisLock`] | `plain.rs` | `SET key owner NX PX lease` + `INCR` fence, one script | a local line per client, its first polling (jittered, the oldest first) | the correct minimal lock; unsafe once the holder outlives its lease |
//! | [`RedisWatchdogLock`] | `watchdog.rs` | hash `owner → count`, Lua | pub/sub wake-up of one waiter per client; a release hands over to its own client's next waiter | a lease renewed while the holder lives; reentrant |
//! | [`RedisFairLock`] | `fair.rs` | the watchdog's hash, plus a wait queue and waiter timeouts, Lua | pub/sub to the one waiter whose turn it is | first come, first served across clients; dead waiters pruned by timeout |
//! | [`Redlock`] | `redlock.rs` | the plain script on N independent instances, then a fence raise | random retry delay | survives a minority of dead instances; still needs fencing |
//! | [`SetnxNoTtlLock`] | `setnx_no_ttl.rs` | `SETNX`, then a separate `EXPIRE` | polling | a crash between the two leaves the lock stuck forever |
//! | [`GetThenSetLock`] | `get_then_set.rs` | `GET`, then `SET` if empty | polling | check-then-act across two round trips: two holders at once |
//! | [`UnsafeReleaseLock`] | `unsafe_release.rs` | correct | polling | release by plain `DEL` removes the *next* holder's lock |
//!
//! The plain lock and the three broken variants are one type, [`SingleInstanceLock`]
//! (`single_instance.rs`: connection, request count, polling, lease clock, compare-and-delete
//! release), over a small private trait; each of their files holds only the acquire (and, for
//! `unsafe_release.rs`, the release) that makes it what it is, and the public names are aliases.
//!
//! Shared by all of them, and kept here: the lock key is the caller's key itself; the fencing
//! counter lives next to it in `<key>:fence` and is only ever `INCR`ed, never deleted, so tokens
//! keep increasing across releases and expiries. The safe locks increment the fence *in the same
//! script* as the grant: Redis runs a script atomically, so no other grant can slip between "I
//! own it" and "my token is N", and token order is grant order. (The broken variants `INCR` in a
//! separate command, as their naive authors would; their tokens still increase.)
//!
//! Connections: `connect(url)` takes `redis://…` or a Sentinel address
//! (`redis+sentinel://host:port,…/<master name>`, [`Target`]) and opens one lazily connecting,
//! self-reconnecting multiplexed connection (to the current primary, for a Sentinel address), over which all tasks of the client pipeline their requests. `from_pool` (plain
//! lock and broken variants) takes a caller's `deadpool-redis` pool instead; note that
//! deadpool-redis checks every connection it hands out with a `PING`, one extra round trip per
//! request that [`crate::DistributedLock::backend_requests`] does not count. The watchdog and
//! Redlock have no `from_pool`: the watchdog (and the fair lock) also needs its own subscriber
//! connection, Redlock one connection per instance. The watchdog and the fair lock are built from
//! the same client (`hash_client.rs`): its renewal and re-entry (`renewal.rs`) and its
//! subscriber (`wakeups.rs`).
//!
//! What none of the single-instance locks survives: a Redis primary that dies after granting and
//! before replicating to the replica that is then promoted. The grant is gone and a second
//! client gets the lock; the fence counter, replicated the same way, may even go back. Redlock
//! exists for that case. [`RedisWatchdogLock::connect_replicated`] narrows it: each grant must
//! be confirmed by `WAIT` from enough replicas, or it is given back and the acquire fails with
//! [`LockError::Unreplicated`] (`replicated.rs`).
//!
//! Every backend counts the requests it sends ([`crate::DistributedLock::backend_requests`]):
//! one per command or script call (a script sent again after `NOSCRIPT` counts once).

mod fair;
mod get_then_set;
mod hash_client;
mod plain;
mod redlock;
mod renewal;
mod replicated;
mod setnx_no_ttl;
mod single_instance;
mod target;
mod unsafe_release;
mod wakeups;
mod watchdog;

pub use fair::{RedisFairLock, queue_key, timeouts_key};
pub use get_then_set::GetThenSetLock;
pub use plain::RedisLock;
pub use redlock::Redlock;
pub use replicated::Replication;
pub use setnx_no_ttl::{SetnxNoTtlLock, SimulatedCrash};
pub use single_instance::SingleInstanceLock;
pub use target::{Following, SENTINEL_SCHEME, Target, primary_gone};
pub use unsafe_release::UnsafeReleaseLock;
pub use watchdog::RedisWatchdogLock;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use deadpool_redis::Pool;
use deadpool_redis::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use deadpool_redis::redis::{Client, Cmd, FromRedisValue, Pipeline, Script, ScriptInvocation};
use tokio::sync::watch;

use crate::LockError;
use crate::polling::Schedule;

/// The companion key holding the fencing counter of lock `key`.
pub fn fence_key(key: &str) -> String {
    format!("{key}:fence")
}

/// A script sent whole, as `EVAL`, on every call: one round trip, always.
///
/// redis-rs's [`Script`] sends `EVALSHA`; on a server that has not cached the script yet (a
/// client's first call, a server restarted since) it takes the `NOSCRIPT` refusal, loads the
/// script and calls again — three round trips where one was counted on. A lease cannot afford
/// that at a distance: 60 ms away, a watchdog's first renewal answered 180 ms after it was
/// sent, and a 200 ms lease granted a third of a lease earlier ran out in Redis first, letting
/// a second holder in (test `redis_lease_distance`). The scripts a lease's arithmetic rests
/// on — the grant, the renewal, the hand-over — are sent whole; Redis caches them by hash all
/// the same.
pub(crate) struct Whole(pub(crate) &'static str);

impl Whole {
    /// The call with `keys`; the caller adds the arguments.
    pub(crate) fn call<K: redis::ToRedisArgs>(&self, keys: &[K]) -> Cmd {
        let mut call = redis::cmd("EVAL");
        call.arg(self.0).arg(keys.len());
        for key in keys {
            call.arg(key);
        }
        call
    }
}

/// Grants the lock if free and draws the next fencing token, atomically.
/// KEYS: lock, fence. ARGV: owner, lease in ms. Returns the token, or 0 if the lock is held.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('incr', KEYS[2])
end
return 0",
    )
});

/// Deletes the lock only if `owner` still holds it. KEYS: lock. ARGV: owner. Returns 1 or 0.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0",
    )
});

/// Resets the lease only if `owner` still holds it. KEYS: lock. ARGV: owner, lease in ms.
/// Returns 1 or 0.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0",
    )
});

/// How a lock client reaches one Redis: a reconnecting multiplexed connection (what `connect`
/// makes: every task pipelines over one socket) or a caller's `deadpool` pool (which pings each
/// connection it hands out, one extra round trip per request).
#[derive(Clone)]
pub(crate) enum Conn {
    Manager(ConnectionManager),
    Pool(Pool),
    /// The primary a Sentinel address names, found again after a failure.
    Following(Following),
}

/// Runs one request (`$call`, given `&mut` a connection as `$c`) on a [`Conn`]: on a clone of
/// the manager, on a connection out of the pool, or on the followed primary's connection, which
/// is told of a failure so that the next request finds the primary again.
macro_rules! on_connection {
    ($conn:expr, |$c:ident| $call:expr) => {
        match $conn {
            Conn::Manager(m) => {
                let $c = &mut m.clone();
                $call.await
            }
            Conn::Pool(p) => {
                let $c = &mut p.get().await.map_err(LockError::unavailable)?;
                $call.await
            }
            Conn::Following(f) => {
                let $c = &mut f.connection().await?;
                let answer = $call.await;
                if let Err(e) = &answer {
                    f.failed(e).await;
                }
                answer
            }
        }
        .map_err(LockError::unavailable)
    };
}

impl Conn {
    /// A lazily connecting, self-healing connection to the Redis at `url` (see [`Target`]).
    pub(crate) fn open(url: &str) -> Result<Conn, LockError> {
        Conn::open_with(url, ConnectionManagerConfig::new())
    }

    /// Like [`Conn::open`], but a reconnection tries once: a request to a dead Redis fails as
    /// soon as its connect is refused, and the next request tries again. The manager's default
    /// retries its connect with a backoff (100 ms doubling, six times: about 6 s), and every
    /// request meanwhile waits for them. For Redlock, where a dead instance only counts against
    /// the quorum and waiting for it costs every round its instance timeout.
    pub(crate) fn open_failing_fast(url: &str) -> Result<Conn, LockError> {
        Conn::open_with(url, ConnectionManagerConfig::new().set_number_of_retries(0))
    }

    fn open_with(url: &str, config: ConnectionManagerConfig) -> Result<Conn, LockError> {
        match Target::parse(url)? {
            Target::Direct(url) => {
                let client = Client::open(url).map_err(LockError::unavailable)?;
                ConnectionManager::new_lazy_with_config(client, config)
                    .map(Conn::Manager)
                    .map_err(LockError::unavailable)
            }
            sentinel => Ok(Conn::Following(Following::new(sentinel))),
        }
    }

    /// Runs a script.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        script: &ScriptInvocation<'_>,
    ) -> Result<T, LockError> {
        on_connection!(self, |c| script.invoke_async(c))
    }

    /// Runs a pipeline, its commands one after the other on one connection.
    pub(crate) async fn pipeline<T: FromRedisValue>(
        &self,
        pipeline: &Pipeline,
    ) -> Result<T, LockError> {
        on_connection!(self, |c| pipeline.query_async(c))
    }

    /// Runs a command.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, LockError> {
        on_connection!(self, |c| cmd.query_async(c))
    }
}

/// Lease length as Redis wants it: whole milliseconds, at least 1.
pub(crate) fn millis(d: Duration) -> u64 {
    d.as_millis().clamp(1, u64::MAX as u128) as u64
}

/// Requests sent to the backend so far.
#[derive(Debug, Default)]
pub(crate) struct Requests(AtomicU64);

impl Requests {
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The pauses between two polls: 1 ms doubling to 32 ms, shrinking again for waiters that
/// have waited long (`polling.rs`) down to half a millisecond, so the oldest waiters are the
/// likeliest to win a release.
pub(crate) const POLLING: Schedule = Schedule {
    first: Duration::from_millis(1),
    longest: Duration::from_millis(32),
    oldest: Duration::from_micros(500),
};

/// Calls `attempt` until it grants (`Some`), pausing by [`POLLING`], until `wait` has passed
/// since the waiter came (`since`: before a local line, if it stood in one; `wait` `None`:
/// once). Dropping the returned future between attempts leaves nothing behind.
pub(crate) async fn poll<T, F, Fut>(
    key: &str,
    since: Instant,
    wait: Option<Duration>,
    mut attempt: F,
) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, LockError>>,
{
    let budget = wait.unwrap_or(Duration::ZERO);
    for tries in 0.. {
        if let Some(granted) = attempt().await? {
            return Ok(granted);
        }
        let waited = since.elapsed();
        if waited >= budget {
            return Err(LockError::Timeout {
                key: key.to_owned(),
                waited,
            });
        }
        tokio::time::sleep(POLLING.pause(tries, waited).min(budget - waited)).await;
    }
    unreachable!("the loop returns")
}

/// Local lease clocks for backends that only know a lease by its length: each held lock's
/// `lost` flag turns `true` when its deadline (counted from the moment the grant request was
/// sent) passes without an extension. One small timer task per held lock.
#[derive(Clone, Default)]
pub(crate) struct LeaseClocks(Arc<Mutex<HashMap<String, watch::Sender<Instant>>>>);

impl LeaseClocks {
    /// Starts the clock of `owner`'s lock; the returned flag is the guard's `lost`.
    pub(crate) fn start(&self, owner: &str, deadline: Instant) -> watch::Receiver<bool> {
        let (lost_tx, lost_rx) = watch::channel(false);
        let (deadline_tx, mut deadline_rx) = watch::channel(deadline);
        self.lock().insert(owner.to_owned(), deadline_tx);
        let clocks = self.clone();
        let owner = owner.to_owned();
        tokio::spawn(async move {
            loop {
                let deadline = *deadline_rx.borrow_and_update();
                tokio::select! {
                    () = tokio::time::sleep_until(deadline.into()) => {
                        let _ = lost_tx.send(true);
                        break;
                    }
                    // Sender removed: released (or extended: then loop with the new deadline).
                    changed = deadline_rx.changed() => if changed.is_err() { return },
                    // The guard is gone and nobody can observe the flag any more.
                    () = lost_tx.closed() => break,
                }
            }
            clocks.lock().remove(&owner);
        });
        lost_rx
    }

    /// Moves `owner`'s deadline; `false` if its clock already ran out or stopped.
    pub(crate) fn extend(&self, owner: &str, deadline: Instant) -> bool {
        self.lock()
            .get(owner)
            .is_some_and(|tx| tx.send(deadline).is_ok())
    }

    /// Stops `owner`'s clock (the lock was released).
    pub(crate) fn stop(&self, owner: &str) {
        self.lock().remove(owner);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<Instant>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
