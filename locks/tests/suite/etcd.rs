//! `EtcdLock` (revision-ordered queue on one lease per client): the conformance suite, plus
//! what the recipe promises beyond it — withdrawn keys. How waiters wait:
//! `zookeeper_and_etcd_waiters.rs`; a holder whose lease expires:
//! `zookeeper_and_etcd_partitioned_holder.rs`.

use locks::conformance;

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, GetOptions};
use futures::FutureExt;
use locks::etcd::{EtcdLock, lock_prefix};
use locks::{AcquireOptions, DistributedLock, Guard, LockError};

const LONG: Duration = Duration::from_secs(30);

async fn lock() -> EtcdLock {
    EtcdLock::connect(&sandbox::shared::etcd())
        .await
        .expect("connect")
}

async fn raw() -> Client {
    Client::connect(sandbox::shared::etcd(), None)
        .await
        .expect("raw client")
}

async fn subject() -> conformance::Subject {
    conformance::Subject::new(
        || async { Arc::new(lock().await) as Arc<dyn DistributedLock> }.boxed(),
        |guard| {
            let key = format!("{}{}", lock_prefix(guard.key()), guard.owner());
            async move {
                raw().await.delete(key, None).await.expect("delete");
            }
            .boxed()
        },
    )
}

conformance::suite!(subject);

/// The contenders' keys queued for `key`.
async fn keys(etcd: &mut Client, key: &str) -> Vec<String> {
    let answer = etcd
        .get(
            lock_prefix(key),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .expect("range");
    answer
        .kvs()
        .iter()
        .map(|kv| kv.key_str().expect("utf-8").to_owned())
        .collect()
}

fn key(test: &str) -> String {
    format!("etcd-test:{test}:{}", locks::new_owner_id())
}

async fn hold(lock: &EtcdLock, key: &str) -> Guard {
    lock.acquire(key, AcquireOptions::new(LONG))
        .await
        .expect("grant")
}

#[tokio::test]
async fn a_waiter_whose_budget_passes_deletes_its_key() {
    let key = key("budget");
    let (holder, waiter, mut etcd) = (lock().await, lock().await, raw().await);
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
    let left = keys(&mut etcd, &key).await;
    assert_eq!(
        left,
        [format!("{}{}", lock_prefix(&key), guard.owner())],
        "a waiter that gave up left its key"
    );
    assert!(guard.release().await.expect("release"));
}

#[tokio::test]
async fn a_dropped_acquire_deletes_its_key() {
    let key = key("dropped");
    let (holder, waiter, mut etcd) = (lock().await, lock().await, raw().await);
    let guard = hold(&holder, &key).await;
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        waiter.acquire(&key, AcquireOptions::new(LONG).wait(LONG)),
    )
    .await;
    assert!(cancelled.is_err(), "granted a held lock: {cancelled:?}");
    // The delete runs in the background: give it a bounded while.
    let mut left = Vec::new();
    for _ in 0..100 {
        left = keys(&mut etcd, &key).await;
        if left.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        left,
        [format!("{}{}", lock_prefix(&key), guard.owner())],
        "a cancelled waiter left its key"
    );
    assert!(guard.release().await.expect("release"));
}

/// A holder that crashes keeps the lock until etcd expires its lease: that lease must be the one
/// asked for (in whole seconds), not more — a lock service that promises a 4 s lease and frees a
/// crashed holder's lock only after 6 s blocks everyone for the difference.
#[tokio::test]
async fn a_crashed_etcd_holder_is_kept_no_longer_than_the_lease_it_asked_for() {
    let key = key("ttl");
    let lease = Duration::from_secs(4);
    let (holder, mut etcd) = (lock().await, raw().await);
    let guard = holder
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    let answer = etcd
        .get(format!("{}{}", lock_prefix(&key), guard.owner()), None)
        .await
        .expect("get");
    let lease_id = answer.kvs().first().expect("the holder's key").lease();
    let granted = etcd
        .lease_time_to_live(lease_id, None)
        .await
        .expect("time to live")
        .granted_ttl();
    assert!(
        granted <= 4,
        "a {lease:?} lock hangs off an etcd lease of {granted} s"
    );
    assert!(guard.release().await.expect("release"));
}
