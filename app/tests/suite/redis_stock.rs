//! Stock kept in Redis (`redis-lua`, `redis-lua-stream`): they sell exactly the stock across
//! instances, refuse bad input without touching the counter, answer `503` and write nothing when
//! Redis is gone, give units back when the order cannot be written, place every accepted order
//! exactly once even when a consumer dies, and `reconcile` repairs units taken without an order.

use crate::common;

use std::time::Duration;

use app::api::{Home, Reconciliation, Strategy};
use app::redis_stock::consumer::Consumer;
use app::redis_stock::{Attempt, RedisStock, Settled, charge};
use app::strategy::{Purchase, PurchaseStats};
use app::{Config, db};
use common::{
    Crowd, TestApp, drop_database, flash_sale, fresh_database_url, ledger, rows_per_request_id,
    sells_exactly_the_stock, spawn_app, test_config, with_fresh_database,
};
use deadpool_redis::redis::{self, streams::StreamPendingReply};
use reqwest::StatusCode;
use serde_json::{Value, json};

const STRATEGIES: [&str; 2] = ["redis-lua", "redis-lua-stream"];

async fn shared_redis() -> String {
    tokio::task::spawn_blocking(sandbox::shared::redis_url)
        .await
        .expect("sandbox Redis")
}

/// Test defaults on `database_url`, the given Redis, and a key prefix of its own.
fn config_with(database_url: &str, redis_url: String) -> Config {
    let mut config = test_config(database_url);
    config.redis_url = Some(redis_url);
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    config
}

/// The Redis stock the instances of `config` use, for reading the counter behind their back.
fn redis_of(config: &Config) -> RedisStock {
    let url = config.redis_url.as_deref().expect("redis configured");
    RedisStock::open(url, &config.lock_prefix, 4).expect("redis pool")
}

/// One unit bought by a buyer of its own (`u-<request id>`): one per customer.
fn order_body(request_id: &str, strategy: &str) -> Value {
    json!({ "user_id": format!("u-{request_id}"), "quantity": 1, "request_id": request_id, "strategy": strategy })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lua_sells_exactly_the_stock_to_200_buyers() {
    let redis = shared_redis().await;
    sells_exactly_the_stock("redis-lua", |c| c.redis_url = Some(redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lua_stream_sells_exactly_the_stock_to_200_buyers_once_drained() {
    let redis = shared_redis().await;
    sells_exactly_the_stock("redis-lua-stream", |c| c.redis_url = Some(redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_redis_strategies_sell_exactly_the_stock_to_200_buyers_across_two_instances() {
    const STOCK: i64 = 100;
    const BUYERS: usize = 200;
    let database_url = fresh_database_url().await;
    let config = config_with(&database_url, shared_redis().await);
    let (a, b) = (spawn_app(config.clone()).await, spawn_app(config).await);
    for (product, strategy) in (1..).zip(STRATEGIES) {
        a.reset_in(product, STOCK, Home::Redis).await;
        let crowd = Crowd {
            buyers: BUYERS,
            hold_ms: None,
            busy_retries: 200,
        };
        let tally = flash_sale(&[&a, &b], product, strategy, crowd).await;
        assert!(tally.unexpected.is_empty(), "{strategy}: {tally:?}");
        assert_eq!(
            (tally.created + tally.accepted, tally.sold_out),
            (STOCK as usize, BUYERS - STOCK as usize),
            "{strategy}: {tally:?}"
        );
        let view = b.drained(product).await;
        let truth = ledger(&database_url, product).await;
        assert_eq!(
            (view.stock, view.sold, truth.orders),
            (0, STOCK, STOCK),
            "{strategy}: {view:?}"
        );
    }
    let rows = rows_per_request_id(&database_url).await;
    assert!(rows.values().all(|&n| n == 1), "a request id ordered twice");
    a.stop().await;
    b.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_answers_4xx_and_takes_nothing_from_the_counter() {
    let database_url = fresh_database_url().await;
    let config = config_with(&database_url, shared_redis().await);
    let redis = redis_of(&config);
    let app = spawn_app(config).await;
    for (product, strategy) in (1..).zip(STRATEGIES) {
        app.reset_in(product, 10, Home::Redis).await;
        let bad = [
            json!({ "user_id": "u", "quantity": 0, "request_id": "r", "strategy": strategy }),
            json!({ "user_id": "u", "quantity": 6, "request_id": "r", "strategy": strategy }),
            json!({ "user_id": "", "quantity": 1, "request_id": "r", "strategy": strategy }),
            json!({ "user_id": "u", "quantity": 1, "request_id": " r", "strategy": strategy }),
            json!({ "user_id": "u", "quantity": 1, "strategy": strategy }),
            json!({ "user_id": "u", "quantity": 1, "request_id": "r", "strategy": strategy, "x": 1 }),
        ];
        for body in &bad {
            let (status, answer) = app.order(product, body, None).await;
            assert!(status.is_client_error(), "{body}: {status} {answer}");
        }
        let (status, _) = app
            .order(99, &order_body("r-unknown", strategy), None)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{strategy}: unknown product");
        let malformed = app
            .client
            .post(format!("{}/api/products/{product}/orders", app.url))
            .header("content-type", "application/json")
            .body("{\"user_id\": ")
            .send()
            .await
            .expect("post");
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);

        assert_eq!(redis.counter(product).await.expect("counter"), Some(10));
        assert!(redis.charged(product).await.expect("records").is_empty());
        let view = app.drained(product).await;
        assert_eq!((view.stock, view.orders), (10, 0), "{strategy}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_product_kept_in_the_row_is_not_sold_by_the_redis_strategies_and_vice_versa() {
    let database_url = fresh_database_url().await;
    let config = config_with(&database_url, shared_redis().await);
    let redis = redis_of(&config);
    let app = spawn_app(config).await;
    app.reset_in(1, 10, Home::Redis).await;
    app.reset_in(1, 10, Home::Row).await;
    assert_eq!(redis.counter(1).await.expect("counter"), None);
    for strategy in STRATEGIES {
        let (status, answer) = app.order(1, &order_body(strategy, strategy), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{strategy}: {answer}");
        assert_eq!(answer["error"], "strategy_not_offered");
    }
    app.reset_in(1, 10, Home::Redis).await;
    let (status, answer) = app.order(1, &order_body("row", "conditional"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    let view = app.drained(1).await;
    assert_eq!((view.home, view.stock, view.orders), (Home::Redis, 10, 0));
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_redis_answers_backend_unavailable_and_writes_no_order() {
    sandbox::require_faults!();
    let private = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .expect("join")
        .expect("private Redis");
    let database_url = fresh_database_url().await;
    let app = spawn_app(config_with(&database_url, private.url())).await;
    app.reset_in(1, 10, Home::Redis).await;
    private.server().kill().expect("kill");
    for strategy in STRATEGIES {
        let (status, answer) = app.order(1, &order_body(strategy, strategy), None).await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{strategy}: {answer}"
        );
        assert_eq!(answer["error"], "backend_unavailable");
    }
    let truth = ledger(&database_url, 1).await;
    assert_eq!((truth.orders, truth.sold), (0, 0));
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lua_gives_the_units_back_when_the_order_cannot_be_written() {
    sandbox::require_faults!();
    let db = tokio::task::spawn_blocking(sandbox::MariaDb::start)
        .await
        .expect("join")
        .expect("private MariaDB");
    let database_url = with_fresh_database(&db.url());
    let mut config = config_with(&database_url, shared_redis().await);
    config.db_acquire_timeout_ms = 500;
    let redis = redis_of(&config);
    let app = spawn_app(config).await;
    app.reset_in(1, 10, Home::Redis).await;
    let (status, _) = app.order(1, &order_body("before", "redis-lua"), None).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(redis.counter(1).await.expect("counter"), Some(9));

    // The database dies while the purchase sits between its deduction and its insert.
    let request = app.purchase(1, &order_body("during", "redis-lua"));
    let buying = tokio::spawn(async move {
        let r = request
            .header("x-seckill-hold-ms", "1500")
            .send()
            .await
            .expect("post");
        (r.status(), r.json::<Value>().await.unwrap_or(Value::Null))
    });
    // Wait until the purchase took its unit: it now sits in its pause.
    common::wait_until("the held purchase's deduction", || async {
        redis.counter(1).await.expect("counter") == Some(8)
    })
    .await;
    let server = std::sync::Arc::new(db);
    let killer = server.clone();
    tokio::task::spawn_blocking(move || killer.server().kill())
        .await
        .expect("join")
        .expect("kill");
    let (status, answer) = buying.await.expect("buyer");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer["error"], "backend_unavailable");
    assert_eq!(
        redis.counter(1).await.expect("counter"),
        Some(9),
        "the unit was not given back"
    );
    assert!(
        !redis
            .charged(1)
            .await
            .expect("records")
            .contains_key("during")
    );

    let starter = server.clone();
    tokio::task::spawn_blocking(move || starter.server().start_again())
        .await
        .expect("join")
        .expect("restart");
    let truth = ledger(&database_url, 1).await;
    assert_eq!((truth.orders, truth.sold), (1, 1));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_consumer_s_round_waits_for_entries_and_ends_with_none_rather_than_failing() {
    // Its read blocks for entries; the Redis client gives up on an answer after its own
    // response timeout, so a block as long makes every idle round a failure (and a warning).
    let database_url = fresh_database_url().await;
    let config = config_with(&database_url, shared_redis().await);
    let pool = db::connect(&config).await.expect("database");
    let redis = redis_of(&config);
    redis.ensure_group(0).await.expect("group");
    let mut consumer = Consumer::new(redis, pool, 100, Duration::from_secs(30));
    for round in 0..3 {
        assert_eq!(
            consumer.round().await.expect("an idle round"),
            0,
            "round {round}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn entries_of_a_consumer_that_died_before_acknowledging_are_claimed_and_placed_exactly_once()
{
    const ENTRIES: usize = 30;
    let database_url = fresh_database_url().await;
    let config = config_with(&database_url, shared_redis().await);
    let pool = db::connect(&config).await.expect("database");
    let redis = redis_of(&config);
    redis.ensure_group(0).await.expect("group");
    let keys = redis.keys().clone();
    let mut accepted = Vec::new();
    for i in 0..ENTRIES {
        let request_id = format!("accepted-{i}");
        redis
            .query::<String>(
                redis::cmd("XADD")
                    .arg(keys.stream(0))
                    .arg("*")
                    .arg("request_id")
                    .arg(&request_id)
                    .arg("quantity")
                    .arg(1)
                    .arg("product_id")
                    .arg(7)
                    .arg("user_id")
                    .arg(format!("u-{i}"))
                    .arg("strategy")
                    .arg("redis-lua-stream"),
            )
            .await
            .expect("xadd");
        let field = app::redis_stock::charge::pending_field(app::db::orders::PurchaseKey {
            product_id: 7,
            user_id: &format!("u-{i}"),
            request_id: &request_id,
        });
        redis
            .query::<()>(redis::cmd("HSET").arg(keys.pending(0)).arg(field).arg(7))
            .await
            .expect("hset");
        accepted.push(request_id);
    }

    let claim_idle = Duration::from_millis(300);
    let dying = Consumer::new(redis.clone(), pool.clone(), 100, claim_idle);
    let read = dying.read(None).await.expect("read");
    assert_eq!(read.len(), ENTRIES);
    // It placed some of them and died before acknowledging anything: a commit without its
    // acknowledgement, the case that tempts a second insert.
    let placed_by_dead = read[..10].to_vec();
    drop(dying);
    sqlx::query(
        "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id) \
         VALUES (?, ?, ?, ?, ?)",
    )
    .bind(placed_by_dead[0].product_id)
    .bind(&placed_by_dead[0].user_id)
    .bind(placed_by_dead[0].quantity)
    .bind(&placed_by_dead[0].strategy)
    .bind(&placed_by_dead[0].request_id)
    .execute(match &pool {
        app::db::Engines::MySql(pool) => pool,
        app::db::Engines::Postgres(_) => unreachable!("the test's database is MariaDB"),
    })
    .await
    .expect("the dead consumer's commit");

    let live = Consumer::new(redis.clone(), pool.clone(), 100, claim_idle);
    assert!(
        live.claim().await.expect("claim").is_empty(),
        "claimed before the entries were idle for the claim time"
    );
    assert!(
        live.read(None).await.expect("read").is_empty(),
        "delivered twice"
    );
    tokio::time::sleep(claim_idle + Duration::from_millis(100)).await;
    let claimed = live.claim().await.expect("claim");
    assert_eq!(claimed.len(), ENTRIES);
    assert_eq!(live.place(&claimed).await.expect("place"), ENTRIES);

    let rows = rows_per_request_id(&config.database_url).await;
    for request_id in &accepted {
        assert_eq!(rows.get(request_id), Some(&1), "{request_id}");
    }
    assert_eq!(rows.len(), ENTRIES);
    assert_eq!(redis.stream_len().await.expect("xlen"), 0);
    let first = app::db::orders::PurchaseKey {
        product_id: 7,
        user_id: "u-0",
        request_id: "accepted-0",
    };
    assert!(!redis.is_waiting(first).await.expect("hexists"));
    pool.close().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_puts_units_taken_without_an_order_back_on_sale() {
    let database_url = fresh_database_url().await;
    let mut config = config_with(&database_url, shared_redis().await);
    // Any charge without an order is presumed lost at once (none is in flight here).
    config.reconcile_grace_ms = 1;
    let redis = redis_of(&config);
    let app = spawn_app(config.clone()).await;
    app.reset_in(1, 10, Home::Redis).await;
    let (status, _) = app.order(1, &order_body("sold", "redis-lua"), None).await;
    assert_eq!(status, StatusCode::CREATED);

    // Three purchases stopped between the Lua deduction and the insert, as a killed process
    // would: the futures are dropped while they hold.
    let (_router, state) = app::build(&config).await.expect("a second instance");
    let strategy = state.registry.get(Strategy::RedisLua).clone();
    for i in 0..3 {
        let purchase = Purchase {
            product_id: 1,
            user_id: format!("crashed-{i}"),
            quantity: 1,
            request_id: format!("crashed-{i}"),
            strategy: Strategy::RedisLua,
            per_user_limit: app::api::MAX_STOCK,
            pay_within: std::time::Duration::from_millis(
                app::api::DEFAULT_PAYMENT_WINDOW_MS as u64,
            ),
            redis_epoch: 0,
            redis_parts: 0,
            hold: Some(Duration::from_secs(30)),
            stats: PurchaseStats::default(),
        };
        let cut = tokio::time::timeout(Duration::from_millis(200), strategy.purchase(&purchase));
        assert!(cut.await.is_err(), "the purchase was not held");
    }
    drop(state);
    assert_eq!(redis.counter(1).await.expect("counter"), Some(6));
    let view = app.drained(1).await;
    let ledger = app::accounting::Ledger::of(view);
    let accounting = app::accounting::Accounting::of(ledger, 100);
    assert_eq!((accounting.undersell, accounting.oversell), (6 + 3, 0));

    let reconciled = app.reconcile(1).await;
    assert_eq!(
        reconciled,
        Reconciliation {
            product_id: 1,
            initial_stock: 10,
            ordered: 1,
            pending: 0,
            counter_found: Some(6),
            counter_after: 9,
            rebuilt: false,
            repaired: true,
            released_requests: 3,
            in_flight: 0,
        }
    );
    // Nothing left to repair.
    let again = app.reconcile(1).await;
    assert!(!again.repaired && again.released_requests == 0, "{again:?}");

    // A crashed click was fenced out: its retry is told so and buys nothing (it could be the
    // stalled original itself); the same buyer with a new request id buys, and the lost units
    // are on sale again.
    let retry = json!({ "user_id": "crashed-0", "quantity": 1, "request_id": "crashed-0", "strategy": "redis-lua" });
    let (status, answer) = app.order(1, &retry, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["error"], "purchase_voided", "{answer}");
    let anew = json!({ "user_id": "crashed-0", "quantity": 1, "request_id": "crashed-0-again", "strategy": "redis-lua" });
    let (status, answer) = app.order(1, &anew, None).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(redis.counter(1).await.expect("counter"), Some(8));
    let crowd = Crowd {
        buyers: 20,
        hold_ms: None,
        busy_retries: 50,
    };
    let tally = flash_sale(&[&app], 1, "redis-lua", crowd).await;
    assert_eq!((tally.created, tally.sold_out), (8, 12), "{tally:?}");
    let view = app.drained(1).await;
    assert_eq!((view.stock, view.sold), (0, 10));
    let rows = rows_per_request_id(&database_url).await;
    assert!(rows.values().all(|&n| n == 1));
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_accepted_order_is_pending_until_a_consumer_places_it() {
    let database_url = fresh_database_url().await;
    let config = config_with(&database_url, shared_redis().await);
    let app = spawn_app(config).await;
    app.reset_in(1, 10, Home::Redis).await;
    let r = app
        .purchase(1, &order_body("click/1", "redis-lua-stream"))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let location = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(String::from)
        .expect("Location");
    assert_eq!(
        location,
        "/api/products/1/orders/click%2F1?user_id=u-click%2F1"
    );
    // Pending until a consumer places it, then placed: nothing else, and no going back.
    let mut seen = Vec::new();
    let started = std::time::Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "never placed: {seen:?}"
        );
        let status: Value = app
            .as_buyer(
                app.client.get(format!("{}{location}", app.url)),
                "u-click/1",
            )
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        let state = status["state"].as_str().unwrap_or_default().to_string();
        assert!(state == "pending" || state == "placed", "{status}");
        if seen.last() != Some(&state) {
            seen.push(state.clone());
        }
        if state == "placed" {
            assert_eq!(status["order"]["request_id"], "click/1");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen == ["placed"] || seen == ["pending", "placed"],
        "{seen:?}"
    );
    let unknown = app.client.get(format!(
        "{}/api/products/1/orders/never?user_id=u-1",
        app.url
    ));
    let unknown = app.as_buyer(unknown, "u-1").send().await.expect("get");
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    // Another buyer is not shown the order.
    let stranger = app.client.get(format!(
        "{}/api/products/1/orders/click%2F1?user_id=u-2",
        app.url
    ));
    let stranger = app.as_buyer(stranger, "u-2").send().await.expect("get");
    assert_eq!(stranger.status(), StatusCode::NOT_FOUND);
    // The consumer reports its lag after each round; wait for its first report.
    common::wait_until("the consumer's first lag report", || async {
        app.client
            .get(format!("{}/metrics", app.url))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
            .contains("seckill_stream_lag_entries")
    })
    .await;
    app.stop().await;
    drop_database(&database_url).await;
}

/// Reading a product costs Redis the same however many orders wait in the stream: the waiting
/// units are a counter the scripts keep, not a scan. (Summed from `XRANGE - +`, a backlog of
/// 100,000 accepted orders took longer than the reply timeout to read, and
/// `GET /api/products/{id}/accounting` answered 503 while the consumers caught up.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_product_read_does_not_scan_the_stream() {
    let private = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .expect("join")
        .expect("private Redis");
    let database_url = fresh_database_url().await;
    let app = spawn_app(config_with(&database_url, private.url())).await;
    app.reset_in(1, 10, Home::Redis).await;
    for i in 0..3 {
        let (status, answer) = app
            .order(
                1,
                &order_body(&format!("scan-{i}"), "redis-lua-stream"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    }
    let mut conn = redis::Client::open(private.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(&mut conn)
        .await
        .expect("resetstat");
    let view = product(&app, 1).await;
    let (stock, pending) = (view["stock"].as_i64(), view["pending"].as_i64());
    assert_eq!(stock, Some(7), "{view}");
    assert!(pending.is_some_and(|p| (0..=3).contains(&p)), "{view}");
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("info");
    assert!(!stats.contains("cmdstat_xrange"), "{stats}");
    app.stop().await;
    drop_database(&database_url).await;
}

/// A product read counts the units of orders accepted and not yet placed, and stops counting
/// them once the consumers placed them: the waiting count the scripts keep follows the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_product_read_counts_accepted_orders_as_pending_until_they_are_placed() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(config_with(&database_url, shared_redis().await)).await;
    app.reset_in(1, 10, Home::Redis).await;
    let blocker = hold_orders_of(&database_url, 1).await;
    for i in 0..3 {
        let mut body = order_body(&format!("wait-{i}"), "redis-lua-stream");
        body["quantity"] = json!(i + 1);
        let (status, answer) = app.order(1, &body, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    }
    let view = product(&app, 1).await;
    assert_eq!(
        (view["stock"].as_i64(), view["pending"].as_i64()),
        (Some(4), Some(6)),
        "{view}"
    );
    release(blocker).await;
    let mut pending = None;
    for _ in 0..200 {
        let view = product(&app, 1).await;
        pending = view["pending"].as_i64();
        if pending == Some(0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(pending, Some(0));
    assert_eq!(ledger(&database_url, 1).await.sold, 6);
    app.stop().await;
    drop_database(&database_url).await;
}

/// The stream is bounded: once it holds `--stream-max-lag` orders not yet placed, a purchase
/// is refused `503 overloaded` and takes no unit, a retry of an accepted purchase is still answered
/// as the accepted one, and once the consumers have placed the backlog the refused buyer can
/// buy. (Unbounded, the consumers fall behind a crowd and its `202`s promise orders that reach
/// the database after their payment deadline.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_stream_refuses_purchases_overloaded_and_takes_nothing_until_it_drains() {
    let database_url = fresh_database_url().await;
    let mut config = config_with(&database_url, shared_redis().await);
    config.stream_max_lag = 3;
    // Every purchase runs the script: what the stream answers, not the door's memory of it.
    config.full_queue_memory_ms = 0;
    let app = spawn_app(config).await;
    app.reset_in(1, 10, Home::Redis).await;
    let buy = |request: &str| order_body(request, "redis-lua-stream");
    let blocker = hold_orders_of(&database_url, 1).await;
    for i in 0..3 {
        let (status, answer) = app.order(1, &buy(&format!("full-{i}")), None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    }
    let (status, answer) = app.order(1, &buy("full-3"), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer["error"], "overloaded", "{answer}");
    let (status, answer) = app.order(1, &buy("full-0"), None).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "a retry of an accepted purchase: {answer}"
    );
    let view = product(&app, 1).await;
    assert_eq!(
        (view["stock"].as_i64(), view["pending"].as_i64()),
        (Some(7), Some(3)),
        "the refused purchase took nothing: {view}"
    );
    release(blocker).await;
    common::wait_until("the backlog placed", || async {
        product(&app, 1).await["pending"].as_i64() == Some(0)
    })
    .await;
    let (status, answer) = app.order(1, &buy("full-3"), None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "once drained: {answer}");
    common::wait_until("the last order placed", || async {
        product(&app, 1).await["pending"].as_i64() == Some(0)
    })
    .await;
    let ledger = ledger(&database_url, 1).await;
    assert_eq!(ledger.sold, 4);
    let rows = rows_per_request_id(&database_url).await;
    assert!(
        rows.len() == 4 && rows.values().all(|&n| n == 1),
        "{rows:?}"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

/// Once a purchase found the stream full, the instance believes it full for a moment and
/// refuses the next purchases at the door: `503 overloaded` before any of them reaches the
/// strategy, a retry of an accepted click included (it is told to come back, and gets its
/// order then), and nothing taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_found_full_refuses_the_next_purchases_at_the_door_without_running_them() {
    let database_url = fresh_database_url().await;
    let mut config = config_with(&database_url, shared_redis().await);
    config.stream_max_lag = 1;
    config.full_queue_memory_ms = 3_600_000;
    let app = spawn_app(config).await;
    app.reset_in(1, 10, Home::Redis).await;
    let buy = |request: &str| order_body(request, "redis-lua-stream");
    let blocker = hold_orders_of(&database_url, 1).await;
    let (status, answer) = app.order(1, &buy("door-0"), None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let (status, answer) = app.order(1, &buy("door-1"), None).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("overloaded")),
        "the script found the stream full: {answer}"
    );
    let started = app.purchases_started().await;
    for request in ["door-2", "door-1", "door-0"] {
        let (status, answer) = app.order(1, &buy(request), None).await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("overloaded")),
            "{request}: {answer}"
        );
    }
    assert_eq!(
        app.purchases_started().await,
        started,
        "no refusal reached the strategy"
    );
    let view = product(&app, 1).await;
    assert_eq!(
        (view["stock"].as_i64(), view["pending"].as_i64()),
        (Some(9), Some(1)),
        "the refused took nothing: {view}"
    );
    release(blocker).await;
    app.stop().await;
    drop_database(&database_url).await;
}

/// While the consumers drain a backlog, every product read accounts for every unit: the
/// counter, the units waiting in the stream and the units in orders add up to at least the
/// stock (an order placed between the read's two halves may be counted twice, never zero
/// times). A read that took the orders first and the waiting count after would miss an order
/// placed in between — and a caller waiting for `pending == 0` would stop at a short count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_product_read_during_a_drain_never_loses_units_between_orders_and_stream() {
    const STOCK: i64 = 300;
    let database_url = fresh_database_url().await;
    let mut config = config_with(&database_url, shared_redis().await);
    // One order per transaction: many placements, each a chance to fall inside a read.
    config.stream_batch = 1;
    let app = spawn_app(config).await;
    app.reset_in(1, STOCK, Home::Redis).await;
    let blocker = hold_orders_of(&database_url, 1).await;
    for i in 0..STOCK {
        let body = order_body(&format!("drain-{i}"), "redis-lua-stream");
        let (status, answer) = app.order(1, &body, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    }
    release(blocker).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut reads = 0;
    loop {
        let view = product(&app, 1).await;
        let units = |field: &str| view[field].as_i64().expect(field);
        reads += 1;
        assert!(
            units("stock") + units("pending") + units("sold") >= STOCK,
            "read {reads} lost units between the orders and the stream: {view}"
        );
        if units("pending") == 0 {
            assert_eq!(units("sold"), STOCK, "{view}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no drain: {view}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}

/// An instance with several stream consumers places several batches at once: while the
/// orders' inserts wait behind a lock, each consumer holds the batch it read, so as many
/// entries as consumers are delivered and unacknowledged at the same moment. With one
/// consumer only one batch is ever in the database's hands, and the orders reach it no faster
/// than one commit at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_with_three_stream_consumers_places_three_batches_at_once() {
    const CONSUMERS: u32 = 3;
    let database_url = fresh_database_url().await;
    let mut config = config_with(&database_url, shared_redis().await);
    config.stream_batch = 1;
    config.stream_consumers = CONSUMERS;
    let redis = redis_of(&config);
    let app = spawn_app(config).await;
    app.reset_in(1, 100, Home::Redis).await;
    let blocker = hold_orders_of(&database_url, 1).await;
    for i in 0..10 {
        let body = order_body(&format!("together-{i}"), "redis-lua-stream");
        let (status, answer) = app.order(1, &body, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    }
    // Entries delivered to a consumer and not yet acknowledged, and how many each one holds.
    let mut xpending = redis::cmd("XPENDING");
    xpending
        .arg(redis.keys().stream(redis.keys().lane(1)))
        .arg(app::redis_stock::GROUP);
    let pending = || async {
        redis
            .query::<StreamPendingReply>(&xpending)
            .await
            .expect("XPENDING")
    };
    // With one consumer the count stays at one: only the helper's cap ends the wait.
    common::wait_until("a batch read by each consumer", || async {
        pending().await.count() >= CONSUMERS as usize
    })
    .await;
    let StreamPendingReply::Data(data) = pending().await else {
        panic!("nothing pending");
    };
    let holders: Vec<(String, usize)> = data
        .consumers
        .into_iter()
        .map(|c| (c.name, c.pending))
        .collect();
    assert_eq!(
        holders.len(),
        CONSUMERS as usize,
        "each consumer holds a batch in the database's hands: {holders:?}"
    );
    release(blocker).await;
    app.stop().await;
    drop_database(&database_url).await;
}

/// Holds a gap lock on `product`'s orders in an open transaction: the consumers' inserts wait
/// behind it, so accepted orders stay in the stream, while plain reads of the orders go on.
async fn hold_orders_of(database_url: &str, product: u64) -> sqlx::MySqlConnection {
    let mut blocker = common::open_transaction(database_url).await;
    sqlx::query("SELECT id FROM orders WHERE product_id = ? FOR UPDATE")
        .bind(product)
        .execute(&mut blocker)
        .await
        .expect("lock");
    blocker
}

/// Ends [`hold_orders_of`]'s transaction: the consumers' inserts go through.
async fn release(mut blocker: sqlx::MySqlConnection) {
    sqlx::query("ROLLBACK")
        .execute(&mut blocker)
        .await
        .expect("unlock");
}

async fn product(app: &TestApp, id: u64) -> Value {
    app.client
        .get(format!("{}/api/products/{id}/accounting", app.url))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json")
}

/// A give-back is for one charge. Sent again after its answer was lost, or arriving late from
/// a connection given up on, it must not give back a later charge of the same purchase (the
/// buyer's retry of the same request id, charged after the first give-back): that would leave
/// an order whose units are back on sale — phantom stock that sells twice.
#[tokio::test]
async fn a_late_give_back_never_gives_back_a_later_charge_of_the_same_purchase() {
    let database_url = fresh_database_url().await;
    let config = config_with(&database_url, shared_redis().await);
    let redis = redis_of(&config);
    let rules = app::api::SaleRules {
        per_user_limit: 5,
        ..Default::default()
    };
    redis.seed(1, 1, 10, &rules).await.expect("seed");
    let field = charge::field("alice", "r-1");
    let take = |redis: &RedisStock, attempt: Attempt| {
        let keys = redis.keys();
        let mut script = app::redis_stock::scripts::TAKE.prepare_invoke();
        script
            .key(keys.stock(1))
            .key(keys.requests(1))
            .key(keys.buyers(1))
            .key(keys.limit(1))
            .key(keys.epoch(1))
            .key(keys.charges(1))
            .arg(&field)
            .arg(1)
            .arg(charge::terms(1, "redis-lua"))
            .arg(attempt.name())
            .arg(1);
        script
    };
    let (first, retry) = (Attempt::new(), Attempt::new());
    let (left, _) = redis
        .take(&redis.keys().stock(1), &take(&redis, first))
        .await
        .expect("first charge");
    assert_eq!(left, 9);
    let name = first.name();
    let give_back = redis.give_back(1, &field, Some(&name), charge::Afterwards::Open);
    let given: i64 = redis.invoke(&give_back).await.expect("give back");
    assert_eq!(given, 1);
    // The buyer's retry charges the purchase again.
    let (left, _) = redis
        .take(&redis.keys().stock(1), &take(&redis, retry))
        .await
        .expect("second charge");
    assert_eq!(left, 9);
    // The first give-back once more (re-sent, or late).
    let again: i64 = redis.invoke(&give_back).await.expect("give back again");
    assert_eq!(again, 0, "the late give-back gave back the retry's charge");
    // The first attempt settling late finds the retry's charge, not its own.
    let settled = redis.settle(1, &field, first).await.expect("settle");
    assert_eq!(settled, Settled::Other);
    assert_eq!(redis.counter(1).await.expect("counter"), Some(9));
    drop_database(&database_url).await;
}
