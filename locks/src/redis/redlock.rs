//! Redlock: one lock over N independent Redis instances (no replication between them).
//!
//! **Algorithm.** Take the time, send the plain lock's grant script (`SET NX PX` + `INCR`
//! fence) to all N instances in parallel, each bounded by a short per-instance timeout so a dead
//! instance costs milliseconds, not the lease. A killed instance refuses the connection at once:
//! its connection does not wait for reconnect retries (`Conn::open_failing_fast`), so it
//! costs a round nothing but its refusal, not the instance timeout. The lock is acquired if at least a quorum
//! (`N/2 + 1`) granted it *and* time is left: validity = lease − elapsed − drift, where drift =
//! 1% of the lease + 2 ms allows for the instances' clocks running faster than ours. Otherwise
//! release on all instances (a partial grant must not block others for a lease) and retry after
//! a random delay, so contenders that collided (each holding a minority) drift apart instead of
//! colliding again. Release is the compare-and-delete script on all instances. The waiters
//! of one client stand in a local line per key and only its first runs rounds
//! ([`crate::line`]): the instances see one contender per process, and a process's waiters
//! are served in the order they came.
//!
//! **What it survives.** Any minority of instances crashing or partitioned away: a majority
//! still grants, and two majorities always share an instance, which refuses the second
//! contender. That is the whole point over a single Redis with a replica, where a failover can
//! lose a granted lock.
//!
//! **The fencing token, honestly.** Each instance only knows its own counter, and the majority
//! that grants changes from one grant to the next, so "the max of the granting majority's
//! `INCR`s" alone would *not* be monotonic (an instance that counted ahead in a lost race may be
//! outside the next majority). So after a grant the client raises `<key>:fence` to the token on
//! every instance, and the grant only counts if a quorum confirmed the raise (a second parallel
//! round trip per grant; validity is computed after it). Any later grant's majority intersects
//! that quorum, so its token is larger: tokens strictly increase — as long as no instance loses
//! its counter. An instance that restarts without persistence comes back with its locks and
//! counters gone. Keeping it down for longer than a lease (as Redlock's description asks)
//! restores exclusion, but only a persisted counter (AOF with `fsync always`) keeps the tokens
//! monotonic.
//!
//! **Why it still needs fencing.** Redlock is a lease over clocks and timeouts: a process
//! paused after acquiring (GC, SIGSTOP, a slow page fault) wakes up after its validity ended and
//! writes anyway; an instance whose clock jumps expires the key early. No lock based on leases
//! can stop a holder that does not know it is late; only the resource can, by refusing tokens
//! lower than one it has seen.

use std::sync::Arc;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use deadpool_redis::redis::Script;
use futures::future::{BoxFuture, join_all};
use rand::Rng;

use super::{ACQUIRE, Conn, LeaseClocks, RELEASE, Requests, fence_key, millis};
use crate::line::Lines;
use crate::{AcquireOptions, Acquiring, DistributedLock, Guard, Held, LockError, new_owner_id};

/// Raises the fencing counter to at least `ARGV[1]`. KEYS: fence. Returns the counter.
static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local current = tonumber(redis.call('get', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if current < floor then
  redis.call('set', KEYS[1], ARGV[1])
  return floor
end
return current",
    )
});

/// A Redlock client over independent Redis instances; see the module docs.
pub struct Redlock {
    shared: Arc<Shared>,
}

struct Shared {
    instances: Vec<Conn>,
    quorum: usize,
    instance_timeout: Duration,
    retry_delay: Duration,
    requests: Requests,
    clocks: LeaseClocks,
    /// This client's waiters, a line per key.
    lines: Lines,
}

/// How one round over all instances went.
enum Round {
    Granted(Guard),
    /// A quorum answered, but not enough of them granted (someone else holds it), or the grant
    /// took so long that no validity was left.
    Refused,
    /// Too few instances answered to ever form a quorum.
    Unreachable {
        granted: usize,
    },
}

impl Redlock {
    /// A client over the instances at `urls` (typically 5), connected lazily: dead instances
    /// only count against the quorum.
    pub fn connect(urls: &[String]) -> Result<Redlock, LockError> {
        let instances = urls
            .iter()
            .map(|url| Conn::open_failing_fast(url))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Redlock {
            shared: Arc::new(Shared {
                quorum: instances.len() / 2 + 1,
                instances,
                instance_timeout: Duration::from_millis(100),
                retry_delay: Duration::from_millis(20),
                requests: Requests::default(),
                clocks: LeaseClocks::default(),
                lines: Lines::new(super::POLLING.oldest),
            }),
        })
    }

    /// How long one instance may take to answer before it counts as failed (default 100 ms;
    /// keep it well below the lease).
    pub fn instance_timeout(mut self, timeout: Duration) -> Redlock {
        Arc::get_mut(&mut self.shared)
            .expect("not shared yet")
            .instance_timeout = timeout;
        self
    }

    /// Instances needed for a grant: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.shared.quorum
    }
}

/// The clock-drift allowance for `lease`: 1% of it plus 2 ms.
fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

impl Shared {
    /// Runs `script` on every instance in parallel, each within the instance timeout; `None`
    /// for an instance that failed or did not answer in time.
    async fn on_all(
        &self,
        script: impl Fn() -> deadpool_redis::redis::ScriptInvocation<'static>,
    ) -> Vec<Option<i64>> {
        self.requests.add(self.instances.len() as u64);
        join_all(self.instances.iter().map(|conn| {
            let invocation = script();
            async move {
                match tokio::time::timeout(self.instance_timeout, conn.invoke(&invocation)).await {
                    Ok(Ok(value)) => Some(value),
                    _ => None,
                }
            }
        }))
        .await
    }

    async fn release_all(&self, key: &str, owner: &str) -> usize {
        let deleted = self
            .on_all(|| {
                let mut release = RELEASE.key(key);
                release.arg(owner);
                release
            })
            .await;
        deleted.into_iter().filter(|d| *d == Some(1)).count()
    }

    async fn round(self: &Arc<Self>, key: &str, lease: Duration) -> Round {
        let owner = new_owner_id();
        let start = Instant::now();
        let tokens = self
            .on_all(|| {
                let mut acquire = ACQUIRE.key(key);
                acquire.key(fence_key(key)).arg(&owner).arg(millis(lease));
                acquire
            })
            .await;
        let answered = tokens.iter().flatten().count();
        let granted: Vec<u64> = tokens
            .iter()
            .flatten()
            .filter(|t| **t > 0)
            .map(|t| *t as u64)
            .collect();
        let mut outcome = if answered < self.quorum {
            Round::Unreachable {
                granted: granted.len(),
            }
        } else {
            Round::Refused
        };
        if granted.len() >= self.quorum {
            let token = granted.iter().copied().max().unwrap_or(0);
            let raised = self
                .on_all(|| {
                    let mut raise = RAISE_FENCE.key(fence_key(key));
                    raise.arg(token);
                    raise
                })
                .await;
            let confirmed = raised.iter().flatten().count();
            let deadline = start + lease.saturating_sub(drift(lease));
            if confirmed >= self.quorum && Instant::now() < deadline {
                let lost = self.clocks.start(&owner, deadline);
                let held = RedlockHeld {
                    shared: Arc::clone(self),
                    key: key.to_owned(),
                    owner: owner.clone(),
                };
                return Round::Granted(Guard::new(key, owner, token, lost, Box::new(held)));
            }
            if confirmed < self.quorum {
                outcome = Round::Unreachable { granted: confirmed };
            }
            // Otherwise the round was too slow for the lease: no validity left, try again.
        }
        self.release_all(key, &owner).await;
        outcome
    }

    /// Rounds until one grants, for the wait budget counted from `start` (when the waiter
    /// joined its line).
    async fn acquire(
        self: &Arc<Self>,
        key: &str,
        options: AcquireOptions,
        start: Instant,
    ) -> Result<Guard, LockError> {
        let budget = options.wait.unwrap_or(Duration::ZERO);
        // Once a round has heard a majority refuse, the wait met contention: a later round that
        // stalls past the instance timeout (a loaded machine) does not make it an outage.
        let mut contended = false;
        loop {
            let failure = match self.round(key, options.lease).await {
                Round::Granted(guard) => return Ok(guard),
                Round::Refused => {
                    contended = true;
                    LockError::waited_since(key, start)
                }
                Round::Unreachable { .. } if contended => LockError::waited_since(key, start),
                Round::Unreachable { granted } => LockError::NoQuorum {
                    key: key.to_owned(),
                    granted,
                    needed: self.quorum,
                },
            };
            let waited = start.elapsed();
            if waited >= budget {
                return Err(failure);
            }
            let delay = rand::rng().random_range(self.retry_delay / 2..=self.retry_delay * 3 / 2);
            tokio::time::sleep(delay.min(budget - waited)).await;
        }
    }
}

struct RedlockHeld {
    shared: Arc<Shared>,
    key: String,
    owner: String,
}

impl Held for RedlockHeld {
    /// Deletes this owner's key on every instance; `true` if a quorum still had it.
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        Box::pin(async move {
            self.shared.clocks.stop(&self.owner);
            let deleted = self.shared.release_all(&self.key, &self.owner).await;
            Ok(deleted >= self.shared.quorum)
        })
    }
}

impl DistributedLock for Redlock {
    fn backend(&self) -> &'static str {
        "redlock"
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        let shared = &self.shared;
        Box::pin(shared.lines.in_line(key, options.wait, move |since| {
            shared.acquire(key, options, since)
        }))
    }

    fn backend_requests(&self) -> u64 {
        self.shared.requests.get()
    }
}
