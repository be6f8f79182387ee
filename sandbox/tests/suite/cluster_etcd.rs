//! The etcd cluster: it elects a leader, elects another when the leader dies or is cut off,
//! and leaves nothing behind.

use std::path::PathBuf;
use std::time::Duration;

use sandbox::EtcdCluster;

/// Generous for a loaded two-core machine; an election takes about a second.
const ELECTION: Duration = Duration::from_secs(60);

fn process_exists(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.split_whitespace().nth(2).is_none_or(|s| s != "Z"))
}

#[test]
fn the_cluster_agrees_on_one_leader() {
    sandbox::require_faults!();
    let etcd = EtcdCluster::start().unwrap();
    let leader = etcd.await_leader(ELECTION).unwrap();
    let leader_id = etcd.member(leader).id();
    for m in etcd.members() {
        assert_eq!(m.status().map(|s| s.leader_id), Some(leader_id));
    }
    let ids: std::collections::HashSet<u64> = etcd.members().iter().map(|m| m.id()).collect();
    assert_eq!(ids.len(), 3, "three distinct members");
    assert_eq!(etcd.endpoints().len(), 3);
}

#[test]
fn killing_the_leader_elects_another_member() {
    sandbox::require_faults!();
    let etcd = EtcdCluster::start().unwrap();
    let old = etcd.await_leader(ELECTION).unwrap();
    etcd.member(old).server().kill().unwrap();
    let new = sandbox::wait_for(ELECTION, || etcd.leader().filter(|&l| l != old));
    let new = new.expect("no other leader was elected");
    // The old leader rejoins from its data directory and follows the new one.
    etcd.member(old).server().start_again().unwrap();
    let follows = sandbox::wait_for(ELECTION, || {
        let s = etcd.member(old).status()?;
        (s.leader_id == etcd.member(new).id()).then_some(())
    });
    assert!(
        follows.is_some(),
        "the restarted member does not follow the new leader"
    );
}

#[test]
fn a_partitioned_leader_is_replaced_and_follows_again_after_healing() {
    sandbox::require_faults!();
    let etcd = EtcdCluster::start().unwrap();
    let old = etcd.await_leader(ELECTION).unwrap();
    etcd.partition(old);
    let new = sandbox::wait_for(ELECTION, || etcd.leader().filter(|&l| l != old));
    let new = new.expect("the majority did not elect another leader");
    // Cut off, the old leader still answers its clients but no longer leads (etcd's leader
    // steps down when it loses contact with a quorum).
    let stepped_down = sandbox::wait_for(ELECTION, || {
        let s = etcd.member(old).status()?;
        (s.leader_id != etcd.member(old).id()).then_some(())
    });
    assert!(stepped_down.is_some(), "the cut off leader still leads");
    etcd.heal(old);
    let follows = sandbox::wait_for(ELECTION, || {
        let s = etcd.member(old).status()?;
        (s.leader_id == etcd.member(new).id()).then_some(())
    });
    assert!(
        follows.is_some(),
        "the healed member does not follow the new leader"
    );
}

#[test]
fn dropping_the_cluster_leaves_no_process_and_no_directory() {
    sandbox::require_faults!();
    let etcd = EtcdCluster::start().unwrap();
    let left: Vec<(u32, PathBuf)> = etcd
        .members()
        .iter()
        .map(|m| (m.server().pid().unwrap(), m.server().dir().to_path_buf()))
        .collect();
    drop(etcd);
    for (pid, dir) in &left {
        assert!(!process_exists(*pid), "process {pid} still runs");
        assert!(!dir.exists(), "{} still exists", dir.display());
    }
}
