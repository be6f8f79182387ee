//! `RedisFairLock`: the conformance suite, plus first-come-first-served order across clients,
//! one waiter woken per turn, dead waiters pruned, and re-entry.

use locks::conformance;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use locks::redis::{RedisFairLock, queue_key};
use locks::{AcquireOptions, DistributedLock, LockError};
use redis::AsyncCommands;

async fn subject() -> conformance::Subject {
    let url = sandbox::shared::redis_url();
    let expire_url = url.clone();
    conformance::Subject::new(
        move || {
            let url = url.clone();
            async move {
                Arc::new(RedisFairLock::connect(&url).expect("client")) as Arc<dyn DistributedLock>
            }
            .boxed()
        },
        move |guard| {
            let (url, key) = (expire_url.clone(), guard.key().to_owned());
            async move {
                let _: i64 = probe(&url).await.del(&key).await.expect("DEL");
            }
            .boxed()
        },
    )
}

conformance::suite!(subject);

async fn probe(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connection")
}

fn client() -> Arc<RedisFairLock> {
    Arc::new(RedisFairLock::connect(&sandbox::shared::redis_url()).expect("client"))
}

/// The owners in `key`'s wait queue, oldest first.
async fn queued(key: &str) -> Vec<String> {
    probe(&sandbox::shared::redis_url())
        .await
        .lrange(queue_key(key), 0, -1)
        .await
        .expect("LRANGE")
}

/// Waits until `key`'s queue holds `n` owners.
async fn until_queued(key: &str, n: usize) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while queued(key).await.len() != n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the queue never held {n} waiters"));
}

const LEASE: Duration = Duration::from_secs(5);
const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_waiters_of_six_clients_are_granted_in_the_order_they_queued() {
    const WAITERS: usize = 6;
    let key = conformance::unique_key("fair-order");
    let holder = client();
    let guard = holder
        .acquire(&key, AcquireOptions::new(LEASE))
        .await
        .expect("grant");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..WAITERS {
        let (lock, k, order) = (client(), key.clone(), Arc::clone(&order));
        tasks.spawn(async move {
            let guard = lock
                .acquire(&k, AcquireOptions::new(LEASE).wait(WAIT))
                .await
                .expect("grant");
            order.lock().unwrap().push(i);
            // Hold a little: a waiter that barged would get in meanwhile.
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(guard.release().await.expect("release"));
        });
        until_queued(&key, i + 1).await;
    }
    assert!(guard.release().await.expect("release"));
    tasks.join_all().await;
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    assert!(queued(&key).await.is_empty(), "the queue kept entries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_wakes_only_the_waiter_whose_turn_it_is() {
    let key = conformance::unique_key("fair-no-herd");
    let holder = client();
    let guard = holder
        .acquire(&key, AcquireOptions::new(Duration::from_secs(60)))
        .await
        .expect("grant");
    let waiters: Vec<_> = (0..3).map(|_| client()).collect();
    let mut grants = Vec::new();
    for (i, waiter) in waiters.iter().enumerate() {
        let (waiter, k) = (Arc::clone(waiter), key.clone());
        grants.push(tokio::spawn(async move {
            // Leases outlast the test: only a turn message wakes a waiter.
            let options = AcquireOptions::new(Duration::from_secs(60)).wait(WAIT);
            waiter.acquire(&k, options).await
        }));
        until_queued(&key, i + 1).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before: Vec<u64> = waiters.iter().map(|w| w.backend_requests()).collect();
    assert!(guard.release().await.expect("release"));
    let first = grants.remove(0).await.expect("task").expect("first waiter");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after: Vec<u64> = waiters.iter().map(|w| w.backend_requests()).collect();
    // The first waiter: its winning attempt, and the UNSUBSCRIBE of its client's channel.
    assert!(
        after[0] <= before[0] + 2,
        "{} requests to win",
        after[0] - before[0]
    );
    assert_eq!(
        after[1..],
        before[1..],
        "a waiter whose turn had not come sent requests"
    );
    assert!(first.release().await.expect("release"));
    for grant in grants {
        let guard = grant.await.expect("task").expect("later waiter");
        assert!(guard.release().await.expect("release"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_waiter_leaves_the_redis_queue_at_once() {
    let key = conformance::unique_key("fair-cancel");
    let (holder, waiter) = (client(), client());
    let guard = holder
        .acquire(&key, AcquireOptions::new(LEASE))
        .await
        .expect("grant");
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        waiter.acquire(&key, AcquireOptions::new(LEASE).wait(WAIT)),
    )
    .await;
    assert!(cancelled.is_err(), "granted a held lock: {cancelled:?}");
    // Far less than the waiter's timeout (the holder's lease plus a grace).
    until_queued(&key, 0).await;
    assert_eq!(waiter.waiting(), 0, "still subscribed for a turn");
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_that_vanished_without_leaving_is_pruned_and_does_not_block_the_queue() {
    let key = conformance::unique_key("fair-dead");
    let lease = Duration::from_millis(900);
    let (holder, ghost, live) = (client(), client(), client());
    let guard = holder
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    // A waiter whose process died: queued in Redis, and never heard from again (its future is
    // leaked, not dropped, so it does not say goodbye).
    let mut vanished = ghost.acquire(&key, AcquireOptions::new(lease).wait(WAIT));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut vanished)
            .await
            .is_err()
    );
    std::mem::forget(vanished);
    until_queued(&key, 1).await;
    let waiting = {
        let (live, key) = (Arc::clone(&live), key.clone());
        tokio::spawn(async move {
            live.acquire(&key, AcquireOptions::new(lease).wait(WAIT))
                .await
        })
    };
    until_queued(&key, 2).await;
    // The holder keeps the lock (renewed) well past one lease, then releases to the dead head.
    tokio::time::sleep(lease * 2).await;
    assert!(guard.release().await.expect("release"));
    let granted = tokio::time::timeout(lease * 5, waiting)
        .await
        .expect("the dead waiter blocked the queue")
        .expect("task")
        .expect("grant");
    assert!(
        queued(&key).await.is_empty(),
        "the dead waiter is still queued"
    );
    assert!(granted.release().await.expect("release"));
}

#[tokio::test]
async fn a_reentered_lock_is_freed_only_by_its_last_release() {
    let (lock, other) = (client(), client());
    let key = conformance::unique_key("fair-reenter");
    let outer = lock
        .acquire(&key, AcquireOptions::new(LEASE))
        .await
        .expect("grant");
    let inner = lock
        .reenter(&outer)
        .await
        .expect("reenter")
        .expect("still held");
    let token = outer.fencing_token();
    assert_eq!(inner.fencing_token(), token);
    assert!(outer.release().await.expect("release outer"));
    let early = other.acquire(&key, AcquireOptions::new(LEASE)).await;
    assert!(
        matches!(early, Err(LockError::Timeout { .. })),
        "freed while re-entered: {early:?}"
    );
    assert!(
        other.reenter(&inner).await.expect("reenter").is_none(),
        "another client re-entered"
    );
    assert!(inner.release().await.expect("release inner"));
    let next = other
        .acquire(&key, AcquireOptions::new(LEASE))
        .await
        .expect("free after last release");
    assert!(next.fencing_token() > token);
    assert!(next.release().await.expect("release"));
    assert_eq!(lock.renewing(), 0, "renewal leaked past the last release");
}
