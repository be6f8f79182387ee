//! The row-lock lock beyond the conformance suite: the articles' claims (`claims!`), a name's
//! first use, a row lock on a table of two rows, and what the database itself does when a
//! transaction locks its row twice.

use std::time::Duration;

use locks::database::{DbLock, DbRowLock, session_of};
use locks::{AcquireOptions, DistributedLock, LockError, conformance};
use sqlx::migrate::MigrateDatabase;
use sqlx::{Connection, MySqlConnection, MySqlPool};

use super::claims::claims;
use super::{database_url, fresh_database_url, pool};

claims!(DbRowLock);

const LEASE: Duration = Duration::from_secs(600);

async fn url() -> String {
    tokio::task::spawn_blocking(database_url)
        .await
        .expect("database")
}

async fn rows_named(admin: &MySqlPool, key: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM db_row_locks WHERE name = ?")
        .bind(key)
        .fetch_one(admin)
        .await
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_first_acquire_of_a_name_creates_its_row_and_holds_it() {
    let url = url().await;
    let admin = pool(&url);
    let key = conformance::unique_key("first-use");
    assert_eq!(rows_named(&admin, &key).await, 0);
    let (lock, other) = (DbRowLock::new(pool(&url)), DbRowLock::new(pool(&url)));
    let guard = lock
        .acquire(&key, AcquireOptions::new(LEASE))
        .await
        .expect("grant");
    assert_eq!(rows_named(&admin, &key).await, 1);
    let refused = other.acquire(&key, AcquireOptions::new(LEASE)).await;
    assert!(
        matches!(refused, Err(LockError::Timeout { .. })),
        "{refused:?}"
    );
    assert!(guard.release().await.expect("release"));
    assert_eq!(
        rows_named(&admin, &key).await,
        1,
        "the row stays for the next use"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holding_one_name_of_a_two_row_table_locks_its_row_only() {
    // A database of its own, so that the table holds exactly the two rows.
    let url = tokio::task::spawn_blocking(fresh_database_url)
        .await
        .expect("server");
    sqlx::MySql::create_database(&url).await.expect("database");
    let admin = pool(&url);
    DbLock::create_table(&admin).await.expect("tables");
    let (lock, other) = (DbRowLock::new(pool(&url)), DbRowLock::new(pool(&url)));
    for name in ["a", "b"] {
        let guard = lock
            .acquire(name, AcquireOptions::new(LEASE))
            .await
            .expect("grant");
        assert!(guard.release().await.expect("release"));
    }
    let a = lock
        .acquire("a", AcquireOptions::new(LEASE))
        .await
        .expect("grant");
    let locked: u64 = sqlx::query_scalar(
        "SELECT trx_rows_locked FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?",
    )
    .bind(session_of(&a).expect("session"))
    .fetch_one(&admin)
    .await
    .expect("the holder's transaction");
    assert_eq!(
        locked, 1,
        "the holder's transaction locked more than its row"
    );
    let b = other
        .acquire("b", AcquireOptions::new(LEASE))
        .await
        .expect("the other row of a small table was locked too");
    assert!(b.release().await.expect("release"));
    assert!(a.release().await.expect("release"));
    drop((lock, other));
    admin.close().await;
    sqlx::MySql::drop_database(&url).await.expect("drop");
}

/// Why the lock counts re-entries itself: InnoDB answers a transaction's second locking read of
/// its own row at once, and counts nothing — one `COMMIT` ends both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_one_transaction_a_second_locking_select_returns_at_once_and_one_commit_ends_both() {
    let url = url().await;
    let key = conformance::unique_key("raw-reentry");
    let seed = DbRowLock::new(pool(&url));
    let created = seed
        .acquire(&key, AcquireOptions::new(LEASE))
        .await
        .expect("create the row");
    assert!(created.release().await.expect("release"));
    let lock_sql = "SELECT name FROM db_row_locks WHERE name = ? FOR UPDATE NOWAIT";
    let (mut holder, mut other) = (
        MySqlConnection::connect(&url).await.expect("holder"),
        MySqlConnection::connect(&url).await.expect("other"),
    );
    sqlx::raw_sql("START TRANSACTION")
        .execute(&mut holder)
        .await
        .expect("begin");
    for entry in 1..=2 {
        sqlx::query(lock_sql)
            .bind(&key)
            .fetch_one(&mut holder)
            .await
            .unwrap_or_else(|e| panic!("entry {entry} of the holder's own lock: {e}"));
    }
    let refused = sqlx::query(lock_sql).bind(&key).fetch_one(&mut other).await;
    assert!(refused.is_err(), "another session locked a held row");
    sqlx::raw_sql("COMMIT")
        .execute(&mut holder)
        .await
        .expect("commit");
    sqlx::query(lock_sql)
        .bind(&key)
        .fetch_one(&mut other)
        .await
        .expect("one COMMIT did not free a row locked twice");
}
