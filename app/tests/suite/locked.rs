//! The generic lock-based strategy, over in-process test locks: a correct one (a mutex per
//! key), one that admits everyone (the worst case of an expired lease), and failing ones.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use app::api::{ErrorBody, ErrorCode, Strategy};
use common::fake_locks::{AdmitEveryone, Failing, MutexLock};
use common::{Crowd, flash_sale, fresh_database_url, ledger, spawn_app_with, test_config};
use locks::{Backend, LockError};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locked_strategy_over_a_correct_lock_never_oversells_under_200_buyers() {
    let database_url = fresh_database_url().await;
    let app = spawn_app_with(test_config(&database_url), |r| {
        r.set_lock(Backend::Redis, Some(Arc::new(MutexLock::default())));
    })
    .await;
    app.reset(1, 100).await;
    let crowd = Crowd {
        buyers: 200,
        hold_ms: None,
        busy_retries: 200,
    };
    let tally = flash_sale(&[&app], 1, Strategy::RedisLock.name(), crowd).await;
    let truth = ledger(&database_url, 1).await;
    assert!(tally.unexpected.is_empty(), "{:?}", tally.unexpected);
    assert_eq!((tally.created, tally.sold_out), (100, 100), "{tally:?}");
    assert_eq!(
        (truth.stock, truth.sold, truth.unaccounted()),
        (0, 100, 0),
        "{truth:?}"
    );
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fencing_rejects_stale_writes_when_the_lock_admits_two_holders() {
    let database_url = fresh_database_url().await;
    let app = spawn_app_with(test_config(&database_url), |r| {
        // `redis-lock` and `redis-lock-fenced` both run over a lock that admits everyone.
        r.set_lock(Backend::Redis, Some(Arc::new(AdmitEveryone::default())));
    })
    .await;
    let crowd = Crowd {
        buyers: 60,
        hold_ms: Some(20),
        busy_retries: 0,
    };

    // Unfenced: the lock protects nothing, and the read-modify-write loses updates.
    let mut oversold = None;
    for round in 0..5 {
        let product = 10 + round;
        app.reset(product, 20).await;
        flash_sale(&[&app], product, Strategy::RedisLock.name(), crowd).await;
        let truth = ledger(&database_url, product).await;
        if truth.oversell() > 0 {
            oversold = Some(truth);
            break;
        }
    }
    let truth = oversold.expect("an unfenced write under a leaky lock never oversold");
    assert!(truth.unaccounted() > 0, "{truth:?}");

    // Fenced, same lock, same crowd: stale writes are refused instead of applied.
    app.reset(1, 20).await;
    let tally = flash_sale(&[&app], 1, Strategy::RedisLockFenced.name(), crowd).await;
    let truth = ledger(&database_url, 1).await;
    assert!(tally.unexpected.is_empty(), "{:?}", tally.unexpected);
    assert!(tally.lock_lost > 0, "no write was refused: {tally:?}");
    assert_eq!(truth.unaccounted(), 0, "a fenced write was lost: {truth:?}");
    assert_eq!(truth.oversell(), 0, "{truth:?}");
    assert_eq!(truth.orders, tally.created as i64, "{truth:?} {tally:?}");
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn lock_failures_answer_busy_or_backend_unavailable() {
    let database_url = fresh_database_url().await;
    let app = spawn_app_with(test_config(&database_url), |r| {
        let timeout = Failing(|key| LockError::Timeout {
            key: key.into(),
            waited: Duration::from_millis(1),
        });
        let down = Failing(|_| LockError::unavailable(std::io::Error::other("connection refused")));
        let no_quorum = Failing(|key| LockError::NoQuorum {
            key: key.into(),
            granted: 2,
            needed: 3,
        });
        r.set_lock(Backend::Redis, Some(Arc::new(timeout)));
        r.set_lock(Backend::Redlock, Some(Arc::new(down)));
        r.set_lock(Backend::ZooKeeper, Some(Arc::new(no_quorum)));
        r.set_lock(Backend::Etcd, None);
    })
    .await;
    app.reset(1, 5).await;
    let cases = [
        (Strategy::RedisLock, ErrorCode::Busy),
        (Strategy::Redlock, ErrorCode::BackendUnavailable),
        (Strategy::Zookeeper, ErrorCode::BackendUnavailable),
        (Strategy::Etcd, ErrorCode::BackendUnavailable),
    ];
    for (strategy, code) in cases {
        let body = json!({ "user_id": "u", "quantity": 1, "request_id": format!("r-{strategy}"), "strategy": strategy });
        let r = app.purchase(1, &body).send().await.expect("post");
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "{strategy}");
        // A wait of whole seconds, spread over 1 to 4 so that refused clients do not return
        // in one wave.
        let wait: Option<u32> = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        assert!(
            wait.is_some_and(|s| (1..=4).contains(&s)),
            "{strategy}: Retry-After {wait:?}"
        );
        let answer: ErrorBody = r.json().await.expect("an error body");
        assert_eq!(answer.error, code, "{strategy}: {answer:?}");
    }
    assert_eq!(ledger(&database_url, 1).await.stock, 5);
    app.stop().await;
    common::drop_database(&database_url).await;
}
