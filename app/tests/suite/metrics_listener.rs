//! `/metrics` tells how much a sale sold, and how fast: with `--metrics-listen`, it is served on
//! a listener for the operators alone, and the public listener answers it `404`. That listener
//! holds connections of its own, so a scrape gets in while buyers hold every public one.
//! Without the option, the public listener serves `/metrics` as it always has.

use crate::common;

use common::served::Served;
use common::{drop_database, fresh_database_url, test_config};
use reqwest::StatusCode;
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_metrics_listener_metrics_are_served_there_and_not_to_buyers() {
    let database_url = fresh_database_url().await;
    let served = Served::start_with_metrics_listener(test_config(&database_url)).await;
    let metrics = served.metrics_address.expect("a metrics listener");
    assert_eq!(served.get("/metrics").await, Some(StatusCode::NOT_FOUND));
    assert_eq!(served.get("/healthz").await, Some(StatusCode::OK));
    assert_eq!(served.get("/api/strategies").await, Some(StatusCode::OK));
    assert_eq!(
        served.get_from(metrics, "/metrics").await,
        Some(StatusCode::OK)
    );
    assert!(
        served
            .metric("seckill_purchases_started_total")
            .await
            .is_some(),
        "the metrics listener's /metrics"
    );
    assert_eq!(
        served.get_from(metrics, "/healthz").await,
        Some(StatusCode::OK)
    );
    assert_eq!(
        served.get_from(metrics, "/api/strategies").await,
        Some(StatusCode::NOT_FOUND),
        "a buyer's route on the metrics listener"
    );
    served.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_metrics_listener_the_public_listener_serves_metrics() {
    let database_url = fresh_database_url().await;
    let served = Served::start(test_config(&database_url)).await;
    assert_eq!(served.get("/metrics").await, Some(StatusCode::OK));
    assert!(
        served
            .metric("seckill_purchases_started_total")
            .await
            .is_some(),
        "the public listener's /metrics"
    );
    served.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scrape_gets_in_while_buyers_hold_every_public_connection() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.max_connections = 2;
    config.operator_connections = 0;
    // The buyers' connections stay until the test lets them go.
    config.header_read_timeout_ms = 600_000;
    let served = Served::start_with_metrics_listener(config).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(TcpStream::connect(served.address).await.expect("connect"));
    }
    common::wait_until("the buyers to hold every public connection", || async {
        served.metric("seckill_connections{door=\"buyers\"}").await == Some(2)
    })
    .await;
    assert_eq!(
        served.get("/healthz").await,
        None,
        "a third public connection"
    );
    let metrics = served.metrics_address.expect("a metrics listener");
    assert_eq!(
        served.get_from(metrics, "/metrics").await,
        Some(StatusCode::OK)
    );
    drop(held);
    served.stop().await;
    drop_database(&database_url).await;
}
