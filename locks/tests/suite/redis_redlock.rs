//! `Redlock` over 5 independent Redis instances: the conformance suite, plus quorum behaviour
//! when instances die.

use locks::conformance;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use locks::redis::Redlock;
use locks::{AcquireOptions, DistributedLock, LockError};
use redis::AsyncCommands;

/// The conformance suite's client: every instance is alive and answers, so a round that takes
/// longer than the default 100 ms per instance is the test machine's load (a new client's first
/// round also connects to all five), not an instance down. The suite checks the lock's
/// contract; the instance timeout has its own tests below, with instances killed and stalled.
async fn subject() -> conformance::Subject {
    let urls = sandbox::shared::redlock_urls();
    let expire_urls = urls.clone();
    conformance::Subject::new(
        move || {
            let urls = urls.clone();
            async move {
                let client = Redlock::connect(&urls)
                    .expect("client")
                    .instance_timeout(Duration::from_millis(500));
                Arc::new(client) as Arc<dyn DistributedLock>
            }
            .boxed()
        },
        move |guard| {
            let (urls, key) = (expire_urls.clone(), guard.key().to_owned());
            async move {
                for url in &urls {
                    let _: i64 = connection(url).await.del(&key).await.expect("DEL");
                }
            }
            .boxed()
        },
    )
}

conformance::suite!(subject);

/// Five private Redis servers (to kill and stall) and their URLs.
async fn five_private_instances() -> (Vec<sandbox::Redis>, Vec<String>) {
    let instances = tokio::task::spawn_blocking(|| sandbox::Redis::start_many(5))
        .await
        .expect("task")
        .expect("5 private redis");
    let urls = instances.iter().map(|r| r.url()).collect();
    (instances, urls)
}

async fn connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connection")
}

#[tokio::test]
async fn a_lock_held_on_a_minority_of_instances_does_not_block_a_grant() {
    let urls = sandbox::shared::redlock_urls();
    let lock = Redlock::connect(&urls).expect("client");
    let key = conformance::unique_key("redlock-minority");
    // Another contender's leftovers on 2 of 5 instances, as after a lost race.
    for url in &urls[..2] {
        let () = connection(url)
            .await
            .set_ex(&key, "someone-else", 30)
            .await
            .expect("SET");
    }
    let guard = lock
        .acquire(&key, AcquireOptions::new(Duration::from_secs(5)))
        .await
        .expect("a majority of 3 free instances should grant");
    assert!(guard.release().await.expect("release"));
}

#[tokio::test]
async fn redlock_keeps_working_with_two_of_five_instances_killed_and_refuses_with_three() {
    sandbox::require_faults!();
    let (instances, urls) = five_private_instances().await;
    let lock = Redlock::connect(&urls).expect("client");
    let key = conformance::unique_key("redlock-kill");
    let options = AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));

    let mut last_token = 0;
    for killed in 0..=2 {
        if killed > 0 {
            instances[killed - 1].server().kill().expect("kill");
        }
        for _ in 0..3 {
            let guard = lock
                .acquire(&key, options)
                .await
                .unwrap_or_else(|e| panic!("no grant with {killed} of 5 killed: {e}"));
            assert!(guard.fencing_token() > last_token, "tokens went back");
            last_token = guard.fencing_token();
            assert!(guard.release().await.expect("release"));
        }
    }

    instances[2].server().kill().expect("kill");
    let refused = lock
        .acquire(&key, AcquireOptions::new(Duration::from_secs(5)))
        .await;
    assert!(
        matches!(refused, Err(LockError::NoQuorum { needed: 3, .. })),
        "expected NoQuorum with 3 of 5 killed, got {refused:?}"
    );
    let refused = lock
        .acquire(&key, options.wait(Duration::from_millis(500)))
        .await;
    assert!(
        matches!(refused, Err(LockError::NoQuorum { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_contended_wait_whose_last_rounds_time_out_ends_as_contention_not_as_an_outage() {
    // Under load the instances (or this process) stall past the per-instance timeout now and
    // then. A wait that found the lock held by someone else in round after round, and whose
    // last rounds happened to stall, met contention: it must say `Timeout` (the app answers
    // `busy`), not `NoQuorum` (the app answers `backend_unavailable`, as for a majority down).
    sandbox::require_faults!();
    let (instances, urls) = five_private_instances().await;
    let lock = Arc::new(Redlock::connect(&urls).expect("client"));
    let key = conformance::unique_key("redlock-stall");
    let lease = Duration::from_secs(10);
    let held = lock
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("first holder");

    let waiter = {
        let (lock, key) = (Arc::clone(&lock), key.clone());
        tokio::spawn(async move {
            lock.acquire(
                &key,
                AcquireOptions::new(lease).wait(Duration::from_millis(1500)),
            )
            .await
        })
    };
    // Contention for a second, then three of five instances stall until the wait is over.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let stalled = &instances[..3];
    for r in stalled {
        r.server().pause().expect("pause");
    }
    let outcome = waiter.await.expect("waiter task");
    for r in stalled {
        r.server().resume().expect("resume");
    }
    assert!(
        matches!(outcome, Err(LockError::Timeout { .. })),
        "expected Timeout after a contended wait, got {outcome:?}"
    );
    assert!(held.release().await.expect("release"));
}

/// A killed instance refuses connections at once: it must cost each round a fast failure, not
/// the instance timeout. (With a reconnecting manager that retries its connect with a backoff,
/// every request to the dead instance waited for the retries, i.e. for the instance timeout:
/// three rounds per grant and release, about 3 grants a second with the default 100 ms.) The
/// timeout is set far above any answer here, so only waiting for it can make a cycle slow.
#[tokio::test]
async fn killed_instances_fail_fast_instead_of_costing_each_round_the_instance_timeout() {
    sandbox::require_faults!();
    let (instances, urls) = five_private_instances().await;
    let timeout = Duration::from_secs(3);
    let lock = Redlock::connect(&urls)
        .expect("client")
        .instance_timeout(timeout);
    let key = conformance::unique_key("redlock-fail-fast");
    let options = AcquireOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(30));
    // Connected to all five, then two die.
    let guard = lock.acquire(&key, options).await.expect("grant");
    assert!(guard.release().await.expect("release"));
    for dead in &instances[..2] {
        dead.server().kill().expect("kill");
    }

    for cycle in 0..5 {
        let started = std::time::Instant::now();
        let guard = lock.acquire(&key, options).await.expect("grant");
        assert!(guard.release().await.expect("release"));
        let took = started.elapsed();
        assert!(
            took < timeout,
            "cycle {cycle}: a grant and release with 2 of 5 instances dead took {took:?}, \
             as long as the {timeout:?} instance timeout"
        );
    }
}
