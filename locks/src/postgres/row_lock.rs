//! The row-lock lock on PostgreSQL (`db-row-lock`): a transaction that locks the lock's row with
//! `SELECT … FOR UPDATE` holds the lock until it ends — MariaDB's `database::DbRowLock`, on the
//! other engine.
//!
//! **How** (the transaction around it: `transaction.rs`). `db_row_locks` has one row per lock
//! name. Acquire = `SELECT nextval('pg_lock_tokens'), pg_backend_pid() FROM (SELECT 1 FROM
//! db_row_locks WHERE name = $1 FOR UPDATE) AS locked`: the inner locking read returns once
//! this transaction holds the row, and only then does the outer select draw the fencing token,
//! so a grant draws after every grant before it released. `FOR UPDATE NOWAIT` is the try; a
//! row locked by another answers 55P03, as the wait budget running out does. Release =
//! `COMMIT`. The name is the primary key: the read locks that one row, never another name's.
//!
//! **The row must exist before its name can be locked**: a locking read of a missing row
//! answers nothing and locks nothing. A first acquire that finds no row rolls back, creates it
//! with `INSERT … ON CONFLICT DO NOTHING` in a transaction of its own, and locks it. Rows are
//! never deleted, so this happens once per name.
//!
//! **Safe while its session holds**, like every lock held by a transaction (`transaction.rs`).

use super::transaction::{PgTransactionLock, TakeStatement};
use crate::Backend;

/// The row-lock lock on PostgreSQL ([`Backend::DbRowLock`]); see the module docs.
pub type PgRowLock = PgTransactionLock<SelectForUpdate>;

/// The statement of [`PgRowLock`]: `SELECT … FOR UPDATE` of the name's row.
pub struct SelectForUpdate;

impl TakeStatement for SelectForUpdate {
    const BACKEND: Backend = Backend::DbRowLock;
    const CREATE: Option<&'static str> =
        Some("INSERT INTO db_row_locks (name) VALUES ($1) ON CONFLICT DO NOTHING");

    fn take(waits: bool) -> &'static str {
        match waits {
            true => {
                "SELECT nextval('pg_lock_tokens'), pg_backend_pid() \
                 FROM (SELECT 1 FROM db_row_locks WHERE name = $1 FOR UPDATE) AS locked"
            }
            false => {
                "SELECT nextval('pg_lock_tokens'), pg_backend_pid() \
                 FROM (SELECT 1 FROM db_row_locks WHERE name = $1 FOR UPDATE NOWAIT) AS locked"
            }
        }
    }
}
