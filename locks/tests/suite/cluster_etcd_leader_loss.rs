//! Clients contend for one lock on the three-member etcd cluster while its leader is killed
//! and stays down. Two members are a majority: once they have elected a new leader (about a
//! second, etcd's default election timeout), etcd serves again, and so must the lock. Every
//! client records each attempt, grant, loss notice and release in a [`History`], checked for
//! mutual exclusion and rising fencing tokens as in the ZooKeeper ensemble's test.

use std::sync::Arc;
use std::time::{Duration, Instant};

use locks::DistributedLock;
use locks::etcd::EtcdLock;
use locks::history::{self, History, Op};
use locks::recorded::{Contention, FencedStore, contend};
use sandbox::EtcdCluster;

const CLIENTS: usize = 4;
/// Longer than an election on a loaded machine, so leases survive the leader's death.
const LEASE: Duration = Duration::from_secs(10);
/// A bound on any one call while the cluster has no leader.
const PATIENCE: Duration = Duration::from_secs(20);
/// How soon after the kill some client must be granted the lock again: several elections.
const RESUMES_WITHIN: Duration = Duration::from_secs(5);

/// Runs blocking harness control off the runtime's workers.
async fn control<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("control task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grants_resume_soon_after_the_leader_dies_while_it_stays_down() {
    sandbox::require_faults!();
    let etcd = Arc::new(control(|| EtcdCluster::start().expect("cluster")).await);
    let history = Arc::new(History::new());
    let store = Arc::new(FencedStore::new(history.clone()));
    let key = format!("cluster-leader-loss:{}", locks::new_owner_id());
    let (before, down) = (Duration::from_secs(3), Duration::from_secs(10));
    let until = Instant::now() + before + down;
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        // Rotate the members so the clients start on different servers.
        let mut endpoints = etcd.endpoints();
        let n = endpoints.len();
        endpoints.rotate_left(i % n);
        let lock = EtcdLock::connect(&endpoints).await.expect("connect");
        let how = Contention {
            lease: LEASE,
            patience: PATIENCE,
            ..Contention::default()
        };
        clients.push(tokio::spawn(contend(
            format!("client-{i}"),
            Arc::new(lock) as Arc<dyn DistributedLock>,
            key.clone(),
            store.clone(),
            until,
            how,
        )));
    }

    tokio::time::sleep(before).await;
    let e = etcd.clone();
    let leader = control(move || e.await_leader(PATIENCE))
        .await
        .expect("a leader");
    history.fault("nemesis", format!("kill leader etcd-{}", leader + 1));
    let e = etcd.clone();
    control(move || e.member(leader).server().kill())
        .await
        .expect("kill");
    for c in clients {
        c.await.expect("client task");
    }

    let events = history.events();
    if let Err(violations) = history::check(&history) {
        panic!("{violations}");
    }
    let kill = events
        .iter()
        .position(|e| matches!(e.op, Op::Fault { .. }))
        .expect("the kill is recorded");
    let is_grant = |e: &&history::Event| matches!(e.op, Op::Grant { .. });
    assert!(
        events[..kill].iter().any(|e| is_grant(&e)),
        "no grant before the kill: the test proves nothing"
    );
    let first_after = events[kill..].iter().find(is_grant).map(|e| e.at);
    let waited = first_after.map(|at| at - events[kill].at);
    let shown: Vec<String> = events.iter().map(ToString::to_string).collect();
    assert!(
        waited.is_some_and(|w| w <= RESUMES_WITHIN),
        "with 2 of 3 members up, the first grant after the leader's death came {waited:?} \
         after it (expected within {RESUMES_WITHIN:?}):\n{}",
        shown.join("\n")
    );
    eprintln!("first grant {waited:?} after the kill");
}
