//! `run --galera`: the strategies' rows on a three-node Galera cluster, each instance writing
//! to a node of its own, or every instance through HAProxy in front of the three.

use crate::common;

use app::api::Strategy;
use loadtest::rig::GaleraRows;
use loadtest::run::{RunOutput, run_in};
use loadtest::schema::world::{GaleraWriters, Topology};
use tempfile::TempDir;

/// A quick run of `conditional` and `pessimistic` from three instances, its rows on a Galera
/// cluster written as `writers` says; the run's folder lives as long as the directory returned.
async fn run_on_galera(writers: GaleraWriters) -> (RunOutput, TempDir) {
    let cluster = tokio::task::spawn_blocking(sandbox::GaleraCluster::start)
        .await
        .unwrap()
        .expect("a Galera cluster");
    let mut target = common::target();
    let rows = GaleraRows::on(cluster, writers).expect("the rows on Galera");
    target.processes.extend(rows.processes());
    target.galera = Some(rows);
    let strategies = [Strategy::Conditional, Strategy::Pessimistic];
    let mut settings = common::quick(strategies[0]);
    settings.strategies = strategies.to_vec();
    settings.instances = 3;
    let out = tempfile::tempdir().unwrap();
    let output = run_in(&settings, &target, out.path()).await.unwrap();
    (output, out)
}

/// Every strategy of `output` sold without oversell or a lost update, the cluster's
/// certification aborts counted, and the CPU of each node (and of each process group in
/// `more`) measured; the report names the arrangement and the aborts.
fn assert_safe_with_aborts_and_cpu(output: &RunOutput, more: &[&str]) {
    let report = &output.report;
    assert_eq!(report.strategies.len(), 2);
    for s in &report.strategies {
        let a = &s.sale.as_ref().unwrap().accounting;
        assert_eq!(
            (a.oversell, a.lost_updates),
            (0, 0),
            "{}: {a:?}",
            s.strategy.name
        );
        let aborts = s
            .loops
            .as_ref()
            .unwrap()
            .aborts
            .expect("aborts counted on Galera");
        assert!(aborts.total() > 0, "{}: {aborts:?}", s.strategy.name);
        let cpu = s
            .loops
            .as_ref()
            .unwrap()
            .cpu
            .as_ref()
            .expect("cpu measured");
        let nodes = ["galera-node-1", "galera-node-2", "galera-node-3"];
        for group in nodes.iter().chain(more) {
            assert!(
                cpu.processes.iter().any(|p| p.group == *group),
                "{group} missing from {cpu:?}"
            );
        }
    }
    let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
    assert!(md.contains("The Galera cluster aborted"), "{md}");
    assert!(md.contains("a Galera cluster of 3 MariaDB nodes"), "{md}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rows_on_galera_written_on_every_node_oversell_nothing_and_the_clusters_aborts_are_counted()
{
    let (output, _out) = run_on_galera(GaleraWriters::AllWriters).await;
    assert_eq!(
        output.report.world.map(|w| w.topology),
        Some(Topology::GaleraAllWriters)
    );
    assert!(
        (output.dir.to_string_lossy()).ends_with("-galera-all-writers"),
        "{}",
        output.dir.display()
    );
    assert_safe_with_aborts_and_cpu(&output, &[]);
}

#[tokio::test(flavor = "multi_thread")]
async fn rows_on_galera_behind_haproxy_oversell_nothing_and_the_proxy_s_cpu_is_counted() {
    let (output, _out) = run_on_galera(GaleraWriters::Haproxy).await;
    assert_eq!(
        output.report.world.map(|w| w.topology),
        Some(Topology::GaleraHaproxy)
    );
    assert!(
        (output.dir.to_string_lossy()).ends_with("-galera-haproxy"),
        "{}",
        output.dir.display()
    );
    // Each instance's connections are dealt to all three nodes: its transactions meet the
    // others' at commit, as with an instance per node.
    assert_safe_with_aborts_and_cpu(&output, &["haproxy"]);
    let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
    assert!(md.contains("behind HAProxy"), "{md}");
    assert!(
        md.contains(" haproxy |"),
        "the proxy's column in the CPU table: {md}"
    );
}
