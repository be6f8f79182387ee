//! One per customer, held against a buyer who clicks many times at once. Every safe strategy
//! counts a buyer's units atomically with its deduction, so one buyer's concurrent clicks never
//! hold more than the product's limit, and a refused click takes no unit. `racy-limit`, which
//! checks what the buyer bought with a plain read before buying, lets them through.

use crate::common;

use std::collections::HashMap;

use app::api::{Safety, Strategy};
use app::db::Engine;
use common::{TestApp, drop_database, fresh_database_url, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::{Value, json};

const LIMIT: i64 = 2;
const CLICKS: usize = 12;

/// `CLICKS` clicks of one buyer at once, each pausing `hold_ms` inside its critical section;
/// returns the answers.
async fn clicks_at_once(
    app: &TestApp,
    product: u64,
    strategy: Strategy,
    hold_ms: u64,
) -> Vec<(StatusCode, Value)> {
    let tasks: Vec<_> = (0..CLICKS)
        .map(|i| {
            let body = json!({ "user_id": "greedy", "quantity": 1,
                "request_id": format!("click-{i}"), "strategy": strategy });
            let request = app.purchase(product, &body);
            tokio::spawn(async move {
                let r = request
                    .header("x-seckill-hold-ms", hold_ms.to_string())
                    .send()
                    .await
                    .expect("click");
                (r.status(), r.json().await.unwrap_or(Value::Null))
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("click"));
    }
    answers
}

/// Units each buyer holds of the product, from its orders.
async fn held(database_url: &str, product: u64) -> HashMap<String, i64> {
    common::stored_orders(database_url)
        .await
        .into_iter()
        .filter(|o| o.product_id == product)
        .fold(HashMap::new(), |mut held, o| {
            *held.entry(o.user_id).or_default() += i64::from(o.quantity);
            held
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_buyers_concurrent_clicks_never_hold_more_than_the_limit_under_any_safe_strategy() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    // Every click reaches the strategy, whose own check is what is tested: the door would
    // refuse all but a few of `optimistic`'s at once.
    config.optimistic_in_flight = 64;
    let app = spawn_app(config).await;
    let safe: Vec<Strategy> = Engine::MySql
        .strategies()
        .into_iter()
        .filter(|s| s.safety() == Safety::Safe)
        .collect();
    for (product, strategy) in (1..).zip(safe) {
        app.reset_with(
            product,
            &json!({ "stock": 100, "home": strategy.home(), "per_user_limit": LIMIT }),
        )
        .await;
        let answers = clicks_at_once(&app, product, strategy, 20).await;
        for (status, answer) in &answers {
            let refused = status.is_client_error() || status.is_server_error();
            if refused {
                assert!(
                    ["limit_reached", "busy", "lock_lost"]
                        .contains(&answer["error"].as_str().unwrap_or("")),
                    "{strategy}: {status} {answer}"
                );
            }
        }
        let view = app.drained(product).await;
        let greedy = held(&database_url, product).await.get("greedy").copied();
        assert!(
            greedy.unwrap_or(0) <= LIMIT,
            "{strategy}: greedy holds {greedy:?}"
        );
        assert_eq!(
            (view.stock + view.sold, view.stranded),
            (100, 0),
            "{strategy}: a refused click took a unit: {view:?}"
        );
        // Someone else is not limited by greedy's clicks.
        let other = json!({ "user_id": "patient", "quantity": LIMIT, "request_id": "r", "strategy": strategy });
        let (status, answer) = app.order(product, &other, None).await;
        assert!(status.is_success(), "{strategy}: {status} {answer}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racy_limit_lets_one_buyers_concurrent_clicks_past_the_limit() {
    racy_limit_past_the_limit(&fresh_database_url().await).await;
}

/// Rounds of one greedy buyer's concurrent clicks through `racy-limit`, on the database
/// `database_url` names (either engine), until the buyer holds more than the limit.
pub(crate) async fn racy_limit_past_the_limit(database_url: &str) {
    let app = spawn_app(test_config(database_url)).await;
    let mut worst = 0;
    for product in 1..=5 {
        app.reset_with(product, &json!({ "stock": 100, "per_user_limit": LIMIT }))
            .await;
        clicks_at_once(&app, product, Strategy::RacyLimit, 20 * product).await;
        worst = worst.max(
            held(database_url, product)
                .await
                .get("greedy")
                .copied()
                .unwrap_or(0),
        );
        if worst > LIMIT {
            break;
        }
    }
    assert!(
        worst > LIMIT,
        "racy-limit kept greedy to {worst} of {LIMIT}"
    );
    app.stop().await;
    drop_database(database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_limit_is_one_per_customer_unless_set_and_a_reset_forgets_what_buyers_hold() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    let app = spawn_app(config).await;
    for (product, strategy) in
        (1..).zip([Strategy::Conditional, Strategy::RedisLua, Strategy::Batched])
    {
        let default_rules = json!({ "stock": 10, "home": strategy.home() });
        app.reset_with(product, &default_rules).await;
        let buy = |request: &str| json!({ "user_id": "u", "quantity": 1, "request_id": request, "strategy": strategy });
        assert_eq!(
            app.order(product, &buy("first"), None).await.0,
            StatusCode::CREATED
        );
        let (status, answer) = app.order(product, &buy("second"), None).await;
        assert_eq!(status, StatusCode::CONFLICT, "{strategy}: {answer}");
        assert_eq!(answer["error"], "limit_reached", "{strategy}: {answer}");
        // Asking for more than the limit in one click is refused the same way.
        let two =
            json!({ "user_id": "v", "quantity": 2, "request_id": "two", "strategy": strategy });
        assert_eq!(
            app.order(product, &two, None).await.1["error"],
            "limit_reached"
        );
        app.reset_with(product, &default_rules).await;
        assert_eq!(
            app.order(product, &buy("again"), None).await.0,
            StatusCode::CREATED
        );
        let view = app.drained(product).await;
        assert_eq!(
            (view.stock, view.sold, view.rules.per_user_limit),
            (9, 1, 1)
        );
    }
    app.stop().await;
    drop_database(&database_url).await;
}

/// Rows of buyers' counts the product has in `purchase_quota`, with their units.
async fn counts(database_url: &str, product: u64) -> HashMap<String, i64> {
    let db = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(database_url)
        .await
        .expect("connect");
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT user_id, units FROM purchase_quota WHERE product_id = ?")
            .bind(product)
            .fetch_all(&db)
            .await
            .expect("counts");
    db.close().await;
    rows.into_iter().collect()
}

/// A count is a row every purchase of its buyer locks until it commits; a batch locked the
/// rows of all its buyers, and two instances' batches sharing buyers waited on each other. A
/// limit of `MAX_STOCK` can refuse no one (no product holds more), and a product's limit
/// changes only with a reset, which forgets its orders: such a product needs no count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_product_whose_limit_no_buyer_can_reach_keeps_no_counts_and_a_limited_one_does() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    let app = spawn_app(config).await;
    let in_database: Vec<Strategy> = Engine::MySql
        .strategies()
        .into_iter()
        .filter(|s| s.safety() == Safety::Safe && !s.home().in_redis())
        .collect();
    let mut product = 0;
    for strategy in in_database {
        for limit in [app::api::MAX_STOCK, 5] {
            product += 1;
            app.reset_with(
                product,
                &json!({ "stock": 100, "home": strategy.home(), "per_user_limit": limit }),
            )
            .await;
            for (buyer, quantity) in [("a", 1), ("b", 2), ("a", 3)] {
                let request = format!("{buyer}-{quantity}");
                let buy = json!({ "user_id": buyer, "quantity": quantity,
                    "request_id": request, "strategy": strategy });
                let (status, answer) = app.order(product, &buy, None).await;
                assert!(status.is_success(), "{strategy}: {status} {answer}");
            }
            let counts = counts(&database_url, product).await;
            let expected = match limit {
                app::api::MAX_STOCK => HashMap::new(),
                _ => HashMap::from([("a".to_owned(), 4), ("b".to_owned(), 2)]),
            };
            assert_eq!(counts, expected, "{strategy}, a limit of {limit}");
        }
    }
    app.stop().await;
    drop_database(&database_url).await;
}
