//! What a database error means for a purchase, decided by error kind and server error number,
//! never by message text.

use sqlx::error::ErrorKind;

/// `innodb_lock_wait_timeout` passed while waiting for a row lock (MariaDB also answers a
/// failed `FOR UPDATE NOWAIT` with it).
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// InnoDB chose this transaction as a deadlock victim.
const ER_LOCK_DEADLOCK: u16 = 1213;
/// MySQL's answer to a failed `NOWAIT`.
const ER_LOCK_NOWAIT: u16 = 3572;
/// Too many connections / server shutting down / connection killed.
const ER_UNAVAILABLE: [u16; 3] = [1040, 1053, 1927];

/// The class of a database failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbFailure {
    /// The server cannot be reached, or no connection was free within the acquire timeout.
    Unavailable,
    /// A row lock was not obtained within the wait budget (or `NOWAIT` found it taken).
    Busy,
    /// A unique constraint rejected the row.
    Duplicate,
    /// Anything else: a bug or a schema problem.
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
                return DbFailure::Duplicate;
            }
            let number = db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|e| e.number());
            match number {
                Some(ER_LOCK_WAIT_TIMEOUT | ER_LOCK_DEADLOCK | ER_LOCK_NOWAIT) => DbFailure::Busy,
                Some(n) if ER_UNAVAILABLE.contains(&n) => DbFailure::Unavailable,
                _ => DbFailure::Other,
            }
        }
        _ => DbFailure::Other,
    }
}
