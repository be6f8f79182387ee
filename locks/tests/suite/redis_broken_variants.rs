//! The deliberately broken Redis locks, each observed failing on a real Redis — and the plain
//! lock surviving the same race, as the control.

use locks::conformance;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use locks::redis::{GetThenSetLock, RedisLock, SetnxNoTtlLock, UnsafeReleaseLock};
use locks::{AcquireOptions, Backend, DistributedLock, LockError};
use redis::AsyncCommands;
use tokio::sync::Barrier;

async fn probe() -> redis::aio::MultiplexedConnection {
    redis::Client::open(sandbox::shared::redis_url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connection")
}

#[tokio::test]
async fn setnx_then_expire_leaves_the_lock_stuck_forever_after_a_crash_between_them() {
    let url = sandbox::shared::redis_url();
    let key = conformance::unique_key("setnx-no-ttl");
    let lease = Duration::from_millis(300);
    let crashing = SetnxNoTtlLock::connect(&url)
        .expect("client")
        .crash_between_setnx_and_expire();
    let crashed = crashing.acquire(&key, AcquireOptions::new(lease)).await;
    assert!(
        matches!(crashed, Err(LockError::Unavailable(_))),
        "{crashed:?}"
    );

    let mut redis = probe().await;
    let pttl: i64 = redis.pttl(&key).await.expect("PTTL");
    assert_eq!(pttl, -1, "the orphaned lock should exist without a lease");
    let other = SetnxNoTtlLock::connect(&url).expect("client");
    let stuck = other
        .acquire(&key, AcquireOptions::new(lease).wait(lease * 5))
        .await;
    assert!(
        matches!(stuck, Err(LockError::Timeout { .. })),
        "the lock was free again five leases after the crash: {stuck:?}"
    );
    let pttl: i64 = redis.pttl(&key).await.expect("PTTL");
    assert_eq!(pttl, -1, "still there, still without a lease");
    let _: i64 = redis.del(&key).await.expect("DEL"); // what an operator would have to do
}

/// Rounds of `tasks` contenders that start together, try once, and hold until everyone has
/// tried; returns the most holders seen in one round (stops early once it is above 1).
async fn most_simultaneous_holders(
    lock: impl Fn() -> Arc<dyn DistributedLock>,
    rounds: usize,
) -> usize {
    const TASKS: usize = 16;
    let clients: Vec<_> = (0..4).map(|_| lock()).collect();
    let mut most = 0;
    for round in 0..rounds {
        let key = conformance::unique_key(&format!("race-{round}"));
        let holders = Arc::new(AtomicUsize::new(0));
        let (start, tried) = (Arc::new(Barrier::new(TASKS)), Arc::new(Barrier::new(TASKS)));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..TASKS {
            let (lock, key) = (Arc::clone(&clients[i % clients.len()]), key.clone());
            let (holders, start, tried) = (holders.clone(), start.clone(), tried.clone());
            tasks.spawn(async move {
                start.wait().await;
                let guard = lock
                    .acquire(&key, AcquireOptions::new(Duration::from_secs(10)))
                    .await;
                if guard.is_ok() {
                    holders.fetch_add(1, Ordering::SeqCst);
                }
                tried.wait().await;
                if let Ok(guard) = guard {
                    guard.release().await.expect("release");
                }
            });
        }
        tasks.join_all().await;
        most = most.max(holders.load(Ordering::SeqCst));
        if most > 1 {
            break;
        }
    }
    most
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn get_then_set_lets_two_holders_in_at_once() {
    let url = sandbox::shared::redis_url();
    let most = most_simultaneous_holders(
        || Arc::new(GetThenSetLock::connect(&url).expect("client")),
        50,
    )
    .await;
    assert!(
        most > 1,
        "no two holders at once in 50 rounds of 16 contenders"
    );
}

/// The published suite is a test that can fail: run against `GetThenSetLock`, its
/// mutual-exclusion property (in-process probe, no Redis counter) sees the two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_conformance_suite_catches_a_lock_that_lets_two_holders_in() {
    for round in 1..=3 {
        let url = sandbox::shared::redis_url();
        let subject = conformance::Subject::new(
            move || {
                let url = url.clone();
                async move {
                    Arc::new(GetThenSetLock::connect(&url).expect("client"))
                        as Arc<dyn DistributedLock>
                }
                .boxed()
            },
            |_| async {}.boxed(),
        );
        let run =
            tokio::spawn(conformance::mutual_exclusion_holds_among_32_contending_tasks(subject));
        match run.await {
            Ok(()) => eprintln!("round {round}: the two holders went unnoticed"),
            Err(e) => {
                let panic = e.into_panic();
                let message = (panic.downcast_ref::<String>().map(String::as_str))
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or_default();
                assert!(
                    message.contains("increments were lost to overlapping holders")
                        || message.contains("two holders were inside at once"),
                    "the suite failed for another reason: {message}"
                );
                return;
            }
        }
    }
    panic!("the suite passed a lock that lets two holders in, 3 rounds in a row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn set_nx_never_lets_two_holders_in_under_the_same_race() {
    let url = sandbox::shared::redis_url();
    let most =
        most_simultaneous_holders(|| Arc::new(RedisLock::connect(&url).expect("client")), 10).await;
    assert_eq!(most, 1);
}

#[tokio::test]
async fn a_token_blind_release_after_lease_expiry_lets_a_third_holder_in() {
    let url = sandbox::shared::redis_url();
    let connect = || UnsafeReleaseLock::connect(&url).expect("client");
    let (a, b, c) = (connect(), connect(), connect());
    let key = conformance::unique_key("unsafe-release");
    let short = Duration::from_millis(300);
    let late = a
        .acquire(&key, AcquireOptions::new(short))
        .await
        .expect("A's grant");
    late.lost().await; // A outlives its lease, as a paused holder would.
    let current = b
        .acquire(
            &key,
            AcquireOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(5)),
        )
        .await
        .expect("B's grant after A's lease");
    assert!(
        late.release().await.expect("A's late release"),
        "the plain DEL claims success"
    );
    let third = c
        .acquire(&key, AcquireOptions::new(Duration::from_secs(30)))
        .await
        .expect("A's DEL should have freed B's lock for C");
    assert!(!current.is_lost(), "B's lease is still running");
    assert_ne!(third.owner(), current.owner());
    // Two holders now: B and C. B's release deletes C's lock in turn.
    assert!(current.release().await.expect("B's release"));
    let mut redis = probe().await;
    let exists: bool = redis.exists(&key).await.expect("EXISTS");
    assert!(!exists, "B's DEL removed C's lock as well");
    drop(third);
}

#[tokio::test]
async fn an_uncontended_cycle_counts_every_request_each_single_instance_lock_sends() {
    let endpoints = locks::Endpoints {
        redis: Some(sandbox::shared::redis_url()),
        ..locks::Endpoints::default()
    };
    // Grant + release: one script each for the plain lock and the token-blind release;
    // SETNX, PEXPIRE, INCR + release script; GET, SET, INCR + release script.
    let expected = [
        (Backend::Redis, 2),
        (Backend::RedisUnsafeRelease, 2),
        (Backend::RedisSetnxNoTtl, 4),
        (Backend::RedisGetThenSet, 4),
    ];
    for (backend, requests) in expected {
        let lock = locks::connect(backend, &endpoints).await.expect("client");
        assert_eq!(lock.backend(), backend.name());
        let key = conformance::unique_key(&format!("requests-{backend}"));
        let guard = lock
            .acquire(&key, AcquireOptions::new(Duration::from_secs(10)))
            .await
            .expect("grant");
        assert!(guard.release().await.expect("release"));
        assert_eq!(lock.backend_requests(), requests, "{backend}");
    }
}
