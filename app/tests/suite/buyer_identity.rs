//! With a buyer key, a buyer is who their token says, not whoever a request names: every buyer
//! route refuses a request without a good token (`401 unauthenticated`), and a good token of
//! another buyer (`403 not_your_order`) — so knowing a buyer's id and request id no longer lets
//! anyone read, pay or cancel their order, or buy as them.

use crate::common;

use std::time::{Duration, SystemTime};

use app::buyer::BuyerKey;
use common::buyers::{ROUTES, Route, call};
use common::life::product;
use common::{TestApp, drop_database, fresh_database_url, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::json;

const KEY: &[u8] = b"the deployment's buyer key";

/// An app whose buyers need tokens signed with [`KEY`], and `product` with two units, one per
/// customer.
async fn keyed_app(database_url: &str, product: u64) -> TestApp {
    let mut config = test_config(database_url);
    config.buyer_key = Some(String::from_utf8(KEY.to_vec()).expect("text"));
    let app = spawn_app(config).await;
    app.reset_with(product, &json!({ "stock": 2, "per_user_limit": 1 }))
        .await;
    app
}

fn in_an_hour() -> SystemTime {
    SystemTime::now() + Duration::from_secs(3600)
}

/// `(stock, sold, cancelled)` of the product.
async fn counts(app: &TestApp, id: u64) -> (Option<i64>, Option<i64>, Option<i64>) {
    let view = product(app, id).await;
    (
        view["stock"].as_i64(),
        view["sold"].as_i64(),
        view["cancelled"].as_i64(),
    )
}

#[tokio::test]
async fn a_missing_forged_or_expired_buyer_token_is_refused_on_every_buyer_route() {
    let database_url = fresh_database_url().await;
    let app = keyed_app(&database_url, 1).await;
    let forged = BuyerKey::new(b"another key").sign("alice", in_an_hour());
    let expired = BuyerKey::new(KEY).sign("alice", SystemTime::now() - Duration::from_secs(1));
    let tokens = [
        None,
        Some(forged.as_str()),
        Some(expired.as_str()),
        Some("not a token"),
    ];
    for route in ROUTES {
        for token in tokens {
            let (status, body) = call(&app, route, 1, "alice", "a-1", token).await;
            assert_eq!(
                (status, body["error"].as_str()),
                (StatusCode::UNAUTHORIZED, Some("unauthenticated")),
                "{route:?} with {token:?}: {body}"
            );
        }
    }
    assert_eq!(counts(&app, 1).await, (Some(2), Some(0), Some(0)));
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn a_buyer_token_acts_for_its_own_buyer_only() {
    let database_url = fresh_database_url().await;
    let app = keyed_app(&database_url, 2).await;
    let key = BuyerKey::new(KEY);
    let alice = key.sign("alice", in_an_hour());
    let mallory = key.sign("mallory", in_an_hour());

    let (status, order) = call(&app, Route::Buy, 2, "alice", "a-1", Some(&alice)).await;
    assert_eq!(status, StatusCode::CREATED, "{order}");
    let (status, order) = call(&app, Route::Buy, 2, "alice", "a-2", Some(&alice)).await;
    assert_eq!(status, StatusCode::CONFLICT, "one per customer: {order}");

    // Mallory knows Alice's id and her request id: with Mallory's own good token, she can
    // neither read, pay nor cancel Alice's order, nor buy as Alice.
    for route in ROUTES {
        let (status, body) = call(&app, route, 2, "alice", "a-1", Some(&mallory)).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::FORBIDDEN, Some("not_your_order")),
            "{route:?}: {body}"
        );
    }
    let (status, body) = call(&app, Route::Buy, 2, "alice", "m-1", Some(&mallory)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(counts(&app, 2).await, (Some(1), Some(1), Some(0)));

    // Alice's own token works on every route.
    let (status, body) = call(&app, Route::Status, 2, "alice", "a-1", Some(&alice)).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (StatusCode::OK, Some("placed")),
        "{body}"
    );
    let (status, body) = call(&app, Route::Token, 2, "alice", "a-1", Some(&alice)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call(&app, Route::Cancel, 2, "alice", "a-1", Some(&alice)).await;
    assert_eq!(
        (status, body["stage"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{body}"
    );
    let (status, body) = call(&app, Route::Buy, 2, "alice", "a-3", Some(&alice)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = call(&app, Route::Pay, 2, "alice", "a-3", Some(&alice)).await;
    assert_eq!(
        (status, body["stage"].as_str()),
        (StatusCode::OK, Some("paid")),
        "{body}"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn requests_refused_for_their_token_spend_nothing_of_their_victims_rate() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.buyer_key = Some(String::from_utf8(KEY.to_vec()).expect("text"));
    // One purchase a second per buyer: a forged click counted against Alice would refuse hers.
    config.rate_per_user = Some(1);
    let app = spawn_app(config).await;
    app.reset_with(3, &json!({ "stock": 10, "per_user_limit": 1 }))
        .await;
    let forged = BuyerKey::new(b"another key").sign("alice", in_an_hour());
    for i in 0..5 {
        let request = format!("f-{i}");
        let (status, body) = call(&app, Route::Buy, 3, "alice", &request, Some(&forged)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    let alice = BuyerKey::new(KEY).sign("alice", in_an_hour());
    let (status, body) = call(&app, Route::Buy, 3, "alice", "a-1", Some(&alice)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn the_admin_token_stands_for_any_buyer() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.buyer_key = Some(String::from_utf8(KEY.to_vec()).expect("text"));
    config.admin_token = Some("operator".into());
    let app = spawn_app(config).await;
    let r = app
        .client
        .put(format!("{}/api/products/4", app.url))
        .bearer_auth("operator")
        .json(&json!({ "stock": 1 }))
        .send()
        .await
        .expect("reset");
    assert_eq!(r.status(), StatusCode::OK);
    // The operator's fault injection takes the admin token in the same header a buyer token
    // goes in: it acts for the buyer the request names.
    let r = app
        .client
        .post(format!("{}/api/products/4/orders", app.url))
        .bearer_auth("operator")
        .header("x-seckill-hold-ms", "1")
        .json(&json!({ "user_id": "alice", "quantity": 1, "request_id": "a-1" }))
        .send()
        .await
        .expect("purchase");
    assert_eq!(r.status(), StatusCode::CREATED);
    let (status, body) = call(&app, Route::Status, 4, "alice", "a-1", Some("operator")).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (StatusCode::OK, Some("placed")),
        "{body}"
    );
    let (status, _) = call(&app, Route::Status, 4, "alice", "a-1", Some("wrong")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    app.stop().await;
    drop_database(&database_url).await;
}
