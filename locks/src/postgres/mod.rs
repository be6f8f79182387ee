//! PostgreSQL as a lock service (feature `postgres`): its own advisory locks, which lock a
//! number the application chooses rather than a row, kept in the server's lock table beside
//! its row locks; and the two row locks of MariaDB's `database` module on this engine —
//! [`PgRowLock`] (`db-row-lock`, `SELECT … FOR UPDATE`) and [`PgInsertLock`]
//! (`db-blocking-insert`, `INSERT … ON CONFLICT DO UPDATE`), each held by a transaction left
//! open, as the transaction advisory lock is (`transaction.rs`). The lock table's rows
//! (`db-lock` and its forms) run here too, written once for both engines in `database`
//! (`database::Tables`); this module makes their tables.
//!
//! The advisory locks come in two forms, one lock each:
//!
//! * [`PgAdvisoryLock`] (`pg-advisory`): `pg_try_advisory_lock`, a **session** lock. It is held
//!   until `pg_advisory_unlock` or until the session ends, whatever transactions begin and end
//!   on it meanwhile, and it counts: a session that takes it twice holds it twice, and a second
//!   take by the *same* session is granted at once.
//! * [`PgAdvisoryXactLock`] (`pg-advisory-xact`): `pg_advisory_xact_lock`, a **transaction**
//!   lock. It is held until the transaction that took it ends — commit or rollback — and
//!   cannot be released any other way.
//!
//! **Session locks break behind a transaction pooler.** PgBouncer in transaction mode hands a
//! server session to a client for one transaction, then to whichever client comes next. A
//! session lock taken through it stays with the *server* session: the client's unlock may run
//! on another session (it unlocks nothing; the lock stays held, by nobody who knows it), and
//! the next client handed that session takes the "same" lock again at once — two holders. The
//! transaction lock ends with the transaction, before the pooler hands the session on, so it is
//! the form that stays safe there. This crate holds a connection of its own per holder for
//! both, which keeps the session lock safe where the client talks to PostgreSQL itself.
//!
//! **Unnamed statements.** Every statement with an argument is sent unnamed
//! (`persistent(false)`): PgBouncer before 1.21 keeps no prepared statement across the server
//! sessions it hands out, so a named one is missing on the next session ("does not exist") or
//! already there under another client's same name ("already exists"). A parse per statement is
//! the price, on a statement run once per acquire or release.
//!
//! **The key.** A lock name becomes the lock's 64-bit number by `hashtextextended(name, 0)`,
//! computed by the server (so every client, in any language, maps a name alike). Two names
//! whose hashes collide share a lock: more waiting, never two holders. Advisory locks are per
//! database: clients of another database never meet these.
//!
//! **Fencing token** = `nextval('pg_lock_tokens')`, drawn by the statement that takes the lock,
//! after the lock is granted, so a grant draws after every grant before it released. A sequence
//! is not transactional: a value drawn by a transaction that rolls back is never drawn again,
//! and it survives restarts (after a crash it may jump ahead, never back). [`create_schema`]
//! creates it.
//!
//! **A connection per holder, the lease as the server's idle timeout.** Both locks live exactly
//! as long as the holder's session (or its transaction), so the holder keeps a connection of the
//! pool while it holds (see `held.rs`): a holder whose connection closes — its process killed,
//! its client dropped — loses the lock at once; one that goes silent with its connection open is
//! cut off by the server one lease after its last ping (`idle_session_timeout`,
//! `idle_in_transaction_session_timeout`). Both forms are **safe while the holder's session
//! holds**: a holder paused past its lease loses the lock while it believes it still holds.
//! Use the fencing token.

mod advisory;
mod advisory_xact;
mod blocking_insert;
mod held;
mod row_lock;
mod transaction;

pub use advisory::PgAdvisoryLock;
pub use advisory_xact::{AdvisoryXact, PgAdvisoryXactLock};
pub use blocking_insert::{PgInsertLock, Upsert};
pub use held::session_of;
pub use row_lock::{PgRowLock, SelectForUpdate};
pub use transaction::{PgTransactionLock, TakeStatement};

use std::time::Duration;

use sqlx::PgPool;

use crate::LockError;

/// The statements that create the fencing tokens' sequence and the tables of the locks kept in
/// PostgreSQL if missing ([`create_schema`]): the lock table's rows and fences (`db-lock` and
/// its forms, `database::Tables`) and the row locks' rows.
pub const SCHEMA: &str = "CREATE SEQUENCE IF NOT EXISTS pg_lock_tokens; \
     CREATE TABLE IF NOT EXISTS db_locks (\
         id bigserial PRIMARY KEY, \
         name text NOT NULL UNIQUE, \
         owner text NOT NULL, \
         expires_at timestamptz NOT NULL, \
         holds integer NOT NULL DEFAULT 1); \
     CREATE TABLE IF NOT EXISTS db_lock_fences (name text PRIMARY KEY, fence bigint NOT NULL); \
     CREATE TABLE IF NOT EXISTS db_row_locks (name text PRIMARY KEY); \
     CREATE TABLE IF NOT EXISTS db_insert_locks (\
         name text PRIMARY KEY, \
         acquired_at timestamptz NOT NULL DEFAULT clock_timestamp())";

/// Creates the fencing tokens' sequence and the locks' tables ([`SCHEMA`]) in `pool`'s
/// database if missing.
pub async fn create_schema(pool: &PgPool) -> Result<(), LockError> {
    match sqlx::raw_sql(SCHEMA).execute(pool).await {
        Ok(_) => Ok(()),
        // Two sessions creating it at once: one wins the catalog's unique index, and the
        // other's `IF NOT EXISTS` came too early to see it. Either way it exists.
        Err(e) if is_unique_violation(&e) => Ok(()),
        Err(e) => Err(LockError::unavailable(e)),
    }
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|db| db.is_unique_violation())
}

/// `lock_timeout` ran out before the lock was granted (SQLSTATE 55P03, `lock_not_available`).
fn is_lock_timeout(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "55P03")
}

/// A duration as the server's timeouts take it: whole milliseconds, rounded up so that the
/// timeout never ends before the duration (a wait budget's `lock_timeout` cut short would
/// refuse a waiter before its budget passed), at least one (0 would turn the timeout off).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_micros().div_ceil(1000))
        .unwrap_or(u64::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_in_whole_milliseconds_never_ends_before_the_duration() {
        assert_eq!(millis(Duration::from_micros(499_888)), 500);
        assert_eq!(millis(Duration::from_millis(500)), 500);
        assert_eq!(millis(Duration::ZERO), 1);
    }
}
