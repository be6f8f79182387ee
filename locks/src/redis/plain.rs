//! The correct minimal Redis lock: `SET key owner NX PX lease`.
//!
//! **Why it is safe.** `SET … NX PX` creates the key and its expiry in one command, so there is
//! no moment at which a crash leaves a lock without a lease (compare `setnx_no_ttl.rs`), and no
//! gap between checking and taking (compare `get_then_set.rs`). The value is a random owner id
//! per acquisition; release and extend are Lua scripts that compare it before `DEL` /
//! `PEXPIRE`, atomically, so a holder whose lease ran out cannot delete or prolong the lock of
//! whoever holds it now (compare `unsafe_release.rs`). The fencing token is `INCR <key>:fence`
//! in the same script as the `SET`.
//!
//! **Why it is still unsafe.** The lease is a guess about how long the critical section takes.
//! A holder that outlives it — a long pause, a slow downstream call — is no longer the holder,
//! and nothing stops its writes but a resource that checks the fencing token. The guard's
//! `lost()` fires when the lease has passed, counted locally from the moment the grant request
//! was *sent* (the server's clock started no earlier), so it never fires late by the client's
//! own clock; [`RedisLock::extend`] pushes it back. A failover to a replica that had not yet
//! received the key also breaks exclusion.
//!
//! **How it waits.** One client's waiters stand in a local line (`line.rs`) and its first polls,
//! with jittered pauses (1 ms doubling to 32 ms, shorter again for long waiters so the oldest
//! are the likeliest to win a release, `polling.rs`): simple, costs one request per process per
//! interval, hands off no faster than the interval, and keeps no queue across processes. The watchdog lock wakes
//! waiters instead.

use std::time::{Duration, Instant};

use super::single_instance::{SingleInstanceLock, Variant};
use crate::{Backend, Guard, LockError};

/// `SET NX PX` lock with a fencing counter; see the module docs.
pub type RedisLock = SingleInstanceLock<Plain>;

/// The correct acquire and release: [`Variant`]'s defaults.
#[derive(Debug, Default)]
pub struct Plain;

impl Variant for Plain {
    const BACKEND: Backend = Backend::Redis;
}

impl RedisLock {
    /// Resets `guard`'s lease to `lease` from now if it still holds the lock; `Ok(false)` if it
    /// does not (its lease already ran out by the local clock, or the key is someone else's).
    /// If the local clock runs out while the request is in flight, the guard stays lost even
    /// though Redis may have extended the key; releasing it then still deletes it.
    pub async fn extend(&self, guard: &Guard, lease: Duration) -> Result<bool, LockError> {
        if guard.is_lost() {
            return Ok(false);
        }
        let sent = Instant::now();
        let extended = (self.client)
            .extend(guard.key(), guard.owner(), lease)
            .await?;
        if extended {
            self.client.clocks.extend(guard.owner(), sent + lease);
        }
        Ok(extended)
    }
}
