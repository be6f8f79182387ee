//! Helpers for the tests of an order's life: buy one unit, pay, cancel, run the sweep on a
//! product, and wait for the database clock to pass the orders' deadlines.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{TestApp, wait_until};

/// Buys one unit of `product` as `user` through `strategy`; the status and body.
pub async fn buy(
    app: &TestApp,
    product: u64,
    user: &str,
    request: &str,
    strategy: &str,
) -> (StatusCode, Value) {
    let body =
        json!({ "user_id": user, "quantity": 1, "request_id": request, "strategy": strategy });
    app.order(product, &body, None).await
}

/// `POST …/orders/{request}/{action}?user_id={user}` (`pay` or `cancel`) as `user`, with extra
/// headers.
pub async fn act(
    app: &TestApp,
    product: u64,
    user: &str,
    request: &str,
    action: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, Value) {
    let mut r = app.as_buyer(
        // The tests' ids need no escaping.
        app.client.post(format!(
            "{}/api/products/{product}/orders/{request}/{action}?user_id={user}",
            app.url
        )),
        user,
    );
    for (name, value) in headers {
        r = r.header(*name, *value);
    }
    let r = r.send().await.expect("transition request");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `POST /api/products/{product}/expire`: one round of the sweep on the product, now.
pub async fn expire(app: &TestApp, product: u64, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    let mut r = app
        .client
        .post(format!("{}/api/products/{product}/expire", app.url));
    for (name, value) in headers {
        r = r.header(*name, *value);
    }
    let r = r.send().await.expect("expire request");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `GET /api/products/{id}`, the product's public page: the status and body.
pub async fn page(app: &TestApp, id: u64) -> (StatusCode, Value) {
    let answer = app
        .client
        .get(format!("{}/api/products/{id}", app.url))
        .send()
        .await
        .expect("page");
    (answer.status(), answer.json().await.expect("json"))
}

/// `GET /api/products/{id}/accounting` as JSON.
pub async fn product(app: &TestApp, id: u64) -> Value {
    app.client
        .get(format!("{}/api/products/{id}/accounting", app.url))
        .send()
        .await
        .expect("product request")
        .json()
        .await
        .expect("product view")
}

/// Waits until every reserved order of the database is past its deadline by the database's
/// own clock (the state a late payment or the sweep acts on).
pub async fn wait_until_all_due(database_url: &str) {
    use app::db::Engines;
    let db = app::db::open(database_url).await.expect("connect");
    wait_until("every reserved order past its deadline", || {
        let db = db.clone();
        async move {
            let waiting: i64 = match &db {
                Engines::MySql(pool) => {
                    sqlx::query_scalar(
                        "SELECT COUNT(*) FROM orders \
                         WHERE state = 'reserved' AND pay_by > NOW(6)",
                    )
                    .fetch_one(pool)
                    .await
                }
                Engines::Postgres(pool) => {
                    sqlx::query_scalar(
                        "SELECT COUNT(*) FROM orders \
                         WHERE state = 'reserved' AND pay_by > clock_timestamp()",
                    )
                    .fetch_one(pool)
                    .await
                }
            }
            .expect("deadlines");
            waiting == 0
        }
    })
    .await;
    db.close().await;
}
