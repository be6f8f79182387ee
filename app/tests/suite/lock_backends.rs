//! The strategies over outside lock services, wired by name in `backends.rs`: each safe one
//! sells exactly the stock to 200 concurrent buyers; an unconfigured one answers
//! `backend_unavailable`.

use crate::common;

use common::{
    fresh_database_url, ledger, sells_exactly_the_stock, sells_exactly_the_stock_on, spawn_app,
    test_config,
};
use reqwest::StatusCode;
use serde_json::json;

async fn server<T: Send + 'static>(start: fn() -> T) -> T {
    tokio::task::spawn_blocking(start).await.expect("sandbox")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lock_never_oversells_under_200_buyers() {
    let url = server(sandbox::shared::redis_url).await;
    sells_exactly_the_stock("redis-lock", |c| c.redis_url = Some(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_redis_lock_never_oversells_under_200_buyers() {
    let url = server(sandbox::shared::redis_url).await;
    sells_exactly_the_stock("redis-lock-fenced", |c| c.redis_url = Some(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_watchdog_never_oversells_under_200_buyers() {
    let url = server(sandbox::shared::redis_url).await;
    sells_exactly_the_stock("redis-watchdog", |c| c.redis_url = Some(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_fair_never_oversells_under_200_buyers() {
    let url = server(sandbox::shared::redis_url).await;
    sells_exactly_the_stock("redis-fair", |c| c.redis_url = Some(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_redis_fair_never_oversells_under_200_buyers() {
    let url = server(sandbox::shared::redis_url).await;
    sells_exactly_the_stock("redis-fair-fenced", |c| c.redis_url = Some(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_redis_watchdog_through_sentinel_never_oversells_under_200_buyers() {
    let (sentinels, master) = server(sandbox::shared::redis_sentinels).await;
    sells_exactly_the_stock("redis-watchdog-fenced", |c| {
        c.redis_sentinels = sentinels;
        c.redis_master_name = master;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_never_oversells_under_200_buyers() {
    let urls = server(sandbox::shared::redlock_urls).await;
    sells_exactly_the_stock("redlock", |c| c.redlock_urls = urls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_lock_never_oversells_under_200_buyers() {
    let connect = server(sandbox::shared::zookeeper).await;
    sells_exactly_the_stock("zookeeper", |c| c.zookeeper = Some(connect)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_lock_never_oversells_under_200_buyers() {
    let endpoints = server(sandbox::shared::etcd).await;
    sells_exactly_the_stock("etcd", |c| c.etcd = endpoints).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memcached_lock_never_oversells_under_200_buyers_across_two_instances() {
    let addr = server(sandbox::shared::memcached).await;
    sells_exactly_the_stock_on(2, "memcached", |c| c.memcached = Some(addr)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_memcached_lock_never_oversells_under_200_buyers_across_two_instances() {
    let addr = server(sandbox::shared::memcached).await;
    sells_exactly_the_stock_on(2, "memcached-fenced", |c| c.memcached = Some(addr)).await;
}

#[tokio::test]
async fn strategies_of_unconfigured_lock_services_answer_backend_unavailable() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    app.reset(1, 5).await;
    for strategy in [
        "redis-lock",
        "redis-watchdog-fenced",
        "redlock",
        "zookeeper",
        "etcd-fenced",
        "memcached-fenced",
    ] {
        let body = json!({ "user_id": "u", "quantity": 1, "request_id": format!("r-{strategy}"), "strategy": strategy });
        let (status, answer) = app.order(1, &body, None).await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{strategy}: {answer}"
        );
        assert_eq!(answer["error"], "backend_unavailable", "{strategy}");
    }
    assert_eq!(ledger(&database_url, 1).await.stock, 5);
    app.stop().await;
    common::drop_database(&database_url).await;
}

/// `--redis-lock-wait-replicas 1`: a `redis-watchdog*` grant no replica confirms is given back
/// and the purchase answers `503` (a Redis without replicas), while one a live replica confirms
/// sells (a primary with its replica). A live replica can still miss the confirmation's
/// deadline on a loaded machine — that purchase is refused (`503`, nothing bought), which is
/// the point — so the buyer retries until a grant is confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_watchdog_waiting_for_a_replica_sells_only_grants_a_replica_confirmed() {
    let alone = server(sandbox::shared::redis_url).await;
    let pair = server(sandbox::RedisPair::start).await.expect("Redis pair");
    for (url, confirmed) in [(alone, false), (pair.primary.url(), true)] {
        let database_url = fresh_database_url().await;
        let mut config = test_config(&database_url);
        config.redis_url = Some(url);
        config.redis_lock_wait_replicas = 1;
        config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
        let app = spawn_app(config).await;
        app.reset(1, 5).await;
        for strategy in ["redis-watchdog", "redis-watchdog-fenced"] {
            let body = json!({ "user_id": "u", "quantity": 1, "request_id": format!("r-{strategy}"), "strategy": strategy });
            let (mut status, mut answer) = app.order(1, &body, None).await;
            match confirmed {
                true => {
                    let mut tries = 1;
                    while status == StatusCode::SERVICE_UNAVAILABLE && tries < 100 {
                        (status, answer) = app.order(1, &body, None).await;
                        tries += 1;
                    }
                    assert_eq!(status, StatusCode::CREATED, "{strategy}: {answer}");
                }
                false => {
                    assert_eq!(
                        status,
                        StatusCode::SERVICE_UNAVAILABLE,
                        "{strategy}: {answer}"
                    );
                    assert_eq!(answer["error"], "backend_unavailable", "{strategy}");
                }
            }
        }
        let sold = if confirmed { 2 } else { 0 };
        assert_eq!(ledger(&database_url, 1).await.stock, 5 - sold);
        app.stop().await;
        common::drop_database(&database_url).await;
    }
}
