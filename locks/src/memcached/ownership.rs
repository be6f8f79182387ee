//! Acting on a lock only while it is one's own: read the holder and the item's CAS value
//! (`mg <key> v c`, the meta form of `gets`), and if the holder is this owner, delete or rewrite
//! the item *on condition that its CAS value is unchanged* (`md <key> C<cas>`, `ms <key> … C<cas>
//! T<ttl>`). Any change in between — an expiry and someone else's `add`, which gets a new CAS
//! value — makes memcached refuse (`EX` or `NF`), so another holder's lock is never touched.
//!
//! The classic text protocol has `cas` but no conditional delete: release would have to `cas` the
//! item to an already-expired one. memcached ≥ 1.6 answers the meta commands, whose `md` takes
//! `C<cas>`, so that is what is used. A refusal is read again: it may have been this owner's own
//! extend that changed the CAS value meanwhile.

use async_memcached::{Error, MetaProtocol, Status};

use super::expiry_secs;
use super::pool::{Pool, Pooled};
use std::time::Duration;

/// What to do with one's own lock.
#[derive(Clone, Copy)]
pub(super) enum Act {
    Delete,
    /// Rewrite it with a new time to live.
    Extend(Duration),
}

/// Does `act` on `key` if `owner` holds it; whether it did.
pub(super) async fn if_owner(
    pool: &Pool,
    key: &str,
    owner: &str,
    act: Act,
) -> Result<bool, crate::LockError> {
    pool.run(|mut conn| async move {
        loop {
            let Some(cas) = owners_cas(&mut conn, pool, key, owner).await? else {
                return Ok(false);
            };
            pool.count();
            let condition = format!("C{cas}");
            let outcome = match act {
                Act::Delete => conn
                    .meta_delete(key, false, None, Some(&[&condition]))
                    .await
                    .map(drop),
                Act::Extend(lease) => {
                    let ttl = format!("T{}", expiry_secs(lease));
                    conn.meta_set(key, owner, false, None, Some(&[&condition, &ttl]))
                        .await
                        .map(drop)
                }
            };
            match outcome {
                Ok(()) => return Ok(true),
                // Changed since it was read: read again.
                Err(Error::Protocol(Status::Exists)) => continue,
                Err(Error::Protocol(Status::NotFound)) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    })
    .await
}

/// The CAS value of `key` if `owner` holds it.
async fn owners_cas(
    conn: &mut Pooled<'_>,
    pool: &Pool,
    key: &str,
    owner: &str,
) -> Result<Option<u64>, Error> {
    pool.count();
    let item = conn.meta_get(key, false, None, Some(&["v", "c"])).await?;
    Ok(item
        .filter(|item| item.data.as_deref() == Some(owner.as_bytes()))
        .and_then(|item| item.cas))
}

/// Whether `owner` still holds `key` (one `mg`).
pub(super) async fn holds(
    conn: &mut Pooled<'_>,
    pool: &Pool,
    key: &str,
    owner: &str,
) -> Result<bool, Error> {
    pool.count();
    let item = conn.meta_get(key, false, None, Some(&["v"])).await?;
    Ok(item.is_some_and(|item| item.data.as_deref() == Some(owner.as_bytes())))
}
