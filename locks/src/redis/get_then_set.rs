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

use super::{Conn, LeaseClocks, RELEASE, Requests, fence_key, millis, poll};
use crate::{AcquireOptions, DistributedLock, Guard, Held, LockError, new_owner_id};

/// `GET` then `SET`; see the module docs.
pub struct GetThenSetLock {
    shared: Arc<Shared>,
}

struct Shared {
    conn: Conn,
    requests: Requests,
    clocks: LeaseClocks,
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
            shared: Arc::new(Shared {
                conn,
                requests: Requests::default(),
                clocks: LeaseClocks::default(),
            }),
        }
    }
}

impl Shared {
    async fn try_acquire(
        self: &Arc<Self>,
        key: &str,
        lease: Duration,
    ) -> Result<Option<Guard>, LockError> {
        let owner = new_owner_id();
        let sent = Instant::now();
        self.requests.add(1);
        let current: Option<String> = self.conn.query(cmd("GET").arg(key)).await?;
        if current.is_some() {
            return Ok(None);
        }
        // The race: someone else may have read the same empty key and be writing right now.
        self.requests.add(2);
        let () = self
            .conn
            .query(cmd("SET").arg(key).arg(&owner).arg("PX").arg(millis(lease)))
            .await?;
        let token: u64 = self.conn.query(cmd("INCR").arg(fence_key(key))).await?;
        let lost = self.clocks.start(&owner, sent + lease);
        let held = GetSetHeld {
            shared: Arc::clone(self),
            key: key.to_owned(),
            owner: owner.clone(),
        };
        Ok(Some(Guard::new(key, owner, token, lost, Box::new(held))))
    }
}

struct GetSetHeld {
    shared: Arc<Shared>,
    key: String,
    owner: String,
}

impl Held for GetSetHeld {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        Box::pin(async move {
            self.shared.clocks.stop(&self.owner);
            self.shared.requests.add(1);
            let deleted: i64 = self
                .shared
                .conn
                .invoke(RELEASE.key(&self.key).arg(&self.owner))
                .await?;
            Ok(deleted == 1)
        })
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
            self.shared.try_acquire(key, options.lease)
        }))
    }

    fn backend_requests(&self) -> u64 {
        self.shared.requests.get()
    }
}
