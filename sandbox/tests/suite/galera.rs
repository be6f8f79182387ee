//! Galera: three nodes synced in one cluster, each taking writes; a row locked `FOR UPDATE` on
//! one node is not locked on another, and the second of two conflicting commits is aborted.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use sandbox::{Cluster, GaleraCluster};

/// Generous: two snapshot transfers, a rejoin.
const PATIENCE: Duration = Duration::from_secs(120);

#[test]
fn three_nodes_synced_each_see_the_others_writes() {
    sandbox::require_faults!();
    let galera = GaleraCluster::start().unwrap();
    assert_eq!(galera.status(0, "wsrep_cluster_size").as_deref(), Some("3"));
    assert_eq!(galera.await_leader(PATIENCE).unwrap(), 0);
    galera
        .sql(
            1,
            "CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, stock INT); \
             INSERT INTO shop.t VALUES (1, 5)",
        )
        .unwrap();
    let seen = sandbox::wait_for(PATIENCE, || {
        let out = galera
            .sql(2, "SELECT stock FROM shop.t WHERE id = 1")
            .ok()?;
        (out.trim() == "5").then_some(())
    });
    assert!(seen.is_some(), "node 3 never saw node 2's row");
}

/// Opens a `mariadb` session on `port` that runs `statements` and keeps its transaction open
/// until its standard input is closed.
fn session(port: u16, statements: &str) -> std::process::Child {
    let mut child = Command::new("mariadb")
        .args([
            "--no-defaults",
            "--unbuffered",
            "-h",
            "127.0.0.1",
            "-u",
            "root",
            "-N",
            "-B",
        ])
        .arg(format!("-P{port}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.as_mut().unwrap();
    writeln!(stdin, "{statements}").unwrap();
    child
}

#[test]
fn a_row_locked_for_update_on_one_node_is_free_on_another_and_the_second_commit_is_aborted() {
    sandbox::require_faults!();
    let galera = GaleraCluster::start().unwrap();
    galera
        .sql(
            0,
            "CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, stock INT); \
             INSERT INTO shop.t VALUES (1, 1)",
        )
        .unwrap();
    sandbox::wait_for(PATIENCE, || {
        let out = galera
            .sql(1, "SELECT stock FROM shop.t WHERE id = 1")
            .ok()?;
        (out.trim() == "1").then_some(())
    })
    .expect("node 2 has the row");
    // Buyer A on node 1 locks the row and keeps its transaction open; its read answered, it
    // holds the lock.
    let mut a = session(
        galera.node(0).port(),
        "BEGIN; SELECT stock FROM shop.t WHERE id = 1 FOR UPDATE; \
         UPDATE shop.t SET stock = stock - 1 WHERE id = 1;",
    );
    let mut read = String::new();
    BufReader::new(a.stdout.as_mut().unwrap())
        .read_line(&mut read)
        .unwrap();
    assert_eq!(read.trim(), "1", "A read the one unit");
    // Buyer B on node 2 locks the same row at once (no wait: the lock is node 1's alone),
    // sells the unit and commits first.
    let b = galera
        .sql(
            1,
            "BEGIN; SELECT stock FROM shop.t WHERE id = 1 FOR UPDATE; \
             UPDATE shop.t SET stock = stock - 1 WHERE id = 1; COMMIT",
        )
        .expect("B locks the row node 1 holds, and commits");
    assert_eq!(b.trim(), "1", "B read the one unit: {b}");
    // A commits: certification finds B's write to the row first.
    writeln!(a.stdin.as_mut().unwrap(), "COMMIT;").unwrap();
    drop(a.stdin.take());
    let out = a.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1213"), "A's commit: {stderr}");
    let left = galera
        .sql(0, "SELECT stock FROM shop.t WHERE id = 1")
        .unwrap();
    assert_eq!(left.trim(), "0");
}

/// The node's client port, as a connection made to `port` finds it.
fn node_port_through(port: u16) -> Option<u16> {
    let out = Command::new("mariadb")
        .args(["--no-defaults", "-h", "127.0.0.1", "-u", "root", "-N", "-B"])
        .arg(format!("-P{port}"))
        .args(["-e", "SELECT @@port"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

#[test]
fn haproxy_deals_new_connections_to_every_node_in_turn_and_none_to_a_killed_one() {
    sandbox::require_faults!();
    let galera = GaleraCluster::start().unwrap();
    let nodes: Vec<u16> = (0..3).map(|i| galera.node(i).port()).collect();
    let proxy = sandbox::Haproxy::round_robin(&nodes).unwrap();
    let mut seen: Vec<u16> = (0..6)
        .map(|_| node_port_through(proxy.port()).expect("a node answered through the proxy"))
        .collect();
    seen.sort_unstable();
    seen.dedup();
    let mut all = nodes.clone();
    all.sort_unstable();
    assert_eq!(seen, all, "six connections in turn reach all three nodes");

    galera.node(1).server().kill().unwrap();
    // A connection dealt to the dead node is dealt again to the next: none fails, none lands
    // on it, before its health check has failed and after.
    for _ in 0..6 {
        let port = node_port_through(proxy.port()).expect("a live node answered");
        assert_ne!(port, nodes[1], "a connection reached the killed node");
    }
}
