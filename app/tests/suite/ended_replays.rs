//! A purchase whose order ended (cancelled, expired) sent again — a client retrying its request
//! id with the same terms — is answered with its ended order and takes nothing, under every
//! strategy: its units stay on sale, no unit is stranded before or after `reconcile`, and the
//! next buyer buys them. Sent again while its cancellation is on the way, or before its order
//! is placed, it takes nothing either.

use crate::common;

use app::api::{Home, ProductView};
use app::db::Engine;
use app::redis_stock::{RedisStock, charge, scripts};
use common::life::{act, expire, wait_until_all_due};
use common::{
    TestApp, config_with_redis, drop_database, fresh_database_url, post_retrying_busy, spawn_app,
    test_config, wait_until, with_every_service,
};
use deadpool_redis::redis;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// One unit for `user`, request id `request`, through `strategy`.
fn click(user: &str, request: &str, strategy: &str) -> Value {
    json!({ "user_id": user, "quantity": 1, "request_id": request, "strategy": strategy })
}

/// Sends `body` for `product` (retrying `busy`), and waits until its order is placed: the
/// status of the first answer (`201`, or `202` for an order placed from the stream).
async fn buy_placed(app: &TestApp, product: u64, body: &Value) -> StatusCode {
    let (status, answer) = post_retrying_busy(app.purchase(product, body)).await;
    assert!(
        status == StatusCode::CREATED || status == StatusCode::ACCEPTED,
        "{body}: {status} {answer}"
    );
    placed(app, product, body).await;
    status
}

/// Waits until the order of the purchase `body` is placed.
async fn placed(app: &TestApp, product: u64, body: &Value) {
    let (user, request) = (body["user_id"].as_str(), body["request_id"].as_str());
    let user = user.expect("user id");
    let status_url = format!(
        "{}/api/products/{product}/orders/{}?user_id={user}",
        app.url,
        request.expect("request id"),
    );
    wait_until("the order placed", || async {
        let r = app.as_buyer(app.client.get(&status_url), user);
        let r = r.send().await.expect("status");
        let found: Value = r.json().await.unwrap_or(Value::Null);
        found["state"] == "placed"
    })
    .await;
}

/// The purchase sent again: it must be answered `200` with its order, in `stage`.
async fn assert_replayed(app: &TestApp, product: u64, body: &Value, stage: &str, what: &str) {
    let (status, answer) = post_retrying_busy(app.purchase(product, body)).await;
    assert_eq!(
        (status, answer["stage"].as_str()),
        (StatusCode::OK, Some(stage)),
        "{what}: the ended purchase sent again: {answer}"
    );
    assert_eq!(answer["request_id"], body["request_id"], "{what}: {answer}");
}

/// Every unit of `product` accounted for: `stock` on sale, `sold` in orders, none waiting in
/// the stream, none on its way home, none stranded.
fn assert_accounts(view: &ProductView, stock: i64, sold: i64, what: &str) {
    assert_eq!(
        (
            view.stock,
            view.sold,
            view.pending,
            view.returning,
            view.stranded
        ),
        (stock, sold, 0, 0, 0),
        "{what}: {view:?}"
    );
}

/// Sends the ended purchases again, then checks that nothing was taken (before and after
/// `reconcile`, which finds nothing to repair) and that every returned unit sells to a new
/// buyer.
async fn replays_take_nothing(app: &TestApp, bodies: &[Value], stage: &str) {
    let units = bodies.len() as i64;
    for body in bodies {
        assert_replayed(app, 1, body, stage, "redis-lua-stream").await;
    }
    assert_accounts(&app.drained(1).await, units, 0, "after the replays");
    let repair = app.reconcile(1).await;
    assert_eq!(
        (
            repair.repaired,
            repair.released_requests,
            repair.counter_after
        ),
        (false, 0, units),
        "nothing to repair: {repair:?}"
    );
    assert_accounts(&app.drained(1).await, units, 0, "after reconcile");
    for b in 0..units {
        let fresh = click(&format!("new-{b}"), "n-1", "redis-lua-stream");
        buy_placed(app, 1, &fresh).await;
    }
    assert_accounts(&app.drained(1).await, 0, units, "resold");
}

/// Three buyers buy through the stream, cancel, and send the same purchase again: each is
/// answered with its cancelled order and charged nothing. (Were the retry charged again, its
/// entry would find the cancelled order and place nothing: three units stranded, the product
/// sold out with nothing sold, and `reconcile` blind to it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_stream_purchase_sent_again_is_answered_its_order_and_strands_no_unit() {
    let database_url = fresh_database_url().await;
    let mut config = config_with_redis(&database_url).await;
    config.reconcile_grace_ms = 1;
    let app = spawn_app(config).await;
    let body = json!({ "stock": 3, "home": "redis", "per_user_limit": 1 });
    app.reset_with(1, &body).await;
    let bodies: Vec<Value> = (0..3)
        .map(|b| click(&format!("u{b}"), "r-1", "redis-lua-stream"))
        .collect();
    for body in &bodies {
        assert_eq!(buy_placed(&app, 1, body).await, StatusCode::ACCEPTED);
        let user = body["user_id"].as_str().expect("user");
        let (status, order) = act(&app, 1, user, "r-1", "cancel", &[]).await;
        assert_eq!(status, StatusCode::OK, "{order}");
    }
    replays_take_nothing(&app, &bodies, "cancelled").await;
    app.stop().await;
    drop_database(&database_url).await;
}

/// The same with orders whose payment window passed and which the sweep expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_stream_purchase_sent_again_is_answered_its_order_and_strands_no_unit() {
    let database_url = fresh_database_url().await;
    let mut config = config_with_redis(&database_url).await;
    config.expiry_interval_ms = 0;
    config.reconcile_grace_ms = 1;
    let app = spawn_app(config).await;
    let body = json!({ "stock": 2, "home": "redis", "per_user_limit": 1, "payment_window_ms": 1 });
    app.reset_with(1, &body).await;
    let bodies: Vec<Value> = (0..2)
        .map(|b| click(&format!("u{b}"), "r-1", "redis-lua-stream"))
        .collect();
    for body in &bodies {
        assert_eq!(buy_placed(&app, 1, body).await, StatusCode::ACCEPTED);
    }
    wait_until_all_due(&database_url).await;
    let (status, round) = expire(&app, 1, &[]).await;
    assert_eq!(
        (status, round["expired"].as_u64()),
        (StatusCode::OK, Some(2)),
        "{round}"
    );
    replays_take_nothing(&app, &bodies, "expired").await;
    app.stop().await;
    drop_database(&database_url).await;
}

/// Under every strategy of the catalogue, in its product's home: a cancelled purchase sent
/// again is answered with its cancelled order, the unit stays on sale, and a new buyer buys it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_purchase_sent_again_is_answered_its_order_under_every_strategy() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    with_every_service(&mut config).await;
    let app = spawn_app(config).await;
    for (i, strategy) in Engine::MySql.strategies().iter().enumerate() {
        let (product, name) = (i as u64 + 1, strategy.name());
        app.reset_in(product, 1, strategy.home()).await;
        let body = click("u-1", &format!("click-{name}"), name);
        buy_placed(&app, product, &body).await;
        let request = body["request_id"].as_str().expect("request id");
        let (status, order) = act(&app, product, "u-1", request, "cancel", &[]).await;
        assert_eq!(status, StatusCode::OK, "{name}: {order}");
        assert_replayed(&app, product, &body, "cancelled", name).await;
        assert_accounts(&app.drained(product).await, 1, 0, name);
        buy_placed(&app, product, &click("u-2", "r-2", name)).await;
        assert_accounts(&app.drained(product).await, 0, 1, name);
    }
    app.stop().await;
    drop_database(&database_url).await;
}

/// Sent again while its cancellation is on its way (the order left `reserved`, its unit not
/// yet back on the counter), the purchase is answered with its cancelled order and takes
/// nothing; the unit comes back once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purchase_sent_again_while_its_cancellation_is_on_the_way_takes_nothing() {
    let database_url = fresh_database_url().await;
    let mut config = config_with_redis(&database_url).await;
    (config.expiry_interval_ms, config.return_grace_ms) = (0, 0);
    let app = spawn_app(config).await;
    for (product, strategy) in [(1, "redis-lua"), (2, "redis-lua-stream")] {
        app.reset_in(product, 1, Home::Redis).await;
        let body = click("u-1", "r-1", strategy);
        buy_placed(&app, product, &body).await;
        let hold = [("x-seckill-hold-ms", "120000")];
        let cancel = tokio::spawn({
            let url = format!(
                "{}/api/products/{product}/orders/r-1/cancel?user_id=u-1",
                app.url
            );
            let request = app.as_buyer(app.client.post(url), "u-1");
            async move {
                let r = request.header(hold[0].0, hold[0].1).send().await;
                r.expect("cancel").status()
            }
        });
        let pool = sqlx::MySqlPool::connect(&database_url)
            .await
            .expect("connect");
        wait_until("the order cancelling", || async {
            let state: Option<String> =
                sqlx::query_scalar("SELECT state FROM orders WHERE product_id = ?")
                    .bind(product)
                    .fetch_optional(&pool)
                    .await
                    .expect("state");
            state.as_deref() == Some("cancelling")
        })
        .await;
        assert_replayed(&app, product, &body, "cancelled", strategy).await;
        let view = app.drained(product).await;
        assert_eq!((view.stock, view.returning), (0, 1), "{strategy}: {view:?}");
        // The cancellation is finished while it pauses, as a sweep finishes the return of an
        // instance presumed dead (no return grace here): the unit comes home once.
        let (status, round) = expire(&app, product, &[]).await;
        assert_eq!(status, StatusCode::OK, "{round}");
        assert_accounts(&app.drained(product).await, 1, 0, strategy);
        cancel.abort();
        pool.close().await;
    }
    app.stop().await;
    drop_database(&database_url).await;
}

/// Sent again before the consumers placed its order (the database holds them up), a stream
/// purchase is accepted again and takes nothing: one order, one unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_purchase_sent_again_before_it_is_placed_takes_nothing() {
    let database_url = fresh_database_url().await;
    let config = config_with_redis(&database_url).await;
    let redis = RedisStock::open(
        config.redis_url.as_deref().expect("redis"),
        &config.lock_prefix,
        2,
    )
    .expect("redis pool");
    let app = spawn_app(config).await;
    app.reset_in(1, 2, Home::Redis).await;
    let mut blocker = common::open_transaction(&database_url).await;
    sqlx::query("SELECT id FROM orders WHERE product_id = 1 FOR UPDATE")
        .execute(&mut blocker)
        .await
        .expect("lock");
    let body = click("u-1", "r-1", "redis-lua-stream");
    for _ in 0..3 {
        let (status, answer) = app.order(1, &body, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    }
    assert_eq!(redis.counter(1).await.expect("counter"), Some(1));
    assert_eq!(redis.waiting_units(1).await.expect("waiting"), 1);
    sqlx::query("ROLLBACK")
        .execute(&mut blocker)
        .await
        .expect("unlock");
    placed(&app, 1, &body).await;
    assert_accounts(&app.drained(1).await, 1, 1, "one order");
    let (status, order) = act(&app, 1, "u-1", "r-1", "cancel", &[]).await;
    assert_eq!(status, StatusCode::OK, "{order}");
    assert_replayed(&app, 1, &body, "cancelled", "redis-lua-stream").await;
    assert_accounts(&app.drained(1).await, 2, 0, "cancelled");
    app.stop().await;
    drop_database(&database_url).await;
}

/// Charges `product`'s purchase `r-1` of `u-1` through `strategy` behind the service's back,
/// with the script that strategy takes by (an entry in the stream for `redis-lua-stream`, none
/// for `redis-lua`: a purchase stopped between its charge and its insert). The units left.
async fn charge_directly(redis: &RedisStock, product: u64, strategy: &str) -> i64 {
    let keys = redis.keys();
    let field = charge::field("u-1", "r-1");
    let attempt = app::redis_stock::Attempt::new().name();
    let mut take = match strategy {
        "redis-lua-stream" => scripts::TAKE_AND_APPEND.prepare_invoke(),
        _ => scripts::TAKE.prepare_invoke(),
    };
    take.key(keys.stock(product))
        .key(keys.requests(product))
        .key(keys.buyers(product))
        .key(keys.limit(product))
        .arg(&field)
        .arg(1)
        .arg(charge::terms(1, strategy));
    if strategy == "redis-lua-stream" {
        let key = app::db::orders::PurchaseKey {
            product_id: product,
            user_id: "u-1",
            request_id: "r-1",
        };
        take.key(keys.stream(0))
            .key(keys.pending(0))
            .key(keys.waiting(product))
            .arg("r-1")
            .arg(product)
            .arg("u-1")
            .arg(strategy)
            .arg(charge::pending_field(key))
            .arg(attempt)
            .arg(1000)
            .key(keys.epoch(product))
            .key(keys.charges(product))
            .arg(0);
    } else {
        take.key(keys.epoch(product))
            .key(keys.charges(product))
            .arg(attempt)
            .arg(0);
    }
    redis
        .take(&redis.keys().stock(product), &take)
        .await
        .expect("charged")
        .0
}

/// Should a charge exist for a purchase whose order has already ended (its ended mark lost,
/// and the purchase charged again), its units come back: the consumer that meets the ended
/// order gives its entry's units back instead of counting it placed, and `reconcile` gives
/// back such a charge with no entry (a `redis-lua` purchase stopped between its charge and its
/// insert, whose insert can never succeed).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn units_charged_again_for_an_ended_order_come_back() {
    let database_url = fresh_database_url().await;
    let mut config = config_with_redis(&database_url).await;
    config.reconcile_grace_ms = 1;
    let redis = RedisStock::open(
        config.redis_url.as_deref().expect("redis"),
        &config.lock_prefix,
        2,
    )
    .expect("redis pool");
    let app = spawn_app(config).await;
    for (product, strategy) in [(1, "redis-lua-stream"), (2, "redis-lua")] {
        app.reset_in(product, 1, Home::Redis).await;
        let body = click("u-1", "r-1", strategy);
        buy_placed(&app, product, &body).await;
        let (status, order) = act(&app, product, "u-1", "r-1", "cancel", &[]).await;
        assert_eq!(status, StatusCode::OK, "{order}");
        let mut lose_the_mark = redis::cmd("HDEL");
        lose_the_mark
            .arg(redis.keys().requests(product))
            .arg(charge::field("u-1", "r-1"));
        redis.query::<()>(&lose_the_mark).await.expect("mark lost");
        assert_eq!(charge_directly(&redis, product, strategy).await, 0);
        if strategy == "redis-lua-stream" {
            wait_until("the entry's unit given back", || async {
                redis.counter(product).await.expect("counter") == Some(1)
            })
            .await;
        } else {
            let repair = app.reconcile(product).await;
            assert_eq!(repair.released_requests, 1, "{repair:?}");
        }
        assert_accounts(&app.drained(product).await, 1, 0, strategy);
        assert_replayed(&app, product, &body, "cancelled", strategy).await;
        assert_accounts(&app.drained(product).await, 1, 0, strategy);
    }
    app.stop().await;
    drop_database(&database_url).await;
}
