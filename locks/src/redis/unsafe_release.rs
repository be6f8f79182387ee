//! BROKEN ON PURPOSE: a correct acquire, released by a plain `DEL`.
//!
//! The acquire is the plain lock's (`SET NX PX` + fence, one script). The release just
//! deletes the key, without checking that the value is still this holder's id. That is fine
//! until a holder outlives its lease: its key expires, B acquires, and then A, finishing late,
//! sends `DEL` — which deletes *B's* lock. C now acquires while B is still inside: two holders
//! at once, created by a release. It cascades: B's own `DEL` later frees C's lock, and so on.
//! Worse, A's release reports success, so A never learns it was late. The fix is the
//! compare-and-delete script (`plain.rs`): delete only if the value is still mine.

use deadpool_redis::redis::cmd;

use super::single_instance::{LockClient, SingleInstanceLock, Variant};
use crate::{Backend, LockError};

/// Correct acquire, token-blind release; see the module docs.
pub type UnsafeReleaseLock = SingleInstanceLock<UnsafeRelease>;

/// The correct acquire (the default) with a `DEL` release.
#[derive(Debug, Default)]
pub struct UnsafeRelease;

impl Variant for UnsafeRelease {
    const BACKEND: Backend = Backend::RedisUnsafeRelease;
    const IN_LINE: bool = false;

    /// `DEL key`, whoever holds it; "owned" means "a key was deleted", which is the lie.
    async fn release(client: &LockClient, key: &str, _owner: &str) -> Result<bool, LockError> {
        let deleted: i64 = client.query(cmd("DEL").arg(key)).await?;
        Ok(deleted == 1)
    }
}
