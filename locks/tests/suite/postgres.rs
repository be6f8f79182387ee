//! PostgreSQL's locks: the conformance suite and a history-checked contention run for the
//! session and transaction advisory locks, the two row locks (`SELECT … FOR UPDATE`, the
//! blocking upsert) and the lock table's rows (`db-lock`, the conformance suite for its renewed
//! and reentrant forms too), in a database of this test binary's own on the sandbox's PostgreSQL; that a
//! released lock leaves its connection holding nothing; that a row lock holds its name's row
//! only; and the server's behaviour that makes session locks unsafe behind a transaction
//! pooler.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use locks::database::{DbLock, DbReentrantLock};
use locks::postgres::{
    PgAdvisoryLock, PgAdvisoryXactLock, PgInsertLock, PgRowLock, create_schema, session_of,
};
use locks::{AcquireOptions, DistributedLock, conformance};
use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

use crate::contention;

/// A fresh database with the fencing sequence, one per test binary, created on a runtime of its
/// own (each test has its own runtime, and a pool must not outlive the one it was made on).
fn database_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        std::thread::spawn(|| {
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            runtime.block_on(own_database())
        })
        .join()
        .expect("database set-up")
    })
    .clone()
}

/// A database nobody else uses on the sandbox's PostgreSQL, with the fencing sequence.
async fn own_database() -> String {
    let server = tokio::task::spawn_blocking(sandbox::shared::postgres_url)
        .await
        .expect("server");
    let url = format!(
        "{}/locks_{}",
        server.trim_end_matches('/'),
        locks::new_owner_id()
    );
    sqlx::Postgres::create_database(&url)
        .await
        .expect("database");
    let admin = pool(&url);
    create_schema(&admin).await.expect("fencing sequence");
    admin.close().await;
    url
}

/// A pool of its own per client, as separate processes would have.
fn pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .connect_lazy(url)
        .expect("database url")
}

/// Ends server process `pid`'s session, as an expired lease would: the server frees its locks
/// and rolls its transaction back. Waits (up to 10 s) until the process is gone.
async fn terminate(admin: &PgPool, pid: i32) {
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 10000)")
        .bind(pid)
        .fetch_one(admin)
        .await
        .expect("terminate the session");
    assert!(ended, "session {pid} did not end");
}

/// How the suite makes the database forget a grant behind its holder's back.
#[derive(Debug, Clone, Copy)]
enum Forget {
    /// Move the row's expiry into the past, so the next acquirer reaps it as it would an
    /// expired row (the lock table's rows).
    ExpireRow,
    /// End the session that holds it: the server frees its locks and rolls its transaction
    /// back (the advisory locks, the locks held by a transaction).
    EndSession,
}

/// The suite for the lock `make` builds, its grants forgotten as `forget` says.
async fn subject<L: DistributedLock + 'static>(
    make: fn(PgPool) -> L,
    forget: Forget,
) -> conformance::Subject {
    let url = tokio::task::spawn_blocking(database_url)
        .await
        .expect("database");
    let admin = pool(&url);
    conformance::Subject::new(
        move || {
            let lock = make(pool(&url));
            async move { Arc::new(lock) as Arc<dyn DistributedLock> }.boxed()
        },
        move |guard| {
            let (admin, owner, session) =
                (admin.clone(), guard.owner().to_owned(), session_of(guard));
            async move {
                match forget {
                    Forget::ExpireRow => {
                        sqlx::query(
                            "UPDATE db_locks \
                             SET expires_at = clock_timestamp() - interval '1 second' \
                             WHERE owner = $1",
                        )
                        .bind(owner)
                        .execute(&admin)
                        .await
                        .expect("expire the row");
                    }
                    Forget::EndSession => {
                        terminate(&admin, session.expect("the guard names its session")).await;
                    }
                }
            }
            .boxed()
        },
    )
}

/// A module running the conformance suite per lock: `module: make, forget;`.
macro_rules! suites {
    ($($module:ident: $make:path, $forget:ident;)*) => {
        $(
            mod $module {
                use super::*;

                async fn subject() -> conformance::Subject {
                    super::subject($make, Forget::$forget).await
                }

                conformance::suite!(subject);
            }
        )*
    };
}

/// The lock table's rows on PostgreSQL, leased.
fn table_lock(pool: PgPool) -> DbLock {
    DbLock::leased(pool)
}

/// The lock table's rows on PostgreSQL, renewed while held.
fn renewed_table_lock(pool: PgPool) -> DbLock {
    DbLock::renewed(pool)
}

/// The lock table's rows on PostgreSQL, reentrant.
fn reentrant_table_lock(pool: PgPool) -> DbReentrantLock {
    DbReentrantLock::new(pool)
}

suites! {
    advisory_suite: PgAdvisoryLock::new, EndSession;
    advisory_xact_suite: PgAdvisoryXactLock::new, EndSession;
    row_lock_suite: PgRowLock::new, EndSession;
    blocking_insert_suite: PgInsertLock::new, EndSession;
    table_lock_suite: table_lock, ExpireRow;
    renewed_table_lock_suite: renewed_table_lock, ExpireRow;
    reentrant_table_lock_suite: reentrant_table_lock, ExpireRow;
}

/// Six clients, each with a pool of two connections, take a lock of `make`'s 20 times each,
/// writing to a fenced store inside (`contention.rs`).
async fn contention_history_shows_no_violation<L: DistributedLock + 'static>(
    make: fn(PgPool) -> L,
) {
    const CLIENTS: usize = 6;
    let url = tokio::task::spawn_blocking(database_url)
        .await
        .expect("database");
    let clients = (0..CLIENTS)
        .map(|_| {
            let pool = PgPoolOptions::new()
                .max_connections(2)
                .connect_lazy(&url)
                .expect("database url");
            Arc::new(make(pool)) as Arc<dyn DistributedLock>
        })
        .collect();
    let options = AcquireOptions::new(Duration::from_secs(600)).wait(Duration::from_secs(60));
    contention::history_shows_no_violation(clients, options).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_history_checked_contention_run_of_the_session_lock_shows_no_violation() {
    contention_history_shows_no_violation(PgAdvisoryLock::new).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_history_checked_contention_run_of_the_transaction_lock_shows_no_violation() {
    contention_history_shows_no_violation(PgAdvisoryXactLock::new).await;
}

/// Advisory locks held in `admin`'s database now, by any session.
async fn advisory_locks_held(admin: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(admin)
    .await
    .expect("pg_locks")
}

/// Takes and releases a lock of `make`'s a few times through a pool of one connection, then
/// finds no advisory lock held: the connection went back to the pool holding nothing.
async fn a_released_lock_leaves_nothing_held<L: DistributedLock>(make: fn(PgPool) -> L) {
    let url = own_database().await;
    let admin = pool(&url);
    let lock = make(
        PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy(&url)
            .expect("database url"),
    );
    let key = conformance::unique_key("released");
    for _ in 0..3 {
        let guard = lock
            .acquire(&key, AcquireOptions::new(Duration::from_secs(30)))
            .await
            .expect("grant");
        assert_eq!(advisory_locks_held(&admin).await, 1, "held while held");
        assert!(guard.release().await.expect("release"));
        assert_eq!(
            advisory_locks_held(&admin).await,
            0,
            "nothing after release"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_session_lock_leaves_its_pooled_connection_holding_nothing() {
    a_released_lock_leaves_nothing_held(PgAdvisoryLock::new).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_transaction_lock_leaves_its_pooled_connection_holding_nothing() {
    a_released_lock_leaves_nothing_held(PgAdvisoryXactLock::new).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_history_checked_contention_run_of_the_lock_tables_rows_shows_no_violation() {
    contention_history_shows_no_violation(table_lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_history_checked_contention_run_of_the_row_lock_shows_no_violation() {
    contention_history_shows_no_violation(PgRowLock::new).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_history_checked_contention_run_of_the_blocking_insert_shows_no_violation() {
    contention_history_shows_no_violation(PgInsertLock::new).await;
}

/// While a name of `make`'s lock is held, a try of it is refused and another name is granted
/// at once: the lock is its name's row, not the table's.
async fn a_held_name_leaves_another_free<L: DistributedLock>(make: fn(PgPool) -> L) {
    let url = tokio::task::spawn_blocking(database_url)
        .await
        .expect("database");
    let (holder, other) = (make(pool(&url)), make(pool(&url)));
    let (first, second) = (
        conformance::unique_key("held"),
        conformance::unique_key("free"),
    );
    let lease = AcquireOptions::new(Duration::from_secs(30));
    // Both rows made and released, so that the names are neighbours in the table.
    for key in [&first, &second] {
        let guard = holder.acquire(key, lease).await.expect("grant");
        assert!(guard.release().await.expect("release"));
    }
    let held = holder.acquire(&first, lease).await.expect("grant");
    assert!(
        other.acquire(&first, lease).await.is_err(),
        "a try of a held name was granted"
    );
    let free = (other
        .acquire(&second, lease.wait(Duration::from_secs(10)))
        .await)
        .expect("another name is free");
    assert!(free.release().await.expect("release"));
    assert!(held.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_row_lock_leaves_another_names_row_free() {
    a_held_name_leaves_another_free(PgRowLock::new).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_blocking_insert_leaves_another_names_row_free() {
    a_held_name_leaves_another_free(PgInsertLock::new).await;
}

/// What a transaction pooler turns into two holders: PostgreSQL grants a session lock again to
/// the session that holds it, and one unlock of two grants leaves it held. A transaction lock
/// taken on that session ends with its transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lock_is_granted_again_to_its_session_and_a_transaction_lock_ends_with_it() {
    let url = tokio::task::spawn_blocking(database_url)
        .await
        .expect("database");
    let (mut shared, mut other) = (
        PgConnection::connect(&url).await.expect("connect"),
        PgConnection::connect(&url).await.expect("connect"),
    );
    let key = conformance::unique_key("same-session");
    let try_lock = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))";
    let take = async |conn: &mut PgConnection, sql: &'static str| -> bool {
        sqlx::query_scalar(sql)
            .bind(&key)
            .fetch_one(conn)
            .await
            .expect("lock statement")
    };
    assert!(
        take(&mut shared, try_lock).await,
        "the first client's grant"
    );
    assert!(
        take(&mut shared, try_lock).await,
        "a second client handed the same session is granted the held lock too"
    );
    assert!(
        !take(&mut other, try_lock).await,
        "another session is refused"
    );
    let unlock = "SELECT pg_advisory_unlock(hashtextextended($1, 0))";
    assert!(take(&mut shared, unlock).await);
    assert!(
        !take(&mut other, try_lock).await,
        "one unlock of the two grants leaves it held"
    );
    assert!(take(&mut shared, unlock).await);

    let try_xact = "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))";
    let mut transaction = shared.begin().await.expect("begin");
    assert!(
        take(&mut *transaction, try_xact).await,
        "granted in the transaction"
    );
    assert!(!take(&mut other, try_lock).await, "held while it lasts");
    transaction.commit().await.expect("commit");
    assert!(
        take(&mut other, try_lock).await,
        "the commit released it: the session carries nothing on"
    );
}
