//! `batched`: purchases coalesced into one transaction per batch sell exactly the stock across
//! instances; a batch serves in arrival order what fits, a duplicate in it fails nobody else,
//! a caller that goes away breaks nothing, and a batch whose commit fails answers every
//! purchase 503 and records none.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use app::api::{Home, Strategy};
use app::strategy::{Deps, Purchase, PurchaseStats};
use common::conformance::{
    refuses_every_bad_input_and_writes_nothing, twenty_copies_make_one_order,
};
use common::{
    TestApp, drop_database, fresh_database_url, ledger, sells_exactly_the_stock_on, spawn_app,
    test_config, with_fresh_database,
};
use futures::FutureExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{Connection, MySqlConnection, MySqlPool};

/// The product row's version: every batch that takes stock bumps it once.
async fn version(database_url: &str, product: u64) -> u64 {
    let mut conn = MySqlConnection::connect(database_url)
        .await
        .expect("connect");
    sqlx::query_scalar("SELECT version FROM products WHERE id = ?")
        .bind(product)
        .fetch_one(&mut conn)
        .await
        .expect("version")
}

fn order(request_id: &str, quantity: u32) -> Value {
    json!({ "user_id": "u", "quantity": quantity, "request_id": request_id, "strategy": "batched" })
}

/// Sends `bodies` to product 1 one after another, `gap` apart, without waiting for answers
/// (they land in one batch when the window is long), and returns the answers in that order.
async fn send_staggered(
    app: &TestApp,
    bodies: &[Value],
    gap: Duration,
    hold_ms: Option<u64>,
) -> Vec<(StatusCode, Value)> {
    let mut tasks = Vec::new();
    for body in bodies {
        let mut request = app.purchase(1, body);
        tasks.push(tokio::spawn(async move {
            if let Some(ms) = hold_ms {
                request = request.header("x-seckill-hold-ms", ms.to_string());
            }
            let r = request.send().await.expect("order");
            (r.status(), r.json().await.unwrap_or(Value::Null))
        }));
        tokio::time::sleep(gap).await;
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("buyer"));
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batched_purchases_across_two_instances_sell_exactly_the_stock_to_200_buyers() {
    sells_exactly_the_stock_on(2, "batched", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_copies_of_one_batched_purchase_across_two_instances_make_one_order() {
    let database_url = fresh_database_url().await;
    let config = test_config(&database_url);
    let (a, b) = (spawn_app(config.clone()).await, spawn_app(config).await);
    twenty_copies_make_one_order(&[&a, &b], &database_url, "batched", Home::Row).await;
    a.stop().await;
    b.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn every_bad_input_to_batched_answers_4xx_and_writes_nothing() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    refuses_every_bad_input_and_writes_nothing(&app, &database_url, "batched", Home::Row).await;
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_larger_than_the_stock_serves_the_earliest_purchases_that_fit_and_sold_out_to_the_rest()
 {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.batch_window_ms = 1_500;
    let app = spawn_app(config).await;
    app.reset(1, 4).await;
    let before = version(&database_url, 1).await;

    let bodies = [order("a", 2), order("b", 3), order("c", 1), order("d", 2)];
    let answers = send_staggered(&app, &bodies, Duration::from_millis(40), None).await;
    let statuses: Vec<StatusCode> = answers.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        statuses,
        [
            StatusCode::CREATED,
            StatusCode::CONFLICT,
            StatusCode::CREATED,
            StatusCode::CONFLICT
        ],
        "2 fits, 3 does not, 1 still fits, 2 does not: {answers:?}"
    );
    assert_eq!(answers[1].1["error"], "sold_out");
    let truth = ledger(&database_url, 1).await;
    assert_eq!(
        (truth.stock, truth.sold, truth.orders),
        (1, 3, 2),
        "{truth:?}"
    );
    assert_eq!(
        version(&database_url, 1).await,
        before + 1,
        "one transaction"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_duplicate_request_id_inside_a_batch_does_not_fail_the_others() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.batch_window_ms = 1_000;
    let app = spawn_app(config).await;
    app.reset(1, 10).await;
    let (status, original) = app.order(1, &order("old", 1), None).await;
    assert_eq!(status, StatusCode::CREATED, "{original}");
    let before = version(&database_url, 1).await;

    let bodies = [
        order("a", 1),
        order("old", 1), // an earlier click again: its order
        order("b", 1),
        order("b", 1),   // two copies of one click in the batch: one order
        order("old", 2), // the earlier click's id for another purchase: a conflict
        order("c", 1),
    ];
    let answers = send_staggered(&app, &bodies, Duration::from_millis(30), None).await;
    let status = |i: usize| answers[i].0;
    assert_eq!(
        (status(0), status(1), status(4), status(5)),
        (
            StatusCode::CREATED,
            StatusCode::OK,
            StatusCode::CONFLICT,
            StatusCode::CREATED
        ),
        "{answers:?}"
    );
    assert_eq!(answers[1].1["order_id"], original["order_id"]);
    assert_eq!(answers[4].1["error"], "idempotency_conflict");
    let mut copies = [status(2), status(3)];
    copies.sort();
    assert_eq!(copies, [StatusCode::OK, StatusCode::CREATED], "{answers:?}");
    assert_eq!(answers[2].1["order_id"], answers[3].1["order_id"]);

    let truth = ledger(&database_url, 1).await;
    assert_eq!(
        (truth.stock, truth.sold, truth.orders),
        (6, 4, 4),
        "{truth:?}"
    );
    assert_eq!(
        version(&database_url, 1).await,
        before + 1,
        "one transaction"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_that_goes_away_before_its_batch_commits_breaks_nothing_and_buys_nothing() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    app.reset(1, 10).await;
    let pool = MySqlPool::connect(&database_url).await.expect("pool");
    let deps = Deps {
        pool: app::db::Engines::MySql(pool.clone()),
        lock_pool: app::db::Engines::MySql(pool.clone()),
        lock_lease: Duration::from_secs(5),
        lock_wait: Duration::from_secs(3),
        lock_prefix: String::new(),
        optimistic_retries: 1,
        batch_window: Duration::from_millis(500),
        batch_max: 64,
        batch_queue: 0,
        stream_max_lag: 1000,
        full_queue_memory: Duration::from_millis(1),
        optimistic_in_flight: 4,
        split_fallback: true,
        redis: None,
    };
    let batched = app::strategy::batched::build(&deps);
    let purchase = |request_id: &str| Purchase {
        product_id: 1,
        user_id: "u".into(),
        quantity: 1,
        request_id: request_id.into(),
        strategy: Strategy::Batched,
        per_user_limit: app::api::MAX_STOCK,
        pay_within: std::time::Duration::from_millis(app::api::DEFAULT_PAYMENT_WINDOW_MS as u64),
        redis_epoch: 0,
        redis_parts: 0,
        hold: None,
        stats: PurchaseStats::default(),
    };
    let (gone, a, b) = (purchase("gone"), purchase("a"), purchase("b"));

    // The first caller opens the batch, then goes away.
    assert!(batched.purchase(&gone).now_or_never().is_none());
    let (a, b) = tokio::join!(batched.purchase(&a), batched.purchase(&b));
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");

    let truth = ledger(&database_url, 1).await;
    assert_eq!((truth.stock, truth.orders), (8, 2), "{truth:?}");
    assert!(
        !common::rows_per_request_id(&database_url)
            .await
            .contains_key("gone")
    );
    pool.close().await;
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_whose_commit_fails_answers_every_purchase_503_and_records_none() {
    sandbox::require_faults!();
    let db = tokio::task::spawn_blocking(sandbox::MariaDb::start)
        .await
        .expect("join")
        .expect("private MariaDB");
    let db = Arc::new(db);
    let database_url = with_fresh_database(&db.url());
    let mut config = test_config(&database_url);
    config.db_acquire_timeout_ms = 500;
    // One batch of exactly five, closed by the fifth purchase: the window is far longer than a
    // loaded machine needs to let five buyers 20 ms apart arrive. (The retries below, one at a
    // time, each wait out the window.)
    config.batch_window_ms = 3_000;
    config.batch_max = 5;
    let app = spawn_app(config).await;
    app.reset(1, 10).await;

    // Five purchases in one batch, which pauses with its orders written and not committed.
    let bodies: Vec<Value> = (0..5).map(|i| order(&format!("k-{i}"), 1)).collect();
    let buyers = {
        let requests: Vec<_> = (bodies.iter())
            .map(|body| app.purchase(1, body).header("x-seckill-hold-ms", "5000"))
            .collect();
        tokio::spawn(async move {
            let mut tasks = Vec::new();
            for request in requests {
                tasks.push(tokio::spawn(async move {
                    let r = request.send().await.expect("the app itself stays up");
                    (r.status(), r.json::<Value>().await.unwrap_or(Value::Null))
                }));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let mut answers = Vec::new();
            for task in tasks {
                answers.push(task.await.expect("buyer"));
            }
            answers
        })
    };
    // A dirty read sees the batch's orders once they are written and not yet committed.
    let mut watcher = MySqlConnection::connect(&database_url)
        .await
        .expect("connect");
    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
        .execute(&mut watcher)
        .await
        .expect("dirty reads");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let written: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
            .fetch_one(&mut watcher)
            .await
            .expect("orders");
        if written == 5 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the batch never wrote its orders"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(watcher);
    let killer = Arc::clone(&db);
    tokio::task::spawn_blocking(move || killer.server().kill())
        .await
        .expect("join")
        .expect("kill");

    let answers = buyers.await.expect("buyers");
    for (status, body) in &answers {
        assert_eq!(
            (*status, body["error"].as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("backend_unavailable")),
            "{answers:?}"
        );
    }

    let starter = Arc::clone(&db);
    tokio::task::spawn_blocking(move || starter.server().start_again())
        .await
        .expect("join")
        .expect("restart");
    let truth = ledger(&database_url, 1).await;
    assert_eq!(
        (truth.stock, truth.orders),
        (10, 0),
        "nothing half-written: {truth:?}"
    );

    // The clicks, retried after the restart, buy.
    for body in &bodies {
        let mut answer = (StatusCode::SERVICE_UNAVAILABLE, Value::Null);
        for _ in 0..50 {
            answer = app.order(1, body, None).await;
            if answer.0 != StatusCode::SERVICE_UNAVAILABLE {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(answer.0, StatusCode::CREATED, "{answer:?}");
    }
    let truth = ledger(&database_url, 1).await;
    assert_eq!(
        (truth.stock, truth.sold, truth.orders),
        (5, 5, 5),
        "{truth:?}"
    );
    app.stop().await;
}
