//! BROKEN ON PURPOSE: a correct acquire, released by a plain `DEL`.
//!
//! The acquire is the plain lock's (`SET NX PX` + fence, one script). The release just
//! deletes the key, without checking that the value is still this holder's id. That is fine
//! until a holder outlives its lease: its key expires, B acquires, and then A, finishing late,
//! sends `DEL` — which deletes *B's* lock. C now acquires while B is still inside: two holders
//! at once, created by a release. It cascades: B's own `DEL` later frees C's lock, and so on.
//! Worse, A's release reports success, so A never learns it was late. The fix is the
//! compare-and-delete script (`plain.rs`): delete only if the value is still mine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_redis::redis::cmd;
use futures::future::BoxFuture;

use super::{Conn, LockClient, poll};
use crate::{AcquireOptions, DistributedLock, Guard, Held, LockError, new_owner_id};

/// Correct acquire, token-blind release; see the module docs.
pub struct UnsafeReleaseLock {
    shared: Arc<LockClient>,
}

impl UnsafeReleaseLock {
    /// A client for the Redis at `url`, connected lazily.
    pub fn connect(url: &str) -> Result<UnsafeReleaseLock, LockError> {
        Ok(UnsafeReleaseLock::with(Conn::open(url)?))
    }

    /// A client over an existing pool.
    pub fn from_pool(pool: deadpool_redis::Pool) -> UnsafeReleaseLock {
        UnsafeReleaseLock::with(Conn::Pool(pool))
    }

    fn with(conn: Conn) -> UnsafeReleaseLock {
        UnsafeReleaseLock {
            shared: LockClient::new(conn),
        }
    }
}

impl UnsafeReleaseLock {
    async fn try_acquire(&self, key: &str, lease: Duration) -> Result<Option<Guard>, LockError> {
        let owner = new_owner_id();
        let sent = Instant::now();
        let token = self.shared.set_nx_px(key, &owner, lease).await?;
        if token == 0 {
            return Ok(None);
        }
        let lost = self.shared.clocks.start(&owner, sent + lease);
        let held = DelHeld {
            shared: Arc::clone(&self.shared),
            key: key.to_owned(),
            owner: owner.clone(),
        };
        Ok(Some(Guard::new(key, owner, token, lost, Box::new(held))))
    }
}

struct DelHeld {
    shared: Arc<LockClient>,
    key: String,
    owner: String,
}

impl Held for DelHeld {
    /// `DEL key`, whoever holds it; "owned" means "a key was deleted", which is the lie.
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        Box::pin(async move {
            self.shared.clocks.stop(&self.owner);
            self.shared.requests.add(1);
            let deleted: i64 = self.shared.conn.query(cmd("DEL").arg(&self.key)).await?;
            Ok(deleted == 1)
        })
    }
}

impl DistributedLock for UnsafeReleaseLock {
    fn backend(&self) -> &'static str {
        "redis-unsafe-release"
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        options: AcquireOptions,
    ) -> BoxFuture<'a, Result<Guard, LockError>> {
        Box::pin(poll(key, options.wait, move || {
            self.try_acquire(key, options.lease)
        }))
    }

    fn backend_requests(&self) -> u64 {
        self.shared.requests.get()
    }
}
