//! `seckill-bench run --redis-cluster` in its quick form: the Redis-held strategies' flood and
//! flash sale with their stock on a sandbox Redis Cluster — one counter per product, or split
//! over parts on several shards — keep every unit (no oversell, no unit beyond the limit, none
//! stranded, sold out: the split undersells nothing), and the report names the cluster and
//! gives each shard its CPU.

use crate::common;

use app::api::Strategy;
use loadtest::phase::flood::{FloodResult, FloodShape, NAME as FLOOD};
use loadtest::run::run_in;
use loadtest::schema::world::Topology;

#[tokio::test(flavor = "multi_thread")]
async fn redis_stock_on_a_cluster_keeps_every_unit_through_a_flood_and_a_sale_and_each_shard_has_its_cpu()
 {
    let cluster = tokio::task::spawn_blocking(sandbox::RedisCluster::start)
        .await
        .unwrap()
        .expect("a Redis Cluster");
    let mut target = common::target();
    target.redis_cluster = Some(cluster.url());
    target
        .processes
        .extend(loadtest::rig::cluster_processes(&cluster));
    let strategies = [
        Strategy::RedisLua,
        Strategy::RedisLuaStream,
        Strategy::RedisSplit,
    ];
    let mut settings = common::quick(strategies[0]);
    settings.strategies = strategies.to_vec();
    settings.phases.put(
        FLOOD,
        FloodShape {
            users: 600,
            non_payer_share: 0.0,
            kill_mid_sale: false,
            ..crate::flood::shape()
        },
    );
    let out = tempfile::tempdir().unwrap();
    let output = run_in(&settings, &target, out.path()).await.unwrap();
    common::drop_database(&target).await;
    let report = &output.report;

    assert_eq!(
        report.world.map(|w| w.topology),
        Some(Topology::RedisCluster)
    );
    for f in report.each::<FloodResult>(FLOOD) {
        let a = &f.crowd.accounting;
        assert_eq!(
            (a.oversell, f.crowd.beyond_limit, a.stranded),
            (0, 0, 0),
            "{}: {f:?}",
            f.strategy.name
        );
        assert_eq!(a.units_sold, a.initial_stock, "{}: {a:?}", f.strategy.name);
    }
    for s in &report.strategies {
        let a = &s.sale.as_ref().unwrap().accounting;
        assert_eq!(
            (a.oversell, a.stranded),
            (0, 0),
            "{}: {a:?}",
            s.strategy.name
        );
        assert_eq!(a.units_sold, a.initial_stock, "{}: {a:?}", s.strategy.name);
    }
    assert_eq!(report.each::<FloodResult>(FLOOD).len(), 3);
    assert_eq!(report.strategies.len(), 3);
    let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
    assert!(
        md.contains("| topology | a Redis Cluster of 3 masters"),
        "{md}"
    );
    assert!(
        md.contains("redis-shard-1"),
        "each shard has its CPU column: {md}"
    );
}
