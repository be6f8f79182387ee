//! An instance on a Galera node cut off from the other two: the node refuses every statement
//! until it is back in the primary component. Its buyers are told `503 backend_unavailable` — the
//! same as for a database that is down, so that they retry or a balancer sends them elsewhere —
//! while an instance on the majority's side sells on, and the node sells again once it is back.

use std::sync::Arc;
use std::time::Duration;

use crate::common;

use common::life::{buy, product};
use common::{spawn_app, test_config, wait_until};
use sandbox::GaleraCluster;

/// Generous: a partition is noticed after Galera's inactivity timeout; the way back is a
/// transfer of what the node missed.
const PATIENCE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_galera_node_cut_off_from_the_others_answers_503_and_sells_again_once_back() {
    sandbox::require_faults!();
    let cluster = Arc::new(
        tokio::task::spawn_blocking(GaleraCluster::start)
            .await
            .expect("join")
            .expect("a Galera cluster"),
    );
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let on = |node: usize| format!("{}/{name}", cluster.url(node));
    let majority = spawn_app(test_config(&on(0))).await;
    let cut_off = spawn_app(test_config(&on(2))).await;
    let id = 43;
    majority.reset(id, 5).await;
    wait_until("node 3 has the product", || async {
        product(&cut_off, id).await["initial_stock"].as_i64() == Some(5)
    })
    .await;

    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.isolate(2, PATIENCE))
        .await
        .expect("join")
        .expect("node 3 out of the primary component");
    // The instance learns it from its node within a fraction of a second; a balancer's health
    // check then sends buyers elsewhere, and one who still comes is told to retry.
    wait_until("the instance's health check fails", || async {
        health(&cut_off).await == (503, Some("backend_unavailable".into()))
    })
    .await;
    let (status, answer) = buy(&cut_off, id, "alone", "r1", "conditional").await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"], "backend_unavailable", "{answer}");
    let (status, answer) = buy(&majority, id, "many", "r1", "conditional").await;
    assert_eq!(status, 201, "the majority sells on: {answer}");

    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.heal(2, PATIENCE))
        .await
        .expect("join")
        .expect("node 3 back");
    wait_until("the instance's health check passes", || async {
        health(&cut_off).await.0 == 200
    })
    .await;
    let (status, answer) = buy(&cut_off, id, "alone", "r1", "conditional").await;
    assert_eq!(status, 201, "back in the cluster: {answer}");
    let seen = product(&cut_off, id).await;
    assert_eq!(seen["stock"].as_i64(), Some(3), "{seen}");
}

async fn health(app: &common::TestApp) -> (u16, Option<String>) {
    let Ok(answer) = reqwest::get(format!("{}/healthz", app.url)).await else {
        return (0, None);
    };
    let status = answer.status().as_u16();
    let body: serde_json::Value = answer.json().await.unwrap_or_default();
    (status, body["error"].as_str().map(String::from))
}
