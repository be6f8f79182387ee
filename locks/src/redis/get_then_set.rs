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

use std::time::Duration;

use deadpool_redis::redis::cmd;

use super::single_instance::{LockClient, SingleInstanceLock, Variant};
use super::{fence_key, millis};
use crate::{Backend, LockError};

/// `GET` then `SET`; see the module docs.
pub type GetThenSetLock = SingleInstanceLock<GetThenSet>;

/// The check-then-act acquire.
#[derive(Debug, Default)]
pub struct GetThenSet;

impl Variant for GetThenSet {
    const BACKEND: Backend = Backend::RedisGetThenSet;
    const IN_LINE: bool = false;

    async fn try_acquire(
        &self,
        client: &LockClient,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<u64>, LockError> {
        let current: Option<String> = client.query(cmd("GET").arg(key)).await?;
        if current.is_some() {
            return Ok(None);
        }
        // The race: someone else may have read the same empty key and be writing right now.
        let () = client
            .query(cmd("SET").arg(key).arg(owner).arg("PX").arg(millis(lease)))
            .await?;
        let token = client.query(cmd("INCR").arg(fence_key(key))).await?;
        Ok(Some(token))
    }
}
