//! `RedisWatchdogLock::connect_replicated`: a grant counts only once replicas confirm it.
//! Each test runs on a private primary + replica pair, whose replica it freezes.

use std::time::Duration;

use locks::redis::{RedisWatchdogLock, Replication};
use locks::{AcquireOptions, DistributedLock, LockError, conformance};

const LEASE: Duration = Duration::from_secs(10);

/// A client whose grants one replica must confirm within `wait`.
fn replicated(pair: &sandbox::RedisPair, wait: Duration) -> RedisWatchdogLock {
    let one = Replication::new(1, wait);
    RedisWatchdogLock::connect_replicated(&pair.primary.url(), one).expect("client")
}

/// The longest wait the option allows: on a loaded machine a live replica's answer to the
/// primary's GETACK can take a few hundred milliseconds.
const LIVE_WAIT: Duration = Replication::MAX_TIMEOUT;

/// The wait for a replica that cannot answer (frozen): short, so that `WAIT`'s answer (none
/// confirmed) comes back well within the connection's 500 ms reply timeout however loaded the
/// machine; with the longest wait it once came back after it, as `Unavailable`.
const FROZEN_WAIT: Duration = Duration::from_millis(100);

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_the_replica_confirms_is_returned_and_one_it_cannot_confirm_is_refused_and_given_back()
 {
    sandbox::require_faults!();
    let pair = tokio::task::spawn_blocking(sandbox::RedisPair::start)
        .await
        .expect("start")
        .expect("primary + replica");
    let lock = replicated(&pair, LIVE_WAIT);

    // A live replica confirms a grant; under load maybe not within one wait (or not before
    // the connection's reply timeout), never not at all. Each try takes a lock of its own, so
    // a grant whose answer timed out cannot stand in the next try's way.
    let mut tries = (0..5).map(|_| conformance::unique_key("replicated"));
    let (key, confirmed) = loop {
        let key = tries.next().expect("no grant confirmed in 5 tries");
        match lock.acquire(&key, AcquireOptions::new(LEASE)).await {
            Err(LockError::Unreplicated { .. } | LockError::Unavailable(_)) => continue,
            confirmed => break (key, confirmed),
        }
    };
    let confirmed = confirmed.expect("a grant the live replica confirms");
    assert!(confirmed.release().await.expect("release"));

    let lock = replicated(&pair, FROZEN_WAIT);
    pair.replica.server().pause().expect("SIGSTOP the replica");
    let refused = lock.acquire(&key, AcquireOptions::new(LEASE)).await;
    pair.replica.server().resume().expect("SIGCONT the replica");
    assert!(
        matches!(
            &refused,
            Err(LockError::Unreplicated {
                acked: 0,
                needed: 1,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(lock.renewing(), 0, "the refused grant is still renewed");

    // Given back: another client is granted the lock at once, without waiting out the lease.
    let other = RedisWatchdogLock::connect(&pair.primary.url()).expect("client");
    let next = other.acquire(&key, AcquireOptions::new(LEASE)).await;
    assert!(next.is_ok(), "{next:?}");
}
