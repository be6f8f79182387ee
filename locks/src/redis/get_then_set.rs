//! BROKEN ON PURPOSE: `GET`, then `SET` if it was empty.
//!
//! Check-then-act across two round trips: the client asks whether the lock is free, and if
//! the answer was "nobody", writes its own id. Between the `GET` reply and the `SET`, any
//! number of other clients can get the same "nobody" and write too; each `SET` overwrites the
//! previous one and every writer returns believing it holds the lock. Under load that is not
//! rare: contenders that start together all read the empty key before any of them writes, so
//! several are inside the critical section at once. Redis runs each command atomically, but
//! nothing makes the *pair* atomic; the fix is to let the server decide in one command
//! (`SET … NX`, see `plain.rs`) or one script.
//!
//! The tokens (`INCR` after the `SET`) still increase, which is exactly why fencing helps here:
//! a resource that remembers the highest token rejects all but the last of the simultaneous
//! holders. Release compares before deleting, so only the last writer's release reports `true`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_redis::redis::cmd;
use futures::future::BoxFuture;

use super::{Conn, LockClient, fence_key, millis, poll};
use crate::{AcquireOptions, DistributedLock, Guard, LockError, new_owner_id};

/// `GET` then `SET`; see the module docs.
pub struct GetThenSetLock {
    shared: Arc<LockClient>,
}

impl GetThenSetLock {
    /// A client for the Redis at `url`, connected lazily.
    pub fn connect(url: &str) -> Result<GetThenSetLock, LockError> {
        Ok(GetThenSetLock::with(Conn::open(url)?))
    }

    /// A client over an existing pool.
    pub fn from_pool(pool: deadpool_redis::Pool) -> GetThenSetLock {
        GetThenSetLock::with(Conn::Pool(pool))
    }

    fn with(conn: Conn) -> GetThenSetLock {
        GetThenSetLock {
            shared: LockClient::new(conn),
        }
    }
}

impl GetThenSetLock {
    async fn try_acquire(&self, key: &str, lease: Duration) -> Result<Option<Guard>, LockError> {
        let owner = new_owner_id();
        let sent = Instant::now();
        self.shared.requests.add(1);
        let current: Option<String> = self.shared.conn.query(cmd("GET").arg(key)).await?;
        if current.is_some() {
            return Ok(None);
        }
        // The race: someone else may have read the same empty key and be writing right now.
        self.shared.requests.add(2);
        let () = self
            .shared
            .conn
            .query(cmd("SET").arg(key).arg(&owner).arg("PX").arg(millis(lease)))
            .await?;
        let token: u64 = self
            .shared
            .conn
            .query(cmd("INCR").arg(fence_key(key)))
            .await?;
        Ok(Some(self.shared.grant(key, owner, token, sent, lease)))
    }
}

impl DistributedLock for GetThenSetLock {
    fn backend(&self) -> &'static str {
        "redis-get-then-set"
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
