//! Products' public pages read on a replica (`--database-replica-url`): a crowd refreshing a
//! page costs the primary nothing, and a replica that lags shows units the primary has sold
//! since — which sells nothing, because the purchase's conditional write on the primary
//! decides. A product the replica does not have yet, or a replica that does not answer, is
//! read on the primary.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use reqwest::StatusCode;
use sandbox::{ReplicatedMariaDb, Replication};

use crate::common::life::{buy, page, product};
use crate::common::{TestApp, spawn_app, test_config, wait_until};

/// One primary with one asynchronous replica for this file's tests (each uses a database of
/// its own).
async fn replicated() -> Arc<ReplicatedMariaDb> {
    static SET: OnceLock<Arc<ReplicatedMariaDb>> = OnceLock::new();
    tokio::task::spawn_blocking(|| {
        SET.get_or_init(|| {
            Arc::new(ReplicatedMariaDb::start(1, Replication::Async).expect("a replicated MariaDB"))
        })
        .clone()
    })
    .await
    .expect("join")
}

/// An instance writing to the primary and reading pages on the replica, over a fresh
/// database; pages kept 1 ms, so every view past the first reads again.
async fn app_on(set: &ReplicatedMariaDb) -> TestApp {
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut config = test_config(&format!("{}/{name}", set.member(0).url()));
    config.database_replica_url = Some(format!("{}/{name}", set.member(1).url()));
    config.page_ttl_ms = 1;
    spawn_app(config).await
}

/// Runs the replica's `action` (which blocks on the `mariadb` client) off the runtime.
async fn on_replica(
    set: &Arc<ReplicatedMariaDb>,
    action: fn(&ReplicatedMariaDb) -> sandbox::Result<()>,
) {
    let set = Arc::clone(set);
    tokio::task::spawn_blocking(move || action(&set))
        .await
        .expect("join")
        .expect("the replica's control");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_read_on_a_lagging_replica_shows_sold_units_and_sells_none_of_them() {
    sandbox::require_faults!();
    let set = replicated().await;
    let app = app_on(&set).await;
    let id = 61;
    app.reset(id, 3).await;
    on_replica(&set, |s| s.wait_caught_up(1, 0, Duration::from_secs(60))).await;
    let (status, shown) = page(&app, id).await;
    assert_eq!((status, shown["stock"].as_i64()), (StatusCode::OK, Some(3)));

    on_replica(&set, |s| s.lag(1)).await;
    for n in 0..3 {
        let (status, order) =
            buy(&app, id, &format!("u{n}"), &format!("r{n}"), "conditional").await;
        assert_eq!(status, StatusCode::CREATED, "{order}");
    }
    let (_, shown) = page(&app, id).await;
    assert_eq!(
        shown["stock"], 3,
        "the page is read on the replica, which applied none of the sales: {shown}"
    );
    assert_eq!(
        product(&app, id).await["stock"],
        0,
        "the primary sold all three"
    );
    let (status, refused) = buy(&app, id, "late", "r-late", "conditional").await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (StatusCode::CONFLICT, Some("sold_out")),
        "a buyer the page promised a unit to is refused by the primary: {refused}"
    );

    on_replica(&set, |s| s.catch_up(1)).await;
    wait_until("the replica's page shows the sales", || async {
        page(&app, id).await.1["stock"] == 0
    })
    .await;
    let accounting = product(&app, id).await;
    assert_eq!(accounting["sold"], 3, "{accounting}");
    app.stop().await;
}

/// Page reads the instance made on the primary because the replica could not answer.
async fn reads_on_primary(app: &TestApp) -> String {
    let metrics = app
        .client
        .get(format!("{}/metrics", app.url))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    metrics
        .lines()
        .find(|l| l.starts_with("seckill_page_reads_on_primary_total "))
        .unwrap_or("no seckill_page_reads_on_primary_total")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_product_the_replica_lacks_is_read_on_the_primary() {
    sandbox::require_faults!();
    let set = replicated().await;
    let app = app_on(&set).await;
    on_replica(&set, |s| s.wait_caught_up(1, 0, Duration::from_secs(60))).await;
    on_replica(&set, |s| s.lag(1)).await;
    let id = 62;
    app.reset(id, 4).await;
    let (status, shown) = page(&app, id).await;
    on_replica(&set, |s| s.catch_up(1)).await;
    assert_eq!(
        (status, shown["stock"].as_i64()),
        (StatusCode::OK, Some(4)),
        "a product created while the replica lags is read on the primary: {shown}"
    );
    assert_eq!(
        reads_on_primary(&app).await,
        "seckill_page_reads_on_primary_total 1"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_replica_that_does_not_answer_leaves_pages_to_the_primary() {
    let database_url = crate::common::fresh_database_url().await;
    let mut config = test_config(&database_url);
    // A loopback port nobody listens on: every connection to the "replica" is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = closed.local_addr().expect("address").port();
    drop(closed);
    config.database_replica_url = Some(format!("mysql://root@127.0.0.1:{port}/replica"));
    config.page_ttl_ms = 1;
    let app = spawn_app(config).await;
    app.reset(63, 2).await;
    let (status, shown) = page(&app, 63).await;
    assert_eq!(
        (status, shown["stock"].as_i64()),
        (StatusCode::OK, Some(2)),
        "{shown}"
    );
    assert_eq!(
        reads_on_primary(&app).await,
        "seckill_page_reads_on_primary_total 1"
    );
    app.stop().await;
}
