//! `RedisWatchdogLock`: the conformance suite, plus renewal, re-entry and wake-up behaviour.

use locks::conformance;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use locks::redis::RedisWatchdogLock;
use locks::{AcquireOptions, DistributedLock, LockError};
use redis::AsyncCommands;

async fn subject() -> conformance::Subject {
    let url = sandbox::shared::redis_url();
    let expire_url = url.clone();
    conformance::Subject::new(
        move || {
            let url = url.clone();
            async move {
                Arc::new(RedisWatchdogLock::connect(&url).expect("client"))
                    as Arc<dyn DistributedLock>
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

fn client() -> RedisWatchdogLock {
    RedisWatchdogLock::connect(&sandbox::shared::redis_url()).expect("client")
}

#[tokio::test]
async fn the_watchdog_keeps_a_lock_for_three_leases_and_stops_renewing_after_release() {
    let (lock, other) = (client(), client());
    let mut redis = probe(&sandbox::shared::redis_url()).await;
    let key = conformance::unique_key("watchdog-alive");
    let lease = Duration::from_millis(600);
    let guard = lock
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    tokio::time::sleep(lease * 3).await;
    assert!(!guard.is_lost(), "the watchdog let the lock go");
    let pttl: i64 = redis.pttl(&key).await.expect("PTTL");
    assert!(
        pttl > 0,
        "the lock's key is gone or has no lease (PTTL {pttl}) while held"
    );
    let stolen = other.acquire(&key, AcquireOptions::new(lease)).await;
    assert!(
        matches!(stolen, Err(LockError::Timeout { .. })),
        "{stolen:?}"
    );
    assert!(guard.release().await.expect("release"));
    assert_eq!(lock.renewing(), 0, "renewal leaked past release");
    tokio::time::sleep(lease).await;
    let pttl: i64 = redis.pttl(&key).await.expect("PTTL");
    assert_eq!(pttl, -2, "the key is still there after release");
}

#[tokio::test]
async fn one_renewal_round_trip_renews_every_held_lock() {
    const LOCKS: usize = 30;
    let lock = client();
    let lease = Duration::from_millis(900);
    let prefix = conformance::unique_key("watchdog-batch");
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        let key = format!("{prefix}:{i}");
        guards.push(
            lock.acquire(&key, AcquireOptions::new(lease))
                .await
                .expect("grant"),
        );
    }
    let before = lock.backend_requests();
    tokio::time::sleep(lease * 3).await;
    let renewal_requests = lock.backend_requests() - before;
    assert!(
        guards.iter().all(|g| !g.is_lost()),
        "a lock was lost while renewed"
    );
    // One request per lock per round would be ~9 × 30; batched it is about one per round.
    assert!(
        renewal_requests < LOCKS as u64,
        "{renewal_requests} renewal requests for {LOCKS} locks over 3 leases: not batched"
    );
    for guard in guards {
        assert!(guard.release().await.expect("release"));
    }
}

#[tokio::test]
async fn a_refused_renewal_fires_lost() {
    let lock = client();
    let key = conformance::unique_key("watchdog-refused");
    let guard = lock
        .acquire(&key, AcquireOptions::new(Duration::from_millis(600)))
        .await
        .expect("grant");
    let _: i64 = probe(&sandbox::shared::redis_url())
        .await
        .del(&key)
        .await
        .expect("DEL");
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost did not fire after the lock vanished");
    assert_eq!(lock.renewing(), 0);
    assert!(!guard.release().await.expect("release"));
}

#[tokio::test]
async fn a_reentered_lock_is_freed_only_by_its_last_release() {
    let (lock, other) = (client(), client());
    let key = conformance::unique_key("watchdog-reenter");
    let lease = Duration::from_secs(5);
    let outer = lock
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    let inner = lock
        .reenter(&outer)
        .await
        .expect("reenter")
        .expect("still held");
    assert_eq!(
        inner.fencing_token(),
        outer.fencing_token(),
        "re-entry drew a new token"
    );
    assert!(outer.release().await.expect("release outer"));
    let early = other.acquire(&key, AcquireOptions::new(lease)).await;
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
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("free after last release");
    assert!(next.release().await.expect("release"));
}

#[tokio::test]
async fn a_release_wakes_a_waiter_that_sent_no_polls_meanwhile() {
    let (holder, waiter) = (client(), Arc::new(client()));
    let key = conformance::unique_key("watchdog-wake");
    // The holder's lease outlasts the waiter's budget: only a wake-up can grant the waiter.
    let guard = holder
        .acquire(&key, AcquireOptions::new(Duration::from_secs(60)))
        .await
        .expect("grant");
    let waiting = {
        let (waiter, key) = (Arc::clone(&waiter), key.clone());
        tokio::spawn(async move {
            let options = AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(30));
            waiter.acquire(&key, options).await
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    // try, SUBSCRIBE, try again: then silence until woken.
    let sent = waiter.backend_requests();
    assert!(
        sent <= 3,
        "the waiter sent {sent} requests while waiting: it polls"
    );
    assert!(guard.release().await.expect("release"));
    let granted = waiting
        .await
        .expect("task")
        .expect("the waiter was not woken by the release");
    assert!(granted.release().await.expect("release"));
}

#[tokio::test]
async fn a_cancelled_waiter_leaves_no_queue_entry_behind() {
    let (holder, waiter) = (client(), client());
    let key = conformance::unique_key("watchdog-cancel");
    let lease = Duration::from_secs(5);
    let guard = holder
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    let attempt = waiter.acquire(
        &key,
        AcquireOptions::new(lease).wait(Duration::from_secs(30)),
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), attempt)
            .await
            .is_err()
    );
    let gave_up = waiter
        .acquire(
            &key,
            AcquireOptions::new(lease).wait(Duration::from_millis(200)),
        )
        .await;
    assert!(
        matches!(gave_up, Err(LockError::Timeout { .. })),
        "{gave_up:?}"
    );
    assert_eq!(waiter.waiting(), 0, "a waiter that left is still queued");
    assert!(guard.release().await.expect("release"));
}

#[tokio::test]
async fn a_watchdog_cut_off_from_redis_for_a_lease_reports_the_lock_lost() {
    sandbox::require_faults!();
    let redis = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .expect("task")
        .expect("private redis");
    let lock = RedisWatchdogLock::connect(&redis.url()).expect("client");
    let key = conformance::unique_key("watchdog-paused");
    let lease = Duration::from_millis(600);
    let guard = lock
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    redis.server().pause().expect("SIGSTOP");
    let lost = tokio::time::timeout(Duration::from_secs(10), guard.lost()).await;
    redis.server().resume().expect("SIGCONT");
    assert!(
        lost.is_ok(),
        "lost did not fire while renewals could not reach Redis"
    );
    assert_eq!(lock.renewing(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_recovers_its_connections_and_wake_ups_after_redis_restarts() {
    sandbox::require_faults!();
    let redis = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .expect("task")
        .expect("private redis");
    let (holder, waiter) = (
        RedisWatchdogLock::connect(&redis.url()).expect("client"),
        Arc::new(RedisWatchdogLock::connect(&redis.url()).expect("client")),
    );
    let key = conformance::unique_key("watchdog-restart");
    let lease = Duration::from_secs(60);
    let before = holder
        .acquire(&key, AcquireOptions::new(Duration::from_millis(1500)))
        .await
        .expect("grant");
    let server = redis.server();
    tokio::task::block_in_place(|| server.restart()).expect("restart");
    // The restarted server forgot the lock; the next renewal learns it.
    tokio::time::timeout(Duration::from_secs(10), before.lost())
        .await
        .expect("lost after the restart");

    let options = AcquireOptions::new(lease).wait(Duration::from_secs(10));
    let guard = holder
        .acquire(&key, options)
        .await
        .expect("grant after restart");
    let waiting = {
        let (waiter, key) = (Arc::clone(&waiter), key.clone());
        tokio::spawn(async move { waiter.acquire(&key, options).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(guard.release().await.expect("release"));
    // The holder's lease (60 s) outlasts the waiter's budget (10 s): only a wake-up grants it.
    let woken = waiting
        .await
        .expect("task")
        .expect("the waiter was not woken after the restart");
    assert!(woken.release().await.expect("release"));
}
