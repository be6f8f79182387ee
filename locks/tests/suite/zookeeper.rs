//! `ZooKeeperLock` (Curator's recipe): the conformance suite, plus what the recipe promises
//! beyond it — withdrawn nodes, fencing tokens that survive the lock directory being
//! recreated, loss reported when the node goes. How waiters wait: `zookeeper_and_etcd_waiters.rs`.

use locks::conformance;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use locks::zookeeper::{ZooKeeperLock, lock_dir};
use locks::{AcquireOptions, DistributedLock, Guard, LockError};
use zookeeper_client::Client;

/// Session timeout of the suite's clients, which is also their "lease": short enough for the
/// vanished-holder test, long enough that a starved test process keeps its session.
const SESSION: Duration = Duration::from_secs(4);
/// Session timeout of the other tests' clients, which never let a session expire.
const LONG: Duration = Duration::from_secs(30);

async fn connect(session_timeout: Duration) -> ZooKeeperLock {
    ZooKeeperLock::connect(&sandbox::shared::zookeeper(), session_timeout)
        .await
        .expect("connect")
}

async fn lock() -> ZooKeeperLock {
    connect(LONG).await
}

async fn raw() -> Client {
    Client::connect(&sandbox::shared::zookeeper())
        .await
        .expect("raw client")
}

async fn subject() -> conformance::Subject {
    conformance::Subject::new(
        || async { Arc::new(connect(SESSION).await) as Arc<dyn DistributedLock> }.boxed(),
        |guard| {
            let (key, owner) = (guard.key().to_owned(), guard.owner().to_owned());
            async move { delete_node_of(&key, &owner).await }.boxed()
        },
    )
    .lease(SESSION)
}

conformance::suite!(subject);

/// Deletes the node of acquisition `owner` behind its back, as session expiry would.
async fn delete_node_of(key: &str, owner: &str) {
    let zk = raw().await;
    let dir = lock_dir(key);
    let name = nodes(&zk, key)
        .await
        .into_iter()
        .find(|name| name.starts_with(&format!("_c_{owner}-")))
        .expect("the guard's node");
    zk.delete(&format!("{dir}/{name}"), None)
        .await
        .expect("delete");
}

/// The contenders' nodes queued for `key` (none if the directory is gone).
async fn nodes(zk: &Client, key: &str) -> Vec<String> {
    match zk.list_children(&lock_dir(key)).await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list: {e}"),
    }
}

fn key(test: &str) -> String {
    format!("zk-test:{test}:{}", locks::new_owner_id())
}

async fn hold(lock: &ZooKeeperLock, key: &str) -> Guard {
    lock.acquire(key, AcquireOptions::new(LONG))
        .await
        .expect("grant")
}

#[tokio::test]
async fn a_waiter_whose_budget_passes_deletes_its_node() {
    let key = key("budget");
    let (holder, waiter, zk) = (lock().await, lock().await, raw().await);
    let guard = hold(&holder, &key).await;
    let once = waiter.acquire(&key, AcquireOptions::new(LONG)).await;
    assert!(matches!(once, Err(LockError::Timeout { .. })), "{once:?}");
    let budget = waiter
        .acquire(
            &key,
            AcquireOptions::new(LONG).wait(Duration::from_millis(300)),
        )
        .await;
    assert!(
        matches!(budget, Err(LockError::Timeout { .. })),
        "{budget:?}"
    );
    let left = nodes(&zk, &key).await;
    assert_eq!(
        left.len(),
        1,
        "a waiter that gave up left its node: {left:?}"
    );
    assert!(left[0].starts_with(&format!("_c_{}-", guard.owner())));
    assert!(guard.release().await.expect("release"));
}

#[tokio::test]
async fn a_dropped_acquire_deletes_its_node() {
    let key = key("dropped");
    let (holder, waiter, zk) = (lock().await, lock().await, raw().await);
    let guard = hold(&holder, &key).await;
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        waiter.acquire(&key, AcquireOptions::new(LONG).wait(LONG)),
    )
    .await;
    assert!(cancelled.is_err(), "granted a held lock: {cancelled:?}");
    // The delete was queued by Drop; anything the waiter's session sends later is ordered
    // after it, so a round trip on that session is enough to see its effect.
    let probe = waiter.acquire(&key, AcquireOptions::new(LONG)).await;
    assert!(matches!(probe, Err(LockError::Timeout { .. })), "{probe:?}");
    let left = nodes(&zk, &key).await;
    assert_eq!(left.len(), 1, "a cancelled waiter left its node: {left:?}");
    assert!(guard.release().await.expect("release"));
}

#[tokio::test]
async fn fencing_tokens_keep_rising_when_the_lock_directory_is_recreated() {
    let key = key("recreated");
    let (lock, zk) = (lock().await, raw().await);
    let first = hold(&lock, &key).await;
    let first_token = first.fencing_token();
    assert!(first.release().await.expect("release"));
    // What the server's container reaper does some time after the last node goes: the
    // sequence counter restarts at 0 with the new directory, the zxid does not.
    zk.delete(&lock_dir(&key), None)
        .await
        .expect("delete the lock directory");
    let second = hold(&lock, &key).await;
    assert!(
        second.fencing_token() > first_token,
        "token went from {first_token} to {} across recreation",
        second.fencing_token()
    );
    assert!(second.release().await.expect("release"));
}

#[tokio::test]
async fn a_deleted_node_fires_lost_and_release_reports_it() {
    let key = key("deleted");
    let lock = lock().await;
    let guard = hold(&lock, &key).await;
    assert!(!guard.is_lost());
    delete_node_of(&key, guard.owner()).await;
    tokio::time::timeout(LONG, guard.lost())
        .await
        .expect("lost() did not fire after the node was deleted");
    assert!(!guard.release().await.expect("release"));
}
