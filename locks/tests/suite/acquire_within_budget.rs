//! An acquire answers within its wait budget (plus the grace one attempt gets), whatever the
//! server does: a caller that says "wait 300 ms" must not hang for the seconds a client library
//! spends reconnecting, or forever on a connection that went silent.
//!
//! The servers misbehave in the two ways that hang requests: a Redis that was killed (its
//! client waits for a reconnect with growing pauses, ≈ 6 s) or a MariaDB (the pool waits for a
//! connection up to its acquire timeout, 30 s by default), and a connection black-holed by a
//! relay (sockets open, nothing answers: etcd's client has no deadline of its own, ZooKeeper's
//! gives up after 2/5 of the session timeout).

use crate::relay;

use std::time::{Duration, Instant};

use locks::database::DbLock;
use locks::etcd::EtcdLock;
use locks::redis::RedisWatchdogLock;
use locks::zookeeper::ZooKeeperLock;
use locks::{AcquireOptions, DistributedLock};
use relay::Relay;
use sqlx::migrate::MigrateDatabase;

const BUDGET: Duration = Duration::from_millis(300);
/// The last attempt gets up to 1 s for its answer even when the budget is spent; the rest is
/// slack for a busy machine. The failures this catches take 6 s and more.
const GRACE: Duration = Duration::from_secs(2);
/// Lease (or session timeout) of the clients: far longer than any bound here.
const LONG: Duration = Duration::from_secs(20);

fn key(test: &str) -> String {
    format!("budget-test:{test}:{}", locks::new_owner_id())
}

/// One acquire with [`BUDGET`] fails, and returns within the budget plus [`GRACE`].
async fn gives_up_in_time(lock: &dyn DistributedLock, key: &str) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        lock.acquire(key, AcquireOptions::new(LONG).wait(BUDGET)),
    )
    .await;
    let took = started.elapsed();
    let outcome = outcome.unwrap_or_else(|_| panic!("acquire still pending after {took:?}"));
    assert!(outcome.is_err(), "granted by an unreachable server");
    assert!(
        took <= BUDGET + GRACE,
        "acquire with a {BUDGET:?} budget took {took:?} to give up: {outcome:?}"
    );
}

/// A client that has been granted once, so that its connection (and session or lease) is up.
async fn warmed(lock: &dyn DistributedLock) {
    let guard = lock
        .acquire(&key("warm-up"), AcquireOptions::new(LONG))
        .await
        .expect("grant");
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_acquire_gives_up_within_its_budget_when_redis_is_killed() {
    sandbox::require_faults!();
    let redis = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .expect("task")
        .expect("private redis");
    let lock = RedisWatchdogLock::connect(&redis.url()).expect("client");
    warmed(&lock).await;
    tokio::task::block_in_place(|| redis.server().kill()).expect("SIGKILL");
    // The first request fails at once and starts the reconnect; the next ones would wait for it.
    for attempt in 0..3 {
        gives_up_in_time(&lock, &key(&format!("killed-{attempt}"))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_lock_acquire_gives_up_within_its_budget_when_mariadb_is_killed() {
    sandbox::require_faults!();
    let mariadb = tokio::task::spawn_blocking(sandbox::MariaDb::start)
        .await
        .expect("task")
        .expect("private mariadb");
    let url = format!("{}/locks_budget", mariadb.url().trim_end_matches('/'));
    sqlx::MySql::create_database(&url).await.expect("database");
    // sqlx's default pool: a checkout waits up to 30 s for a connection, which a dead server
    // never gives.
    let pool = sqlx::MySqlPool::connect(&url).await.expect("pool");
    DbLock::create_table(&pool).await.expect("lock table");
    let lock = DbLock::leased(pool);
    warmed(&lock).await;
    tokio::task::block_in_place(|| mariadb.server().kill()).expect("SIGKILL");
    gives_up_in_time(&lock, &key("db-killed")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_acquire_gives_up_within_its_budget_when_its_connection_is_black_holed() {
    sandbox::require_faults!();
    let relay = Relay::start(&sandbox::shared::etcd()[0]).await;
    let lock = EtcdLock::connect(&[relay.http_url()])
        .await
        .expect("client");
    warmed(&lock).await;
    relay.black_hole();
    gives_up_in_time(&lock, &key("etcd")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_acquire_gives_up_within_its_budget_when_its_connection_is_black_holed() {
    sandbox::require_faults!();
    let relay = Relay::start(&sandbox::shared::zookeeper()).await;
    let lock = ZooKeeperLock::connect(&relay.address(), LONG)
        .await
        .expect("client");
    warmed(&lock).await;
    relay.black_hole();
    gives_up_in_time(&lock, &key("zookeeper")).await;
}
