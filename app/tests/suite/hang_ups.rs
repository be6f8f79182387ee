//! A buyer who hangs up strands nothing. A hundred buyers send a purchase and close the
//! connection while it is being worked on (each pauses inside its critical section, so every
//! hang-up lands there): afterwards every unit is on sale, in an order, or on its way to one
//! (`initial = stock + sold + pending`), and a retry of each click gets its order or a plain
//! answer — never `503`.

use crate::common;

use app::api::{Safety, Strategy};
use app::db::Engine;
use common::{TestApp, drop_database, fresh_database_url, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const BUYERS: usize = 100;
const STOCK: i64 = 30;
/// The pause inside each critical section: long enough that the hang-ups find the purchases
/// there (the test closes the connections only once every purchase has started).
const HOLD_MS: u64 = 1_000;

/// One value of the service's Prometheus text (0 when not there yet).
async fn metric(app: &TestApp, name: &str) -> u64 {
    app.metric(name).await.unwrap_or(0)
}

/// Polls the metric until `done` holds for it.
async fn await_metric(app: &TestApp, name: &str, done: impl Fn(u64) -> bool) {
    common::wait_until(name, || async { done(metric(app, name).await) }).await;
}

/// Sends each click over a connection of its own and closes every connection once the service
/// has received all of them (each then sits in its critical section, or was refused already).
async fn send_and_hang_up(app: &TestApp, product: u64, strategy: Strategy, run: &str) {
    let address = app.url.trim_start_matches("http://").to_string();
    let before = metric(app, "seckill_purchase_requests_total").await;
    let mut connections = Vec::with_capacity(BUYERS);
    for buyer in 0..BUYERS {
        let user = format!("u-{buyer}");
        let body = json!({
            "user_id": user,
            "quantity": 1,
            "request_id": format!("{run}-{buyer}"),
            "strategy": strategy,
        })
        .to_string();
        let token = app.buyers.token(&user).expect("a buyer token");
        let request = format!(
            "POST /api/products/{product}/orders HTTP/1.1\r\nhost: {address}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\
             authorization: Bearer {token}\r\nx-seckill-hold-ms: {HOLD_MS}\r\n\r\n{body}",
            body.len()
        );
        let mut stream = TcpStream::connect(&address).await.expect("connect");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("send the purchase");
        connections.push(stream);
    }
    let all = before + BUYERS as u64;
    eprintln!(
        "{strategy}: before {before}, now {}",
        metric(app, "seckill_purchase_requests_total").await
    );
    await_metric(app, "seckill_purchase_requests_total", |n| n >= all).await;
    drop(connections);
    // Every purchase that started has ended, finished or abandoned.
    await_metric(app, "seckill_purchases_in_flight", |n| n == 0).await;
}

async fn hang_ups_strand_nothing(strategies: impl Fn(&Strategy) -> bool) {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    common::with_every_service(&mut config).await;
    let app = spawn_app(config).await;
    let chosen: Vec<Strategy> = Engine::MySql
        .strategies()
        .into_iter()
        .filter(|s| s.safety() == Safety::Safe && strategies(s))
        .collect();
    assert!(!chosen.is_empty());
    for (product, strategy) in (1..).zip(chosen) {
        app.reset_in(product, STOCK, strategy.home()).await;
        let run = uuid::Uuid::new_v4().simple().to_string();
        send_and_hang_up(&app, product, strategy, &run).await;
        let view = app.drained(product).await;
        assert_eq!(
            view.initial_stock,
            view.stock + view.sold + view.pending,
            "{strategy}: units taken without an order after the hang-ups: {view:?}"
        );
        for buyer in 0..BUYERS {
            let retry = json!({
                "user_id": format!("u-{buyer}"),
                "quantity": 1,
                "request_id": format!("{run}-{buyer}"),
                "strategy": strategy,
            });
            let (status, answer) = app.order(product, &retry, None).await;
            let plain = status.is_success()
                || (status == StatusCode::CONFLICT && answer["error"] == "sold_out");
            assert!(
                plain,
                "{strategy}: the retry of click {buyer}: {status} {answer}"
            );
        }
        let view = app.drained(product).await;
        assert_eq!(
            (view.stock, view.sold),
            (0, STOCK),
            "{strategy}: after the retries: {view:?}"
        );
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyers_who_hang_up_strand_no_stock_under_the_redis_strategies() {
    hang_ups_strand_nothing(|s| s.home().in_redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyers_who_hang_up_strand_no_stock_under_the_database_strategies() {
    hang_ups_strand_nothing(|s| !s.home().in_redis() && s.lock_backend().is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyers_who_hang_up_strand_no_stock_under_the_lock_strategies() {
    hang_ups_strand_nothing(|s| s.lock_backend().is_some()).await;
}
