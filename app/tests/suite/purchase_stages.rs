//! The service times the stages of every purchase that reaches a strategy — its admission, the
//! strategy, and the strategy's own parts — and shows them in `/metrics`, so that where a
//! purchase's time goes is read without a profiler.

use crate::common;

use app::api::Strategy;
use common::{TestApp, drop_database, fresh_database_url, spawn_app};
use reqwest::StatusCode;
use serde_json::json;

/// Purchases of `strategy` timed in `stage`, as `/metrics` counts them (0: none).
async fn timed(app: &TestApp, strategy: Strategy, stage: &str) -> u64 {
    let series = format!(
        "seckill_purchase_stage_seconds_count{{strategy=\"{}\",stage=\"{stage}\"}}",
        strategy.name()
    );
    app.metric(&series).await.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_purchase_is_timed_in_admission_its_strategy_and_the_strategys_own_stages() {
    let database_url = fresh_database_url().await;
    let app = spawn_app(common::config_with_redis(&database_url).await).await;
    app.reset(1, 100).await;
    app.reset_in(2, 100, Strategy::RedisLua.home()).await;
    // Sold out from the start. Reset first: the reset's announcement, which makes every
    // instance forget the product, reaches this one over Redis while the others sell.
    app.reset(3, 0).await;
    let buys = [
        (1, Strategy::Batched),
        (1, Strategy::RedisLockFenced),
        (2, Strategy::RedisLua),
    ];
    for (product, strategy) in buys {
        for n in 0..3 {
            let user = format!("{}-{n}", strategy.name());
            let body = json!({ "user_id": user, "quantity": 1, "request_id": format!("r-{user}"),
                               "strategy": strategy });
            let (status, answer) = app.order(product, &body, None).await;
            assert_eq!(status, StatusCode::CREATED, "{strategy}: {answer}");
        }
    }
    // A refusal from memory reaches no strategy: no stage of it is timed.
    let body = json!({ "user_id": "late", "quantity": 1, "request_id": "r-late",
                       "strategy": Strategy::Conditional });
    for _ in 0..5 {
        let (status, _) = app.order(3, &body, None).await;
        assert_eq!(status, StatusCode::CONFLICT);
    }
    for (_, strategy) in buys {
        for stage in ["admission", "strategy"] {
            assert_eq!(timed(&app, strategy, stage).await, 3, "{strategy} {stage}");
        }
    }
    let own = [
        (Strategy::Batched, "queued"),
        (Strategy::Batched, "batch"),
        (Strategy::Batched, "lookup"),
        (Strategy::Batched, "stock_update"),
        (Strategy::Batched, "order_insert"),
        (Strategy::Batched, "commit"),
        (Strategy::RedisLockFenced, "lock_wait"),
        (Strategy::RedisLua, "script"),
        (Strategy::RedisLua, "order_write"),
    ];
    for (strategy, stage) in own {
        assert_eq!(timed(&app, strategy, stage).await, 3, "{strategy} {stage}");
    }
    assert_eq!(timed(&app, Strategy::RedisLockFenced, "script").await, 0);
    // The first refusal reaches the strategy and the instance remembers the sale is over; the
    // others are refused from memory. (Were the reset's announcement still on its way, it
    // would make the instance forget once more, and read the product once more: a loaded test
    // machine once saw two.)
    assert!(
        timed(&app, Strategy::Conditional, "admission").await <= 2,
        "at most the first refusals reached the strategy; the others were refused from memory"
    );
    app.stop().await;
    drop_database(&database_url).await;
}
