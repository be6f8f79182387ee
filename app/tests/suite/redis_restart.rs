//! A Redis that restarts without its data (no append-only file) loses the counters, the
//! purchases' charge records, the buyers' counts and the stream's accepted orders. The service
//! must not guess: a missing counter is not "sold out" and a missing count is not "bought
//! nothing". It refuses the purchases of the products whose stock it lost with `503`, takes
//! nothing, says so of an accepted order it can no longer find, and `reconcile` rebuilds the
//! stock from the orders, after which the remaining units sell exactly once.

use crate::common;

use std::sync::Arc;

use app::api::ProductView;
use app::redis_stock::{GROUP, RedisStock};
use common::{
    TestApp, drop_database, fresh_database_url, ledger, open_transaction, spawn_app, test_config,
    wait_until,
};
use deadpool_redis::redis::{self, streams::StreamPendingReply};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The product `redis-lua` sells, and the one `redis-lua-stream` sells.
const LUA: u64 = 1;
const STREAM: u64 = 2;

/// Runs blocking harness control off the runtime's threads.
async fn control<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("join")
}

/// One unit for `user`, request id `request`, through `strategy`.
fn click(user: &str, request: &str, strategy: &str) -> Value {
    json!({ "user_id": user, "quantity": 1, "request_id": request, "strategy": strategy })
}

fn strategy_of(product: u64) -> &'static str {
    match product {
        LUA => "redis-lua",
        _ => "redis-lua-stream",
    }
}

/// Buys one unit of `product` for `user`: the answer's status and error code.
async fn buy(app: &TestApp, product: u64, user: &str, request: &str) -> (StatusCode, Value) {
    let body = click(user, request, strategy_of(product));
    let (status, answer) = app.order(product, &body, None).await;
    (status, answer)
}

/// The status of `user`'s purchase `request` of `product`: HTTP status and body.
async fn status_of(app: &TestApp, product: u64, user: &str, request: &str) -> (StatusCode, Value) {
    let url = format!(
        "{}/api/products/{product}/orders/{request}?user_id={user}",
        app.url
    );
    let r = app
        .as_buyer(app.client.get(url), user)
        .send()
        .await
        .expect("status");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn placed(app: &TestApp, product: u64, user: &str, request: &str) {
    wait_until("the order placed", || async {
        status_of(app, product, user, request).await.1["state"] == "placed"
    })
    .await;
}

/// Entries of the stream a consumer has read and not yet acknowledged.
async fn read_unacknowledged(redis: &RedisStock) -> usize {
    let mut xpending = redis::cmd("XPENDING");
    xpending.arg(redis.keys().stream(0)).arg(GROUP);
    redis
        .query::<StreamPendingReply>(&xpending)
        .await
        .map_or(0, |reply| reply.count())
}

/// Every unit of the product accounted for: `stock` on sale, `sold` in orders, none waiting,
/// none stranded.
fn assert_accounts(view: &ProductView, stock: i64, sold: i64, what: &str) {
    assert_eq!(
        (view.stock, view.sold, view.pending, view.stranded),
        (stock, sold, 0, 0),
        "{what}: {view:?}"
    );
}

fn assert_lost(status: StatusCode, answer: &Value, what: &str) {
    assert_eq!(
        (status, answer["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("backend_unavailable")),
        "{what}: a product whose stock Redis lost must be refused, not guessed: {answer}"
    );
}

/// `redis-lua` sells one of 3 units and `redis-lua-stream` four of 6 (one placed, one read by
/// the consumer and held at its insert, two still unread in the stream), each buyer at her
/// limit of one. Redis restarts empty. Every purchase of either product is refused `503` and
/// takes nothing; the two accepted orders the stream lost are said to be unknown, not absent.
/// After `reconcile`, the buyers at their limit are still at it, the first purchases sent again
/// are answered with their orders, the lost orders sent again buy, and exactly the rest sells.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restarted_empty_refuses_purchases_until_reconciled_and_sells_no_unit_twice() {
    sandbox::require_faults!();
    let server = Arc::new(control(sandbox::Redis::start).await.expect("private Redis"));
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.redis_url = Some(server.url());
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    // One consumer, one entry per batch: the consumer held at its insert leaves the later
    // entries unread.
    config.stream_consumers = 1;
    config.stream_batch = 1;
    let redis = RedisStock::open(&server.url(), &config.lock_prefix, 2).expect("redis pool");
    let app = spawn_app(config).await;
    for (product, stock) in [(LUA, 3), (STREAM, 6)] {
        let body = json!({ "stock": stock, "home": "redis", "per_user_limit": 1 });
        app.reset_with(product, &body).await;
    }

    let (status, answer) = buy(&app, LUA, "alice", "alice-1").await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let (status, answer) = buy(&app, STREAM, "carol", "carol-1").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    placed(&app, STREAM, "carol", "carol-1").await;
    // The consumer's inserts wait behind a lock on the product's orders: it reads dave's
    // entry and holds it; erin's and frank's stay unread in the stream.
    let mut blocker = open_transaction(&database_url).await;
    sqlx::query("SELECT id FROM orders WHERE product_id = ? FOR UPDATE")
        .bind(STREAM)
        .execute(&mut blocker)
        .await
        .expect("lock");
    for user in ["dave", "erin", "frank"] {
        let (status, answer) = buy(&app, STREAM, user, &format!("{user}-1")).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{user}: {answer}");
    }
    wait_until("the consumer holding dave's entry", || async {
        read_unacknowledged(&redis).await == 1
    })
    .await;

    let restarting = server.clone();
    control(move || restarting.server().restart())
        .await
        .expect("restart");

    // Lost: every purchase refused, the buyer at her limit as much as a new one.
    for (product, user, request) in [
        (LUA, "alice", "alice-2"),
        (LUA, "bob", "bob-1"),
        (STREAM, "carol", "carol-2"),
        (STREAM, "grace", "grace-1"),
    ] {
        let (status, answer) = buy(&app, product, user, request).await;
        assert_lost(status, &answer, &format!("{user} buying product {product}"));
    }
    for user in ["erin", "frank"] {
        let (status, answer) = status_of(&app, STREAM, user, &format!("{user}-1")).await;
        assert_lost(
            status,
            &answer,
            &format!("the status of {user}'s lost order"),
        );
    }
    for product in [LUA, STREAM] {
        assert_eq!(redis.counter(product).await.expect("counter"), None);
    }
    sqlx::query("ROLLBACK")
        .execute(&mut blocker)
        .await
        .expect("unlock");
    // The entry the consumer held is placed: its order is one of the product's.
    placed(&app, STREAM, "dave", "dave-1").await;

    let lua = app.reconcile(LUA).await;
    assert_eq!(
        (lua.counter_found, lua.counter_after, lua.ordered),
        (None, 2, 1),
        "{lua:?}"
    );
    let stream = app.reconcile(STREAM).await;
    assert_eq!(
        (stream.counter_found, stream.counter_after, stream.ordered),
        (None, 4, 2),
        "{stream:?}"
    );

    // The buyers at their limit stay at it; their first purchases replay their orders.
    let (status, answer) = buy(&app, LUA, "alice", "alice-3").await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (StatusCode::CONFLICT, Some("limit_reached")),
        "{answer}"
    );
    let (status, answer) = buy(&app, LUA, "alice", "alice-1").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "alice's first purchase sent again: {answer}"
    );
    for user in ["carol", "dave"] {
        let (status, answer) = buy(&app, STREAM, user, &format!("{user}-2")).await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (StatusCode::CONFLICT, Some("limit_reached")),
            "{user}: {answer}"
        );
        let (status, answer) = buy(&app, STREAM, user, &format!("{user}-1")).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{user}'s purchase sent again: {answer}"
        );
    }
    // The orders the stream lost are absent; sent again, they buy.
    for user in ["erin", "frank"] {
        let request = format!("{user}-1");
        let (status, answer) = status_of(&app, STREAM, user, &request).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{user}: {answer}");
        let (status, answer) = buy(&app, STREAM, user, &request).await;
        assert_eq!(
            status,
            StatusCode::ACCEPTED,
            "{user} sending again: {answer}"
        );
        placed(&app, STREAM, user, &request).await;
    }

    // The rest sells exactly: two units of each, then sold out.
    for product in [LUA, STREAM] {
        for n in 0..3 {
            let user = format!("new-{n}");
            let (status, answer) = buy(&app, product, &user, "n-1").await;
            let expected = match n {
                2 => StatusCode::CONFLICT,
                _ if product == LUA => StatusCode::CREATED,
                _ => StatusCode::ACCEPTED,
            };
            assert_eq!(
                status, expected,
                "{user} buying product {product}: {answer}"
            );
            if expected == StatusCode::ACCEPTED {
                placed(&app, product, &user, "n-1").await;
            }
        }
    }
    assert_accounts(&app.drained(LUA).await, 0, 3, "redis-lua");
    assert_accounts(&app.drained(STREAM).await, 0, 6, "redis-lua-stream");
    for product in [LUA, STREAM] {
        let truth = ledger(&database_url, product).await;
        assert_eq!(truth.oversell(), 0, "{truth:?}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}
