//! The row-lock lock (`db-row-lock`): a transaction that locks the lock's row with
//! `SELECT … FOR UPDATE` holds the lock until it ends.
//!
//! **How.** `db_row_locks` has one row per lock name. Acquire = `START TRANSACTION; SELECT …
//! FROM db_row_locks WHERE name = ? FOR UPDATE WAIT n`: the statement returns once this
//! transaction holds the row's exclusive lock, and blocks while another transaction holds it.
//! `NOWAIT` is the try. Release = `COMMIT`. The name is the primary key, so the locking read is
//! an equality on the clustered index and locks that one record: however small the table,
//! InnoDB does not lock other names' rows (the articles' warning about row locks turning into
//! table locks concerns reads that do not go through a unique index; the test suite checks
//! that holding one name of a two-row table leaves the other free).
//!
//! **The row must exist before its name can be locked**: a locking read of a missing row locks
//! nothing a second reader would wait for. A first acquire that finds no row rolls back,
//! creates it with `INSERT IGNORE` outside any transaction (so the insert does not hold the
//! gap it goes into), and locks it. Rows are never deleted, so this happens once per name;
//! `INSERT IGNORE` of a row that another session just created and locked waits for that lock
//! like the select would, within the same bound.
//!
//! **Fencing token**: `NEXTVAL(db_lock_tokens)` in the locking select's own select list,
//! evaluated once the row is locked, so a grant draws after every grant before it released.
//! Not a counter column of the locked row, bumped in the holding transaction: that bump is
//! undone when the transaction is rolled back — exactly when the holder died or lost its
//! session — and the next holder would draw the dead holder's token again. A sequence is not
//! transactional: a drawn value is never drawn again, and it survives restarts.
//!
//! **On a Galera cluster** neither the lock nor the token spans the nodes: the row lock exists
//! on the node that took it (two holders on two nodes at once), and the token is drawn from the
//! node's copy of the sequence, its draw replicated with the holder's transaction — a node that
//! has not yet applied another's draw hands out the same token again or a lower one (measured
//! under load: 5 on node 1, then 4 on node 3; `tests/suite/database/galera.rs`). A fence that
//! accepts only tokens above the last it saw refuses the second writer (`lock_lost`): the stock
//! is kept, the holders are not ordered. The same holds for the blocking insert.
//!
//! **What the articles claim, as this crate measures it** (tests in
//! `tests/suite/database/claims.rs`, the same for the blocking insert): mutual exclusion, yes
//! (history-checked); a killed holder's lock is freed by the database as soon as the kernel
//! closes its connection (milliseconds after a SIGKILL) — but a holder cut off without its
//! connection closing keeps it until the session's idle timeout, which is why this lock sets
//! that timeout to the lease (see `held_transaction.rs`); waiters are granted in the order they
//! arrived (InnoDB queues a row's lock requests first come, first served); one release wakes
//! one waiter, not all of them; re-entry in the same transaction is granted at once, but the
//! database counts nothing and one `COMMIT` ends every entry, so
//! [`TransactionLock::reenter`] counts; and the price the articles name, a connection per
//! holder and per waiter, is real: a pool whose connections all hold or wait cannot take a
//! lock that is free.
//!
//! **Safe while its session holds.** The lock lasts exactly as long as the holder's session: a
//! holder paused past the lease (its pings stop) loses it while it believes it still holds.
//! Use the fencing token.

use futures::FutureExt;
use futures::future::BoxFuture;
use sqlx::MySqlConnection;

use super::held_transaction::{LockStatement, Taken, TransactionLock};
use crate::Backend;

/// The row-lock lock ([`Backend::DbRowLock`]); see the module docs. Re-entry:
/// [`TransactionLock::reenter`] runs the locking select again in the holder's transaction.
pub type DbRowLock = TransactionLock<SelectForUpdate>;

/// The statement of [`DbRowLock`]: `SELECT … FOR UPDATE` of the lock's row.
pub struct SelectForUpdate;

impl LockStatement for SelectForUpdate {
    const BACKEND: Backend = Backend::DbRowLock;
    const STATEMENTS: u64 = 1;

    fn lock<'c>(
        conn: &'c mut MySqlConnection,
        key: &'c str,
        wait: u64,
    ) -> BoxFuture<'c, Result<Option<Taken>, sqlx::Error>> {
        let how = match wait {
            0 => "NOWAIT".to_owned(),
            n => format!("WAIT {n}"),
        };
        let sql = format!(
            "SELECT CAST(NEXTVAL(db_lock_tokens) AS UNSIGNED), CAST(CONNECTION_ID() AS UNSIGNED) \
             FROM db_row_locks WHERE name = ? FOR UPDATE {how}"
        );
        async move {
            let row: Option<(u64, u64)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(key)
                .fetch_optional(conn)
                .await?;
            Ok(row.map(|(token, connection)| Taken { token, connection }))
        }
        .boxed()
    }

    fn create<'c>(
        conn: &'c mut MySqlConnection,
        key: &'c str,
        wait: u64,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
        let sql = format!(
            "SET STATEMENT innodb_lock_wait_timeout = {wait} FOR \
             INSERT IGNORE INTO db_row_locks (name) VALUES (?)"
        );
        async move {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(key)
                .execute(conn)
                .await?;
            Ok(())
        }
        .boxed()
    }
}
