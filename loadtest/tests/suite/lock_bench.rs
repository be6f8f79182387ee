//! `seckill-bench lock` counts mutual-exclusion violations: none for a correct lock, some for
//! a deliberately broken one; and it measures fairness: the fair Redis lock shares its grants
//! evenly among workers of separate clients; `--check` runs the lock-history checker over the
//! recorded run.

use std::time::Duration;

use loadtest::lock::{LockReport, bench, connect_clients};
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
        postgres_url: None,
    }
}

async fn checked(backend: Backend) -> LockReport {
    let e = match backend.uses_postgres() {
        true => Endpoints {
            postgres_url: Some(sandbox::shared::postgres_url()),
            ..endpoints()
        },
        false => endpoints(),
    };
    let clients = connect_clients(backend, &e, 1).await.unwrap();
    let report = bench(
        backend,
        clients,
        &e,
        8,
        1.0,
        Duration::from_micros(200),
        true,
    )
    .await
    .unwrap();
    assert!(report.acquisitions > 0, "{report:?}");
    report
}

async fn violations(backend: Backend) -> i64 {
    checked(backend).await.violations
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
async fn postgres_advisory_locks_show_no_violation_and_a_clean_history() {
    for backend in [Backend::PgAdvisory, Backend::PgAdvisoryXact] {
        let report = checked(backend).await;
        assert_eq!(report.violations, 0, "{backend}: {report:?}");
        assert_eq!(report.history_violations, Some(0), "{backend}: {report:?}");
    }
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
async fn the_history_check_finds_two_holders_of_the_get_then_set_lock_and_none_of_a_correct_one() {
    let report = checked(Backend::RedisWatchdog).await;
    assert_eq!(report.history_violations, Some(0), "{report}");
    for round in 1..=3 {
        let report = checked(Backend::RedisGetThenSet).await;
        if report.history_violations.is_some_and(|n| n > 0) {
            assert!(!report.history_slices.is_empty(), "{report}");
            return;
        }
        eprintln!("round {round}: no violation this time");
    }
    panic!("the history of `redis-get-then-set` never showed two holders within 3 rounds");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fair_redis_lock_shares_grants_evenly_among_16_workers_of_16_clients() {
    let e = endpoints();
    let clients = connect_clients(Backend::RedisFair, &e, 16).await.unwrap();
    let report = bench(
        Backend::RedisFair,
        clients,
        &e,
        16,
        1.5,
        Duration::ZERO,
        false,
    )
    .await
    .unwrap();
    assert_eq!(report.violations, 0, "{report:?}");
    assert_eq!(report.clients, 16);
    let fairness = report.fairness_index.expect("grants");
    assert!(fairness >= 0.95, "fairness index {fairness}: {report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_history_check_finds_no_overlap_of_zookeeper_holders_handing_off_within_and_across_clients()
 {
    // Workers of one client hand the lock to each other on release (`successors.rs`), those of
    // different clients through the server: with 4 clients both happen in one run.
    let e = Endpoints {
        zookeeper: sandbox::shared::zookeeper(),
        ..endpoints()
    };
    let clients = connect_clients(Backend::ZooKeeper, &e, 4).await.unwrap();
    let report = bench(
        Backend::ZooKeeper,
        clients,
        &e,
        8,
        2.0,
        Duration::ZERO,
        true,
    )
    .await
    .unwrap();
    assert!(report.acquisitions > 0, "{report}");
    assert_eq!(report.violations, 0, "{report}");
    assert_eq!(report.history_violations, Some(0), "{report}");
}
