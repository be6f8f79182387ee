//! What every strategy must do, written once and called from each strategy's tests: refuse
//! bad input without writing anything, and turn concurrent copies of one click into one
//! order, across instances.

use app::api::Home;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{TestApp, ledger};

/// Runs every bad order (through `strategy`) and every bad reset against product 1 (reset to
/// 10 units in `home`) and product 404 (absent), then checks that nothing changed and that a
/// good order still buys.
pub async fn refuses_every_bad_input_and_writes_nothing(
    app: &TestApp,
    database_url: &str,
    strategy: &str,
    home: Home,
) {
    app.reset_in(1, 10, home).await;
    let before = ledger(database_url, 1).await;
    let long = "x".repeat(200);
    let order = |quantity: Value, user: &str, request: &str| json!({ "user_id": user, "quantity": quantity, "request_id": request, "strategy": strategy });
    let orders = [
        ("quantity 0", order(json!(0), "u", "r-0")),
        ("quantity -1", order(json!(-1), "u", "r-1")),
        ("quantity above the maximum", order(json!(6), "u", "r-2")),
        ("fractional quantity", order(json!(1.5), "u", "r-3")),
        ("quantity as a string", order(json!("1"), "u", "r-4")),
        ("empty user id", order(json!(1), "", "r-5")),
        ("over-long user id", order(json!(1), &long, "r-6")),
        ("empty request id", order(json!(1), "u", "")),
        (
            "request id with spaces around",
            order(json!(1), "u", " r-7 "),
        ),
        ("over-long request id", order(json!(1), "u", &long)),
        (
            "unknown field",
            json!({ "user_id": "u", "quantity": 1, "request_id": "r-8", "strategy": strategy, "x": 1 }),
        ),
    ];
    for (what, body) in orders {
        let (status, answer) = app.order(1, &body, None).await;
        assert_client_error(status, &answer, &format!("{strategy}: {what}"));
    }
    let (status, answer) = app.order(404, &order(json!(1), "u", "r-9"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{strategy}: {answer}");

    let resets = [
        ("negative stock", json!({ "stock": -1, "home": home })),
        (
            "0 buckets",
            json!({ "stock": 5, "home": home, "buckets": 0 }),
        ),
        (
            "1025 buckets",
            json!({ "stock": 5, "home": home, "buckets": 1025 }),
        ),
        (
            "negative buckets",
            json!({ "stock": 5, "home": home, "buckets": -3 }),
        ),
        (
            "fractional buckets",
            json!({ "stock": 5, "home": home, "buckets": 2.5 }),
        ),
        (
            "buckets as a string",
            json!({ "stock": 5, "home": home, "buckets": "8" }),
        ),
        ("unknown home", json!({ "stock": 5, "home": "attic" })),
    ];
    for (what, body) in resets {
        let r = app
            .client
            .put(format!("{}/api/products/1", app.url))
            .json(&body)
            .send()
            .await
            .expect("reset");
        let status = r.status();
        let answer: Value = r.json().await.unwrap_or(Value::Null);
        assert_client_error(status, &answer, &format!("{strategy}: reset with {what}"));
    }

    assert_eq!(ledger(database_url, 1).await, before, "{strategy}");
    let r = app
        .client
        .get(format!("{}/api/products/404", app.url))
        .send()
        .await
        .expect("get");
    assert_eq!(
        r.status(),
        StatusCode::NOT_FOUND,
        "{strategy}: product 404 was created"
    );

    let (status, answer) = app.order(1, &order(json!(2), "u", "r-good"), None).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "{strategy}: a good order still buys: {answer}"
    );
    let after = ledger(database_url, 1).await;
    assert_eq!(
        (after.stock, after.sold, after.orders),
        (8, 2, 1),
        "{strategy}: {after:?}"
    );
}

/// 20 concurrent copies of one click (quantity 2), spread over `apps`, through `strategy` on
/// product 1 (reset to 10 units in `home`): one order, one `201`, every other copy `200` with
/// the same order.
pub async fn twenty_copies_make_one_order(
    apps: &[&TestApp],
    database_url: &str,
    strategy: &str,
    home: Home,
) {
    const COPIES: usize = 20;
    apps[0].reset_in(1, 10, home).await;
    let body =
        json!({ "user_id": "u-1", "quantity": 2, "request_id": "click", "strategy": strategy });
    let mut tasks = Vec::new();
    for copy in 0..COPIES {
        let app = apps[copy % apps.len()];
        let request = app.purchase(1, &body);
        tasks.push(tokio::spawn(super::post_retrying_busy(request)));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("copy"));
    }
    let count = |status| answers.iter().filter(|(s, _)| *s == status).count();
    assert_eq!(
        (count(StatusCode::CREATED), count(StatusCode::OK)),
        (1, COPIES - 1),
        "{strategy}: {answers:?}"
    );
    let ids: std::collections::HashSet<_> =
        answers.iter().map(|(_, b)| b["order_id"].clone()).collect();
    assert_eq!(
        ids.len(),
        1,
        "{strategy}: one order for all copies: {answers:?}"
    );
    let truth = ledger(database_url, 1).await;
    assert_eq!(
        (truth.orders, truth.sold, truth.stock),
        (1, 2, 8),
        "{strategy}: {truth:?}"
    );
}

/// A 4xx JSON error with a code and a non-empty message.
fn assert_client_error(status: StatusCode, body: &Value, what: &str) {
    assert!(
        status.is_client_error(),
        "{what}: status {status}, body {body}"
    );
    assert!(
        body["error"].as_str().is_some_and(|c| !c.is_empty()),
        "{what}: {body}"
    );
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: {body}"
    );
}
