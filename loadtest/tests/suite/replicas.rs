//! `run --replicas`: the strategies' rows on a MariaDB primary whose commits wait for its
//! replica, the products' pages read on the replica.

use crate::common;

use app::api::Strategy;
use loadtest::rig::replicas::{ReplicaRows, Replicas};
use loadtest::rig::world::Topology;
use loadtest::run::run_in;

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
        let a = &s.sale.accounting;
        assert_eq!(
            (a.oversell, a.lost_updates),
            (0, 0),
            "{}: {a:?}",
            s.strategy.name
        );
        let lag = s.replica.expect("the replica's distance read");
        assert_eq!(lag.rounds_asynchronous, 0, "{}: {lag:?}", s.strategy.name);
        let cpu = s.cpu.as_ref().expect("cpu measured");
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
    assert!(md.contains("transaction(s) behind the primary"), "{md}");
    assert!(
        md.contains("a MariaDB primary with a semi-synchronous replica"),
        "{md}"
    );
}
