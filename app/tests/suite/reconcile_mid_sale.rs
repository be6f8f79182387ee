//! `reconcile` is safe at any moment. A `redis-lua` purchase between its deduction and its
//! order insert looks exactly like one whose process died there; a reconcile that gave its
//! units back would let them be sold a second time once the order commits. A purchase younger
//! than the reconcile grace is in flight and left alone; an older one is presumed lost, and its
//! units come back only once it is fenced out (it can no longer place its order). The same
//! holds part by part for `redis-split`, whose stock is split over several counters.

use crate::common;

use app::Config;
use app::api::{Home, Strategy};
use app::redis_stock::RedisStock;
use common::{TestApp, drop_database, fresh_database_url, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::json;

const STOCK: i64 = 10;

/// The units left in Redis of product 1, kept in `home`.
async fn left(redis: &RedisStock, home: Home) -> Option<i64> {
    match home {
        Home::RedisSplit => (redis.split_counter_and_charges(1).await)
            .expect("counters")
            .map(|(left, _)| left),
        _ => redis.counter(1).await.expect("counter"),
    }
}

/// `STOCK` purchases by `strategy` that each take a unit and then pause 3 s before writing
/// their order, on an instance configured by `configure`; the product is reconciled (twice)
/// once every unit is taken. Returns the instance, its database and each purchase's answer.
async fn purchases_held_in_the_window(
    strategy: Strategy,
    configure: impl FnOnce(&mut Config),
) -> (TestApp, String, Vec<(StatusCode, serde_json::Value)>) {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    configure(&mut config);
    let url = config.redis_url.clone().expect("redis");
    let redis = RedisStock::open(&url, &config.lock_prefix, 2).expect("redis");
    let app = spawn_app(config).await;
    app.reset_in(1, STOCK, strategy.home()).await;

    let held: Vec<_> = (0..STOCK)
        .map(|i| {
            let body = json!({ "user_id": format!("u-{i}"), "quantity": 1,
                "request_id": format!("held-{i}"), "strategy": strategy });
            let request = app.purchase(1, &body);
            tokio::spawn(async move {
                let r = request
                    .header("x-seckill-hold-ms", "3000")
                    .send()
                    .await
                    .expect("purchase");
                (r.status(), r.json().await.unwrap_or_default())
            })
        })
        .collect();
    common::wait_until("every unit taken", || async {
        left(&redis, strategy.home()).await == Some(0)
    })
    .await;
    // The operator reconciles, twice, while all of them sit in the window.
    for _ in 0..2 {
        app.reconcile(1).await;
    }
    let mut answers = Vec::new();
    for purchase in held {
        answers.push(purchase.await.expect("purchase"));
    }
    (app, database_url, answers)
}

/// `STOCK` later buyers by `strategy`; returns how many bought.
async fn later_buyers(app: &TestApp, strategy: Strategy) -> usize {
    let mut bought = 0;
    for i in 0..STOCK {
        let late = json!({ "user_id": format!("late-{i}"), "quantity": 1,
            "request_id": format!("late-{i}"), "strategy": strategy });
        let (status, answer) = app.order(1, &late, None).await;
        match status {
            StatusCode::CREATED => bought += 1,
            StatusCode::CONFLICT => assert_eq!(answer["error"], "sold_out", "{answer}"),
            _ => panic!("a later buyer: {status} {answer}"),
        }
    }
    bought
}

/// [`purchases_held_in_the_window`] with a grace longer than the hold: each purchase is left
/// alone, places its order, and no later buyer finds a unit.
async fn in_flight_purchases_are_left_alone(strategy: Strategy) {
    let (app, database_url, answers) =
        purchases_held_in_the_window(strategy, |c| c.reconcile_grace_ms = 3_600_000).await;
    for (status, answer) in &answers {
        assert_eq!(*status, StatusCode::CREATED, "{answer}");
    }
    assert_eq!(
        later_buyers(&app, strategy).await,
        0,
        "a unit was sold twice"
    );
    let view = app.drained(1).await;
    assert_eq!((view.sold, view.stock), (STOCK, 0), "{view:?}");
    app.stop().await;
    drop_database(&database_url).await;
}

/// [`purchases_held_in_the_window`] past a grace of 1 ms: each purchase is fenced out before
/// its unit goes back, and the later buyers buy every unit.
async fn stalled_purchases_are_fenced_out(strategy: Strategy) {
    let (app, database_url, answers) =
        purchases_held_in_the_window(strategy, |c| c.reconcile_grace_ms = 1).await;
    for (status, answer) in &answers {
        assert_eq!(*status, StatusCode::CONFLICT, "{answer}");
        assert_eq!(answer["error"], "purchase_voided", "{answer}");
    }
    assert_eq!(later_buyers(&app, strategy).await, STOCK as usize);
    let view = app.drained(1).await;
    assert_eq!((view.sold, view.stock), (STOCK, 0), "{view:?}");
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconciling_while_purchases_are_in_flight_leaves_them_alone_and_never_oversells() {
    in_flight_purchases_are_left_alone(Strategy::RedisLua).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purchase_stalled_past_the_grace_is_fenced_out_before_its_units_go_back_on_sale() {
    stalled_purchases_are_fenced_out(Strategy::RedisLua).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconciling_a_split_product_leaves_its_in_flight_purchases_alone() {
    in_flight_purchases_are_left_alone(Strategy::RedisSplit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_split_product_s_stalled_purchases_are_fenced_out_part_by_part() {
    stalled_purchases_are_fenced_out(Strategy::RedisSplit).await;
}
