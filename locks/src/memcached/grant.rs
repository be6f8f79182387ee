//! One attempt to take the lock: `add`, draw a token, check the `add` still stands.
//!
//! `add key owner <ttl>` stores the item only if the key is absent: that is the whole mutual
//! exclusion, atomic in the server. The token comes from a second request (`ma`, memcached has no
//! scripts to put both in one), so a holder could in principle be paused between the two for
//! longer than its lease, while a second holder takes the lock and draws a token first; the
//! stale holder would then carry the *larger* token. The third request rules that out: it reads
//! the lock after drawing the token, and only if the item still holds this attempt's owner id
//! (which nobody else writes, and an expired item cannot come back) is the attempt a grant. The
//! token was then drawn while this grant held the lock, so every later grant draws a larger one,
//! and token order is grant order. A grant costs three round trips.
//!
//! An attempt dropped after its `add` succeeded (the acquire was cancelled or gave up) would
//! leave an item that blocks others until it expires, and memcached's whole-second expiry makes
//! that longer than the lease; so a dropped attempt deletes its item in the background (only if
//! it is still its own). That includes an attempt dropped with its `add` sent and its answer
//! not read: the server may still store it, even after a release sent later on another
//! connection (each connection is served on its own), so from the moment the `add` leaves
//! until it is answered `NOT_STORED` the attempt counts as one that may hold an item. (The
//! clean-up travels on another connection too: an `add` held up longer than the clean-up's two
//! round trips would still be stored after it, and block others until it expires.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_memcached::{AsciiProtocol, Error, Status};

use super::ownership::{Act, holds, if_owner};
use super::pool::{Pool, Pooled};
use super::{Shared, expiry_secs, fence};

/// The fencing token if `owner` was granted `key`, `None` if someone else holds it.
pub(super) async fn attempt(
    shared: &Arc<Shared>,
    key: &str,
    owner: &str,
    lease: Duration,
) -> Result<Option<u64>, crate::LockError> {
    let pending = Pending {
        shared: Arc::clone(shared),
        key: key.to_owned(),
        owner: owner.to_owned(),
        maybe_added: AtomicBool::new(false),
    };
    let pool = &shared.pool;
    let token = pool
        .run(|conn| add_and_draw(conn, pool, key, owner, lease, &pending.maybe_added))
        .await?;
    if token.is_some() {
        pending.maybe_added.store(false, Ordering::Relaxed);
    }
    Ok(token)
}

async fn add_and_draw(
    mut conn: Pooled<'_>,
    pool: &Pool,
    key: &str,
    owner: &str,
    lease: Duration,
    maybe_added: &AtomicBool,
) -> Result<Option<u64>, Error> {
    pool.count();
    // Until the answer says otherwise, the item may exist.
    maybe_added.store(true, Ordering::Relaxed);
    match conn.add(key, owner, Some(expiry_secs(lease)), None).await {
        Ok(()) => {}
        Err(Error::Protocol(Status::NotStored)) => {
            maybe_added.store(false, Ordering::Relaxed);
            return Ok(None);
        }
        Err(e) => return Err(e),
    }
    pool.count();
    let token = fence::next_token(&mut conn, key).await?;
    if !holds(&mut conn, pool, key, owner).await? {
        // Expired before the token was drawn: not a grant, and nothing left to clean up.
        maybe_added.store(false, Ordering::Relaxed);
        return Ok(None);
    }
    Ok(Some(token))
}

/// An attempt under way; if dropped while its item may exist (its `add` sent and not refused)
/// but is not yet a grant, deletes it.
struct Pending {
    shared: Arc<Shared>,
    key: String,
    owner: String,
    maybe_added: AtomicBool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.maybe_added.load(Ordering::Relaxed) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (shared, key, owner) = (
                Arc::clone(&self.shared),
                std::mem::take(&mut self.key),
                std::mem::take(&mut self.owner),
            );
            runtime.spawn(async move {
                if let Err(e) = if_owner(&shared.pool, &key, &owner, Act::Delete).await {
                    tracing::warn!(error = %e, "deleting the item of an abandoned memcached lock attempt failed");
                }
            });
        }
    }
}
