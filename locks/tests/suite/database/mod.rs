//! `DbLock` (the database lock table), leased and renewed: the conformance suite on MariaDB,
//! plus connecting it by its `Backend` into an empty database.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use locks::database::DbLock;
use locks::{AcquireOptions, Backend, ConnectError, DistributedLock, Endpoints, conformance};
use sqlx::MySqlPool;
use sqlx::migrate::MigrateDatabase;
use sqlx::mysql::MySqlPoolOptions;

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

/// A pool of its own per client, as separate processes would have.
fn pool(url: &str) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(4)
        .connect_lazy(url)
        .expect("database url")
}

/// The suite for the lock `make` builds; a grant is forgotten by moving its expiry into the past,
/// so the next acquirer reaps it as it would an expired row.
async fn subject(make: fn(MySqlPool) -> DbLock) -> conformance::Subject {
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
            let (admin, owner) = (admin.clone(), guard.owner().to_owned());
            async move {
                sqlx::query(
                    "UPDATE db_locks SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE owner = ?",
                )
                .bind(owner)
                .execute(&admin)
                .await
                .expect("expire the row");
            }
            .boxed()
        },
    )
}

mod leased {
    use super::*;

    async fn subject() -> conformance::Subject {
        super::subject(DbLock::leased).await
    }

    conformance::suite!(subject);
}

mod renewed {
    use super::*;

    async fn subject() -> conformance::Subject {
        super::subject(DbLock::renewed).await
    }

    conformance::suite!(subject);
}

#[tokio::test]
async fn connecting_by_backend_creates_the_lock_table_in_an_empty_database() {
    let url = tokio::task::spawn_blocking(fresh_database_url)
        .await
        .expect("server");
    sqlx::MySql::create_database(&url).await.expect("database");
    for backend in [Backend::DbLock, Backend::DbLockRenewed] {
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
