//! A ZooKeeper node or etcd key whose delete was lost in a broken connection must still go: its
//! session or lease outlives the glitch (the client reconnects and keeps renewing), so a node
//! left behind would block every later contender for as long as the process lives.
//!
//! Each test cuts a client off (a relay that black-holes its connection) while one of its
//! deletes is in flight — a release, a waiter giving up, a cancelled waiter, a cancelled put —
//! then heals the link, which cuts the stale connection so that the delete fails. The next
//! contender must then get the lock well within the session timeout / lease, which only a
//! retried delete allows.

use crate::relay;

use std::time::Duration;

use etcd_client::GetOptions;
use locks::etcd::{EtcdLock, lock_prefix};
use locks::zookeeper::ZooKeeperLock;
use locks::{AcquireOptions, DistributedLock, Guard};
use relay::Relay;

/// Session timeout / lease of the client that is cut off: its session or lease must survive
/// the cut, so only its own delete can free the lock.
const SURVIVES: Duration = Duration::from_secs(20);
/// How soon after the heal the next contender must be granted: far below [`SURVIVES`].
const PROMPTLY: Duration = Duration::from_secs(5);
/// Long enough for a delete to be sent into the black hole.
const IN_FLIGHT: Duration = Duration::from_millis(300);

fn key(test: &str) -> String {
    format!("failed-delete-test:{test}:{}", locks::new_owner_id())
}

async fn zookeeper(connect_string: &str) -> ZooKeeperLock {
    ZooKeeperLock::connect(connect_string, SURVIVES)
        .await
        .expect("connect")
}

async fn etcd(endpoint: String) -> EtcdLock {
    EtcdLock::connect(&[endpoint]).await.expect("connect")
}

async fn zookeeper_relay() -> Relay {
    Relay::start(&sandbox::shared::zookeeper()).await
}

async fn etcd_relay() -> Relay {
    Relay::start(&sandbox::shared::etcd()[0]).await
}

async fn hold(lock: &dyn DistributedLock, key: &str) -> Guard {
    lock.acquire(key, AcquireOptions::new(SURVIVES))
        .await
        .expect("grant")
}

/// The next contender is granted promptly: nothing of the cut-off client is left in the queue.
async fn next_contender_is_granted(next: &dyn DistributedLock, key: &str) {
    let granted = next
        .acquire(key, AcquireOptions::new(SURVIVES).wait(PROMPTLY))
        .await;
    let guard = match granted {
        Ok(guard) => guard,
        Err(e) => panic!("the next contender was not granted after the heal: {e}"),
    };
    assert!(guard.release().await.expect("release"));
}

/// A holder releases while cut off; the delete fails when the link heals.
async fn a_release_cut_off_in_flight_still_frees_the_lock(
    relay: &Relay,
    holder: &dyn DistributedLock,
    next: &dyn DistributedLock,
) {
    let key = key(&format!("release-{}", holder.backend()));
    let guard = hold(holder, &key).await;
    relay.black_hole();
    let release = tokio::spawn(guard.release());
    tokio::time::sleep(IN_FLIGHT).await;
    relay.heal();
    next_contender_is_granted(next, &key).await;
    let released = tokio::time::timeout(PROMPTLY, release)
        .await
        .expect("the release never finished")
        .expect("task");
    assert!(
        matches!(released, Ok(true)),
        "a release that did delete its lock reported {released:?}"
    );
}

/// A waiter's budget runs out while it is cut off; its withdrawal fails when the link heals.
async fn a_withdrawal_cut_off_in_flight_leaves_nothing_queued(
    relay: &Relay,
    holder: &dyn DistributedLock,
    waiter: &dyn DistributedLock,
    next: &dyn DistributedLock,
) {
    let key = key(&format!("withdraw-{}", holder.backend()));
    let guard = hold(holder, &key).await;
    let budget = Duration::from_secs(1);
    let waiting = waiter.acquire(&key, AcquireOptions::new(SURVIVES).wait(budget));
    let cut = async {
        tokio::time::sleep(budget - IN_FLIGHT).await;
        relay.black_hole();
        // The budget passes now, and the withdrawal's delete goes into the black hole.
        tokio::time::sleep(IN_FLIGHT * 2).await;
        relay.heal();
    };
    let (gave_up, ()) = tokio::join!(waiting, cut);
    assert!(gave_up.is_err(), "granted a held lock");
    assert!(guard.release().await.expect("release"));
    next_contender_is_granted(next, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_release_whose_delete_is_cut_off_still_frees_the_lock() {
    sandbox::require_faults!();
    let relay = zookeeper_relay().await;
    let holder = zookeeper(&relay.address()).await;
    let next = zookeeper(&sandbox::shared::zookeeper()).await;
    a_release_cut_off_in_flight_still_frees_the_lock(&relay, &holder, &next).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_release_whose_delete_is_cut_off_still_frees_the_lock() {
    sandbox::require_faults!();
    let relay = etcd_relay().await;
    let holder = etcd(relay.http_url()).await;
    let next = etcd(sandbox::shared::etcd().remove(0)).await;
    a_release_cut_off_in_flight_still_frees_the_lock(&relay, &holder, &next).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_waiter_whose_withdrawal_is_cut_off_leaves_no_node_behind() {
    sandbox::require_faults!();
    let relay = zookeeper_relay().await;
    let direct = sandbox::shared::zookeeper();
    let (holder, next) = (zookeeper(&direct).await, zookeeper(&direct).await);
    let waiter = zookeeper(&relay.address()).await;
    a_withdrawal_cut_off_in_flight_leaves_nothing_queued(&relay, &holder, &waiter, &next).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_waiter_whose_withdrawal_is_cut_off_leaves_no_key_behind() {
    sandbox::require_faults!();
    let relay = etcd_relay().await;
    let direct = sandbox::shared::etcd().remove(0);
    let (holder, next) = (etcd(direct.clone()).await, etcd(direct).await);
    let waiter = etcd(relay.http_url()).await;
    a_withdrawal_cut_off_in_flight_leaves_nothing_queued(&relay, &holder, &waiter, &next).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_zookeeper_waiter_whose_delete_is_cut_off_leaves_no_node_behind() {
    sandbox::require_faults!();
    let relay = zookeeper_relay().await;
    let direct = sandbox::shared::zookeeper();
    let (holder, next) = (zookeeper(&direct).await, zookeeper(&direct).await);
    let waiter = zookeeper(&relay.address()).await;
    let key = key("cancelled-zookeeper");
    let guard = hold(&holder, &key).await;
    let mut waiting = waiter.acquire(&key, AcquireOptions::new(SURVIVES).wait(SURVIVES));
    // Queued and watching its predecessor by then.
    let early = tokio::time::timeout(Duration::from_millis(500), &mut waiting).await;
    assert!(early.is_err(), "granted a held lock");
    relay.black_hole();
    // Cancelled now: the drop's delete goes into the black hole, and fails at the heal.
    drop(waiting);
    tokio::time::sleep(IN_FLIGHT).await;
    relay.heal();
    assert!(guard.release().await.expect("release"));
    next_contender_is_granted(&next, &key).await;
}

/// The put of a cancelled acquire lands, but its answer is lost: the key's name is known, so the
/// cancelled acquire must still delete it once the put's fate is sealed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_etcd_acquire_whose_put_landed_unanswered_leaves_no_key_behind() {
    sandbox::require_faults!();
    let relay = etcd_relay().await;
    let direct = sandbox::shared::etcd().remove(0);
    let next = etcd(direct.clone()).await;
    let mut raw = etcd_client::Client::connect([direct], None)
        .await
        .expect("raw client");
    let waiter = etcd(relay.http_url()).await;
    let key = key("cancelled-put-etcd");
    // The lease is granted before the cut, so that only the put goes out during it.
    let warm = hold(&waiter, &format!("{key}:warm-up")).await;
    assert!(warm.release().await.expect("release"));

    relay.hold_replies();
    let mut acquire = waiter.acquire(&key, AcquireOptions::new(SURVIVES).wait(SURVIVES));
    let landed = async {
        // Until the put has landed (seen by another client), the acquire keeps waiting for
        // its answer.
        loop {
            let queued = raw
                .get(
                    lock_prefix(&key),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )
                .await
                .expect("range");
            if queued.count() > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        granted = &mut acquire => panic!("the put was answered through held replies: {granted:?}"),
        () = landed => {}
    }
    // The acquire is dropped with its put landed and unanswered; whatever it sends now is
    // lost.
    relay.black_hole();
    drop(acquire);
    tokio::time::sleep(IN_FLIGHT).await;
    relay.heal();
    next_contender_is_granted(&next, &key).await;
}
