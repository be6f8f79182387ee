//! A product is sold by the strategies its reset names, and a deployment offers the unsafe
//! strategies only when it asks for them: a buyer cannot pick `unchecked` to undo a sale.

use app::api::Strategy;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{self, TestApp, fresh_database_url, spawn_app, test_config};

/// `PUT /api/products/{id}` with `body` as it is (the test helpers' reset adds strategies).
async fn put(app: &TestApp, id: u64, body: Value) -> (StatusCode, Value) {
    let r = app
        .client
        .put(format!("{}/api/products/{id}", app.url))
        .json(&body)
        .send()
        .await
        .expect("put");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn order(user: &str, strategy: Option<&str>) -> Value {
    let mut body = json!({ "user_id": user, "quantity": 1, "request_id": format!("r-{user}") });
    if let Some(strategy) = strategy {
        body["strategy"] = json!(strategy);
    }
    body
}

#[tokio::test]
async fn a_purchase_naming_a_strategy_the_product_is_not_sold_by_is_refused_and_takes_nothing() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    let (status, view) = put(
        &app,
        1,
        json!({ "stock": 5, "strategies": ["conditional"] }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["rules"]["strategies"], json!(["conditional"]));

    for strategy in ["unchecked", "naive", "pessimistic"] {
        let (status, body) = app.order(1, &order(strategy, Some(strategy)), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{strategy}: {body}");
        assert_eq!(body["error"], "strategy_not_offered");
    }
    let (status, body) = app
        .order(1, &order("named", Some("conditional")), None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = app.order(1, &order("unnamed", None), None).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["strategy"], "conditional");
    let view = common::life::product(&app, 1).await;
    assert_eq!(
        (view["stock"].clone(), view["sold"].clone()),
        (json!(3), json!(2))
    );
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn a_product_reset_without_strategies_is_sold_by_one_of_its_home() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    let (status, view) = put(&app, 2, json!({ "stock": 5 })).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["rules"]["strategies"], json!(["conditional"]));
    let (status, view) = put(&app, 3, json!({ "stock": 5, "home": "buckets" })).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["rules"]["strategies"], json!(["sharded"]));

    let (status, body) = app.order(2, &order("u", Some("unchecked")), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = put(&app, 4, json!({ "stock": 5, "strategies": ["redis-lua"] })).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = put(&app, 4, json!({ "stock": 5, "strategies": [] })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn the_unsafe_strategies_are_offered_only_when_the_deployment_asks() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.offer_unsafe = false;
    let app = spawn_app(config).await;
    let offered = app.offered().await;
    assert!(offered.contains(&Strategy::Conditional) && offered.contains(&Strategy::RedisLock));
    for unsafe_one in [
        Strategy::Naive,
        Strategy::Unchecked,
        Strategy::RacyLimit,
        Strategy::LocalMutex,
    ] {
        assert!(
            !offered.contains(&unsafe_one),
            "{unsafe_one} offered: {offered:?}"
        );
    }
    let (status, body) = put(&app, 5, json!({ "stock": 5, "strategies": ["naive"] })).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = put(&app, 5, json!({ "stock": 5 })).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = app.order(5, &order("u", Some("unchecked")), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    app.stop().await;
    common::drop_database(&database_url).await;
}
