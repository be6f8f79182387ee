//! Clients contend for one lock on the ZooKeeper ensemble while its leader is killed (and
//! later restarted). Every client records each attempt, grant, loss notice and release in a
//! [`History`], and the fenced store records each write it accepts or refuses; the history
//! checker then asserts mutual exclusion (as far as clients can know), increasing fencing
//! tokens, and that the store accepted only the newest token.
//!
//! ZooKeeper commits a grant on a quorum before answering, and sessions outlive a leader
//! election that is shorter than their timeout, so the expected outcome is a clean history
//! with a gap in grants while the ensemble elects: the unavailability window, printed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use locks::DistributedLock;
use locks::history::{self, History, Op};
use locks::recorded::{Contention, FencedStore, Outage, contend_while};
use locks::zookeeper::ZooKeeperLock;
use sandbox::ZooKeeperEnsemble;

const CLIENTS: usize = 4;
/// Longer than an election on a loaded machine, so sessions survive the leader's death.
const SESSION: Duration = Duration::from_secs(10);
/// A bound on any one request while the ensemble has no leader.
const PATIENCE: Duration = Duration::from_secs(20);

/// How long the run may wait for one state before it gives up and says which.
const STATE_WAIT: Duration = Duration::from_secs(180);

/// Grants recorded so far.
fn grants(history: &History) -> usize {
    let events = history.events();
    events
        .iter()
        .filter(|e| matches!(e.op, Op::Grant { .. }))
        .count()
}

/// Waits until the history shows `enough`; panics naming `what` after [`STATE_WAIT`].
async fn await_history(history: &History, what: &str, enough: impl Fn(&History) -> bool) {
    let deadline = Instant::now() + STATE_WAIT;
    while !enough(history) {
        assert!(
            Instant::now() < deadline,
            "waited {STATE_WAIT:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs blocking harness control off the runtime's workers.
async fn control<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("control task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contenders_keep_a_clean_lock_history_while_the_ensemble_loses_its_leader() {
    sandbox::require_faults!();
    let zk = Arc::new(control(|| ZooKeeperEnsemble::start().expect("ensemble")).await);
    let ports: Vec<String> = zk.members().iter().map(|m| m.connect_string()).collect();
    let history = Arc::new(History::new());
    let store = Arc::new(FencedStore::new(history.clone()));
    let key = format!("cluster-history:{}", locks::new_owner_id());
    let going = Arc::new(AtomicBool::new(true));
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        // Rotate the members so the clients' sessions start on different servers.
        let mut members = ports.clone();
        members.rotate_left(i % ports.len());
        let lock = ZooKeeperLock::connect(&members.join(","), SESSION)
            .await
            .expect("connect");
        let (key, store, going) = (key.clone(), store.clone(), going.clone());
        let how = Contention {
            lease: SESSION,
            patience: PATIENCE,
            ..Contention::default()
        };
        clients.push(tokio::spawn(contend_while(
            format!("client-{i}"),
            Arc::new(lock) as Arc<dyn DistributedLock>,
            key,
            store,
            move || going.load(Ordering::SeqCst),
            how,
        )));
    }

    await_history(&history, "grants before the kill", |h| {
        grants(h) >= 2 * CLIENTS
    })
    .await;
    let z = zk.clone();
    let leader = control(move || z.await_leader(PATIENCE))
        .await
        .expect("a leader");
    history.fault("nemesis", format!("kill leader zookeeper-{}", leader + 1));
    let z = zk.clone();
    control(move || z.member(leader).server().kill())
        .await
        .expect("kill");
    // Two of three members are a quorum: the lock must come back before the member does. One
    // grant the dying leader committed may still reach its client after the kill; several
    // grants, each after a release, need the new leader.
    await_history(&history, "grants after the kill", |h| {
        Outage::of(&h.events()).grants_after >= CLIENTS
    })
    .await;
    history.fault("nemesis", format!("restart zookeeper-{}", leader + 1));
    let z = zk.clone();
    control(move || z.member(leader).server().start_again())
        .await
        .expect("restart");
    let restarted = grants(&history);
    await_history(&history, "grants after the restart", |h| {
        grants(h) >= restarted + CLIENTS
    })
    .await;
    going.store(false, Ordering::SeqCst);

    for c in clients {
        c.await.expect("client task");
    }
    if let Err(violations) = history::check(&history) {
        panic!("{violations}");
    }

    let outage = Outage::of(&history.events());
    eprintln!("{outage:?}");
    let (before, after) = (outage.grants_before, outage.grants_after);
    assert!(
        before > 0,
        "no grant before the kill: the test proves nothing"
    );
    assert!(
        after > 0,
        "no grant after the leader was killed: the lock never came back"
    );
}
