//! `run --replicas`: the strategies' rows on a MariaDB primary whose commits wait for its
//! replica, the products' pages read on the replica.

use crate::common;

use app::api::Strategy;
use loadtest::rig::replicas::{ReplicaRows, Replicas};
use loadtest::run::run_in;
use loadtest::schema::world::Topology;
use sqlx::{Connection, MySqlConnection};

#[tokio::test(flavor = "multi_thread")]
async fn rows_on_a_semi_synchronous_primary_oversell_nothing_and_the_replicas_distance_is_read() {
    let rows = tokio::task::spawn_blocking(|| ReplicaRows::start(Replicas::SemiSync))
        .await
        .unwrap()
        .expect("a primary and its replica");
    let set = std::sync::Arc::clone(&rows.set);
    let mut target = common::target();
    target.processes.extend(rows.processes());
    target.replicas = Some(rows);
    let strategies = [Strategy::Conditional, Strategy::Batched];
    let mut settings = common::quick(strategies[0]);
    settings.strategies = strategies.to_vec();
    let out = tempfile::tempdir().unwrap();
    let output = run_in(&settings, &target, out.path()).await.unwrap();
    let report = &output.report;

    assert_eq!(
        report.world.map(|w| w.topology),
        Some(Topology::ReplicaSemiSync)
    );
    assert!(
        output.dir.to_string_lossy().ends_with("-replica-semi-sync"),
        "{}",
        output.dir.display()
    );
    assert_eq!(report.strategies.len(), 2);
    for s in &report.strategies {
        let a = &s.sale.as_ref().unwrap().accounting;
        assert_eq!(
            (a.oversell, a.lost_updates),
            (0, 0),
            "{}: {a:?}",
            s.strategy.name
        );
        let lag = s
            .loops
            .as_ref()
            .unwrap()
            .replica
            .expect("the replica's distance read");
        assert_eq!(lag.rounds_asynchronous, 0, "{}: {lag:?}", s.strategy.name);
        let cpu = s
            .loops
            .as_ref()
            .unwrap()
            .cpu
            .as_ref()
            .expect("cpu measured");
        for role in ["mariadb-primary", "mariadb-replica"] {
            assert!(
                cpu.processes.iter().any(|p| p.group == role),
                "{role} missing from {cpu:?}"
            );
        }
    }
    let (semi_sync, replicas) = tokio::task::spawn_blocking(move || set.semi_sync_status(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (semi_sync, replicas),
        (true, 1),
        "the primary's commits waited for its replica throughout"
    );
    let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
    assert!(md.contains("of the primary's transactions behind"), "{md}");
    assert!(md.contains("a commit of this strategy carried"), "{md}");
    assert!(
        md.contains("a MariaDB primary with a semi-synchronous replica"),
        "{md}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_watch_sees_a_lagging_replica_behind_and_times_its_catch_up() {
    let rows = tokio::task::spawn_blocking(|| ReplicaRows::start(Replicas::Async))
        .await
        .unwrap()
        .expect("a primary and its replica");
    let set = std::sync::Arc::clone(&rows.set);
    let blocking = std::sync::Arc::clone(&set);
    tokio::task::spawn_blocking(move || blocking.lag(1))
        .await
        .unwrap()
        .unwrap();
    let watch = rows.watch().await.unwrap();
    let mut primary = MySqlConnection::connect(&rows.primary_url()).await.unwrap();
    sqlx::raw_sql(
        "CREATE DATABASE watched; CREATE TABLE watched.t (id INT PRIMARY KEY); \
         INSERT INTO watched.t VALUES (1); INSERT INTO watched.t VALUES (2); \
         INSERT INTO watched.t VALUES (3)",
    )
    .execute(&mut primary)
    .await
    .unwrap();
    // A state, not a time: a sample taken after the writes.
    while watch.most_behind_so_far() < 5 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let blocking = std::sync::Arc::clone(&set);
    tokio::task::spawn_blocking(move || blocking.catch_up(1))
        .await
        .unwrap()
        .unwrap();
    let lag = watch.finish().await.unwrap();
    assert_eq!(
        lag.most_behind, 5,
        "two DDL and three inserts not applied: {lag:?}"
    );
    assert_eq!(lag.rounds_asynchronous, 0);
    let caught_up = set.last_transaction(1).unwrap();
    assert_eq!(
        caught_up,
        set.last_transaction(0).unwrap(),
        "caught up by the finish"
    );
}
