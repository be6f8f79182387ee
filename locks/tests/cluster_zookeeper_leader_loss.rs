//! Clients contend for one lock on the ZooKeeper ensemble while its leader is killed (and
//! later restarted). Every client records each attempt, grant, loss notice and release in a
//! [`History`], and the fenced store records each write it accepts or refuses; the history
//! checker then asserts mutual exclusion (as far as clients can know), increasing fencing
//! tokens, and that the store accepted only the newest token.
//!
//! ZooKeeper commits a grant on a quorum before answering, and sessions outlive a leader
//! election that is shorter than their timeout, so the expected outcome is a clean history
//! with a gap in grants while the ensemble elects: the unavailability window, printed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use locks::history::{self, History, Op};
use locks::zookeeper::ZooKeeperLock;
use locks::{AcquireOptions, DistributedLock};
use sandbox::ZooKeeperEnsemble;

const CLIENTS: usize = 4;
/// Longer than an election on a loaded machine, so sessions survive the leader's death.
const SESSION: Duration = Duration::from_secs(10);
/// A bound on any one request while the ensemble has no leader.
const PATIENCE: Duration = Duration::from_secs(20);

/// A resource that remembers the highest fencing token it has seen and refuses lower ones. It
/// records each decision under its own mutex, so the history shows the store's order.
struct FencedStore {
    highest: Mutex<u64>,
    history: Arc<History>,
}

impl FencedStore {
    fn write(&self, client: &str, token: u64) -> bool {
        let mut highest = self.highest.lock().unwrap();
        let accepted = token >= *highest;
        if accepted {
            *highest = token;
        }
        self.history.write(client, token, accepted);
        accepted
    }
}

/// One client: acquire, write three times to the store, release; until `until`.
async fn contend(
    name: String,
    lock: ZooKeeperLock,
    key: String,
    store: Arc<FencedStore>,
    until: Instant,
) {
    let history = &store.history;
    while Instant::now() < until {
        history.attempt(&name);
        let options = AcquireOptions::new(SESSION).wait(Duration::from_secs(5));
        let guard = match tokio::time::timeout(PATIENCE, lock.acquire(&key, options)).await {
            Ok(Ok(guard)) => guard,
            Ok(Err(e)) => {
                history.failed(&name, e);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(_) => {
                history.failed(&name, format!("no answer within {PATIENCE:?}"));
                continue;
            }
        };
        let token = guard.fencing_token();
        history.grant(&name, token);
        let work = async {
            for _ in 0..3 {
                store.write(&name, token);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            () = work => history.release(&name, token),
            () = guard.lost() => history.lost(&name, token),
        }
        let _ = tokio::time::timeout(PATIENCE, guard.release()).await;
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
    let store = Arc::new(FencedStore {
        highest: Mutex::new(0),
        history: history.clone(),
    });
    let key = format!("cluster-history:{}", locks::new_owner_id());
    let until = Instant::now() + Duration::from_secs(16);
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        // Rotate the members so the clients' sessions start on different servers.
        let mut members = ports.clone();
        members.rotate_left(i % ports.len());
        let lock = ZooKeeperLock::connect(&members.join(","), SESSION)
            .await
            .expect("connect");
        let (key, store) = (key.clone(), store.clone());
        clients.push(tokio::spawn(contend(
            format!("client-{i}"),
            lock,
            key,
            store,
            until,
        )));
    }

    tokio::time::sleep(Duration::from_secs(3)).await;
    let z = zk.clone();
    let leader = control(move || z.await_leader(PATIENCE))
        .await
        .expect("a leader");
    history.fault("nemesis", format!("kill leader zookeeper-{}", leader + 1));
    let z = zk.clone();
    control(move || z.member(leader).server().kill())
        .await
        .expect("kill");
    tokio::time::sleep(Duration::from_secs(5)).await;
    history.fault("nemesis", format!("restart zookeeper-{}", leader + 1));
    let z = zk.clone();
    control(move || z.member(leader).server().start_again())
        .await
        .expect("restart");

    for c in clients {
        c.await.expect("client task");
    }
    if let Err(violations) = history::check(&history) {
        panic!("{violations}");
    }

    let events = history.events();
    let kill = events
        .iter()
        .position(|e| matches!(e.op, Op::Fault { .. }))
        .expect("the kill is recorded");
    let grant_at = |e: &history::Event| matches!(e.op, Op::Grant { .. }).then_some(e.at);
    let before = events[..kill].iter().filter_map(grant_at).count();
    let last_before = events[..kill].iter().rev().find_map(grant_at);
    let first_after = events[kill..].iter().find_map(grant_at);
    let after = events[kill..].iter().filter_map(grant_at).count();
    eprintln!(
        "grants: {before} before the kill, {after} after; no grant for {:?} around it; \
         {} loss notices, {} refused writes",
        first_after.zip(last_before).map(|(a, b)| a - b),
        events
            .iter()
            .filter(|e| matches!(e.op, Op::Lost { .. }))
            .count(),
        events
            .iter()
            .filter(|e| matches!(
                e.op,
                Op::Write {
                    accepted: false,
                    ..
                }
            ))
            .count(),
    );
    assert!(
        before > 0,
        "no grant before the kill: the test proves nothing"
    );
    assert!(
        after > 0,
        "no grant after the leader was killed: the lock never came back"
    );
}
