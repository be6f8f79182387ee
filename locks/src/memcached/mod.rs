//! The memcached lock: `add` with an expiry to take it, compare-and-swap to give it back or
//! extend it, an `incr` counter for the fencing token.
//!
//! **How it works.** `add <key> <owner> <ttl>` stores the item only if the key is absent, in one
//! atomic server operation, with its expiry: the lock of the classic "lock on a cache" recipe.
//! The value is a random owner id per acquisition. Release and [`MemcachedLock::extend`] read the
//! item with its CAS value and delete it (`md <key> C<cas>`) or rewrite it with a new expiry
//! (`ms <key> … C<cas> T<ttl>`) only if the owner is this one and the CAS value is unchanged
//! (`ownership.rs`): a holder whose lease ran out never removes or prolongs its successor's
//! lock. The fencing token is `<key>:fence`, incremented after the `add` and checked to have been
//! drawn while the grant still stood (`grant.rs`). Waiting is polling as for the plain Redis
//! lock — one client's waiters in a local line (`line.rs`), its first polling with jittered
//! pauses from 1 ms doubling to 32 ms, shorter again for long waiters (`polling.rs`): memcached
//! has no notifications.
//!
//! **Why it is safe — while leases hold, and with fencing beyond.** At any moment at most one
//! `add` item exists per key, so while every holder finishes within its lease, exclusion holds.
//! memcached counts expiry in whole seconds on a clock it advances once a second, so the item is
//! given `⌈lease⌉ + 2` s: it lives at least `lease` (the guard's `lost()` fires at `lease`,
//! counted from the moment the `add` was sent) and at most about 3 s longer, which is how long a
//! crashed holder can block others. A holder that outlives its lease is no longer the holder;
//! only a resource that checks the fencing token stops its writes.
//!
//! **What memcached cannot give**, and where this lock is weaker than the Redis or consensus
//! ones:
//! * **No persistence.** A restart empties the server: every held lock is free at once, while
//!   its holders go on believing they hold it (a second holder gets it immediately). The fencing
//!   counter is gone too; it is re-created at a floor from the wall clock (`fence.rs`), so tokens
//!   keep increasing and the fence still refuses the old holders' writes.
//! * **Eviction.** memcached is a cache: when memory is full it evicts the least recently used
//!   items of the same size class, a held lock among them. A second client is then granted while
//!   the first still holds it (`locks/tests/suite/memcached.rs` shows it). Size the server so that it
//!   never evicts, or run it with `-M` (refuse writes instead of evicting), or rely on the fence.
//! * **No replication.** One server is one point of failure; a client-side hash over several
//!   servers only spreads keys, it does not copy them.
//!
//! The client is `async-memcached` (Tokio, meta protocol) over a small connection pool
//! (`pool.rs`). Every command counts as one request
//! ([`crate::DistributedLock::backend_requests`]): a grant costs three, a release or extend two.

mod fence;
mod grant;
mod ownership;
mod pool;

pub use fence::fence_key;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::line::Lines;
use crate::redis::{LeaseClocks, poll};
use crate::{AcquireOptions, Acquiring, DistributedLock, Guard, Held, LockError, new_owner_id};
use ownership::{Act, if_owner};
use pool::Pool;

/// The longest relative expiry memcached accepts; larger numbers are read as Unix times.
const MAX_RELATIVE_TTL_SECS: u64 = 30 * 24 * 3600;

/// The item expiry, in whole seconds, that keeps a lock at least `lease`: memcached's clock
/// ticks once a second and may be up to two seconds behind when the item is stored.
pub(crate) fn expiry_secs(lease: Duration) -> i64 {
    let whole = lease.as_secs() + u64::from(lease.subsec_nanos() > 0);
    (whole + 2).min(MAX_RELATIVE_TTL_SECS) as i64
}

/// A memcached lock client; see the module docs.
pub struct MemcachedLock {
    shared: Arc<Shared>,
}

struct Shared {
    pool: Pool,
    clocks: LeaseClocks,
    /// This client's waiters, in line per key: only the first polls (`line.rs`).
    lines: Lines,
}

impl MemcachedLock {
    /// A lock client for the memcached at `addr` (`host:port`, or a `tcp://` or `unix://`
    /// URL). Connects lazily: an unreachable
    /// server shows up as [`LockError::Unavailable`] on the first acquire.
    pub fn connect(addr: &str) -> MemcachedLock {
        MemcachedLock {
            shared: Arc::new(Shared {
                pool: Pool::new(addr),
                clocks: LeaseClocks::default(),
                lines: Lines::new(crate::redis::POLLING.oldest),
            }),
        }
    }

    /// Resets `guard`'s lease to `lease` from now if it still holds the lock; `Ok(false)` if it
    /// does not (its lease already ran out by the local clock, or the item is gone or someone
    /// else's).
    pub async fn extend(&self, guard: &Guard, lease: Duration) -> Result<bool, LockError> {
        if guard.is_lost() {
            return Ok(false);
        }
        let shared = &self.shared;
        let sent = Instant::now();
        let extended =
            if_owner(&shared.pool, guard.key(), guard.owner(), Act::Extend(lease)).await?;
        if extended {
            shared.clocks.extend(guard.owner(), sent + lease);
        }
        Ok(extended)
    }

    async fn try_acquire(&self, key: &str, lease: Duration) -> Result<Option<Guard>, LockError> {
        let owner = new_owner_id();
        let sent = Instant::now();
        let Some(token) = grant::attempt(&self.shared, key, &owner, lease).await? else {
            return Ok(None);
        };
        let lost = self.shared.clocks.start(&owner, sent + lease);
        let held = MemcachedHeld {
            shared: Arc::clone(&self.shared),
            key: key.to_owned(),
            owner: owner.clone(),
        };
        Ok(Some(Guard::new(key, owner, token, lost, Box::new(held))))
    }
}

impl DistributedLock for MemcachedLock {
    fn backend(&self) -> &'static str {
        crate::Backend::Memcached.name()
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        let try_acquire = move || self.try_acquire(key, options.lease);
        let polled = move |since| poll(key, since, options.wait, try_acquire);
        self.shared.lines.budgeted(key, options, polled)
    }

    fn backend_requests(&self) -> u64 {
        self.shared.pool.requests.get()
    }
}

/// A held memcached lock: its lease clock stops, and the item is deleted if still its own.
struct MemcachedHeld {
    shared: Arc<Shared>,
    key: String,
    owner: String,
}

impl Held for MemcachedHeld {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        Box::pin(async move {
            self.shared.clocks.stop(&self.owner);
            if_owner(&self.shared.pool, &self.key, &self.owner, Act::Delete).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_lives_at_least_its_lease_in_whole_seconds_plus_the_clock_lag() {
        assert_eq!(expiry_secs(Duration::from_millis(1)), 3);
        assert_eq!(expiry_secs(Duration::from_secs(1)), 3);
        assert_eq!(expiry_secs(Duration::from_millis(1001)), 4);
        assert_eq!(
            expiry_secs(Duration::from_secs(365 * 24 * 3600)),
            MAX_RELATIVE_TTL_SECS as i64,
            "beyond 30 days memcached would read a Unix time"
        );
    }
}
