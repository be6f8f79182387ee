//! What the locks held by an open transaction share ([`super::DbRowLock`],
//! [`super::DbInsertLock`]): a connection of the pool per acquisition, the transaction open on
//! it, the session's idle timeout as the lease, and how each of them ends.
//!
//! **A connection per holder and per waiter.** The lock is InnoDB's row lock, and a row lock
//! belongs to a transaction, which belongs to a session: an acquire checks a connection out of
//! the pool, opens a transaction, and runs the statement that takes the row lock — blocked in
//! it while someone else holds the lock. The holder keeps the connection until it releases
//! (`COMMIT`). So a pool of N connections serves at most N holders and waiters of all lock
//! names together, and an acquire that finds every connection taken fails with
//! [`LockError::Unavailable`] when its budget ends, though the lock it wanted may be free. Give
//! the lock a pool of its own, sized for the waiters, or bound the wait.
//!
//! **The wait is bounded twice.** The server bounds the blocked statement (`FOR UPDATE WAIT n`,
//! `SET STATEMENT innodb_lock_wait_timeout = n FOR …`, 0 for a try: `NOWAIT`), but only in whole
//! seconds, rounded up; the client gives up at its exact budget by closing the connection. A
//! session whose statement is still waiting when the client gives up (or drops the acquire)
//! is never returned to the pool: it is closed, and the server ends it when the statement
//! returns — within the rounded-up second, or at once if the lock was granted meanwhile: the
//! server then writes the answer, finds the connection closed, and rolls back.
//!
//! **The lease is the session's idle timeout.** A holder whose *connection closes* — its
//! process killed, its client dropped — loses the lock at once: the server rolls its
//! transaction back. A holder that *goes silent* with its connection open — frozen, or cut off
//! by a partition — would keep it until the server notices, after `wait_timeout` (8 hours by
//! default) or TCP's keep-alive. So the acquire sets the session's `wait_timeout` to the lease
//! (whole seconds, rounded up), and while the guard and its client live a task pings the
//! session every third of the lease: a live holder keeps its lock, a silent one loses it one
//! lease after its last ping. A ping that fails or goes unanswered for a lease fires the
//! guard's `lost()`, and the session is closed, never reused. The release restores the
//! server's default `wait_timeout` before the connection goes back to the pool.
//!
//! **Re-entry** runs the locking statement again in the holder's own transaction, which InnoDB
//! answers at once (a transaction never waits for its own lock); the database counts nothing,
//! and one `COMMIT` would end every entry. So the guards of one acquisition share a hold count
//! here, and only the last release commits.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sqlx::pool::PoolConnection;
use sqlx::{Connection, MySql, MySqlConnection, MySqlPool};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{is_busy, is_deadlock};
use crate::held_session::{self, Acquisition};
use crate::options::budgeted;
use crate::{
    AcquireOptions, Acquiring, Backend, DistributedLock, Guard, Held, LockError, new_owner_id,
};

/// The statement that takes a transaction-held lock; what the backends differ in. Implemented in
/// this crate only (the module is private).
pub trait LockStatement: Send + Sync + 'static {
    const BACKEND: Backend;
    /// Statements `lock` sends (for [`crate::DistributedLock::backend_requests`]).
    const STATEMENTS: u64;

    /// In the transaction open on `conn`, takes the row lock of `key`, waiting at most `wait`
    /// whole seconds (0: not at all), then draws the fencing token: the token and the session's
    /// connection id, or `None` if the lock's row does not exist.
    fn lock<'c>(
        conn: &'c mut MySqlConnection,
        key: &'c str,
        wait: u64,
    ) -> BoxFuture<'c, Result<Option<Taken>, sqlx::Error>>;

    /// Creates the row of `key` outside a transaction, after `lock` found none, waiting at most
    /// `wait` whole seconds for a session that created it and locks it.
    fn create<'c>(
        conn: &'c mut MySqlConnection,
        key: &'c str,
        wait: u64,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>>;
}

/// A row lock taken: the fencing token drawn after it, and the session holding it.
#[derive(Debug, Clone, Copy)]
pub struct Taken {
    pub(super) token: u64,
    pub(super) connection: u64,
}

/// How one client's blocked lock statements were answered by the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waits {
    /// Granted the lock.
    pub granted: u64,
    /// Refused when the server's wait (or a try's none) ran out.
    pub refused: u64,
    /// Rolled back as the victim of a deadlock (and tried again while the budget lasted).
    pub deadlocks: u64,
}

/// The database session (connection id) holding `guard`'s lock, for a lock held by a
/// transaction: what `KILL` takes to end it by hand. The guard's owner id ends in it.
pub fn session_of(guard: &Guard) -> Option<u64> {
    guard.owner().rsplit_once('@')?.1.parse().ok()
}

/// A lock held by an open transaction, taking its row lock with the statement `S`:
/// [`super::DbRowLock`], [`super::DbInsertLock`]. Every holder and every waiter keeps one of
/// the pool's connections; see the module docs of `database` and of each lock.
pub struct TransactionLock<S> {
    pool: MySqlPool,
    requests: Arc<AtomicU64>,
    waits: Arc<Mutex<Waits>>,
    /// The holdings of this client, by owner: what [`TransactionLock::reenter`] finds a
    /// guard's in.
    holdings: Arc<Mutex<HashMap<String, Weak<Holding>>>>,
    /// Dropped with the client; its holdings' keep-alive tasks stop pinging then.
    alive: watch::Sender<()>,
    statement: PhantomData<S>,
}

impl<S: LockStatement> TransactionLock<S> {
    /// A lock over `pool`'s database (tables as [`super::DbLock::create_table`] makes them).
    pub fn new(pool: MySqlPool) -> TransactionLock<S> {
        TransactionLock {
            pool,
            requests: Arc::new(AtomicU64::new(0)),
            waits: Arc::default(),
            holdings: Arc::default(),
            alive: watch::Sender::new(()),
            statement: PhantomData,
        }
    }

    /// How this client's locking statements were answered so far.
    pub fn waits(&self) -> Waits {
        *lock(&self.waits)
    }

    fn answered(&self, e: Option<&sqlx::Error>) {
        let mut waits = lock(&self.waits);
        match e {
            None => waits.granted += 1,
            Some(e) if is_deadlock(e) => waits.deadlocks += 1,
            Some(_) => waits.refused += 1,
        }
    }

    fn acquire_within_budget<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        budgeted(key, options, async move {
            let Acquisition {
                started,
                deadline,
                conn,
            } = Acquisition::begin(&self.pool, key, options).await?;
            let timeout = || LockError::waited_since(key, started);
            let mut session = Session::new(conn, Arc::clone(&self.requests));
            loop {
                let wait = deadline.map_or(0, whole_seconds_until);
                session.begin(options.lease).await?;
                self.requests.fetch_add(S::STATEMENTS, Ordering::Relaxed);
                let locking = S::lock(session.conn(), key, wait);
                // At the budget's end the session is dropped with its statement, and closed.
                let answer = match deadline {
                    Some(deadline) => tokio::time::timeout_at(deadline.into(), locking)
                        .await
                        .map_err(|_| timeout())?,
                    None => locking.await,
                };
                match answer {
                    Ok(Some(taken)) => {
                        self.answered(None);
                        return Ok(self.hold(session, key, taken, options.lease));
                    }
                    Ok(None) => {
                        session.end("ROLLBACK").await?;
                        self.requests.fetch_add(1, Ordering::Relaxed);
                        match S::create(session.conn(), key, wait).await {
                            // The row exists now (rows are never deleted): lock it.
                            Ok(()) => continue,
                            // Someone created it and holds it.
                            Err(e) if is_busy(&e) => self.answered(Some(&e)),
                            Err(e) => return Err(LockError::unavailable(e)),
                        }
                    }
                    Err(e) if is_busy(&e) => {
                        self.answered(Some(&e));
                        session.end("ROLLBACK").await?;
                    }
                    Err(e) => return Err(LockError::unavailable(e)),
                }
                if deadline.is_none_or(|d| Instant::now() >= d) {
                    return Err(timeout());
                }
            }
        })
    }

    /// The guard of a lock just taken on `session`, whose keep-alive task starts now.
    fn hold(&self, session: Session, key: &str, taken: Taken, lease: Duration) -> Guard {
        let owner = format!("{}@{}", new_owner_id(), taken.connection);
        let (lost, lost_flag) = watch::channel(false);
        let holding = Arc::new(Holding {
            key: key.to_owned(),
            owner: owner.clone(),
            token: taken.token,
            session: tokio::sync::Mutex::new(Some(session)),
            holds: Mutex::new(1),
            lost,
            keepalive: Mutex::new(None),
            holdings: Arc::clone(&self.holdings),
        });
        let (held, requests, client) = (
            Arc::clone(&holding),
            Arc::clone(&self.requests),
            self.alive.subscribe(),
        );
        // Keeps the holder's session alive while the client lives; fires `lost()` when that
        // ends it.
        let keepalive = tokio::spawn(async move {
            let (session, key, lost) = (&held.session, &held.key, &held.lost);
            held_session::keep_alive(session, key, &requests, lease, client, Session::ping, lost)
                .await
        });
        *lock(&holding.keepalive) = Some(keepalive);
        lock(&self.holdings).insert(owner.clone(), Arc::downgrade(&holding));
        Guard::new(key, owner, taken.token, lost_flag, Box::new(Hold(holding)))
    }

    /// Enters the lock `guard` holds once more, by running its statement again in the holder's
    /// transaction (answered at once: a transaction never waits for its own lock). A guard of
    /// the same acquisition and token, or `None` if `guard`'s lock is gone (released, lost) or
    /// was not taken through this client. The transaction commits when the last of the guards
    /// is released.
    pub async fn reenter(&self, guard: &Guard) -> Result<Option<Guard>, LockError> {
        let holding = lock(&self.holdings)
            .get(guard.owner())
            .and_then(Weak::upgrade);
        let Some(holding) = holding.filter(|h| h.key == guard.key()) else {
            return Ok(None);
        };
        let mut session = holding.session.lock().await;
        let Some(open) = session.as_mut() else {
            return Ok(None);
        };
        self.requests.fetch_add(S::STATEMENTS, Ordering::Relaxed);
        match S::lock(open.conn(), &holding.key, 0).await {
            Ok(Some(_)) => {
                *lock(&holding.holds) += 1;
                let lost = holding.lost.subscribe();
                let (key, owner, token) = (guard.key(), guard.owner(), holding.token);
                drop(session);
                Ok(Some(Guard::new(
                    key,
                    owner,
                    token,
                    lost,
                    Box::new(Hold(holding)),
                )))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                // The session is broken or no longer ours: it ends here.
                *session = None;
                let _ = holding.lost.send(true);
                Err(LockError::unavailable(e))
            }
        }
    }
}

impl<S: LockStatement> DistributedLock for TransactionLock<S> {
    fn backend(&self) -> &'static str {
        S::BACKEND.name()
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        self.acquire_within_budget(key, options)
    }

    fn backend_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// One acquisition's hold: its session, shared by the guards of its re-entries.
struct Holding {
    key: String,
    owner: String,
    token: u64,
    /// `None` once released or lost.
    session: tokio::sync::Mutex<Option<Session>>,
    /// Guards of this acquisition not yet released.
    holds: Mutex<u32>,
    lost: watch::Sender<bool>,
    keepalive: Mutex<Option<JoinHandle<()>>>,
    holdings: Arc<Mutex<HashMap<String, Weak<Holding>>>>,
}

/// A guard's share of a [`Holding`].
struct Hold(Arc<Holding>);

impl Held for Hold {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        Box::pin(async move {
            let holding = self.0;
            let lost = *holding.lost.borrow();
            let last = {
                let mut holds = lock(&holding.holds);
                *holds = holds.saturating_sub(1);
                *holds == 0
            };
            if !last {
                return Ok(!lost);
            }
            if let Some(keepalive) = lock(&holding.keepalive).take() {
                keepalive.abort();
            }
            lock(&holding.holdings).remove(&holding.owner);
            let session = holding.session.lock().await.take();
            match session {
                Some(mut session) => Ok(session.end("COMMIT").await.is_ok() && !lost),
                None => Ok(false),
            }
        })
    }
}

/// A pooled connection with a transaction possibly open on it. Returned to the pool only in a
/// known state (no transaction, the server's `wait_timeout`); dropped in any other, it is closed,
/// so that nobody else ever runs in a transaction that holds a lock.
struct Session {
    conn: Option<PoolConnection<MySql>>,
    requests: Arc<AtomicU64>,
    /// A transaction may be open, or a statement under way.
    dirty: bool,
}

impl Session {
    fn new(conn: PoolConnection<MySql>, requests: Arc<AtomicU64>) -> Session {
        Session {
            conn: Some(conn),
            requests,
            dirty: false,
        }
    }

    fn conn(&mut self) -> &mut MySqlConnection {
        self.conn
            .as_mut()
            .expect("a session's connection lives until it is dropped")
    }

    /// Opens the transaction, with the session's idle timeout set to `lease`.
    async fn begin(&mut self, lease: Duration) -> Result<(), LockError> {
        self.dirty = true;
        let seconds = lease.as_secs_f64().ceil().max(1.0) as u64;
        let sql = format!("SET SESSION wait_timeout = {seconds}; START TRANSACTION");
        self.run(sqlx::AssertSqlSafe(sql)).await
    }

    /// Ends the transaction with `end` (`ROLLBACK` or `COMMIT`) and gives the session back the
    /// server's idle timeout: fit for the pool again.
    async fn end(&mut self, end: &'static str) -> Result<(), LockError> {
        let sql = format!("{end}; SET SESSION wait_timeout = DEFAULT");
        self.run(sqlx::AssertSqlSafe(sql)).await?;
        self.dirty = false;
        Ok(())
    }

    fn ping(&mut self) -> BoxFuture<'_, Result<(), sqlx::Error>> {
        Box::pin(self.conn().ping())
    }

    async fn run(&mut self, sql: impl sqlx::SqlSafeStr) -> Result<(), LockError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        sqlx::raw_sql(sql)
            .execute(self.conn())
            .await
            .map_err(LockError::unavailable)?;
        Ok(())
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

/// Whole seconds from now to `deadline`, rounded up (0 if it passed): what a server-side lock
/// wait can express of the rest of a budget.
fn whole_seconds_until(deadline: Instant) -> u64 {
    let left = deadline.saturating_duration_since(Instant::now());
    left.as_secs() + u64::from(left.subsec_nanos() > 0)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
