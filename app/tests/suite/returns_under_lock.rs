//! Units given back while a buyer of an unfenced locked strategy holds the product's lock,
//! between its read of the stock and its absolute write: the return waits for the lock, so the
//! holder's write cannot cover it and the returned unit stays on sale.
//!
//! Without the lock, the holder read 1 unit left, the return made it 2, and the holder wrote 0:
//! the returned unit vanished (undersell).

use std::future::Future;
use std::sync::Arc;

use crate::common;

use common::fake_locks::MutexLock;
use common::life::{act, buy, expire, wait_until_all_due};
use common::{
    TestApp, drop_database, fresh_database_url, ledger, spawn_app_with, test_config, wait_until,
};
use locks::{Backend, DistributedLock};
use serde_json::json;

/// How long the second buyer stays between its read and its write: long past the return,
/// which without the lock lands in it within milliseconds. (A machine slow enough to send the
/// return after the pause lets the test pass without the lock; it cannot make it fail with.)
const HOLD_MS: u64 = 3_000;

/// Alice buys one of two units through `redis-lock` (over an in-process lock); Bob buys the
/// other and pauses between his read and his write; while he is paused, `give_back` ends
/// Alice's order. Then the ledger must account for every unit.
async fn a_return_beside_a_paused_holder<F, Fut>(payment_window_ms: i64, give_back: F)
where
    F: FnOnce(TestApp) -> Fut,
    Fut: Future<Output = TestApp>,
{
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.expiry_interval_ms = 0;
    // The return waits in the lock's line for the whole pause.
    config.lock_wait_ms = 30_000;
    let lock = Arc::new(MutexLock::default());
    let behind = Arc::clone(&lock);
    let app = spawn_app_with(config, move |r| r.set_lock(Backend::Redis, Some(behind))).await;
    let body = json!({ "stock": 2, "per_user_limit": 1, "payment_window_ms": payment_window_ms });
    app.reset_with(1, &body).await;
    let (status, order) = buy(&app, 1, "alice", "a-1", "redis-lock").await;
    assert_eq!(status, 201, "{order}");
    // Due before Bob's order exists, so that a round started now finds Alice's alone.
    if payment_window_ms < 1_000 {
        wait_until_all_due(&database_url).await;
    }

    let bob =
        json!({ "user_id": "bob", "quantity": 1, "request_id": "b-1", "strategy": "redis-lock" });
    let paused = app
        .purchase(1, &bob)
        .header("x-seckill-hold-ms", HOLD_MS.to_string())
        .send();
    let paused = tokio::spawn(paused);
    // Granted to Bob (Alice's was the first grant): he reads the stock next, then pauses.
    wait_until("bob holds the product's lock", || {
        let granted = lock.backend_requests();
        async move { granted >= 2 }
    })
    .await;
    let app = give_back(app).await;
    let answer = paused.await.expect("bob's purchase").expect("bob's answer");
    assert_eq!(answer.status(), 201, "{:?}", answer.text().await);
    assert_eq!(
        app.metric("seckill_return_locks_total").await,
        Some(1),
        "the return took the seller's lock once, and the metrics count it"
    );

    let truth = ledger(&database_url, 1).await;
    assert_eq!(
        (truth.stock, truth.sold, truth.unaccounted()),
        (1, 1, 0),
        "alice's returned unit must be back on sale beside bob's sale: {truth:?}"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn a_cancellation_during_an_unfenced_holders_pause_keeps_its_unit_on_sale() {
    a_return_beside_a_paused_holder(900_000, |app| async move {
        let (status, cancelled) = act(&app, 1, "alice", "a-1", "cancel", &[]).await;
        assert_eq!(status, 200, "{cancelled}");
        app
    })
    .await;
}

#[tokio::test]
async fn an_expiry_during_an_unfenced_holders_pause_keeps_its_unit_on_sale() {
    // Bob's order gets the same short window, but is placed after the round read the due
    // orders: the round expires Alice's only.
    a_return_beside_a_paused_holder(1, |app| async move {
        let (status, round) = expire(&app, 1, &[]).await;
        assert_eq!(
            (status.as_u16(), round["expired"].as_u64()),
            (200, Some(1)),
            "{round}"
        );
        app
    })
    .await;
}
