//! A product sold first come, first served gives each click its place in one queue, in Redis,
//! when the click comes in: the first clicks, up to the units, are served however full the
//! instance is — they wait for room where an ordinary click is refused `overloaded` — the clicks
//! behind them are refused `sold_out` at once, and a click that does not buy gives its place to
//! the next.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use app::api::Strategy;
use app::first_come::{FirstCome, Turn};
use app::redis_stock::RedisStock;
use app::strategy::{Purchase, PurchaseStats};
use common::{TestApp, config_with_redis, drop_database, fresh_database_url, sent, spawn_app};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn click(user: &str, strategy: Strategy) -> Value {
    json!({ "user_id": user, "quantity": 1, "request_id": format!("r-{user}"), "strategy": strategy })
}

async fn metric(app: &TestApp, name: &str) -> u64 {
    app.metric(name).await.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_first_come_click_waits_for_room_where_an_ordinary_one_is_refused_and_those_past_the_units_are_sold_out()
 {
    let database_url = fresh_database_url().await;
    let mut config = config_with_redis(&database_url).await;
    config.max_in_flight = 2;
    let app = spawn_app(config).await;
    app.reset_in(1, 100, Strategy::RedisLua.home()).await;
    let first_come = json!({ "stock": 3, "first_come": true, "strategies": ["conditional"] });
    app.reset_with(2, &first_come).await;
    // Two purchases of another product fill the instance for two seconds.
    let holding: Vec<_> = (0..2)
        .map(|i| {
            sent(
                &app,
                1,
                click(&format!("held-{i}"), Strategy::RedisLua),
                Some(2_000),
            )
        })
        .collect();
    common::wait_until("two purchases in flight", || async {
        metric(&app, "seckill_purchases_in_flight").await == 2
    })
    .await;
    let (status, answer) = app
        .order(1, &click("ordinary", Strategy::RedisLua), None)
        .await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("overloaded")),
        "an ordinary click finds no room: {answer}"
    );
    let first: Vec<_> = (0..3)
        .map(|i| {
            sent(
                &app,
                2,
                click(&format!("first-{i}"), Strategy::Conditional),
                None,
            )
        })
        .collect();
    common::wait_until("the three first clicks waiting for room", || async {
        metric(&app, "seckill_admission_waiting").await == 3
    })
    .await;
    for late in ["late-0", "late-1"] {
        let (status, answer) = app
            .order(2, &click(late, Strategy::Conditional), None)
            .await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (StatusCode::CONFLICT, Some("sold_out")),
            "every unit is promised to an earlier click: {answer}"
        );
    }
    for task in holding {
        assert_eq!(task.await.expect("held").0, StatusCode::CREATED);
    }
    for task in first {
        let (status, answer) = task.await.expect("first");
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }
    let view = app.drained(2).await;
    assert_eq!((view.sold, view.stock), (3, 0));
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_first_come_click_that_does_not_buy_gives_its_place_to_the_next_and_a_resold_unit_is_sold_again()
 {
    let database_url = fresh_database_url().await;
    let app = spawn_app(config_with_redis(&database_url).await).await;
    let first_come = json!({ "stock": 1, "first_come": true, "per_user_limit": 1,
                             "strategies": ["conditional"] });
    app.reset_with(1, &first_come).await;
    // Alice's click holds the one place while it is served: Bob's is behind it.
    let alice = sent(&app, 1, click("alice", Strategy::Conditional), Some(1_000));
    common::wait_until("alice's click being served", || async {
        metric(&app, "seckill_purchases_in_flight").await == 1
    })
    .await;
    let (status, answer) = app
        .order(1, &click("bob", Strategy::Conditional), None)
        .await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (StatusCode::CONFLICT, Some("sold_out")),
        "{answer}"
    );
    assert_eq!(alice.await.expect("alice").0, StatusCode::CREATED);
    // Her second click, another request id, finds the unit sold and nothing being served: the
    // stock refuses it (her limit). The unit she cancels comes back and is sold to Carol.
    let mut again = click("alice", Strategy::Conditional);
    again["request_id"] = json!("r-alice-again");
    let (status, answer) = app.order(1, &again, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let cancelled = common::life::act(&app, 1, "alice", "r-alice", "cancel", &[]).await;
    assert_eq!(cancelled.0, StatusCode::OK, "{}", cancelled.1);
    let (status, answer) = app
        .order(1, &click("carol", Strategy::Conditional), None)
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the unit back home is sold: {answer}"
    );
    let view = app.drained(1).await;
    assert_eq!((view.sold, view.stock), (1, 0));
    app.stop().await;
    drop_database(&database_url).await;
}

/// `user`'s purchase of one unit of `product` under request id `r-<user>`.
fn purchase(product: u64, user: &str, limit: i64) -> Purchase {
    Purchase {
        product_id: product,
        user_id: user.to_owned(),
        quantity: 1,
        request_id: format!("r-{user}"),
        strategy: Strategy::Conditional,
        per_user_limit: limit,
        pay_within: Duration::from_secs(60),
        redis_epoch: 0,
        redis_parts: 0,
        hold: None,
        stats: PurchaseStats::default(),
    }
}

/// A queue beside an instance of `database_url` (which made its tables), places kept `keep`.
async fn queue(config: &app::Config, keep: Duration) -> Arc<FirstCome> {
    let url = config.redis_url.as_deref().expect("redis configured");
    let redis = RedisStock::open(url, &config.lock_prefix, 4).expect("redis pool");
    let pool = sqlx::MySqlPool::connect(&config.database_url)
        .await
        .expect("database");
    Arc::new(FirstCome::new(redis, app::db::Engines::MySql(pool), keep))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn places_are_given_in_arrival_order_up_to_the_units_and_a_place_not_bought_goes_to_the_next()
{
    let database_url = fresh_database_url().await;
    let config = config_with_redis(&database_url).await;
    let app = spawn_app(config.clone()).await;
    let queue = queue(&config, Duration::from_secs(60)).await;
    queue.open(7, 2).await.expect("open");
    let take = |user: &'static str| {
        let queue = &queue;
        async move { queue.take(&purchase(7, user, 1)).await.expect("take") }
    };
    let Turn::Yours(a) = take("a").await else {
        panic!("the first click has a place")
    };
    let Turn::Yours(b) = take("b").await else {
        panic!("the second click has a place")
    };
    assert_eq!((a.place, b.place), (1, 2));
    assert!(
        matches!(take("c").await, Turn::Behind),
        "two units, both promised"
    );
    assert!(
        matches!(take("a").await, Turn::Pending),
        "a resend while it is served"
    );
    let mut second = purchase(7, "a", 1);
    second.request_id = "r-a-2".into();
    assert!(
        matches!(queue.take(&second).await.expect("take"), Turn::OverLimit),
        "a double-click past the limit holds no second place"
    );
    a.settle(false).await.expect("settle");
    let Turn::Yours(c) = take("c").await else {
        panic!("a place not bought goes to the next click")
    };
    assert_eq!(c.place, 3);
    b.settle(true).await.expect("settle");
    c.settle(true).await.expect("settle");
    assert!(
        matches!(take("d").await, Turn::Settled),
        "every unit sold, none being served: the ordinary way decides"
    );
    queue.close(7).await.expect("close");
    assert!(matches!(take("e").await, Turn::NotOpened));
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_place_its_instance_never_settles_is_given_up_after_its_time() {
    let database_url = fresh_database_url().await;
    let config = config_with_redis(&database_url).await;
    let app = spawn_app(config.clone()).await;
    let queue = queue(&config, Duration::ZERO).await;
    queue.open(8, 1).await.expect("open");
    let Turn::Yours(_never_settled) = queue.take(&purchase(8, "a", 1)).await.expect("take") else {
        panic!("the first click has a place")
    };
    // Kept for no time: the next click, finding every unit promised, gives it up first.
    common::wait_until("the unsettled place given up", || async {
        matches!(
            queue.take(&purchase(8, "b", 1)).await.expect("take"),
            Turn::Yours(_)
        )
    })
    .await;
    app.stop().await;
    drop_database(&database_url).await;
}
