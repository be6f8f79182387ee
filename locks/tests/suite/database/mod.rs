//! The database locks on MariaDB: the conformance suite for each (the unique-key lock leased,
//! renewed and reentrant; the row-lock lock; the blocking insert), connecting each by its
//! `Backend` into an empty database, and, in the submodules, what each claims beyond the suite.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use locks::database::{DbInsertLock, DbLock, DbReentrantLock, DbRowLock, session_of};
use locks::{AcquireOptions, Backend, ConnectError, DistributedLock, Endpoints, conformance};
use sqlx::MySqlPool;
use sqlx::migrate::MigrateDatabase;
use sqlx::mysql::MySqlPoolOptions;

mod blocking_insert;
mod claims;
mod galera;
mod reentrant;
mod row_lock;
mod tokens;

/// A fresh database with the lock table, one per test binary, created on a runtime of its own
/// (each test has its own runtime, and a pool must not outlive the one it was made on).
fn database_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        std::thread::spawn(|| {
            let url = fresh_database_url();
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            runtime.block_on(async {
                sqlx::MySql::create_database(&url).await.expect("database");
                let pool = MySqlPool::connect(&url).await.expect("pool");
                DbLock::create_table(&pool).await.expect("lock table");
                pool.close().await;
            });
            url
        })
        .join()
        .expect("database set-up")
    })
    .clone()
}

/// The sandbox's MariaDB with a database name nobody else uses.
fn fresh_database_url() -> String {
    let server = sandbox::shared::database_url();
    let name = format!("locks_{}", locks::new_owner_id());
    format!("{}/{name}", server.trim_end_matches('/'))
}

/// A database of one test's own, with the lock tables: the sessions it counts at the server are
/// its own, whatever else runs there.
pub struct OwnDatabase {
    pub url: String,
    pub admin: MySqlPool,
}

impl OwnDatabase {
    pub async fn new() -> OwnDatabase {
        let url = tokio::task::spawn_blocking(fresh_database_url)
            .await
            .expect("server");
        sqlx::MySql::create_database(&url).await.expect("database");
        let admin = pool(&url);
        DbLock::create_table(&admin).await.expect("lock tables");
        OwnDatabase { url, admin }
    }

    /// Sessions of this database inside a lock statement now (`SELECT … FOR UPDATE` of the
    /// row-lock lock, the blocking insert's upsert): while the lock is held, its waiters. Read
    /// from the process list, not from InnoDB's lock-wait tables: those are a cache refreshed only
    /// after 100 ms without a reader, which a poll never leaves them.
    pub async fn waiting(&self) -> usize {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE DB = DATABASE() AND ID <> CONNECTION_ID() \
             AND (INFO LIKE '%FROM db_row_locks%FOR UPDATE%' OR INFO LIKE '%INTO db_insert_locks%')",
        )
        .fetch_one(&self.admin)
        .await
        .expect("process list");
        usize::try_from(n).unwrap_or(0)
    }

    /// Polls the server until `n` sessions wait.
    pub async fn until_waiting(&self, n: usize) {
        while self.waiting().await != n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub async fn remove(self) {
        self.admin.close().await;
        sqlx::MySql::drop_database(&self.url).await.expect("drop");
    }
}

/// A pool of its own per client, as separate processes would have.
fn pool(url: &str) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(4)
        .connect_lazy(url)
        .expect("database url")
}

/// How the suite makes the database forget a grant behind its holder's back.
#[derive(Debug, Clone, Copy)]
enum Forget {
    /// Move the row's expiry into the past, so the next acquirer reaps it as it would an
    /// expired row (the unique-key locks).
    ExpireRow,
    /// Kill the session that holds it, so the server rolls its transaction back (the locks
    /// held by a transaction).
    KillSession,
}

/// The suite for the lock `make` builds, its grants forgotten as `forget` says.
async fn subject<L: DistributedLock + 'static>(
    make: fn(MySqlPool) -> L,
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
                            "UPDATE db_locks SET expires_at = NOW(6) - INTERVAL 1 SECOND \
                             WHERE owner = ?",
                        )
                        .bind(owner)
                        .execute(&admin)
                        .await
                        .expect("expire the row");
                    }
                    Forget::KillSession => {
                        kill(&admin, session.expect("the guard names its session")).await;
                    }
                }
            }
            .boxed()
        },
    )
}

/// Ends database session `id` as `KILL` does: its transaction is rolled back.
async fn kill(admin: &MySqlPool, id: u64) {
    let sql = format!("KILL CONNECTION {id}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(admin)
        .await
        .expect("kill the session");
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

suites! {
    leased: DbLock::leased, ExpireRow;
    renewed: DbLock::renewed, ExpireRow;
    reentrant_suite: DbReentrantLock::new, ExpireRow;
    row_lock_suite: DbRowLock::new, KillSession;
    blocking_insert_suite: DbInsertLock::new, KillSession;
}

#[tokio::test]
async fn connecting_by_backend_creates_the_lock_table_in_an_empty_database() {
    let url = tokio::task::spawn_blocking(fresh_database_url)
        .await
        .expect("server");
    sqlx::MySql::create_database(&url).await.expect("database");
    let database_backends = [
        Backend::DbLock,
        Backend::DbLockRenewed,
        Backend::DbLockReentrant,
        Backend::DbRowLock,
        Backend::DbBlockingInsert,
    ];
    for backend in database_backends {
        let endpoints = Endpoints {
            database: Some(pool(&url).into()),
            ..Endpoints::default()
        };
        let lock = locks::connect(backend, &endpoints).await.expect("connect");
        assert_eq!(lock.backend(), backend.name());
        let guard = lock
            .acquire(
                &conformance::unique_key("by-backend"),
                AcquireOptions::new(Duration::from_secs(5)),
            )
            .await
            .expect("grant");
        assert!(guard.release().await.expect("release"));
    }
    sqlx::MySql::drop_database(&url).await.expect("drop");
}

#[tokio::test]
async fn the_database_lock_without_a_database_is_not_configured() {
    let connected = locks::connect(Backend::DbLock, &Endpoints::default()).await;
    assert!(
        matches!(
            connected,
            Err(ConnectError::NotConfigured {
                backend: Backend::DbLock,
                ..
            })
        ),
        "{:?}",
        connected.err()
    );
}
