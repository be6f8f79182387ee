//! A request id means one thing everywhere: its bytes, scoped to one buyer of one product. Ids
//! that differ only in a letter's case or in how an accent is written are different purchases
//! in the database, in the Redis scripts and in the batch alike; the same id on two products
//! (or of two buyers) is two purchases. No accepted purchase is lost for sharing an id with
//! another, no unit is taken without an order, and an order is shown only to its buyer.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use app::api::{Home, Strategy};
use app::db::Engine;
use common::{
    StoredOrder, TestApp, drop_database, fresh_database_url, spawn_app, stored_orders, test_config,
    with_every_service,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Ids a case- or accent-insensitive comparison takes for one: upper and lower case, an accent
/// written as one code point (NFC) and as a letter plus a combining mark (NFD), and no accent.
const TWINS: [&str; 5] = ["CASE", "case", "caf\u{e9}", "cafe\u{301}", "cafe"];

/// One purchase of one unit.
fn click(user: &str, request: &str, strategy: Strategy) -> Value {
    json!({ "user_id": user, "quantity": 1, "request_id": request, "strategy": strategy })
}

/// `GET /api/products/{product}/orders/{request}?user_id={user}`.
async fn status_of(app: &TestApp, product: u64, request: &str, user: &str) -> (StatusCode, Value) {
    let url = format!(
        "{}/api/products/{product}/orders/{}?user_id={}",
        app.url,
        encode(request),
        encode(user)
    );
    let r = app
        .as_buyer(app.client.get(url), user)
        .send()
        .await
        .expect("status request");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Percent-encodes every byte outside the unreserved set.
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Units taken from the product's home that no order holds and no queued entry is bringing:
/// `initial − stock − sold − pending`, read once the stream has drained.
async fn stranded(app: &TestApp, product: u64) -> i64 {
    let view = app.drained(product).await;
    view.initial_stock - view.stock - view.sold - view.pending
}

/// Whether the database holds an order of exactly these bytes.
fn has_order(orders: &[StoredOrder], product: u64, user: &str, request: &str) -> bool {
    orders
        .iter()
        .any(|o| o.product_id == product && o.user_id == user && o.request_id == request)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn case_and_accent_twins_and_one_id_on_two_products_are_each_their_own_order_under_every_strategy()
 {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    with_every_service(&mut config).await;
    let app = spawn_app(config).await;
    for (i, &strategy) in Engine::MySql.strategies().iter().enumerate() {
        let (product, other) = (i as u64 + 1, i as u64 + 1001);
        app.reset_in(product, 20, strategy.home()).await;
        app.reset_in(other, 20, strategy.home()).await;
        // One buyer clicks with each twin, another buyer with the first twin, and the first
        // buyer with the first twin on another product.
        let mut clicks: Vec<(u64, &str, String)> = TWINS
            .iter()
            .map(|twin| (product, "buyer", format!("{twin}-{product}")))
            .collect();
        clicks.push((product, "other-buyer", format!("{}-{product}", TWINS[0])));
        clicks.push((other, "buyer", format!("{}-{product}", TWINS[0])));
        for (p, user, request) in &clicks {
            let (status, answer) = app.order(*p, &click(user, request, strategy), None).await;
            assert!(
                status == StatusCode::CREATED || status == StatusCode::ACCEPTED,
                "{strategy}: `{request}` of {user} on {p} is a purchase of its own: {status} {answer}"
            );
        }
        // Nothing was taken without an order, and every accepted purchase is in the database
        // under exactly its own bytes.
        assert_eq!(stranded(&app, product).await, 0, "{strategy}");
        assert_eq!(stranded(&app, other).await, 0, "{strategy}");
        let orders = stored_orders(&database_url).await;
        for (p, user, request) in &clicks {
            assert!(
                has_order(&orders, *p, user, request),
                "{strategy}: no order `{request}` of {user} on {p}: {orders:?}"
            );
        }
        let view = app.drained(product).await;
        assert_eq!((view.orders, view.stock), (6, 14), "{strategy}: {view:?}");
        // Each buyer sees their own order, and only their own.
        for (p, user, request) in &clicks {
            let (status, answer) = status_of(&app, *p, request, user).await;
            assert_eq!(status, StatusCode::OK, "{strategy}: {answer}");
            assert_eq!(answer["order"]["user_id"], *user, "{strategy}: {answer}");
            assert_eq!(
                answer["order"]["request_id"], **request,
                "{strategy}: {answer}"
            );
        }
        let (status, answer) = status_of(&app, product, &clicks[0].2, "a-stranger").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{strategy}: {answer}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reused_id_with_another_quantity_or_strategy_is_refused_without_naming_another_buyer() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    with_every_service(&mut config).await;
    let app = spawn_app(config).await;
    for (product, strategy) in (1..).zip([Strategy::Conditional, Strategy::RedisLuaStream]) {
        app.reset_in(product, 10, strategy.home()).await;
        let (status, _) = app
            .order(product, &click("alice", "r-1", strategy), None)
            .await;
        assert!(status.is_success(), "{strategy}: {status}");
        app.drained(product).await;
        let twice =
            json!({ "user_id": "alice", "quantity": 2, "request_id": "r-1", "strategy": strategy });
        let (status, answer) = app.order(product, &twice, None).await;
        assert_eq!(status, StatusCode::CONFLICT, "{strategy}: {answer}");
        assert_eq!(answer["error"], "idempotency_conflict", "{answer}");
        let view = app.drained(product).await;
        assert_eq!((view.orders, view.sold), (1, 1), "{strategy}: {view:?}");
        // Bob's click with Alice's id is his own purchase, and nothing he is told names her.
        let (status, answer) = app
            .order(product, &click("bob", "r-1", strategy), None)
            .await;
        assert!(status.is_success(), "{strategy}: {status} {answer}");
        assert!(!answer.to_string().contains("alice"), "{answer}");
    }
    app.stop().await;
    drop_database(&database_url).await;
}

/// The clicks whose last answer was a 2xx.
fn served_clicks(
    clicks: &[(String, String)],
    answers: &[(StatusCode, Value)],
) -> Vec<(String, String)> {
    clicks
        .iter()
        .zip(answers)
        .filter(|(_, (status, _))| status.is_success())
        .map(|(click, _)| click.clone())
        .collect()
}

/// The clicks sent at once, each retried on `503` (same request id, up to 100 times); returns
/// each click's last answer.
async fn flood(
    app: &TestApp,
    product: u64,
    clicks: &[(String, String)],
    strategy: Strategy,
) -> Vec<(StatusCode, Value)> {
    let tasks: Vec<_> = clicks
        .iter()
        .map(|(user, request)| {
            let request = app.purchase(product, &click(user, request, strategy));
            tokio::spawn(async move {
                let mut tries = 0;
                loop {
                    let again = request.try_clone().expect("a body of bytes");
                    let r = again.send().await.expect("order");
                    let status = r.status();
                    let answer: Value = r.json().await.unwrap_or(Value::Null);
                    tries += 1;
                    if status != StatusCode::SERVICE_UNAVAILABLE || tries == 100 {
                        return (status, answer);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(tasks.len());
    for task in tasks {
        answers.push(task.await.expect("click"));
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_whose_request_ids_repeat_from_one_product_to_the_next_loses_no_accepted_order() {
    const BUYERS: usize = 1_000;
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    with_every_service(&mut config).await;
    let app = spawn_app(config).await;
    // A client whose counter restarts for every product: product 2's ids are product 1's.
    let clicks: Vec<(String, String)> = (0..BUYERS)
        .map(|i| (format!("u-{i}"), format!("click-{i}")))
        .collect();
    let strategies = [
        Strategy::RedisLuaStream,
        Strategy::RedisLua,
        Strategy::Batched,
    ];
    let mut served = std::collections::HashMap::new();
    for (n, strategy) in strategies.into_iter().enumerate() {
        let first = 10 * n as u64 + 1;
        for product in [first, first + 1] {
            app.reset_in(product, BUYERS as i64, strategy.home()).await;
            let answers = flood(&app, product, &clicks, strategy).await;
            // A click the service could not serve in the client's patience (100 tries) must
            // have been told so (`503`), never anything else; on a loaded machine some are.
            let unserved: Vec<_> = answers.iter().filter(|(s, _)| !s.is_success()).collect();
            assert!(
                unserved
                    .iter()
                    .all(|(s, _)| *s == StatusCode::SERVICE_UNAVAILABLE),
                "{strategy} on {product}: a click answered outside 2xx and 503: {:?}",
                &unserved[..unserved.len().min(5)]
            );
            if !unserved.is_empty() {
                eprintln!(
                    "{strategy} on {product}: {} of {BUYERS} clicks still 503 after 100 tries, \
                     e.g. {:?}",
                    unserved.len(),
                    &unserved[..unserved.len().min(3)]
                );
            }
            served.insert(product, served_clicks(&clicks, &answers));
        }
        for product in [first, first + 1] {
            // A click told `503` may leave its charge without an order until `reconcile` (undersell,
            // never oversell); a served one never does.
            let unserved = BUYERS - served[&product].len();
            let stranded = stranded(&app, product).await;
            assert!(
                (0..=unserved as i64).contains(&stranded),
                "{strategy} on {product}: {stranded} units stranded, {unserved} clicks unserved"
            );
        }
        let orders = stored_orders(&database_url).await;
        for product in [first, first + 1] {
            let ours: HashSet<_> = orders
                .iter()
                .filter(|o| o.product_id == product)
                .map(|o| (&*o.user_id, &*o.request_id))
                .collect();
            // Every click answered 2xx has its own order: none vanished, none is another's.
            let missing: Vec<_> = served[&product]
                .iter()
                .filter(|click| !ours.contains(&(click.0.as_str(), click.1.as_str())))
                .collect();
            assert!(
                missing.is_empty(),
                "{strategy}: product {product}: {} served clicks have no order, e.g. {:?}",
                missing.len(),
                &missing[..missing.len().min(5)]
            );
            assert!(
                ours.len() <= BUYERS,
                "{strategy}: product {product}'s orders"
            );
        }
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_with_a_case_twin_of_an_existing_order_sells_to_every_buyer_in_it() {
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    config.batch_window_ms = 50;
    let app = spawn_app(config).await;
    app.reset_in(1, 100, Home::Row).await;
    let (status, _) = app
        .order(1, &click("buyer", "CASE-0", Strategy::Batched), None)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    // Sixteen innocent buyers share a batch with the twin.
    let mut clicks: Vec<(String, String)> = (0..16)
        .map(|i| (format!("u-{i}"), format!("r-{i}")))
        .collect();
    clicks.push(("buyer".into(), "case-0".into()));
    let answers = flood(&app, 1, &clicks, Strategy::Batched).await;
    for ((user, request), (status, answer)) in clicks.iter().zip(&answers) {
        assert_eq!(
            *status,
            StatusCode::CREATED,
            "{user}/{request}: {status} {answer}"
        );
    }
    let view = app.drained(1).await;
    assert_eq!((view.orders, view.stock), (18, 82), "{view:?}");
    app.stop().await;
    drop_database(&database_url).await;
}
