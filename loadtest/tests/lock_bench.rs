//! `seckill-bench lock` counts mutual-exclusion violations: none for a correct lock, some for
//! a deliberately broken one; and it measures fairness: the fair Redis lock shares its grants
//! evenly among workers of separate clients.

use std::time::Duration;

use loadtest::lock::{bench, connect_clients};
use locks::Backend;
use sandbox::Endpoints;

fn endpoints() -> Endpoints {
    Endpoints {
        database_url: String::new(),
        redis_url: sandbox::shared::redis_url(),
        redlock_urls: Vec::new(),
        zookeeper: String::new(),
        etcd: Vec::new(),
        memcached: sandbox::shared::memcached(),
    }
}

async fn violations(backend: Backend) -> i64 {
    let e = endpoints();
    let clients = connect_clients(backend, &e, 1).await.unwrap();
    let report = bench(backend, clients, &e, 8, 1.0, Duration::from_micros(200))
        .await
        .unwrap();
    assert!(report.acquisitions > 0, "{report:?}");
    report.violations
}

#[tokio::test(flavor = "multi_thread")]
async fn a_correct_redis_lock_shows_no_violation() {
    assert_eq!(violations(Backend::Redis).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_memcached_lock_shows_no_violation() {
    assert_eq!(violations(Backend::Memcached).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_get_then_set_lock_shows_violations_under_contention() {
    for round in 1..=3 {
        let v = violations(Backend::RedisGetThenSet).await;
        if v > 0 {
            return;
        }
        eprintln!("round {round}: no violation this time");
    }
    panic!("`redis-get-then-set` never let two holders in within 3 rounds");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fair_redis_lock_shares_grants_evenly_among_16_workers_of_16_clients() {
    let e = endpoints();
    let clients = connect_clients(Backend::RedisFair, &e, 16).await.unwrap();
    let report = bench(Backend::RedisFair, clients, &e, 16, 1.5, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(report.violations, 0, "{report:?}");
    assert_eq!(report.clients, 16);
    let fairness = report.fairness_index.expect("grants");
    assert!(fairness >= 0.95, "fairness index {fairness}: {report}");
}
