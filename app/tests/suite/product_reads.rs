//! An instance reads a product it does not remember one read at a time: the first click asks
//! the database while the others wait for its answer. When that answer is that the database
//! cannot be reached, the ones who waited are told so too — not each in turn after a read of
//! its own, as long as the first: behind a gone database, the k-th of a crowd would wait k
//! times the pool's acquire timeout.

use std::sync::Arc;

use crate::common;

use common::{spawn_app, test_config, wait_until, with_fresh_database};
use reqwest::StatusCode;
use serde_json::json;

const PRODUCT: u64 = 7;
const BUYERS: u64 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyers_waiting_behind_a_read_that_found_the_database_gone_share_its_answer() {
    sandbox::require_faults!();
    let db = tokio::task::spawn_blocking(sandbox::MariaDb::start)
        .await
        .expect("join")
        .expect("private MariaDB");
    let db = Arc::new(db);
    let database_url = with_fresh_database(&db.url());
    let seller = spawn_app(test_config(&database_url)).await;
    seller.reset(PRODUCT, 100).await;
    // An instance that has never read the product: every click asks for it.
    let mut config = test_config(&database_url);
    config.db_acquire_timeout_ms = 500;
    let app = spawn_app(config).await;
    let metric = |name: &'static str| {
        let app = &app;
        async move { app.metric(name).await.unwrap_or(0) }
    };
    let reads_before = metric("seckill_product_reads_total").await;

    // The database stops answering: the first click's read waits, the others wait behind it.
    let paused = Arc::clone(&db);
    tokio::task::spawn_blocking(move || paused.server().pause())
        .await
        .expect("join")
        .expect("pause");
    let clicks: Vec<_> = (0..BUYERS)
        .map(|n| {
            let click = json!({ "user_id": format!("u{n}"), "quantity": 1,
                                "request_id": format!("r{n}"), "strategy": "conditional" });
            common::sent(&app, PRODUCT, click, None)
        })
        .collect();
    wait_until(
        "every click in, one read of the product under way",
        || async {
            metric("seckill_purchase_requests_total").await == BUYERS
                && metric("seckill_product_reads_total").await == reads_before + 1
        },
    )
    .await;
    // Then it is gone: the read under way fails.
    let killed = Arc::clone(&db);
    tokio::task::spawn_blocking(move || killed.server().kill())
        .await
        .expect("join")
        .expect("kill");

    for click in clicks {
        let (status, answer) = click.await.expect("join");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        assert_eq!(answer["error"], "backend_unavailable", "{answer}");
    }
    assert_eq!(
        metric("seckill_product_reads_total").await - reads_before,
        1,
        "the buyers who waited behind the failed read read again"
    );
}
