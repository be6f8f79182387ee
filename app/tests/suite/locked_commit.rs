//! A locked strategy must not give its lock back before its commit's outcome is known: the next
//! holder would read the stock before the first purchase lands and write an absolute value over
//! it. MariaDB's `BACKUP STAGE BLOCK_COMMIT` holds every commit in flight, which lets the test
//! put the client's disconnect exactly there.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use app::api::{OrderRequest, Strategy};
use common::fake_locks::CountsReleases;
use common::{fresh_database_url, ledger, spawn_app_with, test_config};
use locks::Backend;
use sqlx::{Connection, MySqlConnection};

async fn sql(conn: &mut MySqlConnection, statement: &'static str) {
    sqlx::query(statement)
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_locked_strategy_keeps_its_lock_while_its_commit_is_in_flight_and_the_client_leaves() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.lock_lease_ms = 1_000;
    let lock = Arc::new(CountsReleases::default());
    let released = Arc::clone(&lock.released);
    let app = spawn_app_with(config, move |r| r.set_lock(Backend::Redis, Some(lock))).await;
    app.reset(1, 5).await;

    let mut backup = MySqlConnection::connect(&database_url)
        .await
        .expect("a side connection");
    sql(&mut backup, "BACKUP STAGE START").await;
    sql(&mut backup, "BACKUP STAGE BLOCK_COMMIT").await;

    let body = OrderRequest {
        user_id: Some("u".into()),
        quantity: 1,
        request_id: "in-doubt".into(),
        strategy: Some(Strategy::RedisLock),
        purchase_token: None,
    };
    let request = (app.client)
        .post(format!("{}/api/products/1/orders", app.url))
        .json(&body);
    let request = app.as_buyer(request, "u").send();
    let client = tokio::spawn(request);

    // Wait until the purchase's COMMIT is the statement held by the backup lock.
    let mut watcher = MySqlConnection::connect(&database_url)
        .await
        .expect("a watching connection");
    let started = Instant::now();
    loop {
        let waiting: i64 = sqlx::query_scalar(
            // This test's database only: with the shared harness, other tests' commits wait
            // for the server-wide backup lock too, and one of theirs must not pass for ours.
            "SELECT COUNT(*) FROM information_schema.processlist \
             WHERE info = 'COMMIT' AND state LIKE '%backup%' AND db = DATABASE()",
        )
        .fetch_one(&mut watcher)
        .await
        .expect("processlist");
        if waiting > 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the purchase's commit never waited for the backup lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(released.load(Ordering::SeqCst), 0);

    // The client gives up while the commit is in flight; the purchase, in a task of its own,
    // goes on waiting for its commit.
    client.abort();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        released.load(Ordering::SeqCst),
        0,
        "the lock was given back while the commit's outcome was unknown"
    );

    sql(&mut backup, "BACKUP STAGE END").await;
    let started = Instant::now();
    while released.load(Ordering::SeqCst) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the lock was never given back after the commit settled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ledger(&database_url, 1).await.orders, 1);
    app.stop().await;
    common::drop_database(&database_url).await;
}
