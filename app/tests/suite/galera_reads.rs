//! Two instances on two nodes of a Galera cluster: a buyer who bought through one pays through
//! the other. A node applies the others' writes a moment after they commit; a session that
//! does not wait for that (`wsrep_sync_wait` 0) does not find the order its buyer was just
//! told of, and one that does (the service's default) waits and finds it.

use std::sync::{Arc, OnceLock};

use crate::common;

use common::life::{act, buy, product};
use common::{spawn_app, test_config, wait_until};
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
    let a = Arc::new(spawn_app(first).await);
    let mut second = test_config(&on(1));
    second.galera_sync_wait = sync_wait;
    let b = Arc::new(spawn_app(second).await);
    let id = 41;
    a.reset(id, 5).await;
    wait_until("node 2 has the product", || async {
        product(&b, id).await["initial_stock"].as_i64() == Some(5)
    })
    .await;

    let mut lock = MySqlConnection::connect(&cluster.url(1)).await.unwrap();
    lock.execute("FLUSH TABLES WITH READ LOCK").await.unwrap();
    let (status, order) = buy(&a, id, "payer", "r1", "conditional").await;
    assert_eq!(status, 201, "{order}");
    let paying = {
        let b = Arc::clone(&b);
        tokio::spawn(async move { act(&b, id, "payer", "r1", "pay", &[]).await })
    };
    // A state, not a time: the payment's statement seen waiting on node 2, or its answer.
    while waiting_statements(&mut lock).await == 0 && !paying.is_finished() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    lock.execute("UNLOCK TABLES").await.unwrap();
    paying.await.unwrap()
}

/// The payment's reads of its order running on this node (a statement waiting for causality
/// waits while it is prepared: `Prepare`, not `Query`). Only those: the instance's own work
/// (its expiry sweep, its pages) runs there too, and unlocking when one of them is caught
/// running would let the node apply the order before the payment looks for it.
async fn waiting_statements(conn: &mut MySqlConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Sleep' AND DB IS NOT NULL \
         AND INFO LIKE '%FROM orders%request_id%'",
    )
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
