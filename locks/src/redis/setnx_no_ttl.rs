//! BROKEN ON PURPOSE: `SETNX`, then a separate `EXPIRE`.
//!
//! The classic first attempt: `SETNX key owner` takes the lock, and only then does a second
//! command, `PEXPIRE key lease`, give it a lease. Between the two round trips the lock exists
//! *without* an expiry. If the holder crashes there — killed, OOM, its connection dropped after
//! the first reply — nobody will ever delete the key: the lock is stuck forever, every
//! contender times out, and only an operator's `DEL` frees it. The fix is one atomic command,
//! `SET key owner NX PX lease` (see `plain.rs`).
//!
//! A crash cannot be timed by a test, so [`SetnxNoTtlLock::crash_between_setnx_and_expire`]
//! simulates it: that client sends the `SETNX`, never sends the `EXPIRE`, and fails the
//! acquire as the dead process would (it returns [`LockError::Unavailable`], holding nothing).
//! Everything else (compare-and-delete release, `INCR` fencing token, polling) is correct, so
//! the stuck key is the only failure this variant shows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_redis::redis::cmd;
use futures::future::BoxFuture;

use super::{Conn, LockClient, fence_key, millis, poll};
use crate::{AcquireOptions, DistributedLock, Guard, LockError, new_owner_id};

/// `SETNX` + separate `PEXPIRE`; see the module docs.
pub struct SetnxNoTtlLock {
    shared: Arc<LockClient>,
    crash_between: bool,
}

/// The simulated crash, as the error the "crashed" acquire returns.
#[derive(Debug, thiserror::Error)]
#[error("simulated crash between SETNX and EXPIRE: the lock was taken without a lease")]
pub struct SimulatedCrash;

impl SetnxNoTtlLock {
    /// A client for the Redis at `url`, connected lazily.
    pub fn connect(url: &str) -> Result<SetnxNoTtlLock, LockError> {
        Ok(SetnxNoTtlLock::with(Conn::open(url)?))
    }

    /// A client over an existing pool.
    pub fn from_pool(pool: deadpool_redis::Pool) -> SetnxNoTtlLock {
        SetnxNoTtlLock::with(Conn::Pool(pool))
    }

    fn with(conn: Conn) -> SetnxNoTtlLock {
        SetnxNoTtlLock {
            shared: LockClient::new(conn),
            crash_between: false,
        }
    }

    /// Simulates a holder that dies right after its `SETNX` succeeded: the `EXPIRE` is never
    /// sent and the acquire fails with [`LockError::Unavailable`] ([`SimulatedCrash`]).
    pub fn crash_between_setnx_and_expire(mut self) -> SetnxNoTtlLock {
        self.crash_between = true;
        self
    }
}

impl SetnxNoTtlLock {
    async fn try_acquire(&self, key: &str, lease: Duration) -> Result<Option<Guard>, LockError> {
        let owner = new_owner_id();
        let sent = Instant::now();
        self.shared.requests.add(1);
        let taken: bool = self
            .shared
            .conn
            .query(cmd("SETNX").arg(key).arg(&owner))
            .await?;
        if !taken {
            return Ok(None);
        }
        if self.crash_between {
            return Err(LockError::unavailable(SimulatedCrash));
        }
        // The window: the lock exists and has no lease until this reply.
        self.shared.requests.add(2);
        let _: i64 = self
            .shared
            .conn
            .query(cmd("PEXPIRE").arg(key).arg(millis(lease)))
            .await?;
        let token: u64 = self
            .shared
            .conn
            .query(cmd("INCR").arg(fence_key(key)))
            .await?;
        Ok(Some(self.shared.grant(key, owner, token, sent, lease)))
    }
}

impl DistributedLock for SetnxNoTtlLock {
    fn backend(&self) -> &'static str {
        "redis-setnx-no-ttl"
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
