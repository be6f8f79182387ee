//! A sale has a window and, if the product asks for one, a purchase token. A click before the
//! start or after the end, or one without its buyer's token, is refused with a clear code and
//! takes nothing; tokens are issued only while the sale is open, good for one buyer of one sale,
//! and on every instance that shares the secret.

use crate::common;

use app::api::Strategy;
use common::{TestApp, drop_database, fresh_database_url, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

fn at(offset_secs: i64) -> String {
    (OffsetDateTime::now_utc() + time::Duration::seconds(offset_secs))
        .format(&Rfc3339)
        .expect("a timestamp")
}

fn click(user: &str, request: &str, strategy: Strategy, token: Option<&str>) -> Value {
    let mut body =
        json!({ "user_id": user, "quantity": 1, "request_id": request, "strategy": strategy });
    if let Some(token) = token {
        body["purchase_token"] = json!(token);
    }
    body
}

async fn token(app: &TestApp, product: u64, user: &str) -> (StatusCode, Value) {
    let r = app
        .client
        .post(format!("{}/api/products/{product}/tokens", app.url))
        .json(&json!({ "user_id": user }))
        .send()
        .await
        .expect("token request");
    (r.status(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_click_outside_the_sale_window_is_refused_and_takes_nothing() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    let app = spawn_app(config).await;
    for (n, strategy) in [
        Strategy::Conditional,
        Strategy::RedisLuaStream,
        Strategy::Batched,
    ]
    .into_iter()
    .enumerate()
    {
        let product = n as u64 + 1;
        let home = strategy.home();
        let windows = [
            (
                json!({ "stock": 5, "home": home, "sale_starts_at": at(3600) }),
                "sale_not_started",
            ),
            (
                json!({ "stock": 5, "home": home, "sale_starts_at": at(-7200), "sale_ends_at": at(-3600) }),
                "sale_ended",
            ),
        ];
        for (rules, code) in windows {
            app.reset_with(product, &rules).await;
            let (status, answer) = app
                .order(product, &click("u", "r", strategy, None), None)
                .await;
            assert_eq!(status, StatusCode::CONFLICT, "{strategy}: {answer}");
            assert_eq!(answer["error"], code, "{strategy}: {answer}");
            let view = app.drained(product).await;
            assert_eq!((view.stock, view.orders), (5, 0), "{strategy}: {view:?}");
        }
        let open = json!({ "stock": 5, "home": home, "sale_starts_at": at(-60), "sale_ends_at": at(3600) });
        app.reset_with(product, &open).await;
        let (status, answer) = app
            .order(product, &click("u", "r", strategy, None), None)
            .await;
        assert!(status.is_success(), "{strategy}: {status} {answer}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sale_that_ends_before_it_starts_never_opens() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    let strategy = Strategy::Conditional;
    for (starts, ends, code) in [
        (60, 30, "sale_not_started"),
        (-30, -60, "sale_ended"),
        (-30, -30, "sale_ended"),
    ] {
        let rules = json!({ "stock": 5, "sale_starts_at": at(starts), "sale_ends_at": at(ends) });
        app.reset_with(1, &rules).await;
        let (status, answer) = app.order(1, &click("u", "r", strategy, None), None).await;
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
        assert_eq!(answer["error"], code, "{answer}");
        let view = app.drained(1).await;
        assert_eq!((view.stock, view.orders), (5, 0), "{view:?}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_product_that_requires_a_token_sells_only_to_buyers_who_show_their_own() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.purchase_token_secret = Some("shared between instances".into());
    let (a, b) = (spawn_app(config.clone()).await, spawn_app(config).await);
    let strategy = Strategy::Conditional;

    // Before the start, no token is issued, and a click without one is refused.
    a.reset_with(
        1,
        &json!({ "stock": 5, "sale_starts_at": at(3600), "token_required": true }),
    )
    .await;
    let (status, answer) = token(&a, 1, "alice").await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["error"], "sale_not_started");

    a.reset_with(
        1,
        &json!({ "stock": 5, "sale_starts_at": at(-1), "token_required": true }),
    )
    .await;
    let (status, issued) = token(&a, 1, "alice").await;
    assert_eq!(status, StatusCode::OK, "{issued}");
    let alices = issued["token"].as_str().expect("a token").to_string();
    let refusals = [
        click("alice", "r-1", strategy, None),
        click("mallory", "r-2", strategy, Some(&alices)),
        click("alice", "r-3", strategy, Some("forged")),
    ];
    for refused in refusals {
        let (status, answer) = b.order(1, &refused, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{refused}: {answer}");
        assert_eq!(answer["error"], "purchase_token_required");
    }
    assert_eq!(b.drained(1).await.orders, 0);
    // Issued by one instance, shown to another: the secret is shared.
    let (status, answer) = b
        .order(1, &click("alice", "r-4", strategy, Some(&alices)), None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");

    // A new sale (another start) makes the old token worthless.
    a.reset_with(
        1,
        &json!({ "stock": 5, "sale_starts_at": at(-2), "token_required": true }),
    )
    .await;
    let (status, answer) = a
        .order(1, &click("alice", "r-5", strategy, Some(&alices)), None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    a.stop().await;
    b.stop().await;
    drop_database(&database_url).await;
}
