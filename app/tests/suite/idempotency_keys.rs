//! A request id is a buyer's idempotency key for one purchase of one product: replaying it
//! answers the original order, reusing it with other terms is refused, and a retry of a
//! purchase that did commit gets that order even when the retry itself would fail.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use app::api::{ErrorBody, ErrorCode, OrderRequest, OrderResponse, Strategy};
use common::fake_locks::GoesDown;
use common::{TestApp, fresh_database_url, ledger, spawn_app, spawn_app_with, test_config};
use locks::Backend;
use reqwest::StatusCode;

fn order(product: u64, user: &str, quantity: i64, strategy: Strategy) -> (u64, OrderRequest) {
    let request = OrderRequest {
        user_id: Some(user.into()),
        quantity,
        request_id: "click-1".into(),
        strategy: Some(strategy),
        purchase_token: None,
    };
    (product, request)
}

async fn post(app: &TestApp, (product, body): &(u64, OrderRequest)) -> (StatusCode, String) {
    let request = (app.client)
        .post(format!("{}/api/products/{product}/orders", app.url))
        .json(body);
    let r = app
        .as_buyer(request, body.user_id.as_deref().unwrap_or_default())
        .send()
        .await
        .expect("order request");
    (r.status(), r.text().await.expect("body"))
}

#[tokio::test]
async fn a_request_id_reused_for_another_quantity_or_strategy_is_refused_and_another_buyer_or_product_is_another_purchase()
 {
    let database_url = fresh_database_url().await;
    let app = spawn_app(test_config(&database_url)).await;
    app.reset(1, 10).await;
    app.reset(2, 10).await;
    let first = order(1, "alice", 1, Strategy::Conditional);
    let (status, body) = post(&app, &first).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let replay = post(&app, &first).await;
    assert_eq!(
        replay.0,
        StatusCode::OK,
        "an exact replay answers the order: {replay:?}"
    );
    let conflicting = [
        order(1, "alice", 2, Strategy::Conditional),
        order(1, "alice", 1, Strategy::Pessimistic),
    ];
    for other in &conflicting {
        let (status, body) = post(&app, other).await;
        assert_eq!(status, StatusCode::CONFLICT, "{other:?}: {body}");
        let error: ErrorBody = serde_json::from_str(&body).expect("an error body");
        assert_eq!(
            error.error,
            ErrorCode::IdempotencyConflict,
            "{other:?}: {body}"
        );
    }
    // The key is the buyer's, for one product: the same id of another buyer, or for another
    // product, names another purchase.
    for other in [
        order(2, "alice", 1, Strategy::Conditional),
        order(1, "bob", 1, Strategy::Conditional),
    ] {
        let (status, body) = post(&app, &other).await;
        assert_eq!(status, StatusCode::CREATED, "{other:?}: {body}");
    }
    let (one, two) = (
        ledger(&database_url, 1).await,
        ledger(&database_url, 2).await,
    );
    assert_eq!((one.orders, one.stock), (2, 8), "{one:?}");
    assert_eq!((two.orders, two.stock), (1, 9), "{two:?}");
    app.stop().await;
    common::drop_database(&database_url).await;
}

#[tokio::test]
async fn a_retry_of_a_committed_purchase_gets_the_original_order_even_when_its_lock_service_is_now_down()
 {
    let database_url = fresh_database_url().await;
    let lock = Arc::new(GoesDown::default());
    let behind = Arc::clone(&lock);
    let app = spawn_app_with(test_config(&database_url), move |r| {
        r.set_lock(Backend::Redis, Some(behind));
    })
    .await;
    app.reset(1, 10).await;
    let click = order(1, "alice", 1, Strategy::RedisLock);
    let (status, body) = post(&app, &click).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let original: OrderResponse = serde_json::from_str(&body).expect("an order");

    // The client never saw that answer (say, it timed out) and retries; meanwhile the lock
    // service went down. The purchase happened: the retry must say so, not "unavailable".
    lock.down.store(true, Ordering::SeqCst);
    let (status, body) = post(&app, &click).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let replayed: OrderResponse = serde_json::from_str(&body).expect("an order");
    assert_eq!(replayed, original);
    assert_eq!(ledger(&database_url, 1).await.orders, 1);
    app.stop().await;
    common::drop_database(&database_url).await;
}
