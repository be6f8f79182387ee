//! Killing the database mid-run: the service answers `503 backend_unavailable` (never a
//! success it cannot vouch for, never a 500), loses and duplicates no order, and recovers by
//! itself when the server is back. Pausing Redis stops nothing of a product whose stock lives
//! in the database: it is sold and its orders are answered without Redis.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{ledger, rows_per_request_id, spawn_app, test_config, with_fresh_database};
use reqwest::StatusCode;
use serde_json::{Value, json};

const BEFORE: u8 = 0;
const DOWN: u8 = 1;
const BACK: u8 = 2;
const BUYERS: usize = 8;

/// What one request was told, and in which phase it was sent.
#[derive(Debug, Clone)]
struct Sent {
    phase: u8,
    user_id: String,
    request_id: String,
    status: StatusCode,
    error: Option<String>,
}

/// Waits until at least `n` requests sent in `phase` were answered `status` (a generous cap
/// turns a service that never gets there into a failure, not a hang).
async fn await_answers(sent: &Mutex<Vec<Sent>>, phase: u8, status: StatusCode, n: usize) {
    let started = std::time::Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "phase {phase}: fewer than {n} answers {status} in 5 minutes"
        );
        let seen = sent
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.phase == phase && s.status == status)
            .count();
        if seen >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_database_answers_backend_unavailable_loses_no_order_and_recovers() {
    sandbox::require_faults!();
    let db = tokio::task::spawn_blocking(sandbox::MariaDb::start)
        .await
        .expect("join")
        .expect("private MariaDB");
    let db = Arc::new(db);
    let database_url = with_fresh_database(&db.url());
    let mut config = test_config(&database_url);
    config.db_acquire_timeout_ms = 500;
    let app = spawn_app(config).await;
    app.reset_with(
        1,
        &json!({ "stock": 1_000_000, "per_user_limit": 1_000_000 }),
    )
    .await;

    let phase = Arc::new(AtomicU8::new(BEFORE));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Mutex::new(Vec::<Sent>::new()));
    let mut buyers = Vec::new();
    for buyer in 0..BUYERS {
        let (client, url, signer) = (
            app.client.clone(),
            format!("{}/api/products/1/orders", app.url),
            app.buyers.clone(),
        );
        let (phase, stop, sent) = (phase.clone(), stop.clone(), sent.clone());
        buyers.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let request_id = format!("b{buyer}-{n}");
                let user_id = format!("u{buyer}");
                let body = json!({ "user_id": user_id, "quantity": 1, "request_id": request_id, "strategy": "conditional" });
                let sent_in = phase.load(Ordering::SeqCst);
                let r = signer.sign(client.post(&url).json(&body), &user_id).send().await.expect("the app itself stays up");
                let status = r.status();
                let value: Value = r.json().await.unwrap_or(Value::Null);
                let error = value["error"].as_str().map(String::from);
                sent.lock().unwrap().push(Sent { phase: sent_in, user_id, request_id, status, error });
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }

    // Sales go through, then the database dies; it comes back once buyers have been refused.
    await_answers(&sent, BEFORE, StatusCode::CREATED, 20).await;
    phase.store(DOWN, Ordering::SeqCst);
    let killer = db.clone();
    tokio::task::spawn_blocking(move || killer.server().kill())
        .await
        .expect("join")
        .expect("kill");
    await_answers(&sent, DOWN, StatusCode::SERVICE_UNAVAILABLE, 5).await;
    let starter = db.clone();
    tokio::task::spawn_blocking(move || starter.server().start_again())
        .await
        .expect("join")
        .expect("restart");
    phase.store(BACK, Ordering::SeqCst);

    // Recovery: successes again.
    await_answers(&sent, BACK, StatusCode::CREATED, 20).await;
    stop.store(true, Ordering::SeqCst);
    for b in buyers {
        b.await.expect("buyer");
    }
    let sent = sent.lock().unwrap().clone();

    // Only two answers are allowed: created, or backend_unavailable.
    for s in &sent {
        let ok = s.status == StatusCode::CREATED
            || (s.status == StatusCode::SERVICE_UNAVAILABLE
                && s.error.as_deref() == Some("backend_unavailable"));
        assert!(ok, "unexpected answer {s:?}");
    }
    let during = sent.iter().filter(|s| s.phase == DOWN).count();
    let unavailable = sent
        .iter()
        .filter(|s| s.status == StatusCode::SERVICE_UNAVAILABLE)
        .count();
    assert!(
        during > 0 && unavailable > 0,
        "the outage was not seen: {during} sent, {unavailable} refused"
    );

    // No 201 was lost or doubled.
    let rows = rows_per_request_id(&database_url).await;
    for s in sent.iter().filter(|s| s.status == StatusCode::CREATED) {
        assert_eq!(
            rows.get(&s.request_id),
            Some(&1),
            "order of a 201 lost or doubled: {s:?}"
        );
    }

    // A refused request may still have committed (the server died between its commit and its
    // reply); the client cannot know, so it retries with the same request id. Afterwards
    // every request id has exactly one order and the stock accounts for all of them.
    let mut final_answer = HashMap::new();
    for s in &sent {
        final_answer.insert(s.request_id.clone(), s.status);
    }
    for s in sent
        .iter()
        .filter(|s| s.status == StatusCode::SERVICE_UNAVAILABLE)
    {
        // A retry resends the same purchase: only the answer was lost.
        let body = json!({ "user_id": s.user_id, "quantity": 1, "request_id": s.request_id, "strategy": "conditional" });
        let (status, answer) = app.order(1, &body, None).await;
        assert!(
            status == StatusCode::CREATED || status == StatusCode::OK,
            "retry of {s:?}: {status} {answer}"
        );
        final_answer.insert(s.request_id.clone(), status);
    }
    let rows = rows_per_request_id(&database_url).await;
    assert!(
        rows.values().all(|&n| n == 1),
        "a request id with several orders"
    );
    assert_eq!(
        rows.len(),
        final_answer.len(),
        "orders without a request, or requests without an order"
    );
    let truth = ledger(&database_url, 1).await;
    assert_eq!(truth.unaccounted(), 0, "{truth:?}");
    assert_eq!(truth.orders as usize, final_answer.len(), "{truth:?}");

    let health = app
        .client
        .get(format!("{}/healthz", app.url))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    app.stop().await;
}

#[tokio::test]
async fn healthz_reports_a_dead_database_as_backend_unavailable() {
    sandbox::require_faults!();
    let db = tokio::task::spawn_blocking(sandbox::MariaDb::start)
        .await
        .expect("join")
        .expect("private MariaDB");
    let database_url = with_fresh_database(&db.url());
    let mut config = test_config(&database_url);
    config.db_acquire_timeout_ms = 300;
    let app = spawn_app(config).await;
    let health = |app: &common::TestApp| app.client.get(format!("{}/healthz", app.url)).send();
    assert_eq!(
        health(&app).await.expect("healthz").status(),
        StatusCode::OK
    );

    db.server().kill().expect("kill");
    let r = health(&app).await.expect("healthz");
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"], "backend_unavailable");
    app.stop().await;
}

/// The app on a fresh database and a private Redis (a key prefix of its own), with that Redis.
async fn app_with_private_redis() -> (common::TestApp, sandbox::Redis, String) {
    let private = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .expect("join")
        .expect("private Redis");
    let database_url = common::fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.redis_url = Some(private.url());
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    (spawn_app(config).await, private, database_url)
}

fn click(request_id: &str) -> Value {
    json!({ "user_id": "alice", "quantity": 1, "request_id": request_id, "strategy": "conditional" })
}

/// Redis paused: where a row-held purchase stands is read from the database and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_status_of_a_row_held_order_is_answered_while_redis_is_paused() {
    sandbox::require_faults!();
    let (app, private, database_url) = app_with_private_redis().await;
    app.reset(1, 10).await;
    let (status, order) = app.order(1, &click("r"), None).await;
    assert_eq!(status, StatusCode::CREATED, "{order}");

    private.server().pause().expect("pause Redis");
    let status_url = format!("{}/api/products/1/orders/r?user_id=alice", app.url);
    let r = app
        .as_buyer(app.client.get(status_url), "alice")
        .send()
        .await
        .expect("status");
    let status = r.status();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (&body["state"], &body["order"]["order_id"]),
        (&json!("placed"), &order["order_id"]),
        "{body}"
    );
    private.server().resume().expect("resume Redis");
    app.stop().await;
    common::drop_database(&database_url).await;
}

/// A row-held product's rules are read where its stock lives: its purchase asks Redis nothing,
/// and a product read for the first time while Redis is paused sells.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_held_purchase_asks_redis_nothing_and_sells_while_redis_is_paused() {
    sandbox::require_faults!();
    let (app, private, database_url) = app_with_private_redis().await;
    app.reset(1, 10).await;
    app.reset(2, 10).await;
    let mut redis = deadpool_redis::redis::Client::open(private.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    deadpool_redis::redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(&mut redis)
        .await
        .expect("resetstat");
    // The first purchase since its reset: the product's rules are read.
    let (status, order) = app.order(1, &click("r"), None).await;
    assert_eq!(status, StatusCode::CREATED, "{order}");
    let stats: String = deadpool_redis::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis)
        .await
        .expect("info");
    assert!(
        !stats.contains("cmdstat_get:"),
        "a row-held purchase read from Redis: {stats}"
    );

    private.server().pause().expect("pause Redis");
    let (status, order) = app.order(2, &click("r"), None).await;
    assert_eq!(status, StatusCode::CREATED, "{order}");
    private.server().resume().expect("resume Redis");
    app.stop().await;
    common::drop_database(&database_url).await;
}
