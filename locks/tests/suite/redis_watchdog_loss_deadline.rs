//! The watchdog reports a lock lost no later than one lease after the last renewal Redis
//! confirmed, whatever the connection does meanwhile: from then on another client may hold the
//! lock, and a guard that still looks held invites a second writer.
//!
//! The two ways a connection goes wrong behave differently in the client: a killed server makes
//! the connection manager reconnect with growing pauses, and requests wait for that; a
//! black-holed connection (a relay that stops forwarding, sockets open) answers nothing at
//! all. Neither may delay `lost()`.

use crate::relay;

use std::time::{Duration, Instant};

use locks::redis::RedisWatchdogLock;
use locks::{AcquireOptions, DistributedLock, Guard};
use relay::Relay;

const LEASE: Duration = Duration::from_millis(600);
/// Scheduling slack on a busy machine; the failure this catches takes seconds.
const MARGIN: Duration = Duration::from_millis(400);

fn key(test: &str) -> String {
    format!("watchdog-loss-test:{test}:{}", locks::new_owner_id())
}

/// A lock held for a while, so the cut falls somewhere between two renewals.
async fn held(lock: &RedisWatchdogLock, test: &str) -> Guard {
    let guard = lock
        .acquire(&key(test), AcquireOptions::new(LEASE))
        .await
        .expect("grant");
    tokio::time::sleep(LEASE).await;
    assert!(!guard.is_lost(), "lost while Redis was answering");
    guard
}

/// `lost()` fires within a lease (plus slack) of `cut`; the last confirmed renewal was before
/// the cut, so this bound is looser than the promise.
async fn lost_within_a_lease_of(guard: &Guard, cut: Instant) {
    tokio::time::timeout(Duration::from_secs(30), guard.lost())
        .await
        .expect("lost() never fired");
    let after = cut.elapsed();
    assert!(
        after <= LEASE + MARGIN,
        "lost() fired {after:?} after the cut, more than a lease ({LEASE:?}) + {MARGIN:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_reports_loss_within_a_lease_when_redis_is_killed() {
    sandbox::require_faults!();
    let redis = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .expect("task")
        .expect("private redis");
    let lock = RedisWatchdogLock::connect(&redis.url()).expect("client");
    let guard = held(&lock, "killed").await;
    let cut = Instant::now();
    tokio::task::block_in_place(|| redis.server().kill()).expect("SIGKILL");
    lost_within_a_lease_of(&guard, cut).await;
    assert_eq!(lock.renewing(), 0, "a lost lock is still being renewed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_reports_loss_within_a_lease_when_its_connection_is_black_holed() {
    sandbox::require_faults!();
    let relay = Relay::start(&sandbox::shared::redis_url()).await;
    let lock = RedisWatchdogLock::connect(&relay.redis_url()).expect("client");
    let guard = held(&lock, "black-holed").await;
    let cut = Instant::now();
    relay.black_hole();
    lost_within_a_lease_of(&guard, cut).await;
    assert_eq!(lock.renewing(), 0, "a lost lock is still being renewed");
}
