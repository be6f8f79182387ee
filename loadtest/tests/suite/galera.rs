//! `run --galera`: the strategies' rows on a three-node Galera cluster, each instance writing
//! to a node of its own.

use std::sync::Arc;

use crate::common;

use app::api::Strategy;
use loadtest::rig::GaleraRows;
use loadtest::rig::world::{GaleraWriters, Topology};
use loadtest::run::run_in;

#[tokio::test(flavor = "multi_thread")]
async fn rows_on_galera_written_on_every_node_oversell_nothing_and_the_clusters_aborts_are_counted()
{
    let cluster = tokio::task::spawn_blocking(sandbox::GaleraCluster::start)
        .await
        .unwrap()
        .expect("a Galera cluster");
    let mut target = common::target();
    target
        .processes
        .extend(loadtest::rig::galera_processes(&cluster));
    target.galera = Some(GaleraRows {
        cluster: Arc::new(cluster),
        writers: GaleraWriters::AllWriters,
    });
    let strategies = [Strategy::Conditional, Strategy::Pessimistic];
    let mut settings = common::quick(strategies[0]);
    settings.strategies = strategies.to_vec();
    settings.instances = 3;
    let out = tempfile::tempdir().unwrap();
    let output = run_in(&settings, &target, out.path()).await.unwrap();
    let report = &output.report;

    assert_eq!(
        report.world.map(|w| w.topology),
        Some(Topology::GaleraAllWriters)
    );
    assert!(
        output
            .dir
            .to_string_lossy()
            .ends_with("-galera-all-writers"),
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
        let aborts = s.aborts.expect("aborts counted on Galera");
        assert!(aborts.total() > 0, "{}: {aborts:?}", s.strategy.name);
        let cpu = s.cpu.as_ref().expect("cpu measured");
        for node in ["galera-node-1", "galera-node-2", "galera-node-3"] {
            assert!(
                cpu.processes.iter().any(|p| p.group == node),
                "{node} missing from {cpu:?}"
            );
        }
    }
    let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
    assert!(md.contains("The Galera cluster aborted"), "{md}");
    assert!(md.contains("a Galera cluster of 3 MariaDB nodes"), "{md}");
}
