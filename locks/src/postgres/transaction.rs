//! What PostgreSQL's three locks held by an open transaction share: the transaction advisory
//! lock (`advisory_xact.rs`), the row lock of `SELECT … FOR UPDATE` (`row_lock.rs`) and the
//! blocking upsert (`blocking_insert.rs`). Each differs only in the statement that takes it.
//!
//! **How.** Acquire checks a connection out of the pool, opens a transaction whose
//! `idle_in_transaction_session_timeout` is the lease and whose `lock_timeout` is what is left
//! of the wait budget (in milliseconds), and runs the lock's statement, which answers the
//! fencing token and the session's server process once the lock is granted. The statement
//! blocks while another transaction holds the lock; the server queues the waiters and wakes the
//! first when the holder's transaction ends, so waiting costs no polling, but a connection per
//! waiter. `lock_timeout` running out (SQLSTATE 55P03) is the wait budget passing. Release =
//! `COMMIT`.
//!
//! **Safe while its transaction lasts.** The lock ends with the transaction that took it: a
//! holder whose connection closes, whose session the server ends (the lease), or whose
//! transaction is rolled back for any reason holds nothing any more. A holder paused past its
//! lease loses the lock while it believes it still holds: use the fencing token. The price is
//! a transaction open for as long as the lock is held, which keeps the server from vacuuming
//! rows that died meanwhile.

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::watch;

use super::held::{Ending, Granted, Session, hold};
use super::{is_lock_timeout, millis};
use crate::held_session::Acquisition;
use crate::options::budgeted;
use crate::{AcquireOptions, Acquiring, Backend, DistributedLock, Guard, LockError};

/// How long past the wait budget an acquire waits for the server's own answer that the budget
/// passed (`lock_timeout`), which leaves the connection fit for the pool, before it gives up and
/// closes the connection.
const ANSWER_MARGIN: Duration = Duration::from_millis(250);

/// The `lock_timeout` of a try that has no form of its own that refuses at once: a
/// millisecond (0 would turn the timeout off).
const TRY_MS: u64 = 1;

/// The statement that takes one of the locks, and what its answers mean.
pub trait TakeStatement: Send + Sync + 'static {
    const BACKEND: Backend;
    /// The statement that takes the lock named `$1` and answers `(token, pid)` once it is
    /// granted; `waits`: whether it may wait for it (else a try, which refuses at once or is
    /// bounded by a [`TRY_MS`] `lock_timeout`). No row answered: a try refused, or the name's
    /// row is missing ([`TakeStatement::CREATE`]).
    fn take(waits: bool) -> &'static str;
    /// The statement that makes the name's row, run in a transaction of its own when the take
    /// answered no row; `None` for a lock that needs no row.
    const CREATE: Option<&'static str>;
}

/// A PostgreSQL lock held by an open transaction; see the module docs.
pub struct PgTransactionLock<S> {
    pool: PgPool,
    requests: Arc<AtomicU64>,
    /// Dropped with the client; the keep-alive tasks of its holders stop pinging then.
    alive: watch::Sender<()>,
    statement: PhantomData<S>,
}

/// What one try of the lock's statement came to.
enum Taken {
    Granted(Guard),
    Refused,
    /// The name's row did not exist: made now, to be taken again.
    Made,
}

impl<S: TakeStatement> PgTransactionLock<S> {
    /// A lock over `pool`'s database, whose tables and fencing sequence
    /// [`super::create_schema`] made. Every holder and every waiter keeps one of the pool's
    /// connections: a pool whose connections all hold or wait cannot take a lock that is free.
    pub fn new(pool: PgPool) -> PgTransactionLock<S> {
        PgTransactionLock {
            pool,
            requests: Arc::new(AtomicU64::new(0)),
            alive: watch::Sender::new(()),
            statement: PhantomData,
        }
    }

    async fn attempt(&self, key: &str, options: AcquireOptions) -> Result<Guard, LockError> {
        let Acquisition {
            started,
            deadline,
            conn,
        } = Acquisition::begin(&self.pool, key, options).await?;
        let timeout = || LockError::waited_since(key, started);
        let mut session = Session::new(conn, Arc::clone(&self.requests));
        loop {
            match self.take(session, key, options, deadline).await? {
                Taken::Granted(guard) => return Ok(guard),
                Taken::Refused => return Err(timeout()),
                Taken::Made => {}
            }
            session = Session::new(
                (self.pool.acquire().await).map_err(LockError::unavailable)?,
                Arc::clone(&self.requests),
            );
        }
    }

    /// One transaction that runs the lock's statement on `session`.
    async fn take(
        &self,
        mut session: Session,
        key: &str,
        options: AcquireOptions,
        deadline: Option<Instant>,
    ) -> Result<Taken, LockError> {
        session.taint();
        // Whole milliseconds, formatted from numbers: nothing of the caller's reaches the SQL.
        let lease = millis(options.lease);
        let wait = match deadline {
            Some(d) => millis(d.saturating_duration_since(Instant::now())),
            None => TRY_MS,
        };
        session.count(1);
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "BEGIN; SET LOCAL idle_in_transaction_session_timeout = {lease}; \
             SET LOCAL lock_timeout = {wait}"
        )))
        .execute(session.conn())
        .await
        .map_err(LockError::unavailable)?;
        session.count(1);
        let taking = sqlx::query_as(S::take(deadline.is_some()))
            .persistent(false)
            .bind(key)
            .fetch_optional(session.conn());
        // The server's `lock_timeout` ends the statement at the budget's end, and the session
        // goes back to the pool; if its answer does not come soon after, the session is dropped
        // with its statement, and closed.
        let taken: Result<Option<(i64, i32)>, sqlx::Error> = match deadline {
            Some(deadline) => {
                match tokio::time::timeout_at((deadline + ANSWER_MARGIN).into(), taking).await {
                    Ok(taken) => taken,
                    // No answer: refused, and the session closed with its statement.
                    Err(_) => return Ok(Taken::Refused),
                }
            }
            None => taking.await,
        };
        match taken {
            Ok(Some((token, pid))) => {
                let granted = Granted {
                    token: token.cast_unsigned(),
                    pid,
                };
                Ok(Taken::Granted(hold(
                    session,
                    key,
                    granted,
                    options.lease,
                    Ending::Commit,
                    self.alive.subscribe(),
                )))
            }
            Ok(None) => {
                give_back(session).await;
                match S::CREATE {
                    Some(create) => {
                        self.requests.fetch_add(1, Ordering::Relaxed);
                        sqlx::query(create)
                            .persistent(false)
                            .bind(key)
                            .execute(&self.pool)
                            .await
                            .map_err(LockError::unavailable)?;
                        Ok(Taken::Made)
                    }
                    None => Ok(Taken::Refused),
                }
            }
            Err(e) if is_lock_timeout(&e) => {
                give_back(session).await;
                Ok(Taken::Refused)
            }
            Err(e) => Err(LockError::unavailable(e)),
        }
    }
}

/// Rolls back the transaction of an acquire that was not granted, so its connection goes back
/// to the pool; one whose rollback fails is closed instead.
async fn give_back(mut session: Session) {
    session.count(1);
    if sqlx::raw_sql("ROLLBACK")
        .execute(session.conn())
        .await
        .is_ok()
    {
        session.clean();
    }
}

impl<S: TakeStatement> DistributedLock for PgTransactionLock<S> {
    fn backend(&self) -> &'static str {
        S::BACKEND.name()
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        budgeted(key, options, self.attempt(key, options))
    }

    fn backend_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}
