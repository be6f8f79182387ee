//! The session advisory lock (`pg-advisory`): `pg_try_advisory_lock` on a connection kept by
//! the holder until `pg_advisory_unlock`.
//!
//! **How.** Acquire checks a connection out of the pool and, in one statement, tries the lock
//! and, if granted, draws the fencing token: `SELECT nextval('pg_lock_tokens'), pg_backend_pid()
//! FROM pg_try_advisory_lock(hashtextextended($1, 0)) AS granted WHERE granted`. No row: taken;
//! the connection goes back to the pool holding nothing, and the waiter polls again after a
//! pause (`polling.rs`), standing in this client's line for the name so that only the first of
//! its waiters polls (`line.rs`). Granted: the connection stays with the holder, its
//! `idle_session_timeout` set to the lease (`held.rs`). Release = `pg_advisory_unlock`, which
//! answers whether this session held it: a session releases only its own locks, so a stale
//! holder can never release the next holder's.
//!
//! **Why a try and polling**, not the blocking `pg_advisory_lock`: a blocked waiter keeps a
//! connection for as long as it waits, and a session lock has no transaction whose timeout
//! bounds the wait as cleanly as the transaction lock's `lock_timeout` does
//! ([`super::PgAdvisoryXactLock`] blocks, and is woken by the server). Between two polls a
//! waiter holds no connection.
//!
//! **Safe while its session holds — and only while it talks to PostgreSQL itself.** The lock
//! is the session's, not the transaction's and not the client's: behind PgBouncer's transaction
//! pooling, the session that took it is handed to another client after the statement, the
//! unlock runs on some other session (and unlocks nothing), and whoever is handed the holding
//! session next is granted the lock at once, because PostgreSQL grants a session a lock it
//! already holds. Two holders, and a lock that nobody can release. Run it on a direct
//! connection or a session-pooled one; behind transaction pooling use the transaction lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::watch;

use super::held::{Ending, Granted, Session, hold};
use super::millis;
use crate::line::Lines;
use crate::polling::Schedule;
use crate::{AcquireOptions, Acquiring, DistributedLock, Guard, LockError};

/// The pauses between two polls of a held lock: 1 ms doubling to 32 ms, shrinking again for
/// waiters that have waited long (`polling.rs`) down to the first pause. A poll is one
/// statement on a pooled connection, answered from the server's lock table in memory.
const POLLING: Schedule = Schedule {
    first: Duration::from_millis(1),
    longest: Duration::from_millis(32),
    oldest: Duration::from_millis(1),
};

/// The session advisory lock (`pg-advisory`); see the module docs.
pub struct PgAdvisoryLock {
    pool: PgPool,
    requests: Arc<AtomicU64>,
    /// Dropped with the client; the keep-alive tasks of its holders stop pinging then.
    alive: watch::Sender<()>,
    /// This client's waiters, in line per name: only the first polls.
    lines: Lines,
}

impl PgAdvisoryLock {
    /// A lock over `pool`'s database, whose fencing sequence [`super::create_schema`] made.
    /// Every holder keeps one of the pool's connections while it holds.
    pub fn new(pool: PgPool) -> PgAdvisoryLock {
        PgAdvisoryLock {
            pool,
            requests: Arc::new(AtomicU64::new(0)),
            alive: watch::Sender::new(()),
            lines: Lines::new(POLLING.oldest),
        }
    }

    /// One try: the guard, or `None` if another session holds the lock.
    async fn try_once(&self, key: &str, lease: Duration) -> Result<Option<Guard>, LockError> {
        let conn = self.pool.acquire().await.map_err(LockError::unavailable)?;
        let mut session = Session::new(conn, Arc::clone(&self.requests));
        session.taint();
        session.count(1);
        let granted: Option<(i64, i32)> = sqlx::query_as(
            "SELECT nextval('pg_lock_tokens'), pg_backend_pid() \
             FROM pg_try_advisory_lock(hashtextextended($1, 0)) AS granted WHERE granted",
        )
        .persistent(false)
        .bind(key)
        .fetch_optional(session.conn())
        .await
        .map_err(LockError::unavailable)?;
        let Some((token, pid)) = granted else {
            // Nothing taken: the connection goes back to the pool as it came.
            session.clean();
            return Ok(None);
        };
        session.count(1);
        sqlx::query("SELECT set_config('idle_session_timeout', $1, false)")
            .persistent(false)
            .bind(millis(lease).to_string())
            .execute(session.conn())
            .await
            .map_err(LockError::unavailable)?;
        let granted = Granted {
            token: token.cast_unsigned(),
            pid,
        };
        Ok(Some(hold(
            session,
            key,
            granted,
            lease,
            Ending::Unlock,
            self.alive.subscribe(),
        )))
    }

    /// Tries until granted, pausing by [`POLLING`], until the wait budget has passed since the
    /// waiter came (`since`: before this client's line).
    async fn poll(
        &self,
        key: &str,
        since: Instant,
        options: AcquireOptions,
    ) -> Result<Guard, LockError> {
        let mut tries = 0;
        loop {
            if let Some(guard) = self.try_once(key, options.lease).await? {
                return Ok(guard);
            }
            let (waited, remaining) = options.left(key, since)?;
            tokio::time::sleep(POLLING.pause(tries, waited).min(remaining)).await;
            tries += 1;
        }
    }
}

impl DistributedLock for PgAdvisoryLock {
    fn backend(&self) -> &'static str {
        crate::Backend::PgAdvisory.name()
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        // Bounded as a whole: with the database gone, a pool checkout alone waits for its own
        // acquire timeout (30 s by sqlx's default).
        let poll = move |since| self.poll(key, since, options);
        self.lines.budgeted(key, options, poll)
    }

    fn backend_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}
