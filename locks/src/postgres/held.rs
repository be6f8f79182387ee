//! What the two advisory locks share once granted: the holder's connection, kept out of the
//! pool while it holds; a task that keeps its session alive; and how the hold ends.
//!
//! **Out of the pool while held.** A session lock belongs to the session, and a session that
//! takes a lock it holds is granted it again at once. So a holder's connection never goes back
//! to the pool while it holds: another acquire checking it out would be "granted" a held lock.
//! It goes back only once its lock is known to be released — the unlock answered `true`, or
//! the transaction committed — and otherwise it is closed, which ends the session and every lock
//! of it.
//!
//! **The lease is the server's idle timeout.** Once granted, the session's
//! `idle_session_timeout` (session lock) or `idle_in_transaction_session_timeout` (transaction
//! lock) is the lease: a holder that goes silent with its connection open — frozen, or cut off
//! — is disconnected by the server one lease after its last statement, and its lock freed. While
//! the guard and its client live, a task runs a statement every third of the lease, so a live
//! holder keeps its lock. A statement that fails or goes unanswered for a lease fires the
//! guard's `lost()`, and the session is closed, never reused; after the client's drop, the same
//! happens one lease after the last ping, as the server would do.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::held_session;
use crate::{Guard, Held, LockError, new_owner_id};

/// The server process (`pg_backend_pid()`) of the session holding `guard`'s lock, for a guard
/// of this module's locks: what `pg_terminate_backend` takes to end it by hand. The guard's
/// owner id ends in it.
pub fn session_of(guard: &Guard) -> Option<i32> {
    guard.owner().rsplit_once('@')?.1.parse().ok()
}

/// How a hold ends when its guard is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// `pg_advisory_unlock`, then the server's idle timeout again.
    Unlock,
    /// `COMMIT`, which ends the transaction and every transaction lock of it.
    Commit,
}

/// A lock just granted on `session`: the fencing token, and the server process of the session.
pub(super) struct Granted {
    pub(super) token: u64,
    pub(super) pid: i32,
}

/// The guard of `key`'s lock granted on `session`, whose keep-alive task starts now.
pub(super) fn hold(
    session: Session,
    key: &str,
    granted: Granted,
    lease: Duration,
    ending: Ending,
    client: watch::Receiver<()>,
) -> Guard {
    let owner = format!("{}@{}", new_owner_id(), granted.pid);
    let requests = Arc::clone(&session.requests);
    let (lost, lost_flag) = watch::channel(false);
    let holding = Arc::new(Holding {
        key: key.to_owned(),
        ending,
        session: tokio::sync::Mutex::new(Some(session)),
        lost,
        keepalive: Mutex::new(None),
    });
    let held = Arc::clone(&holding);
    // Keeps the holder's session alive while the client lives; fires `lost()` when that ends it.
    let keepalive = tokio::spawn(async move {
        let (session, key, lost) = (&held.session, &held.key, &held.lost);
        held_session::keep_alive(session, key, &requests, lease, client, Session::ping, lost).await
    });
    *lock(&holding.keepalive) = Some(keepalive);
    Guard::new(
        key,
        owner,
        granted.token,
        lost_flag,
        Box::new(Hold(holding)),
    )
}

/// One acquisition's hold.
struct Holding {
    key: String,
    ending: Ending,
    /// `None` once released or lost.
    session: tokio::sync::Mutex<Option<Session>>,
    lost: watch::Sender<bool>,
    keepalive: Mutex<Option<JoinHandle<()>>>,
}

/// A guard's [`Holding`].
struct Hold(Arc<Holding>);

impl Held for Hold {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        Box::pin(async move {
            let holding = self.0;
            if let Some(keepalive) = lock(&holding.keepalive).take() {
                keepalive.abort();
            }
            let lost = *holding.lost.borrow();
            let session = holding.session.lock().await.take();
            match session {
                Some(mut session) => Ok(session.end(&holding.key, holding.ending).await && !lost),
                None => Ok(false),
            }
        })
    }
}

/// A pooled connection that may hold a lock. Returned to the pool only once it is known to hold
/// none, with the server's default timeouts; dropped in any other state it is closed, so that
/// nobody else ever runs in a session that holds a lock.
pub(super) struct Session {
    conn: Option<PoolConnection<Postgres>>,
    requests: Arc<AtomicU64>,
    /// A lock may be held, or a statement that takes one is under way.
    dirty: bool,
}

impl Session {
    pub(super) fn new(conn: PoolConnection<Postgres>, requests: Arc<AtomicU64>) -> Session {
        Session {
            conn: Some(conn),
            requests,
            dirty: false,
        }
    }

    pub(super) fn conn(&mut self) -> &mut PgConnection {
        self.conn
            .as_mut()
            .expect("a session's connection lives until it is dropped")
    }

    /// A statement, which restarts the server's idle timeout (as any message would; a query
    /// leaves no doubt).
    fn ping(&mut self) -> BoxFuture<'_, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::raw_sql("SELECT 1").execute(self.conn()).await?;
            Ok(())
        })
    }

    /// Counts requests to the server.
    pub(super) fn count(&self, statements: u64) {
        self.requests.fetch_add(statements, Ordering::Relaxed);
    }

    /// From now on the session may hold a lock: it is closed unless [`Session::clean`] is called.
    pub(super) fn taint(&mut self) {
        self.dirty = true;
    }

    /// The session is known to hold no lock, with the server's default timeouts: fit for the
    /// pool again.
    pub(super) fn clean(&mut self) {
        self.dirty = false;
    }

    /// Ends the hold of `key` as `ending` says; whether the lock was released by it (else the
    /// session is closed when dropped, which frees whatever it held).
    async fn end(&mut self, key: &str, ending: Ending) -> bool {
        let released = match ending {
            Ending::Unlock => {
                self.count(2);
                let unlocked = sqlx::query_scalar::<_, bool>(
                    "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
                )
                .persistent(false)
                .bind(key)
                .fetch_one(self.conn())
                .await;
                match unlocked {
                    Ok(true) => sqlx::raw_sql("RESET idle_session_timeout")
                        .execute(self.conn())
                        .await
                        .is_ok(),
                    _ => false,
                }
            }
            Ending::Commit => {
                self.count(1);
                sqlx::raw_sql("COMMIT").execute(self.conn()).await.is_ok()
            }
        };
        if released {
            self.clean();
        }
        released
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.dirty
        {
            // Out of the pool, and the socket closed as the detached connection drops.
            drop(conn.detach());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
