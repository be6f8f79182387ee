//! `sharded`: the stock split over bucket rows sells exactly the stock across instances, and
//! no uneven split makes it answer `sold_out` while any bucket still holds the units.

use crate::common;

use app::api::Home;
use common::conformance::{
    refuses_every_bad_input_and_writes_nothing, twenty_copies_make_one_order,
};
use common::{
    Crowd, TestApp, drop_database, flash_sale, fresh_database_url, ledger,
    sells_exactly_the_stock_on, spawn_app, test_config,
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{Connection, MySqlConnection};

async fn buckets(database_url: &str, product: u64) -> Vec<i64> {
    let mut conn = MySqlConnection::connect(database_url)
        .await
        .expect("connect");
    sqlx::query_scalar("SELECT stock FROM stock_buckets WHERE product_id = ? ORDER BY bucket")
        .bind(product)
        .fetch_all(&mut conn)
        .await
        .expect("buckets")
}

/// `PUT` with `body`, and no per-user limit to speak of unless it names one.
async fn put(app: &TestApp, product: u64, mut body: Value) -> (StatusCode, Value) {
    if body.get("per_user_limit").is_none() {
        body["per_user_limit"] = json!(app::api::MAX_STOCK);
    }
    let r = app
        .client
        .put(format!("{}/api/products/{product}", app.url))
        .json(&body)
        .send()
        .await
        .expect("reset");
    (r.status(), r.json().await.unwrap_or(Value::Null))
}

async fn buy(app: &TestApp, product: u64, quantity: u32, request_id: &str) -> (StatusCode, Value) {
    let body = json!({ "user_id": "u", "quantity": quantity, "request_id": request_id, "strategy": "sharded" });
    app.order(product, &body, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharded_stock_across_two_instances_sells_exactly_the_stock_to_200_buyers() {
    sells_exactly_the_stock_on(2, "sharded", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_copies_of_one_sharded_purchase_across_two_instances_make_one_order() {
    let database_url = fresh_database_url().await;
    let config = test_config(&database_url);
    let (a, b) = (spawn_app(config.clone()).await, spawn_app(config).await);
    twenty_copies_make_one_order(&[&a, &b], &database_url, "sharded", Home::Buckets).await;
    a.stop().await;
    b.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn every_bad_input_to_sharded_answers_4xx_and_writes_nothing() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    refuses_every_bad_input_and_writes_nothing(&app, &database_url, "sharded", Home::Buckets).await;
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn a_reset_splits_the_stock_evenly_over_the_buckets_and_another_home_deletes_them() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;

    let (status, view) = put(
        &app,
        1,
        json!({ "stock": 10, "home": "buckets", "buckets": 3 }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(
        (view["home"].clone(), view["stock"].clone()),
        (json!("buckets"), json!(10))
    );
    assert_eq!(buckets(&database_url, 1).await, [4, 3, 3]);

    let (status, view) = put(&app, 1, json!({ "stock": 20, "home": "buckets" })).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(buckets(&database_url, 1).await, [3, 3, 3, 3, 2, 2, 2, 2]);

    let (status, view) = put(&app, 1, json!({ "stock": 7, "home": "row", "buckets": 4 })).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(
        (view["home"].clone(), view["stock"].clone()),
        (json!("row"), json!(7))
    );
    assert!(buckets(&database_url, 1).await.is_empty());
    // The row's stock is not this strategy's: the product is not sold by it, and untouched.
    assert_eq!(buy(&app, 1, 1, "r-row").await.0, StatusCode::FORBIDDEN);
    assert_eq!(ledger(&database_url, 1).await.stock, 7);
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn all_the_stock_in_one_bucket_still_sells_every_unit() {
    const STOCK: i64 = 100;
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    app.reset_in(1, STOCK, Home::Buckets).await;
    let mut conn = MySqlConnection::connect(&database_url)
        .await
        .expect("connect");
    sqlx::query("UPDATE stock_buckets SET stock = IF(bucket = 5, ?, 0) WHERE product_id = 1")
        .bind(STOCK)
        .execute(&mut conn)
        .await
        .expect("uneven split");
    assert_eq!(buckets(&database_url, 1).await, [0, 0, 0, 0, 0, 100, 0, 0]);

    let crowd = Crowd {
        buyers: 200,
        hold_ms: None,
        busy_retries: 200,
    };
    let tally = flash_sale(&[&app], 1, "sharded", crowd).await;
    assert!(tally.unexpected.is_empty(), "{:?}", tally.unexpected);
    assert_eq!((tally.created, tally.sold_out), (100, 100), "{tally:?}");
    let truth = ledger(&database_url, 1).await;
    assert_eq!(
        (truth.stock, truth.sold, truth.unaccounted()),
        (0, STOCK, 0),
        "{truth:?}"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn sold_out_comes_only_when_every_bucket_is_empty() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;

    // One unit per bucket: every purchase empties a bucket, yet each finds the next one.
    let (status, _) = put(
        &app,
        1,
        json!({ "stock": 8, "home": "buckets", "buckets": 8 }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    for n in 0..8 {
        let (status, body) = buy(&app, 1, 1, &format!("one-{n}")).await;
        assert_eq!(status, StatusCode::CREATED, "unit {n}: {body}");
    }
    let (status, body) = buy(&app, 1, 1, "one-8").await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::CONFLICT, json!("sold_out"))
    );

    // A quantity no single bucket holds is taken from several; sold out only beyond the sum.
    let (status, _) = put(
        &app,
        2,
        json!({ "stock": 8, "home": "buckets", "buckets": 8 }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = buy(&app, 2, 5, "five").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = buy(&app, 2, 4, "four").await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::CONFLICT, json!("sold_out"))
    );
    let (status, body) = buy(&app, 2, 3, "three").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(buckets(&database_url, 2).await, [0; 8]);
    let truth = ledger(&database_url, 2).await;
    assert_eq!(
        (truth.stock, truth.sold, truth.orders),
        (0, 8, 2),
        "{truth:?}"
    );
    app.stop().await;
    drop_database(&database_url).await;
}
