//! A buyer is who their token says, not whoever a request names: an instance does not start
//! without a buyer key unless told to take buyers on their word; with one, every buyer route
//! takes the buyer from the token — a request need not name them — and refuses a request
//! without a good token (`401 unauthenticated`), and one naming another buyer than its token
//! (`403 not_your_order`) — so knowing a buyer's id and request id no longer lets anyone read,
//! pay or cancel their order, or buy as them.

use crate::common;

use std::time::{Duration, SystemTime};

use app::buyer::BuyerKey;
use common::buyers::{ROUTES, Route, call};
use common::life::product;
use common::{TestApp, drop_database, fresh_database_url, spawn_app, stored_orders, test_config};
use reqwest::StatusCode;
use serde_json::{Value, json};

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

/// Sends `request` with `token` as its buyer token, if any; the status and body.
async fn send(request: reqwest::RequestBuilder, token: Option<&str>) -> (StatusCode, Value) {
    let request = match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    let r = request.send().await.expect("buyer request");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
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
    // Unsigned: the admin token is its only credential.
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
    // It names no buyer itself: the request must.
    let status_url = format!("{}/api/products/4/orders/a-1", app.url);
    let (status, body) = send(app.client.get(status_url), Some("operator")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request")),
        "{body}"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn an_instance_without_a_buyer_key_refuses_to_start_unless_told_anonymous() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.buyer_key = None;
    let error = app::build(&config).await.err().expect("a start-up error");
    let message = error.to_string();
    assert!(
        message.contains("--buyer-key") && message.contains("--anonymous-buyers"),
        "{message}"
    );
    config.anonymous_buyers = true;
    let (_router, _state) = app::build(&config)
        .await
        .expect("an anonymous instance starts");
    drop_database(&database_url).await;
}

#[tokio::test]
async fn an_anonymous_instance_takes_the_buyer_a_request_names_and_requires_one() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    (config.buyer_key, config.anonymous_buyers) = (None, true);
    let app = spawn_app(config).await;
    app.reset(5, 2).await;
    let orders = format!("{}/api/products/5/orders", app.url);

    let body = json!({ "user_id": "alice", "quantity": 1, "request_id": "a-1" });
    let (status, order) = send(app.client.post(&orders).json(&body), None).await;
    assert_eq!(status, StatusCode::CREATED, "{order}");
    let (status, found) = send(app.client.get(format!("{orders}/a-1?user_id=alice")), None).await;
    assert_eq!(
        (status, found["state"].as_str()),
        (StatusCode::OK, Some("placed")),
        "{found}"
    );

    let nameless = [
        app.client
            .post(&orders)
            .json(&json!({ "quantity": 1, "request_id": "a-2" })),
        app.client.get(format!("{orders}/a-1")),
        app.client.post(format!("{orders}/a-1/pay")),
        app.client.post(format!("{orders}/a-1/cancel")),
        (app.client)
            .post(format!("{}/api/products/5/tokens", app.url))
            .json(&json!({})),
    ];
    for request in nameless {
        let (status, body) = send(request, None).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request")),
            "{body}"
        );
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains("user_id"), "{body}");
    }
    assert_eq!(counts(&app, 5).await, (Some(1), Some(1), Some(0)));
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn a_purchase_without_user_id_buys_as_the_token_s_buyer() {
    let database_url = fresh_database_url().await;
    let app = keyed_app(&database_url, 6).await;
    let alice = BuyerKey::new(KEY).sign("alice", in_an_hour());
    let orders = format!("{}/api/products/6/orders", app.url);
    let nameless = json!({ "quantity": 1, "request_id": "a-1" });

    let (status, body) = send(app.client.post(&orders).json(&nameless), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, order) = send(app.client.post(&orders).json(&nameless), Some(&alice)).await;
    assert_eq!(
        (status, order["user_id"].as_str()),
        (StatusCode::CREATED, Some("alice")),
        "{order}"
    );
    // Sent again, it is the same purchase of the same buyer.
    let (status, again) = send(app.client.post(&orders).json(&nameless), Some(&alice)).await;
    assert_eq!(
        (status, &again["order_id"]),
        (StatusCode::OK, &order["order_id"]),
        "{again}"
    );
    let stored = stored_orders(&database_url).await;
    let buyers: Vec<&str> = stored.iter().map(|o| o.user_id.as_str()).collect();
    assert_eq!(buyers, ["alice"]);

    // A purchase token too is the token's buyer's.
    let tokens = format!("{}/api/products/6/tokens", app.url);
    let (status, token) = send(app.client.post(&tokens).json(&json!({})), Some(&alice)).await;
    assert_eq!(
        (status, token["user_id"].as_str()),
        (StatusCode::OK, Some("alice")),
        "{token}"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn status_pay_and_cancel_find_the_order_of_the_token_s_buyer_without_a_query() {
    let database_url = fresh_database_url().await;
    let app = keyed_app(&database_url, 7).await;
    app.reset_with(7, &json!({ "stock": 2, "per_user_limit": 2 }))
        .await;
    let key = BuyerKey::new(KEY);
    let (alice, mallory) = (
        key.sign("alice", in_an_hour()),
        key.sign("mallory", in_an_hour()),
    );
    let orders = format!("{}/api/products/7/orders", app.url);
    for request in ["a-1", "a-2"] {
        let body = json!({ "quantity": 1, "request_id": request });
        let (status, order) = send(app.client.post(&orders).json(&body), Some(&alice)).await;
        assert_eq!(status, StatusCode::CREATED, "{order}");
    }

    // Mallory's token, without a query, asks for Mallory's purchase: she has none.
    let (status, body) = send(app.client.get(format!("{orders}/a-1")), Some(&mallory)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = send(app.client.post(format!("{orders}/a-1/pay")), Some(&mallory)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    let (status, found) = send(app.client.get(format!("{orders}/a-1")), Some(&alice)).await;
    assert_eq!(
        (status, found["state"].as_str(), found["user_id"].as_str()),
        (StatusCode::OK, Some("placed"), Some("alice")),
        "{found}"
    );
    let (status, paid) = send(app.client.post(format!("{orders}/a-1/pay")), Some(&alice)).await;
    assert_eq!(
        (status, paid["stage"].as_str()),
        (StatusCode::OK, Some("paid")),
        "{paid}"
    );
    let cancel = app.client.post(format!("{orders}/a-2/cancel"));
    let (status, cancelled) = send(cancel, Some(&alice)).await;
    assert_eq!(
        (status, cancelled["stage"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{cancelled}"
    );
    assert_eq!(counts(&app, 7).await, (Some(1), Some(1), Some(1)));
    app.stop().await;
    drop_database(&database_url).await;
}
