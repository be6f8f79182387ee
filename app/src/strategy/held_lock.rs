//! A lock held around a purchase's transaction, given back only once the transaction's outcome
//! is known.
//!
//! Releasing right after the critical section is wrong in two cases, both of which let the next
//! holder read the stock *before* this purchase lands and then write an absolute value over it
//! (a lost update, and with it an oversell):
//!
//! * the handler is dropped while the `COMMIT` is in flight (the client disconnected): the
//!   guard's drop would release at once, though the server may still commit;
//! * `COMMIT` fails in transit: the server may have committed before the connection broke.
//!
//! In both cases the outcome settles on the server within moments (it commits, or rolls back
//! when it notices the broken connection), but this process cannot know when. So the lock is
//! kept for one more lease and only then given back — what "let the lease run out" means for a
//! lock that a watchdog or a session would otherwise keep alive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::db::engine::Tx;
use locks::Guard;

/// Commits `tx` with `in_doubt` set from the moment the `COMMIT` is sent until its outcome is
/// known: cleared when it succeeded or the server answered it with a rollback (a Galera
/// certification failure), kept when its answer was lost, and when the future is dropped in
/// between. What a lock holder needs to know before it may give its lock back.
pub(crate) async fn commit_in_doubt(tx: Tx<'_>, in_doubt: &AtomicBool) -> Result<(), sqlx::Error> {
    in_doubt.store(true, Ordering::SeqCst);
    let committed = tx.commit().await;
    let known = match &committed {
        Ok(()) => true,
        Err(e) => crate::db::errors::rolled_back_at_commit(e),
    };
    if known {
        in_doubt.store(false, Ordering::SeqCst);
    }
    committed
}

pub(crate) struct HeldLock {
    guard: Option<Guard>,
    /// Set while a commit's outcome is unknown (see [`super::outcome::place_in_doubt`]).
    pub(crate) in_doubt: AtomicBool,
    /// How long to keep an in-doubt lock: the lease.
    settle: Duration,
}

impl HeldLock {
    pub(crate) fn new(guard: Guard, settle: Duration) -> HeldLock {
        HeldLock {
            guard: Some(guard),
            in_doubt: AtomicBool::new(false),
            settle,
        }
    }

    /// Gives the lock back now, or one lease from now if the commit's outcome is unknown.
    pub(crate) async fn finish(mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        if self.in_doubt.load(Ordering::SeqCst) {
            release_later(guard, self.settle);
            return;
        }
        let (key, token) = (guard.key().to_string(), guard.fencing_token());
        match guard.release().await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                key,
                token,
                "the lock was no longer ours at release: the critical section outlived the lease"
            ),
            Err(e) => tracing::warn!(key, token, error = %e, "lock release failed"),
        }
    }
}

impl Drop for HeldLock {
    /// A dropped purchase (the client went away): an in-doubt lock is kept for a lease; any
    /// other is released by the guard's own drop, since no commit was under way.
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take()
            && self.in_doubt.load(Ordering::SeqCst)
        {
            release_later(guard, self.settle);
        }
    }
}

fn release_later(guard: Guard, settle: Duration) {
    tracing::warn!(
        key = guard.key(),
        token = guard.fencing_token(),
        ?settle,
        "commit outcome unknown: keeping the lock for one more lease before giving it back"
    );
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                tokio::time::sleep(settle).await;
                let _ = guard.release().await;
            });
        }
        // No runtime to wait on: never release early; the lease or session ends it.
        Err(_) => std::mem::forget(guard),
    }
}
