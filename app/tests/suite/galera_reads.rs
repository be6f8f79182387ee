//! Two instances on two nodes of a Galera cluster: a buyer who bought through one pays through
//! the other. A node applies the others' writes a moment after they commit; a session that
//! does not wait for that (`wsrep_sync_wait` 0) does not find the order its buyer was just
//! told of, and one that does (the service's default) waits and finds it. The same holds for
//! the product's page read on another node (`--database-replica-url`): it waits for the sale.

use std::sync::{Arc, OnceLock};

use crate::common;

use common::life::{act, buy, page, product};
use common::{TestApp, spawn_app, test_config, wait_until};
use reqwest::StatusCode;
use sandbox::GaleraCluster;
use serde_json::Value;
use sqlx::{Connection, Executor, MySqlConnection};

/// One cluster for this file's tests (each uses a database of its own).
async fn cluster() -> Arc<GaleraCluster> {
    static CLUSTER: OnceLock<Arc<GaleraCluster>> = OnceLock::new();
    tokio::task::spawn_blocking(|| {
        CLUSTER
            .get_or_init(|| Arc::new(GaleraCluster::start().expect("a Galera cluster")))
            .clone()
    })
    .await
    .expect("join")
}

/// What paying through node 2 answered for an order placed through node 1 while node 2 applied
/// nothing (its applier held by a global read lock, released once the payment is answered or
/// seen waiting).
async fn pay_on_the_other_node(sync_wait: u8) -> (StatusCode, Value) {
    let cluster = cluster().await;
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let on = |node: usize| format!("{}/{name}", cluster.url(node));
    let mut first = test_config(&on(0));
    first.galera_sync_wait = sync_wait;
    let a = spawn_app(first).await;
    let mut second = test_config(&on(1));
    second.galera_sync_wait = sync_wait;
    let b = spawn_app(second).await;
    let id = 41;
    a.reset(id, 5).await;
    wait_until("node 2 has the product", || async {
        product(&b, id).await["initial_stock"].as_i64() == Some(5)
    })
    .await;

    let paying = async move { act(&b, id, "payer", "r1", "pay", &[]).await };
    // A session that waits for causality is seen waiting, and node 2 is let go; one that does
    // not wait reads at once and is answered while node 2 is still held (let go at the sight
    // of its statement, node 2 could apply the order between its prepare and its execution).
    let waits = (sync_wait > 0).then_some("%FROM orders%request_id%");
    read_after_a_sale(&cluster, &a, id, "payer", waits, paying).await
}

/// Node 2 held still by a global read lock: it applies none of the others' writes until the
/// lock is released.
struct Paused {
    conn: MySqlConnection,
    /// This file's tests pause node 2 one at a time: the node's applier is paused once for all
    /// the sessions that hold the lock, and the first of them to unlock can resume it for all.
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

/// Waits for this test's turn, then pauses node 2.
async fn pause_node_2(cluster: &GaleraCluster) -> Paused {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = TURN.lock().await;
    let mut conn = MySqlConnection::connect(&cluster.url(1)).await.unwrap();
    conn.execute("FLUSH TABLES WITH READ LOCK").await.unwrap();
    Paused { conn, _turn: turn }
}

/// Buys one unit of `id` through `seller` (on node 1) as `user` (request `r1`) while node 2
/// applies nothing, then runs `read`; lets node 2 apply again once a statement like `waits` is
/// seen running there (waiting for causality) or `read` is done — a state, not a time — and
/// returns what `read` answered.
async fn read_after_a_sale<T: Send + 'static>(
    cluster: &GaleraCluster,
    seller: &TestApp,
    id: u64,
    user: &str,
    waits: Option<&str>,
    read: impl Future<Output = T> + Send + 'static,
) -> T {
    let mut lock = pause_node_2(cluster).await;
    let (status, order) = buy(seller, id, user, "r1", "conditional").await;
    assert_eq!(status, 201, "{order}");
    let answer = tokio::spawn(read);
    while !answer.is_finished() {
        if let Some(pattern) = waits
            && waiting_statements(&mut lock.conn, pattern).await > 0
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    lock.conn.execute("UNLOCK TABLES").await.unwrap();
    let answered = answer.await.unwrap();
    drop(lock);
    answered
}

/// The statements like `pattern` running on this node (a statement waiting for causality
/// waits while it is prepared: `Prepare`, not `Query`). Only those: the instance's own work
/// (its expiry sweep, its pages) runs there too, and unlocking when one of them is caught
/// running would let the node apply the order before the read that is tested looks for it.
async fn waiting_statements(conn: &mut MySqlConnection, pattern: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Sleep' AND DB IS NOT NULL \
         AND INFO LIKE ?",
    )
    .bind(pattern)
    .fetch_one(conn)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buyer_pays_through_another_galera_node_an_order_it_waits_for_and_finds() {
    sandbox::require_faults!();
    let (status, paid) = pay_on_the_other_node(3).await;
    assert_eq!(status, 200, "{paid}");
    assert_eq!(paid["stage"], "paid", "{paid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_causality_checks_the_other_galera_node_does_not_find_the_order_just_placed() {
    sandbox::require_faults!();
    let (status, paid) = pay_on_the_other_node(0).await;
    assert_eq!(status, 404, "{paid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_read_on_another_galera_node_waits_for_the_sale_it_shows() {
    sandbox::require_faults!();
    let cluster = cluster().await;
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut config = test_config(&format!("{}/{name}", cluster.url(0)));
    config.database_replica_url = Some(format!("{}/{name}", cluster.url(1)));
    config.galera_sync_wait = 3;
    config.page_ttl_ms = 1;
    let app = Arc::new(spawn_app(config).await);
    let id = 42;
    app.reset(id, 5).await;
    let node_2 = format!("{}/{name}", cluster.url(1));
    wait_until("node 2 has the product", || async {
        let mut conn = MySqlConnection::connect(&node_2).await.unwrap();
        let found: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM products WHERE id = ?")
            .bind(id)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        found == 1
    })
    .await;

    let reading = {
        let app = Arc::clone(&app);
        async move { page(&app, id).await.1 }
    };
    let pattern = "%initial_stock%FROM products%";
    let shown = read_after_a_sale(&cluster, &app, id, "reader", Some(pattern), reading).await;
    assert_eq!(
        shown["stock"], 4,
        "the page read on node 2 waited for the sale node 1 had made: {shown}"
    );
}
