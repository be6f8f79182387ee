//! The transaction advisory lock (`pg-advisory-xact`): `pg_advisory_xact_lock` inside a
//! transaction the holder keeps open until it releases.
//!
//! **How** (the transaction around it: `transaction.rs`). The lock and the fencing token are
//! taken in one statement: `SELECT nextval('pg_lock_tokens'), pg_backend_pid() FROM
//! pg_advisory_xact_lock(hashtextextended($1, 0))`; a try-once acquire uses
//! `pg_try_advisory_xact_lock`. Release = `COMMIT` (nothing else can release a transaction
//! lock).
//!
//! **Safe while its transaction lasts, behind a transaction pooler too.** The lock ends with
//! the transaction that took it: a holder whose connection closes, whose session the server
//! ends (the lease, `idle_in_transaction_session_timeout`), or whose transaction is rolled back
//! for any reason holds nothing any more, and a session handed to another client by PgBouncer
//! after the commit carries no lock along. It is the form of advisory lock a transaction-pooled
//! deployment can use; the price is a transaction open for as long as the lock is held, which
//! keeps the server from vacuuming rows that died meanwhile. A holder paused past its lease
//! loses the lock while it believes it still holds: use the fencing token.

use super::transaction::{PgTransactionLock, TakeStatement};
use crate::Backend;

/// The transaction advisory lock (`pg-advisory-xact`); see the module docs.
pub type PgAdvisoryXactLock = PgTransactionLock<AdvisoryXact>;

/// The statement of [`PgAdvisoryXactLock`]: `pg_advisory_xact_lock` of the name's hash.
pub struct AdvisoryXact;

impl TakeStatement for AdvisoryXact {
    const BACKEND: Backend = Backend::PgAdvisoryXact;
    const CREATE: Option<&'static str> = None;

    fn take(waits: bool) -> &'static str {
        match waits {
            true => {
                "SELECT nextval('pg_lock_tokens'), pg_backend_pid() \
                 FROM pg_advisory_xact_lock(hashtextextended($1, 0))"
            }
            false => {
                "SELECT nextval('pg_lock_tokens'), pg_backend_pid() \
                 FROM pg_try_advisory_xact_lock(hashtextextended($1, 0)) AS granted WHERE granted"
            }
        }
    }
}
