//! The unique-key lock made reentrant (`db-lock-reentrant`), as the articles build it: the row
//! names its owner, and a count of how often that owner entered it.
//!
//! **How.** Acquiring and waiting are the unique-key lock's ([`super::DbLock`]): insert the row,
//! poll while another owner's row is there, reap an expired one. The holder may then enter
//! again through its guard ([`DbReentrantLock::reenter`]): `UPDATE … SET holds = holds + 1
//! WHERE name = ? AND owner = ? AND expires_at > NOW(6)` — only the owner of the row, and only
//! while its lease lasts, gets another guard, with the same fencing token (one grant, entered
//! twice). Each guard's release gives one hold back; the last deletes the row. So an inner
//! section that releases does not free the lock under its outer one, which is what re-entry is
//! for.
//!
//! **Owner identity** is the acquisition's random id, as everywhere in this crate, not a
//! thread: the articles key re-entry on a thread (a `ThreadLocal` request id, a map from thread
//! to count), which async tasks that move between threads cannot use. Re-entering is asking
//! with the guard in hand; a second plain `acquire` by the same task is another owner and
//! waits like anyone else.
//!
//! **Safe while leases hold**, as the unique-key lock: the lease is not renewed, and re-entry
//! does not extend it (the article's count does not either). A holder whose lease passed is
//! refused re-entry (`Ok(None)`), and its releases no longer touch the row once a waiter reaped
//! it.

use std::sync::Arc;

use super::row::RowHeld;
use super::tables::Tables;
use super::{DbLock, Variant};
use crate::{AcquireOptions, Acquiring, DistributedLock, Guard, LockError};

/// The reentrant unique-key lock ([`crate::Backend::DbLockReentrant`]); see the module docs.
pub struct DbReentrantLock {
    lock: DbLock,
}

impl DbReentrantLock {
    /// A reentrant lock over `pool`'s database (tables as [`DbLock::create_table`] makes them,
    /// or `postgres::create_schema` on PostgreSQL).
    pub fn new(pool: impl Into<Tables>) -> DbReentrantLock {
        DbReentrantLock {
            lock: DbLock::new(pool.into(), Variant::Reentrant),
        }
    }

    /// Enters the lock `guard` holds once more: a new guard with the same owner and token, or
    /// `None` if the lock is no longer `guard`'s (its lease passed, or it was released). The
    /// lock is free again only when every guard of it was released.
    pub async fn reenter(&self, guard: &Guard) -> Result<Option<Guard>, LockError> {
        self.lock.count();
        let Some(id) = self.lock.pool.reenter(guard.key(), guard.owner()).await? else {
            return Ok(None);
        };
        let held = RowHeld::reentered(
            self.lock.pool.clone(),
            Arc::clone(&self.lock.requests),
            id,
            guard.owner().to_owned(),
            guard.lost_flag(),
        );
        let lost = held.lost();
        Ok(Some(Guard::new(
            guard.key(),
            guard.owner(),
            guard.fencing_token(),
            lost,
            Box::new(held),
        )))
    }
}

impl DistributedLock for DbReentrantLock {
    fn backend(&self) -> &'static str {
        self.lock.backend()
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        self.lock.acquire(key, options)
    }

    fn backend_requests(&self) -> u64 {
        self.lock.backend_requests()
    }
}
