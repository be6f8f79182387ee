//! The watchdog lock a round trip away from its Redis: its lease holds through a section
//! longer than the lease from the very first renewal of a client that Redis has never seen,
//! because every request a lease rests on is one round trip.

use std::net::SocketAddr;
use std::time::Duration;

use locks::redis::RedisWatchdogLock;
use locks::{AcquireOptions, DistributedLock, LockError};

/// A round trip of 60 ms to Redis (30 ms each way), the renewal due every third of a 200 ms
/// lease: one round trip per renewal leaves room; the three of a script Redis has not cached
/// (`EVALSHA`, `NOSCRIPT`, `SCRIPT LOAD`, `EVALSHA`) do not.
const RTT: Duration = Duration::from_millis(60);
const LEASE: Duration = Duration::from_millis(200);

#[tokio::test(flavor = "multi_thread")]
async fn a_watchdog_lock_60_ms_away_keeps_its_200_ms_lease_from_a_fresh_client_s_first_renewal() {
    // A Redis of its own: no script of the lock is cached on it yet.
    let redis = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .unwrap()
        .unwrap();
    let server: SocketAddr = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
    let relay = sandbox::Relay::start_delayed(server, sandbox::Delays::round_trip(RTT)).unwrap();
    let url = format!("redis://{}", relay.addr());
    let holder = RedisWatchdogLock::connect(&url).unwrap();
    let other = RedisWatchdogLock::connect(&url).unwrap();

    let guard = holder
        .acquire("far", AcquireOptions::new(LEASE))
        .await
        .expect("the lock is free");
    // Two and a half leases inside, asking meanwhile whether another client can take it.
    for _ in 0..5 {
        tokio::time::sleep(LEASE / 2).await;
        match other.acquire("far", AcquireOptions::new(LEASE)).await {
            Err(LockError::Timeout { .. }) => {}
            Ok(_) => panic!("a second client was granted a lock still held"),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        guard.release().await.expect("release"),
        "the holder lost its lock: a renewal came too late"
    );
}
