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

use std::time::Duration;

use deadpool_redis::redis::cmd;

use super::single_instance::{LockClient, SingleInstanceLock, Variant};
use super::{fence_key, millis};
use crate::{Backend, LockError};

/// `SETNX` + separate `PEXPIRE`; see the module docs.
pub type SetnxNoTtlLock = SingleInstanceLock<SetnxNoTtl>;

/// The simulated crash, as the error the "crashed" acquire returns.
#[derive(Debug, thiserror::Error)]
#[error("simulated crash between SETNX and EXPIRE: the lock was taken without a lease")]
pub struct SimulatedCrash;

/// The two-command acquire, optionally "crashing" between the commands.
#[derive(Debug, Default)]
pub struct SetnxNoTtl {
    crash_between: bool,
}

impl SetnxNoTtlLock {
    /// Simulates a holder that dies right after its `SETNX` succeeded: the `EXPIRE` is never
    /// sent and the acquire fails with [`LockError::Unavailable`] ([`SimulatedCrash`]).
    pub fn crash_between_setnx_and_expire(mut self) -> SetnxNoTtlLock {
        self.variant.crash_between = true;
        self
    }
}

impl Variant for SetnxNoTtl {
    const BACKEND: Backend = Backend::RedisSetnxNoTtl;
    const IN_LINE: bool = false;

    async fn try_acquire(
        &self,
        client: &LockClient,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<u64>, LockError> {
        let taken: bool = client.query(cmd("SETNX").arg(key).arg(owner)).await?;
        if !taken {
            return Ok(None);
        }
        if self.crash_between {
            return Err(LockError::unavailable(SimulatedCrash));
        }
        // The window: the lock exists and has no lease until this reply.
        let _: i64 = client
            .query(cmd("PEXPIRE").arg(key).arg(millis(lease)))
            .await?;
        let token = client.query(cmd("INCR").arg(fence_key(key))).await?;
        Ok(Some(token))
    }
}
