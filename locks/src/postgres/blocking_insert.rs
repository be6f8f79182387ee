//! The blocking insert on PostgreSQL (`db-blocking-insert`): `INSERT … ON CONFLICT DO UPDATE`
//! of the lock's row inside a transaction kept open, so that the next inserter of the same name
//! waits on the row until the holder's transaction ends — MariaDB's `database::DbInsertLock`,
//! on the other engine.
//!
//! **How** (the transaction around it: `transaction.rs`). `db_insert_locks` has one row per
//! lock name. Acquire = `WITH taken AS (INSERT INTO db_insert_locks (name) VALUES ($1) ON
//! CONFLICT (name) DO UPDATE SET acquired_at = clock_timestamp() RETURNING 1) SELECT
//! nextval('pg_lock_tokens'), pg_backend_pid() FROM taken`. The first insert of a name creates
//! the row, every later one updates it; either way the statement holds the row's lock until
//! `COMMIT`, the release, and a second inserter's conflict check waits on it. The outer select
//! draws the fencing token from the row the upsert returned — once it holds the row — so a
//! grant draws after every grant before it released. No row has to exist first. PostgreSQL has
//! no `NOWAIT` for an insert: a try is the upsert with a `lock_timeout` of one millisecond.
//!
//! **Safe while its session holds**, like every lock held by a transaction (`transaction.rs`).

use super::transaction::{PgTransactionLock, TakeStatement};
use crate::Backend;

/// The blocking insert on PostgreSQL ([`Backend::DbBlockingInsert`]); see the module docs.
pub type PgInsertLock = PgTransactionLock<Upsert>;

/// The statement of [`PgInsertLock`]: `INSERT … ON CONFLICT DO UPDATE` of the name's row.
pub struct Upsert;

impl TakeStatement for Upsert {
    const BACKEND: Backend = Backend::DbBlockingInsert;
    const CREATE: Option<&'static str> = None;

    fn take(_waits: bool) -> &'static str {
        "WITH taken AS (INSERT INTO db_insert_locks (name) VALUES ($1) \
         ON CONFLICT (name) DO UPDATE SET acquired_at = clock_timestamp() RETURNING 1) \
         SELECT nextval('pg_lock_tokens'), pg_backend_pid() FROM taken"
    }
}
