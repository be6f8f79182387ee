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
//! An attempt must never leave an item behind that nobody holds: memcached's whole-second expiry
//! would block every other client for longer than the lease. So an attempt, once begun, runs to
//! its answer in a task of its own, whether or not anyone still waits for it (the acquire may
//! be cancelled or give up meanwhile). If its `add` was stored and the grant is not taken — the
//! acquire is gone, or a later request failed — the task deletes the item (only if it is still
//! its own). It does so *after* the `add` was answered, so the item's fate is settled: a delete
//! sent on another connection while the `add` was still on its way could arrive first (memcached
//! serves each connection on its own) and leave the late `add` stored.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_memcached::{AsciiProtocol, Error, Status};
use tokio::sync::oneshot;

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
    let (answer, answered) = oneshot::channel();
    let (shared, key, owner) = (Arc::clone(shared), key.to_owned(), owner.to_owned());
    tokio::spawn(async move {
        let maybe_added = AtomicBool::new(false);
        let pool = &shared.pool;
        let outcome = pool
            .run(|conn| add_and_draw(conn, pool, &key, &owner, lease, &maybe_added))
            .await;
        let granted = matches!(outcome, Ok(Some(_)));
        let taken = answer.send(outcome).is_ok();
        if maybe_added.load(Ordering::Relaxed)
            && !(granted && taken)
            && let Err(e) = if_owner(pool, &key, &owner, Act::Delete).await
        {
            tracing::warn!(error = %e, "deleting the item of an abandoned memcached lock attempt failed");
        }
    });
    // Only a runtime shutting down drops the task before it answers.
    answered
        .await
        .unwrap_or_else(|e| Err(crate::LockError::unavailable(e)))
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
