//! What an instance remembers of its products stays bounded, whatever ids its clients ask for:
//! an unknown id is answered `404` without leaving a product behind in memory, a product
//! nobody asks about any more is forgotten, and a crowd asking for unknown ids neither slows
//! the refusals from memory of a sold-out product nor escapes the buyers' rates.

use crate::common;

use app::api::Strategy;
use common::{TestApp, drop_database, fresh_database_url, spawn_app, test_config};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn click(user: &str) -> Value {
    json!({ "user_id": user, "quantity": 1, "request_id": format!("r-{user}"), "strategy": Strategy::Conditional })
}

/// Products the instance remembers now.
async fn remembered(app: &TestApp) -> u64 {
    app.metric("seckill_products_remembered")
        .await
        .expect("the products remembered gauge")
}

/// Sells product `id`'s one unit and waits until the instance refuses it from memory.
async fn sold_out_in_memory(app: &TestApp, id: u64) {
    app.reset(id, 1).await;
    let (status, answer) = app.order(id, &click("winner"), None).await;
    assert!(status.is_success(), "{status} {answer}");
    common::wait_until("a refusal from memory", || async {
        let mark = app.purchases_started().await;
        let (status, _) = app.order(id, &click("probe"), None).await;
        status == StatusCode::CONFLICT && app.purchases_started().await == mark
    })
    .await;
}

/// Clicks on `count` product ids that do not exist, 16 at a time; each must be `404`.
async fn click_unknown_ids(app: &TestApp, first: u64, count: u64) {
    futures::stream::iter(first..first + count)
        .map(|id| async move { app.order(id, &click(&format!("u-{id}")), None).await })
        .buffer_unordered(16)
        .for_each(|(status, answer)| async move {
            assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_unknown_product_ids_leave_the_memory_bounded_and_the_refusals_in_it() {
    const UNKNOWN: u64 = 10_000;
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    // Nothing ages meanwhile: only the memory's own bound can keep it small.
    config.product_memory_ms = 3_600_000;
    let app = spawn_app(config).await;
    sold_out_in_memory(&app, 1).await;
    let before = remembered(&app).await;
    click_unknown_ids(&app, 1_000_000, UNKNOWN).await;
    let after = remembered(&app).await;
    assert!(
        after < before + UNKNOWN / 4,
        "{UNKNOWN} unknown ids took the memory from {before} products to {after}"
    );
    // The sold-out product is still refused from memory.
    let mark = app.purchases_started().await;
    for n in 0..20 {
        let (status, answer) = app.order(1, &click(&format!("late-{n}")), None).await;
        assert_eq!(answer["error"], "sold_out", "{status} {answer}");
    }
    assert_eq!(
        app.purchases_started().await,
        mark,
        "a refusal reached a strategy"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn products_nobody_asks_about_are_forgotten_once_their_memory_has_aged() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.product_memory_ms = 200;
    let app = spawn_app(config).await;
    for id in 1..=20 {
        app.reset(id, 5).await;
        let (status, answer) = app.order(id, &click("buyer"), None).await;
        assert!(status.is_success(), "{status} {answer}");
    }
    click_unknown_ids(&app, 1_000_000, 100).await;
    assert!(remembered(&app).await > 0, "nothing was remembered");
    // Nobody asks any more.
    common::wait_until("every product forgotten", || async {
        remembered(&app).await == 0
    })
    .await;
    // What is forgotten is read again when asked for.
    let (status, answer) = app.order(1, &click("later"), None).await;
    assert!(status.is_success(), "{status} {answer}");
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn token_requests_count_against_the_buyers_rate_as_purchases_do() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.rate_per_user = Some(1);
    let app = spawn_app(config).await;
    let requests: Vec<_> = (0..20)
        .map(|n| {
            let url = format!("{}/api/products/{}/tokens", app.url, 1_000 + n);
            let request = app.client.post(&url).json(&json!({ "user_id": "bot" }));
            let request = app.as_buyer(request, "bot");
            tokio::spawn(async move {
                let r = request.send().await.expect("token request");
                (r.status(), r.json::<Value>().await.unwrap_or(Value::Null))
            })
        })
        .collect();
    let mut limited = 0;
    for request in requests {
        let (status, answer) = request.await.expect("token request");
        match status {
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(answer["error"], "rate_limited");
                limited += 1;
            }
            _ => assert_eq!(status, StatusCode::NOT_FOUND, "{answer}"),
        }
    }
    assert!(
        limited > 0,
        "20 token requests at once for unknown products, none past a rate of 1/s"
    );
    app.stop().await;
    drop_database(&database_url).await;
}
