//! A request id buys at most once, whatever the strategy: twenty concurrent copies of one
//! click make one order, and every copy is answered with it.

use crate::common;

use app::api::{Home, Strategy};
use common::{fresh_database_url, ledger, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::json;

const COPIES: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_copies_of_one_request_make_one_order_under_every_strategy() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    (
        config.redis_url,
        config.redlock_urls,
        config.zookeeper,
        config.etcd,
        config.memcached,
    ) = tokio::task::spawn_blocking(|| {
        use sandbox::shared;
        (
            Some(shared::redis_url()),
            shared::redlock_urls(),
            Some(shared::zookeeper()),
            shared::etcd(),
            Some(shared::memcached()),
        )
    })
    .await
    .expect("sandbox servers");
    let app = spawn_app(config).await;
    let list = app.strategies().await;
    let names: Vec<String> = list["strategies"]
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|s| s["name"].as_str().map(String::from))
        .collect();
    assert!(names.len() >= 20, "{names:?}");

    for (i, strategy) in names.iter().enumerate() {
        let product = i as u64 + 1;
        let home = strategy.parse::<Strategy>().map_or(Home::Row, |s| s.home());
        app.reset_in(product, 10, home).await;
        let body = json!({
            "user_id": "u-1",
            "quantity": 2,
            "request_id": format!("click-{strategy}"),
            "strategy": strategy,
        });
        let mut tasks = Vec::new();
        for _ in 0..COPIES {
            let request = app.purchase(product, &body);
            tasks.push(tokio::spawn(common::post_retrying_busy(request)));
        }
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.expect("task"));
        }
        let count = |status| answers.iter().filter(|(s, _)| *s == status).count();
        let (created, accepted, replayed) = (
            count(StatusCode::CREATED),
            count(StatusCode::ACCEPTED),
            count(StatusCode::OK),
        );
        if accepted == 0 {
            assert_eq!(
                (created, replayed),
                (1, COPIES - 1),
                "{strategy}: {answers:?}"
            );
        } else {
            // Answered before the order is written: every copy is accepted, or replayed once
            // the consumer has placed the one order.
            assert_eq!(
                (created, accepted + replayed),
                (0, COPIES),
                "{strategy}: {answers:?}"
            );
        }
        let ids: std::collections::HashSet<_> = answers
            .iter()
            .filter(|(s, _)| *s != StatusCode::ACCEPTED)
            .map(|(_, b)| b["order_id"].clone())
            .collect();
        assert!(
            ids.len() <= 1,
            "{strategy}: every copy names the same order: {answers:?}"
        );

        let left = app.drained(product).await.stock;
        let truth = ledger(&database_url, product).await;
        assert_eq!(
            (truth.orders, truth.sold, left),
            (1, 2, 8),
            "{strategy}: {truth:?}"
        );

        // Long after, and with the stock gone, the same click still gets its order back.
        app.reset(product + 100, 0).await;
        let (status, replay) = app.order(product, &body, None).await;
        assert_eq!(status, StatusCode::OK, "{strategy}: {replay}");
        let first = answers.iter().find(|(s, _)| *s != StatusCode::ACCEPTED);
        if let Some((_, first)) = first {
            assert_eq!(replay["order_id"], first["order_id"]);
        }
    }
    app.stop().await;
    common::drop_database(&database_url).await;
}
