//! Redis-held stock through Sentinel: an instance given the Sentinels sells `redis-lua` stock
//! from the primary they name; when that primary dies it answers `503 backend_unavailable`
//! (or sells) while no primary answers, never anything else; and once the Sentinels promote a
//! replica, the same instance sells from it, without a restart.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use app::api::Home;
use app::redis_stock::Keys;
use common::{TestApp, drop_database, fresh_database_url, ledger, spawn_app, test_config};
use reqwest::StatusCode;
use serde_json::{Value, json};

const PRODUCT: u64 = 1;
const STOCK: i64 = 20;
/// Units sold before the primary is killed.
const BEFORE: usize = 5;
/// A bound on the Sentinels' failover (down-after 1 s, failover timeout 3 s in the harness).
const FAILOVER: Duration = Duration::from_secs(60);
/// A bound on the instance finding the promoted primary once the Sentinels name it.
const RECOVERY: Duration = Duration::from_secs(30);

/// Runs blocking harness control off the runtime's threads.
async fn control<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("join")
}

/// One `redis-lua` unit for buyer `n` (request id of its own).
async fn buy(app: &TestApp, n: usize) -> (StatusCode, Value) {
    let body = json!({
        "user_id": format!("u-{n}"),
        "quantity": 1,
        "request_id": format!("r-{n}"),
        "strategy": "redis-lua",
    });
    app.order(PRODUCT, &body, None).await
}

fn unavailable(status: StatusCode, answer: &Value) -> bool {
    status == StatusCode::SERVICE_UNAVAILABLE && answer["error"] == "backend_unavailable"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lua_through_sentinel_answers_503_while_no_primary_answers_and_sells_from_the_promoted_replica()
 {
    sandbox::require_faults!();
    let cluster = Arc::new(
        control(sandbox::RedisSentinelCluster::start)
            .await
            .expect("Redis with Sentinels"),
    );
    let c = cluster.clone();
    let old = control(move || c.await_leader(FAILOVER))
        .await
        .expect("a primary");
    let database_url = fresh_database_url().await;
    let mut config = test_config(&database_url);
    // The primary's fixed address as well, as a deployment naming both might: the Sentinels
    // must win, or the stock stays with the primary that is about to die.
    config.redis_url = Some(cluster.server(old).url());
    config.redis_sentinels = cluster.sentinel_addrs();
    config.redis_master_name = cluster.master_name().to_string();
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let keys = Keys::new(&config.lock_prefix);
    let app = spawn_app(config).await;
    app.reset_in(PRODUCT, STOCK, Home::Redis).await;

    let mut n = 0;
    for _ in 0..BEFORE {
        let (status, answer) = buy(&app, n).await;
        n += 1;
        assert_eq!(status, StatusCode::CREATED, "before the kill: {answer}");
    }
    // Both replicas have every deduction before the primary dies: whichever is promoted,
    // nothing sold is lost, so the counter must account for every order afterwards.
    let c = cluster.clone();
    control(move || c.server(old).await_replicas_acknowledged(2, FAILOVER))
        .await
        .expect("both replicas acknowledge every deduction");
    let c = cluster.clone();
    control(move || c.server(old).server().kill())
        .await
        .expect("kill the primary");

    // Until the Sentinels agree on a promoted replica: a sale or a 503, nothing else.
    let deadline = Instant::now() + FAILOVER;
    let mut refused = 0;
    let new = loop {
        let (status, answer) = buy(&app, n).await;
        n += 1;
        match status {
            StatusCode::CREATED => {}
            _ if unavailable(status, &answer) => refused += 1,
            _ => panic!("while the primary was dead: {status} {answer}"),
        }
        let c = cluster.clone();
        if let Some(new) = control(move || c.leader()).await.filter(|&i| i != old) {
            break new;
        }
        assert!(
            Instant::now() < deadline,
            "no replica promoted in {FAILOVER:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The first purchase after the kill went out well within the Sentinels' one-second
    // failure detection, to a primary that was already dead.
    assert!(
        refused > 0,
        "no purchase was refused while the primary was dead"
    );

    // The same instance sells again, at the promoted replica.
    let deadline = Instant::now() + RECOVERY;
    loop {
        let (status, answer) = buy(&app, n).await;
        n += 1;
        match status {
            StatusCode::CREATED => break,
            _ if unavailable(status, &answer) => assert!(
                Instant::now() < deadline,
                "no sale within {RECOVERY:?} of the promotion: {answer}"
            ),
            _ => panic!("after the promotion: {status} {answer}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The product read is the promoted primary's counter, and it accounts for every order.
    let view = app.drained(PRODUCT).await;
    let (c, key) = (cluster.clone(), keys.stock(PRODUCT));
    let counter = control(move || c.server(new).command(&["GET", &key]))
        .await
        .expect("GET on the promoted primary");
    assert_eq!(view.stock.to_string(), counter, "{view:?}");
    let truth = ledger(&database_url, PRODUCT).await;
    assert_eq!(
        view.stock + truth.sold,
        STOCK,
        "the counter and the orders disagree: {view:?}, {truth:?}"
    );
    app.stop().await;
    drop_database(&database_url).await;
}
