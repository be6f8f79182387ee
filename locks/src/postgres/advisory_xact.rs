//! The transaction advisory lock (`pg-advisory-xact`): `pg_advisory_xact_lock` inside a
//! transaction the holder keeps open until it releases.
//!
//! **How.** Acquire checks a connection out of the pool, opens a transaction whose
//! `lock_timeout` is what is left of the wait budget (in milliseconds), and takes the lock and
//! the fencing token in one statement: `SELECT nextval('pg_lock_tokens'), pg_backend_pid() FROM
//! pg_advisory_xact_lock(hashtextextended($1, 0))`. The statement blocks while another
//! transaction holds the lock; the server queues the waiters of a lock and wakes the first when
//! the holder's transaction ends, so waiting costs no polling, but a connection per waiter.
//! `lock_timeout` running out (SQLSTATE 55P03) is the wait budget passing; a try-once acquire
//! uses `pg_try_advisory_xact_lock`. Release = `COMMIT` (nothing else can release a
//! transaction lock).
//!
//! **Safe while its transaction lasts, behind a transaction pooler too.** The lock ends with
//! the transaction that took it: a holder whose connection closes, whose session the server
//! ends (the lease, `idle_in_transaction_session_timeout`), or whose transaction is rolled back
//! for any reason holds nothing any more, and a session handed to another client by PgBouncer
//! after the commit carries no lock along. It is the form of advisory lock a transaction-pooled
//! deployment can use; the price is a transaction open for as long as the lock is held, which
//! keeps the server from vacuuming rows that died meanwhile. A holder paused past its lease
//! loses the lock while it believes it still holds: use the fencing token.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::watch;

use super::held::{Ending, Granted, Session, hold};
use super::{is_lock_timeout, millis};
use crate::held_session::Acquisition;
use crate::options::budgeted;
use crate::{AcquireOptions, Acquiring, DistributedLock, Guard, LockError};

/// How long past the wait budget an acquire waits for the server's own answer that the budget
/// passed (`lock_timeout`), which leaves the connection fit for the pool, before it gives up and
/// closes the connection.
const ANSWER_MARGIN: Duration = Duration::from_millis(250);

/// The transaction advisory lock (`pg-advisory-xact`); see the module docs.
pub struct PgAdvisoryXactLock {
    pool: PgPool,
    requests: Arc<AtomicU64>,
    /// Dropped with the client; the keep-alive tasks of its holders stop pinging then.
    alive: watch::Sender<()>,
}

impl PgAdvisoryXactLock {
    /// A lock over `pool`'s database, whose fencing sequence [`super::create_schema`] made.
    /// Every holder and every waiter keeps one of the pool's connections: a pool whose
    /// connections all hold or wait cannot take a lock that is free.
    pub fn new(pool: PgPool) -> PgAdvisoryXactLock {
        PgAdvisoryXactLock {
            pool,
            requests: Arc::new(AtomicU64::new(0)),
            alive: watch::Sender::new(()),
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
        session.taint();
        // Whole milliseconds, formatted from numbers: nothing of the caller's reaches the SQL.
        let lease = millis(options.lease);
        let wait = deadline.map(|d| millis(d.saturating_duration_since(Instant::now())));
        let lock_timeout = wait
            .map(|ms| format!("; SET LOCAL lock_timeout = {ms}"))
            .unwrap_or_default();
        session.count(1);
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "BEGIN; SET LOCAL idle_in_transaction_session_timeout = {lease}{lock_timeout}"
        )))
        .execute(session.conn())
        .await
        .map_err(LockError::unavailable)?;
        session.count(1);
        let taking = match deadline {
            None => sqlx::query_as(
                "SELECT nextval('pg_lock_tokens'), pg_backend_pid() \
                 FROM pg_try_advisory_xact_lock(hashtextextended($1, 0)) AS granted WHERE granted",
            ),
            Some(_) => sqlx::query_as(
                "SELECT nextval('pg_lock_tokens'), pg_backend_pid() \
                 FROM pg_advisory_xact_lock(hashtextextended($1, 0))",
            ),
        }
        .persistent(false)
        .bind(key)
        .fetch_optional(session.conn());
        // The server's `lock_timeout` ends the statement at the budget's end, and the session
        // goes back to the pool; if its answer does not come soon after, the session is dropped
        // with its statement, and closed.
        let taken: Result<Option<(i64, i32)>, sqlx::Error> = match deadline {
            Some(deadline) => tokio::time::timeout_at((deadline + ANSWER_MARGIN).into(), taking)
                .await
                .map_err(|_| timeout())?,
            None => taking.await,
        };
        match taken {
            Ok(Some((token, pid))) => {
                let granted = Granted {
                    token: token.cast_unsigned(),
                    pid,
                };
                Ok(hold(
                    session,
                    key,
                    granted,
                    options.lease,
                    Ending::Commit,
                    self.alive.subscribe(),
                ))
            }
            Ok(None) => {
                give_back(session).await;
                Err(timeout())
            }
            Err(e) if is_lock_timeout(&e) => {
                give_back(session).await;
                Err(timeout())
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

impl DistributedLock for PgAdvisoryXactLock {
    fn backend(&self) -> &'static str {
        crate::Backend::PgAdvisoryXact.name()
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        budgeted(key, options, self.attempt(key, options))
    }

    fn backend_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}
