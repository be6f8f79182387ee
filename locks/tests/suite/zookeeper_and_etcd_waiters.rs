//! Waiters on the ZooKeeper and etcd locks are woken by a watch on their predecessor, not by
//! timers: waiting longer costs no more requests, and a release wakes one waiter, not all.
//!
//! Both properties are read off [`DistributedLock::backend_requests`] of each waiter's own
//! client. A polling waiter fails the first (its count grows with time), a waiter that watches
//! the whole queue (or the holder) fails the second.

use std::sync::Arc;
use std::time::Duration;

use locks::etcd::EtcdLock;
use locks::zookeeper::ZooKeeperLock;
use locks::{AcquireOptions, DistributedLock, Guard};

/// Lease and wait of every acquisition here. For etcd it also sets the lease's TTL (30 s), so
/// no renewal — one per client per TTL/3, however many locks it holds — falls inside a test.
/// For ZooKeeper it is the session timeout: no session expires during a test.
const LONG: Duration = Duration::from_secs(30);

type Connect = fn() -> futures::future::BoxFuture<'static, Arc<dyn DistributedLock>>;

fn zookeeper() -> futures::future::BoxFuture<'static, Arc<dyn DistributedLock>> {
    Box::pin(async {
        let lock = ZooKeeperLock::connect(&sandbox::shared::zookeeper(), LONG).await;
        Arc::new(lock.expect("connect")) as Arc<dyn DistributedLock>
    })
}

fn etcd() -> futures::future::BoxFuture<'static, Arc<dyn DistributedLock>> {
    Box::pin(async {
        let lock = EtcdLock::connect(&sandbox::shared::etcd()).await;
        Arc::new(lock.expect("connect")) as Arc<dyn DistributedLock>
    })
}

/// A client that has already been granted once, so that its session or lease is in place and
/// the requests counted below are the recipe's alone.
async fn warm(connect: Connect, key: &str) -> Arc<dyn DistributedLock> {
    let lock = connect().await;
    let guard = hold(&*lock, &format!("{key}:warm-up")).await;
    assert!(guard.release().await.expect("release"));
    lock
}

async fn hold(lock: &dyn DistributedLock, key: &str) -> Guard {
    lock.acquire(key, AcquireOptions::new(LONG))
        .await
        .expect("grant")
}

fn key(test: &str) -> String {
    format!("waiters-test:{test}:{}", locks::new_owner_id())
}

/// Starts `waiter` waiting for `key` and returns once it has sent the requests of a queued
/// waiter: enqueue, look at the queue, watch the predecessor; and for ZooKeeper also the watch
/// on its own node, sent with the look.
async fn queue(
    waiter: &Arc<dyn DistributedLock>,
    key: &str,
) -> tokio::task::JoinHandle<Result<Guard, locks::LockError>> {
    let before = waiter.backend_requests();
    let waiting = {
        let (waiter, key) = (Arc::clone(waiter), key.to_owned());
        tokio::spawn(async move {
            waiter
                .acquire(&key, AcquireOptions::new(LONG).wait(LONG))
                .await
        })
    };
    for _ in 0..500 {
        if waiter.backend_requests() >= before + queued_requests(&**waiter) {
            return waiting;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the waiter never queued");
}

fn queued_requests(waiter: &dyn DistributedLock) -> u64 {
    if waiter.backend() == "zookeeper" {
        4
    } else {
        3
    }
}

async fn waiting_longer_costs_no_more_requests(connect: Connect) {
    let key = key("flat");
    let holder = connect().await;
    let waiter = warm(connect, &key).await;
    let mut spent = Vec::new();
    for hold_for in [Duration::from_millis(100), Duration::from_millis(1500)] {
        let guard = hold(&*holder, &key).await;
        let before = waiter.backend_requests();
        let waiting = queue(&waiter, &key).await;
        tokio::time::sleep(hold_for).await;
        assert!(guard.release().await.expect("release"));
        let granted = waiting
            .await
            .expect("join")
            .expect("the waiter was not granted after the release");
        spent.push(waiter.backend_requests() - before);
        assert!(granted.release().await.expect("release"));
    }
    assert_eq!(
        spent[0], spent[1],
        "waiting 15x longer cost different requests: {spent:?}"
    );
}

async fn a_release_wakes_only_the_next_waiter(connect: Connect) {
    let key = key("herd");
    let holder = connect().await;
    let guard = hold(&*holder, &key).await;
    let mut waiters = Vec::new();
    let mut pending = Vec::new();
    for _ in 0..4 {
        let waiter = warm(connect, &key).await;
        // One at a time, so that the queue order is the order of `waiters`.
        pending.push(queue(&waiter, &key).await);
        waiters.push(waiter);
    }
    let queued: Vec<u64> = waiters.iter().map(|w| w.backend_requests()).collect();
    assert!(guard.release().await.expect("release"));
    let first = pending
        .remove(0)
        .await
        .expect("join")
        .expect("first waiter");
    // The others' predecessors are still there: none of them may have been woken.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (i, waiter) in waiters.iter().enumerate().skip(1) {
        assert_eq!(
            waiter.backend_requests(),
            queued[i],
            "waiter {i} was woken by a release that was not its predecessor's"
        );
    }
    // And the queue drains in order.
    assert!(first.release().await.expect("release"));
    for next in pending {
        let guard = next.await.expect("join").expect("next waiter");
        assert!(guard.release().await.expect("release"));
    }
}

#[tokio::test]
async fn a_zookeeper_waiter_sends_the_same_requests_however_long_it_waits() {
    waiting_longer_costs_no_more_requests(zookeeper).await;
}

#[tokio::test]
async fn an_etcd_waiter_sends_the_same_requests_however_long_it_waits() {
    waiting_longer_costs_no_more_requests(etcd).await;
}

#[tokio::test]
async fn a_zookeeper_release_wakes_only_the_next_waiter_not_the_herd() {
    a_release_wakes_only_the_next_waiter(zookeeper).await;
}

#[tokio::test]
async fn an_etcd_release_wakes_only_the_next_waiter_not_the_herd() {
    a_release_wakes_only_the_next_waiter(etcd).await;
}
