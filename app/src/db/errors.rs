//! What a database error means for a purchase, decided by error kind, server error number (or
//! PostgreSQL's SQLSTATE) and the name of the violated key, never by the wording of a message.

use sqlx::error::ErrorKind;

/// `innodb_lock_wait_timeout` passed while waiting for a row lock (MariaDB also answers a
/// failed `FOR UPDATE NOWAIT` with it).
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// InnoDB chose this transaction as a deadlock victim.
const ER_LOCK_DEADLOCK: u16 = 1213;
/// MySQL's answer to a failed `NOWAIT`.
const ER_LOCK_NOWAIT: u16 = 3572;
/// MariaDB aborted a statement that ran past `max_statement_time`.
const ER_STATEMENT_TIMEOUT: u16 = 1969;
/// A transaction's write met a row another transaction changed after this one's snapshot
/// (`innodb_snapshot_isolation`): a conflict, to retry like a deadlock.
const ER_CHECKREAD: u16 = 1020;
/// Too many connections / server shutting down / connection killed / a Galera node outside
/// the primary component (`ER_UNKNOWN_COM_ERROR`: "WSREP has not yet prepared node for
/// application use", its answer to every statement that touches a table).
const ER_UNAVAILABLE: [u16; 4] = [1040, 1053, 1927, 1047];

/// PostgreSQL's SQLSTATEs: a serialization failure and a deadlock's victim roll the
/// transaction back; a lock not obtained (`NOWAIT`, `lock_timeout`) or a statement cancelled
/// by `statement_timeout` is busy; too many connections, a server shutting down or not yet
/// accepting connections is unavailable.
const PG_ROLLED_BACK: [&str; 2] = ["40001", "40P01"];
const PG_BUSY: [&str; 2] = ["55P03", "57014"];
const PG_UNAVAILABLE: [&str; 5] = ["53300", "57P01", "57P02", "57P03", "08006"];

/// The unique key that names a purchase (`orders`: product, buyer, request id).
pub const PURCHASE_KEY: &str = "orders_purchase";

/// The class of a database failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbFailure {
    /// The server cannot be reached, or no connection was free within the acquire timeout.
    Unavailable,
    /// A row lock was not obtained within the wait budget (or `NOWAIT` found it taken), or a
    /// statement ran past its deadline.
    Busy,
    /// The server rolled the transaction back: a deadlock's victim, or on Galera a transaction
    /// certification refused ([`deadlocked`]). Nothing of it happened; it may be run again.
    RolledBack,
    /// An order of this purchase (product, buyer, request id) exists already.
    Duplicate,
    /// Anything else, another unique key's violation included: a bug or a schema problem.
    Other,
}

/// Classifies a sqlx error.
pub fn classify(e: &sqlx::Error) -> DbFailure {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => DbFailure::Unavailable,
        sqlx::Error::Database(db) => {
            if db.kind() == ErrorKind::UniqueViolation {
                let key = db.constraint().or_else(|| violated_key(db.message()));
                return match key == Some(PURCHASE_KEY) {
                    true => DbFailure::Duplicate,
                    false => DbFailure::Other,
                };
            }
            if let Some(state) = postgres_state(db.as_ref()) {
                return match state {
                    s if PG_ROLLED_BACK.contains(&s) => DbFailure::RolledBack,
                    s if PG_BUSY.contains(&s) => DbFailure::Busy,
                    s if PG_UNAVAILABLE.contains(&s) => DbFailure::Unavailable,
                    _ => DbFailure::Other,
                };
            }
            match number(db.as_ref()) {
                Some(ER_LOCK_DEADLOCK | ER_CHECKREAD) => DbFailure::RolledBack,
                Some(ER_LOCK_WAIT_TIMEOUT | ER_LOCK_NOWAIT | ER_STATEMENT_TIMEOUT) => {
                    DbFailure::Busy
                }
                Some(n) if ER_UNAVAILABLE.contains(&n) => DbFailure::Unavailable,
                _ => DbFailure::Other,
            }
        }
        _ => DbFailure::Other,
    }
}

/// Whether InnoDB rolled the transaction back to break a deadlock (or a snapshot conflict): the
/// transaction did nothing, and running it again is what the server asks for.
pub fn deadlocked(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    if let Some(state) = postgres_state(db.as_ref()) {
        return PG_ROLLED_BACK.contains(&state);
    }
    matches!(number(db.as_ref()), Some(ER_LOCK_DEADLOCK | ER_CHECKREAD))
}

/// Whether the server answered a `COMMIT` by rolling the transaction back — on Galera, a write
/// set certification refused (`1213 Deadlock: wsrep aborted transaction`). An answer, not a lost
/// one: the transaction did not happen, as certainly as a refused statement; only a `COMMIT`
/// whose answer never came leaves its outcome unknown.
pub fn rolled_back_at_commit(e: &sqlx::Error) -> bool {
    deadlocked(e)
}

/// The server's error number, for an error MariaDB answered.
fn number(db: &dyn sqlx::error::DatabaseError) -> Option<u16> {
    db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(|e| e.number())
}

/// The SQLSTATE of an error PostgreSQL answered.
fn postgres_state(db: &dyn sqlx::error::DatabaseError) -> Option<&str> {
    db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .map(|e| e.code())
}

/// The key a duplicate-entry error (`ER_DUP_ENTRY`, 1062) names. The MySQL protocol carries no
/// constraint field and sqlx reports none, so the name is read from the one place the server
/// puts it: the error's fixed format `Duplicate entry '…' for key '<name>'` (MySQL 8 writes
/// `'<table>.<name>'`).
fn violated_key(message: &str) -> Option<&str> {
    let (_, key) = message.rsplit_once(" for key '")?;
    let key = key.strip_suffix('\'')?;
    Some(key.rsplit_once('.').map_or(key, |(_, name)| name))
}

#[cfg(test)]
mod tests {
    use super::violated_key;

    #[test]
    fn the_violated_key_is_read_from_mariadb_and_mysql_messages() {
        assert_eq!(
            violated_key("Duplicate entry '1-u-it''s for key' for key 'orders_purchase'"),
            Some("orders_purchase")
        );
        assert_eq!(
            violated_key("Duplicate entry 'x' for key 'orders.orders_purchase'"),
            Some("orders_purchase")
        );
        assert_eq!(violated_key("Deadlock found"), None);
    }
}
