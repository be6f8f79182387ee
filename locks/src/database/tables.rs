//! The statements of the lock table's rows (`db-lock` and its forms) on either engine, one
//! method a statement, so that the lock itself (`mod.rs`, `row.rs`, `reentrant.rs`) is written
//! once. MariaDB's use `AUTO_INCREMENT` and `LAST_INSERT_ID`, `LOCK IN SHARE MODE` and
//! `NOW(6)`; PostgreSQL's (feature `postgres`, tables made by `postgres::create_schema`) the
//! same steps with `RETURNING`, `FOR SHARE` and `clock_timestamp()`. On PostgreSQL an insert
//! that meets another session's uncommitted row of the same name waits for it and then does
//! nothing (`ON CONFLICT DO NOTHING`), where InnoDB answers a duplicate key or picks a deadlock
//! victim; either way the name is taken.

use std::time::Duration;

use sqlx::MySqlPool;
#[cfg(feature = "postgres")]
use sqlx::PgPool;

use super::{is_busy, is_duplicate, micros};
use crate::LockError;

/// The database the lock table lives in.
#[derive(Clone)]
pub enum Tables {
    MySql(MySqlPool),
    #[cfg(feature = "postgres")]
    Postgres(PgPool),
}

impl From<MySqlPool> for Tables {
    fn from(pool: MySqlPool) -> Tables {
        Tables::MySql(pool)
    }
}

#[cfg(feature = "postgres")]
impl From<PgPool> for Tables {
    fn from(pool: PgPool) -> Tables {
        Tables::Postgres(pool)
    }
}

/// What a release gives back of a held row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Release {
    /// The row.
    Row,
    /// The row, if this is its last hold.
    LastHold,
    /// One hold, if more than one is left.
    OneHold,
}

/// A lease as PostgreSQL's `make_interval` takes it: seconds.
#[cfg(feature = "postgres")]
fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// `sql` with its `?` placeholders numbered as PostgreSQL writes them (`$1`, `$2`, …).
#[cfg(feature = "postgres")]
fn numbered(sql: &str) -> String {
    let mut n = 0;
    let mut out = String::with_capacity(sql.len() + 8);
    for c in sql.chars() {
        match c {
            '?' => {
                n += 1;
                out.push_str(&format!("${n}"));
            }
            c => out.push(c),
        }
    }
    out
}

/// Runs a MariaDB statement that sets `LAST_INSERT_ID` to what it wrote: that value, or `None`
/// if it changed no row.
async fn id_set_by(
    statement: sqlx::query::Query<'_, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    pool: &MySqlPool,
) -> Result<Option<u64>, LockError> {
    let done = (statement.execute(pool).await).map_err(LockError::unavailable)?;
    Ok((done.rows_affected() > 0).then(|| done.last_insert_id()))
}

impl Tables {
    /// Inserts the name's row for `owner`, its lease by the database's clock: the row's id, or
    /// `None` if the name is taken.
    pub(super) async fn insert(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<u64>, LockError> {
        let inserted = match self {
            Tables::MySql(pool) => sqlx::query(
                "INSERT INTO db_locks (name, owner, expires_at) \
                 VALUES (?, ?, NOW(6) + INTERVAL ? MICROSECOND)",
            )
            .bind(key)
            .bind(owner)
            .bind(micros(lease))
            .execute(pool)
            .await
            .map(|done| Some(done.last_insert_id())),
            #[cfg(feature = "postgres")]
            Tables::Postgres(pool) => sqlx::query_scalar::<_, i64>(
                "INSERT INTO db_locks (name, owner, expires_at) \
                 VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3)) \
                 ON CONFLICT (name) DO NOTHING RETURNING id",
            )
            .bind(key)
            .bind(owner)
            .bind(seconds(lease))
            .fetch_optional(pool)
            .await
            .map(|id| id.map(i64::cast_unsigned)),
        };
        match inserted {
            Ok(id) => Ok(id),
            // Taken. Or InnoDB picked us as the victim of the deadlock that concurrent
            // duplicate inserts into a unique index make around a delete: taken too.
            Err(e) if is_duplicate(&e) || is_busy(&e) => Ok(None),
            Err(e) => Err(LockError::unavailable(e)),
        }
    }

    /// Bumps the name's counter for the grant of row `id` (created at the row's id the first
    /// time) if the row is still `owner`'s and unexpired, reading it with a shared lock so that
    /// no waiter reaps it meanwhile: the fencing token, or `None` if the lease passed.
    pub(super) async fn fence(&self, id: u64, owner: &str) -> Result<Option<u64>, LockError> {
        match self {
            Tables::MySql(pool) => {
                let bump = sqlx::query(
                    "INSERT INTO db_lock_fences (name, fence) \
                     SELECT name, LAST_INSERT_ID(id) FROM db_locks \
                     WHERE id = ? AND owner = ? AND expires_at > NOW(6) LOCK IN SHARE MODE \
                     ON DUPLICATE KEY UPDATE \
                     fence = LAST_INSERT_ID(GREATEST(db_lock_fences.fence + 1, VALUES(fence)))",
                );
                id_set_by(bump.bind(id).bind(owner), pool).await
            }
            #[cfg(feature = "postgres")]
            Tables::Postgres(pool) => sqlx::query_scalar::<_, i64>(
                "WITH held AS (SELECT name, id FROM db_locks \
                 WHERE id = $1 AND owner = $2 AND expires_at > clock_timestamp() FOR SHARE) \
                 INSERT INTO db_lock_fences (name, fence) SELECT name, id FROM held \
                 ON CONFLICT (name) DO UPDATE \
                 SET fence = GREATEST(db_lock_fences.fence + 1, EXCLUDED.fence) \
                 RETURNING fence",
            )
            .bind(id.cast_signed())
            .bind(owner)
            .fetch_optional(pool)
            .await
            .map(|fence| fence.map(i64::cast_unsigned))
            .map_err(LockError::unavailable),
        }
    }

    /// Gives back what `release` says of row `id` held by `owner`: whether the row changed.
    pub(super) async fn release(
        &self,
        id: u64,
        owner: &str,
        release: Release,
    ) -> Result<bool, sqlx::Error> {
        let sql = match release {
            Release::Row => "DELETE FROM db_locks WHERE id = ? AND owner = ?",
            Release::LastHold => "DELETE FROM db_locks WHERE id = ? AND owner = ? AND holds = 1",
            Release::OneHold => {
                "UPDATE db_locks SET holds = holds - 1 WHERE id = ? AND owner = ? AND holds > 1"
            }
        };
        let changed = match self {
            Tables::MySql(pool) => {
                (sqlx::query(sql).bind(id).bind(owner).execute(pool).await?).rows_affected()
            }
            #[cfg(feature = "postgres")]
            Tables::Postgres(pool) => (sqlx::query(sqlx::AssertSqlSafe(numbered(sql))))
                .bind(id.cast_signed())
                .bind(owner)
                .execute(pool)
                .await?
                .rows_affected(),
        };
        Ok(changed == 1)
    }

    /// The row holding `key`, if any: its id, and whether its lease has passed.
    pub(super) async fn holder(&self, key: &str) -> Result<Option<(u64, bool)>, LockError> {
        match self {
            Tables::MySql(pool) => {
                sqlx::query_as("SELECT id, expires_at < NOW(6) FROM db_locks WHERE name = ?")
                    .bind(key)
                    .fetch_optional(pool)
                    .await
            }
            #[cfg(feature = "postgres")]
            Tables::Postgres(pool) => sqlx::query_as::<_, (i64, bool)>(
                "SELECT id, expires_at < clock_timestamp() FROM db_locks WHERE name = $1",
            )
            .bind(key)
            .fetch_optional(pool)
            .await
            .map(|row| row.map(|(id, expired)| (id.cast_unsigned(), expired))),
        }
        .map_err(LockError::unavailable)
    }

    /// Deletes row `id` if its lease has passed: a compare-and-set on the row a waiter saw.
    pub(super) async fn reap(&self, id: u64) -> Result<(), sqlx::Error> {
        match self {
            Tables::MySql(pool) => {
                sqlx::query("DELETE FROM db_locks WHERE id = ? AND expires_at < NOW(6)")
                    .bind(id)
                    .execute(pool)
                    .await?;
            }
            #[cfg(feature = "postgres")]
            Tables::Postgres(pool) => {
                sqlx::query(
                    "DELETE FROM db_locks WHERE id = $1 AND expires_at < clock_timestamp()",
                )
                .bind(id.cast_signed())
                .execute(pool)
                .await?;
            }
        }
        Ok(())
    }

    /// Extends row `id`'s lease to `lease` from now if it is still `owner`'s and unexpired:
    /// whether it was.
    pub(super) async fn extend(
        &self,
        id: u64,
        owner: &str,
        lease: Duration,
    ) -> Result<bool, sqlx::Error> {
        let extended = match self {
            Tables::MySql(pool) => sqlx::query(
                "UPDATE db_locks SET expires_at = NOW(6) + INTERVAL ? MICROSECOND \
                 WHERE id = ? AND owner = ? AND expires_at >= NOW(6)",
            )
            .bind(micros(lease))
            .bind(id)
            .bind(owner)
            .execute(pool)
            .await?
            .rows_affected(),
            #[cfg(feature = "postgres")]
            Tables::Postgres(pool) => sqlx::query(
                "UPDATE db_locks SET expires_at = clock_timestamp() + make_interval(secs => $1) \
                 WHERE id = $2 AND owner = $3 AND expires_at >= clock_timestamp()",
            )
            .bind(seconds(lease))
            .bind(id.cast_signed())
            .bind(owner)
            .execute(pool)
            .await?
            .rows_affected(),
        };
        Ok(extended == 1)
    }

    /// One more hold of `key`'s row by `owner`, while its lease lasts: the row's id, or `None`.
    pub(super) async fn reenter(&self, key: &str, owner: &str) -> Result<Option<u64>, LockError> {
        match self {
            Tables::MySql(pool) => {
                let enter = sqlx::query(
                    "UPDATE db_locks SET holds = holds + 1, id = LAST_INSERT_ID(id) \
                     WHERE name = ? AND owner = ? AND expires_at > NOW(6)",
                );
                id_set_by(enter.bind(key).bind(owner), pool).await
            }
            #[cfg(feature = "postgres")]
            Tables::Postgres(pool) => sqlx::query_scalar::<_, i64>(
                "UPDATE db_locks SET holds = holds + 1 \
                 WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp() RETURNING id",
            )
            .bind(key)
            .bind(owner)
            .fetch_optional(pool)
            .await
            .map(|id| id.map(i64::cast_unsigned))
            .map_err(LockError::unavailable),
        }
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_order_for_postgresql() {
        assert_eq!(
            numbered("DELETE FROM db_locks WHERE id = ? AND owner = ? AND holds = 1"),
            "DELETE FROM db_locks WHERE id = $1 AND owner = $2 AND holds = 1"
        );
    }
}
