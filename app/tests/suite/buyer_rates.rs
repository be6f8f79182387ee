//! Every buyer route counts against the buyer's rate and the address's, as a purchase does: a
//! status poll, a payment and a cancellation each read the database, and a client that may
//! poll or cancel as fast as it likes takes the buyers' database connections as a crowd of
//! clicks would. Past either rate a request is answered `429 rate_limited` with a
//! `Retry-After`; its ids are checked first, so a limiter remembers none longer than the rules
//! allow. (The purchases' and the token requests' own rate tests are in `overload.rs` and
//! `product_memory.rs`.)

use crate::common;

use common::buyers::{ROUTES, Route, request};
use common::{TestApp, drop_database, fresh_database_url, spawn_app, test_config};
use reqwest::StatusCode;
use reqwest::header::RETRY_AFTER;
use serde_json::Value;

/// Requests sent at once: many more than a rate of one a second lets through together.
const BURST: usize = 20;

/// Sends [`BURST`] requests of `route` at once, the `i`th as `user(i)` for a purchase it never
/// made; asserts that each is answered `429 rate_limited` with a `Retry-After`, or what the
/// route answers a buyer within their rates, `404 not_found`. How many were refused.
async fn burst(app: &TestApp, route: Route, user: impl Fn(usize) -> String) -> usize {
    let requests = (0..BURST).map(|i| {
        let r = request(app, route, 1, &user(i), &format!("never-{i}"));
        async move {
            let r = r.send().await.expect("buyer request");
            let (status, retry_after) = (r.status(), r.headers().contains_key(RETRY_AFTER));
            (
                status,
                retry_after,
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    });
    let mut refused = 0;
    for (status, retry_after, body) in futures::future::join_all(requests).await {
        match status {
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(body["error"], "rate_limited", "{route:?}: {body}");
                assert!(retry_after, "{route:?}: a refusal without a Retry-After");
                refused += 1;
            }
            _ => assert_eq!(status, StatusCode::NOT_FOUND, "{route:?}: {body}"),
        }
    }
    refused
}

/// An instance whose buyers may each make one request a second.
async fn one_a_second_per_buyer(database_url: &str) -> TestApp {
    let mut config = test_config(database_url);
    config.rate_per_user = Some(1);
    spawn_app(config).await
}

async fn a_burst_of_one_buyer_is_refused_past_their_rate(route: Route) {
    let database_url = fresh_database_url().await;
    let app = one_a_second_per_buyer(&database_url).await;
    let refused = burst(&app, route, |_| "bot".into()).await;
    assert!(
        refused > 0,
        "{route:?}: {BURST} requests of one buyer at once, none past a rate of 1/s"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_polls_count_against_the_buyers_rate_as_purchases_do() {
    a_burst_of_one_buyer_is_refused_past_their_rate(Route::Status).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn payments_count_against_the_buyers_rate_as_purchases_do() {
    a_burst_of_one_buyer_is_refused_past_their_rate(Route::Pay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancellations_count_against_the_buyers_rate_as_purchases_do() {
    a_burst_of_one_buyer_is_refused_past_their_rate(Route::Cancel).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_buyer_route_counts_against_the_addresss_rate_whoever_it_names() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.rate_per_address = Some(1);
    let app = spawn_app(config).await;
    for route in ROUTES {
        // A buyer of their own for each request: only the address they share limits them.
        let refused = burst(&app, route, |i| format!("{route:?}-{i}")).await;
        assert!(
            refused > 0,
            "{route:?}: {BURST} requests of one address at once, none past a rate of 1/s"
        );
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_over_long_id_of_a_poll_payment_or_cancellation_is_refused_before_a_limiter_remembers_it()
 {
    let database_url = fresh_database_url().await;
    let app = one_a_second_per_buyer(&database_url).await;
    let keys = "seckill_rate_limiter_keys{limiter=\"user\"}";
    let long_user = "u".repeat(app::api::MAX_USER_ID + 1);
    let long_request = "r".repeat(app::api::MAX_REQUEST_ID + 1);
    for route in [Route::Status, Route::Pay, Route::Cancel] {
        for (user, purchase) in [(long_user.as_str(), "r-1"), ("buyer", &long_request)] {
            let r = request(&app, route, 1, user, purchase)
                .send()
                .await
                .expect("buyer request");
            let status = r.status();
            let body = r.json::<Value>().await.unwrap_or(Value::Null);
            assert_eq!(
                (status, body["error"].as_str()),
                (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request")),
                "{route:?}: {body}"
            );
        }
    }
    assert_eq!(
        app.metric(keys).await,
        Some(0),
        "the refused ids are remembered"
    );
    app.stop().await;
    drop_database(&database_url).await;
}
