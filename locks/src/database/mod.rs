//! The database as a lock service (feature `mysql`, MariaDB): two families of locks over tables
//! of the pool's database. The unique-key lock runs on PostgreSQL too (feature `postgres`, a
//! `PgPool` for its pool): its statements are written once per engine in `tables.rs`; the row
//! locks' PostgreSQL forms are `postgres::PgRowLock` and `postgres::PgInsertLock`.
//!
//! **A row per held lock** — the unique-key lock, [`DbLock`] here (`db-lock`, `db-lock-renewed`)
//! and its reentrant form ([`DbReentrantLock`], `db-lock-reentrant`): the lock *is* the row,
//! inserted to acquire and deleted to release, with a lease in the row so a dead holder's row can
//! be reaped. Waiters poll. Between two statements no connection is held.
//!
//! **A row lock held by an open transaction** — [`DbRowLock`] (`db-row-lock`, `SELECT … FOR
//! UPDATE`) and [`DbInsertLock`] (`db-blocking-insert`, `INSERT … ON DUPLICATE KEY UPDATE`): one
//! row per lock name that is never deleted, and the lock is InnoDB's row lock on it, held until
//! the transaction ends. Waiters block in a statement and InnoDB wakes them; every holder and
//! every waiter keeps a connection for as long as it holds or waits (see `held_transaction.rs`).
//!
//! # The unique-key lock
//!
//! * **Acquire** = `INSERT` a row with the lock's name. The unique index on `name` lets
//!   exactly one concurrent insert win; the others get a duplicate-key error and poll, with
//!   jittered sleeps that grow while a waiter is young and shrink once it has waited long
//!   (so the oldest waiters are the likeliest to win a release), until their wait budget
//!   runs out. Polling is the cost: every poller queries the database on every interval, and
//!   those queries compete with the holder's own work for the same connections (give the
//!   lock its own pool). So the waiters of one client stand in a local line per name and only
//!   its first polls (`line.rs`): the database sees one poller per process, not one per
//!   waiter, and a process's waiters are served in the order they came.
//! * **Fencing token** = a counter per lock name in `db_lock_fences`, bumped by the statement
//!   that confirms the grant. The row's `AUTO_INCREMENT` id is *not* a fencing token: InnoDB
//!   numbers an insert before it checks the unique index, and a checked insert may wait there
//!   (behind another session's row or gap lock) or simply be scheduled late, so an insert
//!   numbered early can win the name after a later-numbered one won and released it — a token
//!   going backwards, seen as "granted 1606 after 1609" under 24 contenders. The counter is
//!   bumped only by the row that holds the name, after its insert, in one statement that reads
//!   the row with a shared lock and requires it unexpired: a waiter cannot reap the row (and
//!   then win the name and bump the counter itself) before that statement is done, so every
//!   grant of a name bumps after the grant before it. The counter never falls below the row's
//!   id, so tokens stay above those handed out when the id was the token; it is committed at
//!   once, so it survives restarts, and nothing ever deletes it (one row per name ever locked).
//! * **Expiry.** A holder that dies must not block the name forever, so each row carries
//!   `expires_at`, computed by the *database's* clock (no client clock drift enters). A waiter
//!   that finds an expired row deletes exactly that row — `DELETE … WHERE id = ? AND
//!   expires_at < NOW(6)`, a compare-and-set on the row it saw — and tries to insert again.
//!   Deleting by name instead could remove a fresh lock that a faster waiter had just inserted.
//!   The lease runs from the insert's start: an insert that waited in the index is granted
//!   with what is left of it (or, if none is, not at all).
//! * **Release** deletes by the row's own id *and* owner, never by name: a holder whose lease
//!   expired and whose row was reaped and re-granted must not delete the new holder's row.
//! * **Renewal** ([`DbLock::renewed`]): a background task extends `expires_at` every third of
//!   the lease while the guard *and its client* live; if the row is gone (reaped) it reports
//!   the loss. Dropping the client stops its renewals, as a process's death would: a guard
//!   leaked past its client must not hold the name forever.
//!
//! **Safe while leases hold.** Without renewal ([`DbLock::leased`]), a critical section that
//! outlives the lease lets a second holder in; renewal keeps a slow but live holder's lock, not
//! a frozen one's. A resource that checks the fencing token makes the stale write fail instead.
//!
//! # Schema
//!
//! The locks live in tables of the pool's database; [`DbLock::create_table`] creates them (and
//! the token sequence) if missing, and adds the hold count to a `db_locks` made before it. An
//! application with migrations may create them there instead, identically:
//!
//! ```sql
#![doc = include_str!("schema.sql")]
//! ```
//!
//! `name` is the lock key (at most 191 characters: the longest a unique `utf8mb4` index takes
//! everywhere), `owner` the acquisition's random id, `holds` how often its owner entered it.
//! The statements use MariaDB's syntax where MySQL has none (`CREATE SEQUENCE`, `FOR UPDATE
//! WAIT n`, `SET STATEMENT … FOR`, `ADD COLUMN IF NOT EXISTS`): MariaDB is what this project
//! runs and tests. On PostgreSQL, `postgres::create_schema` makes the same two tables of the
//! unique-key lock in its types (`bigserial`, `text`, `timestamptz`).

mod blocking_insert;
mod held_transaction;
mod reentrant;
mod row;
mod row_lock;
mod tables;

pub use blocking_insert::{DbInsertLock, Upsert};
pub use held_transaction::{TransactionLock, Waits, session_of};
pub use reentrant::DbReentrantLock;
pub use row_lock::{DbRowLock, SelectForUpdate};
pub use tables::Tables;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::MySqlPool;
use sqlx::mysql::MySqlDatabaseError;
use tokio::sync::watch;

use crate::line::Lines;
use crate::polling::Schedule;
use crate::{AcquireOptions, Acquiring, Backend, DistributedLock, Guard, LockError, new_owner_id};
use row::RowHeld;
use tables::Release;

/// The statements that create every table of the database locks if missing ([`DbLock::create_table`]).
pub const SCHEMA: &str = include_str!("schema.sql");

/// The statement that makes the token sequence, [`SCHEMA`]'s last.
const SEQUENCE: &str = "CREATE SEQUENCE IF NOT EXISTS db_lock_tokens";

/// [`SEQUENCE`] on a Galera node.
const GALERA_SEQUENCE: &str = "CREATE SEQUENCE IF NOT EXISTS db_lock_tokens NOCACHE";

/// [`SCHEMA`] as the statements before the token sequence's, and that one.
fn schema_parts() -> (&'static str, &'static str) {
    let tables = SCHEMA
        .trim_end()
        .strip_suffix(SEQUENCE)
        .expect("the schema ends with the token sequence");
    (tables, SEQUENCE)
}

/// The pauses between two polls of a held lock: 4 ms doubling to 64 ms, shrinking again for
/// waiters that have waited long (`polling.rs`) down to the first pause, not below: every poll
/// is two statements.
const POLLING: Schedule = Schedule {
    first: Duration::from_millis(4),
    longest: Duration::from_millis(64),
    oldest: Duration::from_millis(4),
};

/// A lock service backed by the `db_locks` table; see the module docs.
pub struct DbLock {
    pool: Tables,
    variant: Variant,
    requests: Arc<AtomicU64>,
    /// Dropped with the client; the renewal tasks of its guards stop when it closes.
    alive: watch::Sender<()>,
    /// This client's waiters, in line per name: only the first polls (`line.rs`).
    lines: Lines,
}

/// How the unique-key lock keeps and gives back a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// The lease runs out `lease` after the grant, whatever the holder does.
    Leased,
    /// A task extends the lease every third of it.
    Renewed,
    /// Leased, and its owner may enter again ([`DbReentrantLock`]): a release takes one hold
    /// back and deletes the row with the last.
    Reentrant,
}

impl DbLock {
    /// A lock over `pool`'s database (MariaDB's, or PostgreSQL's with feature `postgres`)
    /// whose leases are never extended: a holder that outlives its lease loses the lock
    /// ([`Backend::DbLock`]).
    pub fn leased(pool: impl Into<Tables>) -> DbLock {
        DbLock::new(pool.into(), Variant::Leased)
    }

    /// A lock over `pool`'s database whose held leases are extended every third of the lease
    /// while the guard lives ([`Backend::DbLockRenewed`]).
    pub fn renewed(pool: impl Into<Tables>) -> DbLock {
        DbLock::new(pool.into(), Variant::Renewed)
    }

    fn new(pool: Tables, variant: Variant) -> DbLock {
        DbLock {
            pool,
            variant,
            requests: Arc::new(AtomicU64::new(0)),
            alive: watch::Sender::new(()),
            lines: Lines::new(POLLING.oldest),
        }
    }

    /// Creates every table of the database locks ([`SCHEMA`]) in `pool`'s database if missing;
    /// on a Galera node, the token sequence `NOCACHE` (see [`SCHEMA`]).
    pub async fn create_table(pool: &MySqlPool) -> Result<(), LockError> {
        let galera: Option<(String, String)> =
            sqlx::query_as("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")
                .fetch_optional(pool)
                .await
                .map_err(LockError::unavailable)?;
        let galera = galera.is_some_and(|(_, on)| on.eq_ignore_ascii_case("ON"));
        let (tables, sequence) = schema_parts();
        let sequence = if galera { GALERA_SEQUENCE } else { sequence };
        for statements in [tables, sequence] {
            sqlx::raw_sql(statements)
                .execute(pool)
                .await
                .map_err(LockError::unavailable)?;
        }
        Ok(())
    }

    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// One attempt: the new row's id, or `None` if the name is taken.
    async fn try_insert(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<u64>, LockError> {
        self.count();
        self.pool.insert(key, owner, lease).await
    }

    /// The fencing token of the grant of row `id`, just inserted: the name's counter, bumped
    /// (created at the row's id the first time) if the row is still ours and unexpired. The row
    /// is read with a shared lock, so no waiter can reap it while the counter moves. `None`: the
    /// lease passed before (the insert waited too long), and the row was deleted again.
    async fn fence(&self, id: u64, owner: &str) -> Result<Option<u64>, LockError> {
        self.count();
        match self.pool.fence(id, owner).await? {
            Some(token) => Ok(Some(token)),
            None => {
                self.count();
                (self.pool.release(id, owner, Release::Row).await)
                    .map_err(LockError::unavailable)?;
                Ok(None)
            }
        }
    }

    /// Looks at the row holding `key`; if its lease has passed, deletes exactly that row.
    /// Returns whether the name may be free now (row gone or reaped).
    async fn reap_if_expired(&self, key: &str) -> Result<bool, LockError> {
        self.count();
        match self.pool.holder(key).await? {
            None => Ok(true),
            Some((_, false)) => Ok(false),
            Some((id, true)) => {
                self.count();
                match self.pool.reap(id).await {
                    Ok(()) => {
                        tracing::debug!(key, id, "reaped an expired lock row");
                        Ok(true)
                    }
                    Err(e) if is_busy(&e) => Ok(false),
                    Err(e) => Err(LockError::unavailable(e)),
                }
            }
        }
    }

    /// Inserts the lock's row until it is granted, pausing by [`POLLING`], until the wait
    /// budget has passed since the waiter came (`since`: before this client's line).
    async fn poll(
        &self,
        key: &str,
        since: Instant,
        options: AcquireOptions,
    ) -> Result<Guard, LockError> {
        let owner = new_owner_id();
        let mut tries = 0;
        loop {
            if let Some(row) = self.try_insert(key, &owner, options.lease).await?
                && let Some(token) = self.fence(row, &owner).await?
            {
                return Ok(self.guard(key, owner, row, token, options.lease));
            }
            // "May be free" includes a row another session inserted and has not committed
            // (invisible to our read): try again at once, but never past the budget.
            let free = self.reap_if_expired(key).await?;
            let (waited, remaining) = options.left(key, since)?;
            if free {
                continue;
            }
            tokio::time::sleep(POLLING.pause(tries, waited).min(remaining)).await;
            tries += 1;
        }
    }

    fn guard(&self, key: &str, owner: String, row: u64, token: u64, lease: Duration) -> Guard {
        let held = RowHeld::start(
            self.pool.clone(),
            Arc::clone(&self.requests),
            row,
            owner.clone(),
            lease,
            self.variant,
            self.alive.subscribe(),
        );
        let lost = held.lost();
        Guard::new(key, owner, token, lost, Box::new(held))
    }
}

impl DistributedLock for DbLock {
    fn backend(&self) -> &'static str {
        match self.variant {
            Variant::Leased => Backend::DbLock.name(),
            Variant::Renewed => Backend::DbLockRenewed.name(),
            Variant::Reentrant => Backend::DbLockReentrant.name(),
        }
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        // Bounded as a whole: with the database gone, a pool checkout alone waits for its own
        // acquire timeout (30 s by sqlx's default) on every statement.
        let poll = move |since| self.poll(key, since, options);
        self.lines.budgeted(key, options, poll)
    }

    fn backend_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// A unique index refused the row: the name is taken.
fn is_duplicate(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|db| db.is_unique_violation())
}

/// The database gave up on a row lock: InnoDB's `innodb_lock_wait_timeout` passed (1205), this
/// statement was a deadlock victim (1213), or a `NOWAIT` found the row locked (3572); on
/// PostgreSQL a deadlock victim (40P01) or `lock_timeout` (55P03). Nothing was changed.
fn is_busy(e: &sqlx::Error) -> bool {
    const BUSY: [u16; 3] = [1205, 1213, 3572];
    const POSTGRES_BUSY: [&str; 2] = ["40P01", "55P03"];
    // MariaDB's SQLSTATEs are never PostgreSQL's own `40P01` and `55P03`.
    error_number(e).is_some_and(|n| BUSY.contains(&n))
        || (e.as_database_error().and_then(|db| db.code()))
            .is_some_and(|code| POSTGRES_BUSY.contains(&code.as_ref()))
}

/// InnoDB chose this statement's transaction as a deadlock's victim and rolled it back (1213).
fn is_deadlock(e: &sqlx::Error) -> bool {
    error_number(e) == Some(1213)
}

/// The server's error number, for an error the server sent.
fn error_number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()
        .and_then(|db| db.try_downcast_ref::<MySqlDatabaseError>())
        .map(MySqlDatabaseError::number)
}

/// A lease as the database wants it: whole microseconds.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_ends_with_the_token_sequence_which_a_galera_node_makes_nocache() {
        let (tables, sequence) = schema_parts();
        assert!(tables.contains("CREATE TABLE IF NOT EXISTS db_locks"));
        assert!(!tables.contains("SEQUENCE IF NOT EXISTS"));
        assert_eq!(sequence, SEQUENCE);
        assert_eq!(GALERA_SEQUENCE.strip_suffix(" NOCACHE"), Some(SEQUENCE));
    }
}
