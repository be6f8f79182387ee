//! The expiry sweep of every instance: orders past their deadline expire once however many
//! instances sweep them, and an instance that dies half-way through an expiry loses nothing —
//! another instance's sweep finishes what it started.

use crate::common;

use std::process::{Child, Command, Stdio};

use common::life::{buy, expire, product, wait_until_all_due};
use common::{drop_database, fresh_database_url, spawn_app, test_config, wait_until};
use deadpool_redis::redis;
use futures::StreamExt;
use serde_json::{Value, json};
use sqlx::{Connection, MySqlConnection};

/// Two instances sweeping every 10 ms on the database `database_url` names (either engine);
/// 30 orders of one product expire under them: each once.
pub(crate) async fn two_sweeps_expire_each_order_once(
    database_url: &str,
    home: &str,
    strategy: &str,
) {
    const ORDERS: i64 = 30;
    let mut config = test_config(database_url);
    config.expiry_interval_ms = 10;
    config.expiry_batch = 7;
    if home == "redis" {
        common::with_every_service(&mut config).await;
    }
    let apps = [spawn_app(config.clone()).await, spawn_app(config).await];
    let body =
        json!({ "stock": ORDERS, "home": home, "per_user_limit": 1, "payment_window_ms": 1 });
    apps[0].reset_with(11, &body).await;
    for b in 0..ORDERS {
        let (status, order) = buy(&apps[b as usize % 2], 11, &format!("u{b}"), "r", strategy).await;
        assert_eq!(status, 201, "{home}: {order}");
    }
    let app = &apps[0];
    wait_until("every order expired and its unit home", || async {
        let view = product(app, 11).await;
        view["expired"] == ORDERS && view["returning"] == 0
    })
    .await;
    let view = product(app, 11).await;
    assert_eq!(
        (
            view["stock"].as_i64(),
            view["sold"].as_i64(),
            view["stranded"].as_i64()
        ),
        (Some(ORDERS), Some(0), Some(0)),
        "{home}: every unit back once: {view}"
    );
    let mut expired = 0;
    for app in &apps {
        expired += app
            .metric("seckill_orders_expired_total")
            .await
            .unwrap_or(0);
    }
    assert_eq!(
        expired, ORDERS as u64,
        "{home}: expired by exactly one sweep each"
    );
    for app in apps {
        app.stop().await;
    }
    drop_database(database_url).await;
}

#[tokio::test]
async fn two_instances_sweeping_the_same_overdue_row_orders_expire_each_once() {
    two_sweeps_expire_each_order_once(&fresh_database_url().await, "row", "conditional").await;
}

#[tokio::test]
async fn two_instances_sweeping_the_same_overdue_redis_orders_expire_each_once() {
    two_sweeps_expire_each_order_once(&fresh_database_url().await, "redis", "redis-lua").await;
}

#[tokio::test]
async fn two_instances_sweeping_the_same_overdue_bucketed_orders_expire_each_once() {
    two_sweeps_expire_each_order_once(&fresh_database_url().await, "buckets", "sharded").await;
}

/// `PUT /api/expiry` on `app`; the status and body.
async fn switch(app: &common::TestApp, paused: bool) -> (reqwest::StatusCode, Value) {
    let r = app
        .client
        .put(format!("{}/api/expiry", app.url))
        .json(&json!({ "paused": paused }))
        .send()
        .await
        .expect("sweep switch");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// While its sweep is paused, an instance expires none of the orders past their deadline, and
/// their payment is still refused; resumed, its sweep expires every one and gives the units back.
#[tokio::test]
async fn a_paused_sweep_expires_nothing_and_a_resumed_one_expires_every_due_order() {
    const ORDERS: i64 = 5;
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.expiry_interval_ms = 5;
    let app = spawn_app(config).await;
    assert_eq!(
        switch(&app, true).await,
        (
            reqwest::StatusCode::OK,
            json!({ "paused": true, "sweeping": false })
        )
    );
    let body = json!({ "stock": ORDERS, "per_user_limit": 1, "payment_window_ms": 1 });
    app.reset_with(12, &body).await;
    for b in 0..ORDERS {
        let (status, order) = buy(&app, 12, &format!("u{b}"), "r", "conditional").await;
        assert_eq!(status, 201, "{order}");
    }
    wait_until_all_due(&database_url).await;
    // Many intervals of a sweep that would run: a loaded machine only makes this check weaker.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let view = product(&app, 12).await;
    assert_eq!(
        (view["reserved"].as_i64(), view["expired"].as_i64()),
        (Some(ORDERS), Some(0)),
        "a paused sweep expired orders: {view}"
    );
    let (status, paid) = common::life::act(&app, 12, "u0", "r", "pay", &[]).await;
    assert_eq!(
        (status.as_u16(), &paid["error"]),
        (409, &json!("order_expired")),
        "{paid}"
    );
    assert_eq!(
        switch(&app, false).await,
        (
            reqwest::StatusCode::OK,
            json!({ "paused": false, "sweeping": true })
        )
    );
    wait_until("every due order expired and its unit home", || async {
        let view = product(&app, 12).await;
        view["expired"] == ORDERS && view["stock"] == ORDERS
    })
    .await;
    app.stop().await;
    drop_database(&database_url).await;
}

/// The state of the one order of `product`, read from the database.
async fn state_of(pool: &sqlx::MySqlPool, product: u64) -> String {
    sqlx::query_scalar("SELECT state FROM orders WHERE product_id = ?")
        .bind(product)
        .fetch_one(pool)
        .await
        .expect("the order's state")
}

/// Redis paused: the sweep expires a row-held order past its deadline and puts its unit back
/// in the row, while the return of a Redis-held one (the product swept first) waits for Redis;
/// once Redis answers again, that one is finished too, its unit back in the counter once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_redis_holds_up_the_expiry_of_redis_held_orders_only() {
    sandbox::require_faults!();
    let private = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .expect("join")
        .expect("private Redis");
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.redis_url = Some(private.url());
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    config.expiry_interval_ms = 10;
    // Every round takes up the Redis-held return left half-way, as soon as it is left.
    config.return_grace_ms = 1;
    let redis = app::redis_stock::RedisStock::open(&private.url(), &config.lock_prefix, 2)
        .expect("redis pool");
    let app = spawn_app(config).await;
    switch(&app, true).await;
    for (product, home, strategy) in [(1, "redis", "redis-lua"), (2, "row", "conditional")] {
        let body = json!({ "stock": 2, "home": home, "per_user_limit": 1, "payment_window_ms": 1 });
        app.reset_with(product, &body).await;
        let (status, order) = buy(&app, product, "alice", "r", strategy).await;
        assert_eq!(status, 201, "{home}: {order}");
    }
    wait_until_all_due(&database_url).await;
    let pool = sqlx::MySqlPool::connect(&database_url)
        .await
        .expect("connect");

    private.server().pause().expect("pause Redis");
    switch(&app, false).await;
    wait_until(
        "the row-held order expired and its unit back in the row",
        || {
            let pool = pool.clone();
            async move {
                let stock: i64 = sqlx::query_scalar("SELECT stock FROM products WHERE id = 2")
                    .fetch_one(&pool)
                    .await
                    .expect("stock");
                state_of(&pool, 2).await == "expired" && stock == 2
            }
        },
    )
    .await;
    wait_until("the Redis-held batch's failure counted", || async {
        app.metric("seckill_expiry_failures_total")
            .await
            .is_some_and(|n| n > 0)
    })
    .await;
    let waiting = state_of(&pool, 1).await;
    assert!(
        waiting == "reserved" || waiting == "expiring",
        "a Redis-held order expired without Redis: {waiting}"
    );

    private.server().resume().expect("resume Redis");
    wait_until("the Redis-held order expired", || {
        let pool = pool.clone();
        async move { state_of(&pool, 1).await == "expired" }
    })
    .await;
    assert_eq!(redis.counter(1).await.expect("counter"), Some(2));
    let records = redis.charged(1).await.expect("records");
    assert!(
        records.values().all(|r| r.ends_with(":ended")),
        "the expired purchase's charge is its ended mark: {records:?}"
    );
    let stock: i64 = sqlx::query_scalar("SELECT stock FROM products WHERE id = 2")
        .fetch_one(&pool)
        .await
        .expect("stock");
    assert_eq!(stock, 2, "the row's unit came back once");
    pool.close().await;
    app.stop().await;
    drop_database(&database_url).await;
}

/// One round of the sweep over a Redis-held product whose orders fell due, some paid and some
/// cancelled before: the due ones expire, each of their units comes back once and no other
/// order's does, and the return is announced to the other instances once for the whole batch
/// (one give-back script for the batch, not one per order).
#[tokio::test]
async fn a_sweep_round_returns_a_batch_of_redis_held_units_once_each_and_announces_them_once() {
    const ORDERS: usize = 20;
    const PAID: usize = 5;
    const CANCELLED: usize = 3;
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.expiry_interval_ms = 0;
    common::with_every_service(&mut config).await;
    let channel = format!("{}products:restocked", config.lock_prefix);
    let redis = redis::Client::open(config.redis_url.clone().expect("redis")).expect("client");
    let app = spawn_app(config).await;
    // Long enough to pay and cancel before the deadline on a loaded machine.
    let body = json!({ "stock": ORDERS, "home": "redis", "per_user_limit": 1, "payment_window_ms": 3_000 });
    app.reset_with(3, &body).await;
    for b in 0..ORDERS {
        let (status, order) = buy(&app, 3, &format!("u{b}"), "r", "redis-lua").await;
        assert_eq!(status, 201, "{order}");
    }
    for b in 0..PAID + CANCELLED {
        let action = if b < PAID { "pay" } else { "cancel" };
        let (status, order) = common::life::act(&app, 3, &format!("u{b}"), "r", action, &[]).await;
        assert_eq!(status, 200, "{action}: {order}");
    }
    wait_until_all_due(&database_url).await;
    let mut announced = redis.get_async_pubsub().await.expect("pubsub");
    announced.subscribe(&channel).await.expect("subscribe");

    let (status, round) = expire(&app, 3, &[]).await;
    assert_eq!(status, 200, "{round}");
    let due = (ORDERS - PAID - CANCELLED) as u64;
    assert_eq!(
        (round["expired"].as_u64(), round["lost_races"].as_u64()),
        (Some(due), Some(0)),
        "{round}"
    );
    // Published after the round's answer, so delivered after every announcement it made.
    let mut conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    redis::cmd("PUBLISH")
        .arg(&channel)
        .arg("end")
        .query_async::<()>(&mut conn)
        .await
        .expect("publish");
    let mut messages = announced.on_message();
    let mut announcements = 0;
    while let Some(message) = messages.next().await {
        if message.get_payload::<String>().expect("payload") == "end" {
            break;
        }
        announcements += 1;
    }
    assert_eq!(announcements, 1, "one announcement for the batch");
    let view = product(&app, 3).await;
    assert_eq!(
        (
            view["stock"].as_u64(),
            view["paid"].as_u64(),
            view["expired"].as_u64(),
            view["cancelled"].as_u64(),
            view["returning"].as_u64(),
            view["stranded"].as_u64()
        ),
        (
            Some((ORDERS - PAID) as u64),
            Some(PAID as u64),
            Some(due),
            Some(CANCELLED as u64),
            Some(0),
            Some(0)
        ),
        "every due order's unit back once, the paid ones kept: {view}"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

/// While a batch of a row-held product's expiries is in its transaction, the product's other
/// buyers and orders stay free: a buyer outside the batch claims more units, a new buyer a
/// count of their own, a new order is placed and another order's payment goes through, without
/// waiting for it. Only the hot row and the batch's own buyers and orders are the batch's to
/// lock.
#[tokio::test]
async fn a_batch_of_row_held_expiries_locks_nothing_but_its_own_buyers_and_orders() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.expiry_interval_ms = 0;
    let app = spawn_app(config).await;
    let body = json!({ "stock": 300, "per_user_limit": 5, "payment_window_ms": 1 });
    app.reset_with(9, &body).await;
    for b in 0..210 {
        let (status, order) = buy(&app, 9, &format!("u{b}"), "r", "conditional").await;
        assert_eq!(status, 201, "{order}");
    }
    wait_until_all_due(&database_url).await;
    let db = app::db::open(&database_url).await.expect("connect");
    let mut sweep = db.acquire().await.expect("a connection");
    let app::db::Engines::MySql(conn) = &mut sweep else {
        unreachable!("the test's database is MariaDB")
    };
    let orders: Vec<(u64, String)> =
        sqlx::query_as("SELECT id, user_id FROM orders WHERE product_id = 9")
            .fetch_all(&mut **conn)
            .await
            .expect("orders");
    let batch: Vec<(u64, &str)> = (orders.iter())
        .filter(|(_, u)| u != "u205" && u != "u209")
        .map(|(id, u)| (*id, u.as_str()))
        .collect();
    let other = orders
        .iter()
        .find(|(_, u)| u == "u205")
        .expect("u5's order")
        .0;
    let mut tx = app::db::order_life::begin_batch(&mut sweep)
        .await
        .expect("begin");
    let expired = app::db::order_life::expire(tx.conn(), 9, &batch, app::api::Home::Row)
        .await
        .expect("expire");
    assert_eq!(expired, 208);

    let mut buyer = MySqlConnection::connect(&database_url)
        .await
        .expect("connect");
    // Not a moment's wait: a count the batch locked fails at once instead.
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 0")
        .execute(&mut buyer)
        .await
        .expect("no lock wait");
    for (what, statement) in [
        (
            "a buyer outside the batch claims more",
            "INSERT INTO purchase_quota (product_id, user_id, units) VALUES (9, 'u209', 1) \
             ON DUPLICATE KEY UPDATE units = units + VALUES(units)",
        ),
        (
            "a new buyer claims a count",
            "INSERT INTO purchase_quota (product_id, user_id, units) VALUES (9, 'u999', 1) \
             ON DUPLICATE KEY UPDATE units = units + VALUES(units)",
        ),
        (
            "a new order is placed",
            "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, pay_by) \
             VALUES (9, 'u999', 1, 'conditional', 'r', NOW(6) + INTERVAL 1 HOUR)",
        ),
        (
            "another order's payment is decided",
            "UPDATE orders SET state = 'paid' \
             WHERE id = ? AND state = 'reserved' AND pay_by > NOW(6)",
        ),
    ] {
        let mut query = sqlx::query(statement);
        if statement.contains('?') {
            query = query.bind(other);
        }
        let done = query.execute(&mut buyer).await;
        assert!(done.is_ok(), "{what}: {done:?}");
    }
    tx.commit().await.expect("commit");
    let view = product(&app, 9).await;
    assert_eq!(
        (view["stock"].as_i64(), view["expired"].as_i64()),
        (Some(298), Some(208)),
        "{view}"
    );
    app.stop().await;
    drop_database(&database_url).await;
}

/// A `seckill-app` process on `database_url` (and Redis, if given) that does not sweep by
/// itself and honours fault injection; its base URL.
async fn spawn_process(database_url: &str, redis: Option<(&str, &str)>) -> (Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_seckill-app"));
    command
        .env_clear()
        .env("DATABASE_URL", database_url)
        .env("SECKILL_LISTEN", format!("127.0.0.1:{port}"))
        .env("SECKILL_EXPIRY_INTERVAL_MS", "0")
        .env("SECKILL_ALLOW_FAULT_INJECTION", "true")
        .env("SECKILL_BUYER_KEY", common::BUYER_KEY)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some((url, prefix)) = redis {
        command
            .env("REDIS_URL", url)
            .env("SECKILL_LOCK_PREFIX", prefix);
    }
    let child = command.spawn().expect("spawn seckill-app");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    wait_until("the process serves", || {
        let (client, url) = (client.clone(), format!("{base}/healthz"));
        async move {
            client
                .get(url)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        }
    })
    .await;
    (child, base)
}

/// Where an expiry stops half-way: after the order left `reserved` (the Redis counter's, and
/// the row's under an unfenced seller's lock: two steps), or inside the one transaction that
/// changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HalfWay {
    OnTheWay,
    InTheTransaction,
}

/// Instance A expires an order and is SIGKILLed before the units are home; instance B, started
/// after, finishes (or redoes) the expiry: the unit comes back once.
async fn a_killed_sweep_loses_nothing(home: &str, strategy: &str, half_way: HalfWay) {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.expiry_interval_ms = 20;
    config.return_grace_ms = 1;
    if home == "redis" {
        common::with_every_service(&mut config).await;
    }
    let redis = config.redis_url.clone();
    let prefix = config.lock_prefix.clone();
    let (mut a, a_url) = spawn_process(
        &database_url,
        redis.as_deref().map(|url| (url, prefix.as_str())),
    )
    .await;
    let client = reqwest::Client::new();
    let reset = client
        .put(format!("{a_url}/api/products/12"))
        .json(
            &json!({ "stock": 1, "home": home, "payment_window_ms": 1, "strategies": [strategy] }),
        )
        .send()
        .await
        .expect("reset");
    assert_eq!(reset.status(), 200);
    let order =
        json!({ "user_id": "alice", "quantity": 1, "request_id": "r", "strategy": strategy });
    let purchase = client
        .post(format!("{a_url}/api/products/12/orders"))
        .json(&order);
    let bought = common::Buyers::with_key(common::BUYER_KEY)
        .sign(purchase, "alice")
        .send()
        .await
        .expect("buy");
    assert_eq!(bought.status(), 201);
    wait_until_all_due(&database_url).await;

    // A's expiry stops half-way: after the order left `reserved`, or inside the transaction
    // that changes it.
    let stalled = tokio::spawn({
        let url = format!("{a_url}/api/products/12/expire");
        let client = client.clone();
        async move {
            client
                .post(url)
                .header("x-seckill-hold-ms", "60000")
                .send()
                .await
        }
    });
    let pool = sqlx::MySqlPool::connect(&database_url)
        .await
        .expect("connect");
    wait_until("A half-way through the expiry", || {
        let pool = pool.clone();
        async move {
            if half_way == HalfWay::OnTheWay {
                let n: i64 =
                    sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE state = 'expiring'")
                        .fetch_one(&pool)
                        .await
                        .expect("state");
                return n > 0;
            }
            // In the transaction: A's transaction has changed the order (the state change is its
            // last statement) and holds it, so the order's row is locked. A state read
            // without the lock must still see the order reserved: committed would mean the
            // hold was missed.
            let locked =
                sqlx::query_scalar::<_, String>("SELECT state FROM orders FOR UPDATE NOWAIT")
                    .fetch_all(&pool)
                    .await
                    .is_err();
            let state: String = sqlx::query_scalar("SELECT state FROM orders")
                .fetch_one(&pool)
                .await
                .expect("state");
            assert_eq!(
                state, "reserved",
                "the expiry committed before it was seen held"
            );
            locked
        }
    })
    .await;
    a.kill().expect("SIGKILL A");
    let _ = a.wait();
    stalled.abort();

    let b = spawn_app(config).await;
    wait_until("B's sweep brought the unit home", || async {
        let view: Value = product(&b, 12).await;
        view["expired"] == 1 && view["returning"] == 0
    })
    .await;
    let view = product(&b, 12).await;
    assert_eq!(
        (
            view["stock"].as_i64(),
            view["sold"].as_i64(),
            view["stranded"].as_i64()
        ),
        (Some(1), Some(0), Some(0)),
        "{home}: {view}"
    );
    // The unit sells again.
    let (status, _) = buy(&b, 12, "bob", "b", strategy).await;
    assert_eq!(status, 201);
    pool.close().await;
    b.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test]
async fn an_instance_killed_between_expiring_an_order_and_returning_its_unit_to_redis_loses_nothing()
 {
    a_killed_sweep_loses_nothing("redis", "redis-lua", HalfWay::OnTheWay).await;
}

#[tokio::test]
async fn an_instance_killed_inside_an_expiry_transaction_loses_nothing() {
    a_killed_sweep_loses_nothing("row", "conditional", HalfWay::InTheTransaction).await;
}

#[tokio::test]
async fn an_instance_killed_between_an_unfenced_sellers_two_return_steps_loses_nothing() {
    a_killed_sweep_loses_nothing("row", "db-lock", HalfWay::OnTheWay).await;
}
