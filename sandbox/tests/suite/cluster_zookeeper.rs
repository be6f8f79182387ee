//! The ZooKeeper ensemble: it elects a leader, elects another when the leader dies or is cut
//! off, and leaves nothing behind.

use std::path::PathBuf;
use std::time::Duration;

use sandbox::{ZkMode, ZooKeeperEnsemble};

/// Generous: three cold JVMs on a loaded two-core machine.
const ELECTION: Duration = Duration::from_secs(60);

fn process_exists(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.split_whitespace().nth(2).is_none_or(|s| s != "Z"))
}

#[test]
fn the_ensemble_elects_one_leader_and_two_followers() {
    sandbox::require_faults!();
    let zk = ZooKeeperEnsemble::start().unwrap();
    let leader = zk.await_leader(ELECTION).unwrap();
    let modes: Vec<_> = zk.members().iter().map(|m| m.mode()).collect();
    for (i, mode) in modes.iter().enumerate() {
        let want = if i == leader {
            ZkMode::Leader
        } else {
            ZkMode::Follower
        };
        assert_eq!(*mode, Some(want), "member {i}; all: {modes:?}");
    }
    assert_eq!(zk.connect_string().split(',').count(), 3);
}

#[test]
fn killing_the_leader_elects_another_member() {
    sandbox::require_faults!();
    let zk = ZooKeeperEnsemble::start().unwrap();
    let old = zk.await_leader(ELECTION).unwrap();
    zk.member(old).server().kill().unwrap();
    let new = zk.await_leader(ELECTION).unwrap();
    assert_ne!(new, old);
    // The old leader comes back as a follower of the new one.
    zk.member(old).server().start_again().unwrap();
    assert_eq!(zk.member(old).mode(), Some(ZkMode::Follower));
    assert_eq!(zk.leader(), Some(new));
}

#[test]
fn a_partitioned_leader_stops_serving_and_the_majority_elects_another() {
    sandbox::require_faults!();
    let zk = ZooKeeperEnsemble::start().unwrap();
    let old = zk.await_leader(ELECTION).unwrap();
    zk.partition(old);
    let new = sandbox::wait_for(ELECTION, || zk.leader().filter(|&l| l != old));
    let modes: Vec<_> = zk.members().iter().map(|m| m.mode()).collect();
    assert!(new.is_some(), "no other leader was elected: {modes:?}");
    // Cut off, the old leader still runs and answers, but serves no one.
    let cut_off = sandbox::wait_for(ELECTION, || {
        (zk.member(old).mode() == Some(ZkMode::NotServing)).then_some(())
    });
    assert!(cut_off.is_some(), "the cut off member kept serving");
    zk.heal(old);
    let rejoined = sandbox::wait_for(ELECTION, || {
        (zk.member(old).mode() == Some(ZkMode::Follower)).then_some(())
    });
    assert!(
        rejoined.is_some(),
        "the healed member did not rejoin as follower"
    );
}

#[test]
fn dropping_the_ensemble_leaves_no_process_and_no_directory() {
    sandbox::require_faults!();
    let zk = ZooKeeperEnsemble::start().unwrap();
    let left: Vec<(u32, PathBuf)> = zk
        .members()
        .iter()
        .map(|m| (m.server().pid().unwrap(), m.server().dir().to_path_buf()))
        .collect();
    drop(zk);
    for (pid, dir) in &left {
        assert!(!process_exists(*pid), "process {pid} still runs");
        assert!(!dir.exists(), "{} still exists", dir.display());
    }
}
