//! Redis-held stock on a Redis Cluster: given the cluster's address, an instance reaches each
//! product's keys on the master that serves their slot, `redis-lua` and `redis-lua-stream`
//! sell exactly the stock across two instances, and products of different lanes live on
//! different masters.

use crate::common;

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use app::api::Home;
use app::redis_stock::{CLUSTER_LANES, Keys};
use common::{drop_database, fresh_database_url, ledger, sells_exactly_the_stock_on, spawn_app};
use reqwest::StatusCode;
use sandbox::RedisCluster;
use serde_json::json;

/// One cluster for this file's tests (each keeps its keys under a prefix of its own).
async fn cluster() -> Arc<RedisCluster> {
    static CLUSTER: OnceLock<Arc<RedisCluster>> = OnceLock::new();
    tokio::task::spawn_blocking(|| {
        CLUSTER
            .get_or_init(|| Arc::new(RedisCluster::start().expect("a Redis Cluster")))
            .clone()
    })
    .await
    .expect("join")
}

/// The master serving each lane's first product (products `0..CLUSTER_LANES`), named by its
/// shard's first slot, by the slot the cluster computes for the product's counter.
async fn masters_of_lanes(cluster: &Arc<RedisCluster>, keys: &Keys) -> Vec<u16> {
    let c = cluster.clone();
    let stock_keys: Vec<String> = (0..CLUSTER_LANES).map(|p| keys.stock(p)).collect();
    tokio::task::spawn_blocking(move || {
        let asked = c.shards()[0].member(0);
        stock_keys
            .iter()
            .map(|key| {
                let slot = asked.command(&["CLUSTER", "KEYSLOT", key]).unwrap();
                c.shard_of_slot(slot.parse().unwrap()).slots().0
            })
            .collect()
    })
    .await
    .expect("join")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lua_on_a_cluster_sells_exactly_the_stock_from_two_instances() {
    sandbox::require_faults!();
    let url = cluster().await.url();
    sells_exactly_the_stock_on(2, "redis-lua", |config| config.redis_url = Some(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lua_stream_on_a_cluster_sells_exactly_the_stock_and_places_every_order() {
    sandbox::require_faults!();
    let url = cluster().await.url();
    sells_exactly_the_stock_on(2, "redis-lua-stream", |config| config.redis_url = Some(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn products_of_different_lanes_are_sold_from_different_masters() {
    sandbox::require_faults!();
    let cluster = cluster().await;
    let database_url = fresh_database_url().await;
    let mut config = common::test_config(&database_url);
    config.redis_url = Some(cluster.url());
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let keys = Keys::in_lanes(&config.lock_prefix, CLUSTER_LANES);
    let app = spawn_app(config).await;
    let masters = masters_of_lanes(&cluster, &keys).await;
    let distinct: BTreeSet<u16> = masters.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        sandbox::SHARDS,
        "the lanes live on {distinct:?}"
    );
    // One unit of a product on each master, each counter read back where it lives.
    for &shard in &distinct {
        let product = masters.iter().position(|&s| s == shard).unwrap() as u64;
        app.reset_in(product, 3, Home::Redis).await;
        let body = json!({"user_id": "u-1", "quantity": 1, "request_id": format!("r-{product}"),
                          "strategy": "redis-lua"});
        let (status, answer) = app.order(product, &body, None).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let (c, key) = (cluster.clone(), keys.stock(product));
        let left = tokio::task::spawn_blocking(move || {
            let shard = c.shards().iter().find(|s| s.slots().0 == shard).unwrap();
            shard
                .member(shard.master().unwrap())
                .command(&["GET", &key])
        })
        .await
        .expect("join")
        .expect("GET on the shard's master");
        assert_eq!(left, "2", "product {product}");
        assert_eq!(ledger(&database_url, product).await.orders, 1);
    }
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deduction_on_a_cluster_waits_for_its_own_shard_s_replica_and_no_other() {
    sandbox::require_faults!();
    // A cluster of its own: one of its replicas is cut off for good.
    let cluster =
        tokio::task::spawn_blocking(|| Arc::new(RedisCluster::start().expect("a cluster")))
            .await
            .expect("join");
    let database_url = fresh_database_url().await;
    let mut config = common::test_config(&database_url);
    config.redis_url = Some(cluster.url());
    config.redis_wait_replicas = 1;
    config.redis_wait_timeout_ms = 300;
    config.lock_prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let keys = Keys::in_lanes(&config.lock_prefix, CLUSTER_LANES);
    let app = spawn_app(config).await;
    let masters = masters_of_lanes(&cluster, &keys).await;
    let kept: u64 = 0;
    let cut = (masters.iter())
        .position(|&m| m != masters[kept as usize])
        .expect("lanes on two masters") as u64;
    for product in [kept, cut] {
        app.reset_in(product, 3, Home::Redis).await;
    }
    let (c, cut_shard) = (cluster.clone(), masters[cut as usize]);
    tokio::task::spawn_blocking(move || {
        let shard = c
            .shards()
            .iter()
            .find(|s| s.slots().0 == cut_shard)
            .unwrap();
        shard.cut_replication()
    })
    .await
    .expect("join")
    .expect("a replica cut off");
    let buy = |product: u64| {
        let body = json!({"user_id": "u-1", "quantity": 1, "request_id": format!("r-{product}"),
                          "strategy": "redis-lua"});
        let app = &app;
        async move { app.order(product, &body, None).await }
    };
    // The product whose shard's replica acknowledges is sold; the one whose replica is cut off
    // is refused, and nothing of it becomes an order.
    let (status, answer) = buy(kept).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let (status, answer) = buy(cut).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(ledger(&database_url, kept).await.orders, 1);
    assert_eq!(ledger(&database_url, cut).await.orders, 0);
    app.stop().await;
    drop_database(&database_url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_split_on_a_cluster_sells_exactly_the_stock_from_two_instances() {
    sandbox::require_faults!();
    let url = cluster().await.url();
    sells_exactly_the_stock_on(2, "redis-split", |config| config.redis_url = Some(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_split_product_s_parts_live_on_every_master() {
    sandbox::require_faults!();
    let cluster = cluster().await;
    let keys = Keys::in_lanes("split:", CLUSTER_LANES);
    let part_keys: Vec<String> = (0..8).map(|p| keys.part(1, p).counter.stock).collect();
    let c = cluster.clone();
    let masters: BTreeSet<u16> = tokio::task::spawn_blocking(move || {
        let asked = c.shards()[0].member(0);
        part_keys
            .iter()
            .map(|key| {
                let slot = asked.command(&["CLUSTER", "KEYSLOT", key]).unwrap();
                c.shard_of_slot(slot.parse().unwrap()).slots().0
            })
            .collect()
    })
    .await
    .expect("join");
    assert_eq!(masters.len(), sandbox::SHARDS, "{masters:?}");
}
