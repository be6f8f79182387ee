//! The Redis locks that renew their lease, a round trip away from their Redis: the lease holds
//! through a section longer than the lease from the very grant of a client that Redis has never
//! seen, because every request a lease rests on — the grant, each renewal — is one round trip.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use locks::redis::{RedisFairLock, RedisWatchdogLock};
use locks::{AcquireOptions, DistributedLock, LockError};

/// A round trip of 60 ms to Redis (30 ms each way), the renewal due every third of a 200 ms
/// lease: one round trip per request leaves room; the three of a script Redis has not cached
/// (`EVALSHA`, `NOSCRIPT`, `SCRIPT LOAD`, `EVALSHA`) do not.
const RTT: Duration = Duration::from_millis(60);
const LEASE: Duration = Duration::from_millis(200);

/// Two clients of a lock made by `connect`, reaching a Redis of their own (no script of the
/// lock cached on it yet) through a relay adding [`RTT`]: the first holds the lock for two and
/// a half leases while the second keeps asking for it; the first must still hold it at the end.
async fn keeps_its_lease_far_away(connect: fn(&str) -> Arc<dyn DistributedLock>) {
    let redis = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .unwrap()
        .unwrap();
    let server: SocketAddr = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
    let relay = sandbox::Relay::start_delayed(server, sandbox::Delays::round_trip(RTT)).unwrap();
    let url = format!("redis://{}", relay.addr());
    let (holder, other) = (connect(&url), connect(&url));

    let guard = holder
        .acquire("far", AcquireOptions::new(LEASE))
        .await
        .expect("the lock is free");
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
        "the holder lost its lock: its grant or a renewal came too late"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watchdog_lock_60_ms_away_keeps_its_200_ms_lease_from_a_fresh_client_s_first_renewal() {
    keeps_its_lease_far_away(|url| Arc::new(RedisWatchdogLock::connect(url).unwrap())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fair_lock_60_ms_away_keeps_its_200_ms_lease_from_a_fresh_client_s_grant() {
    keeps_its_lease_far_away(|url| Arc::new(RedisFairLock::connect(url).unwrap())).await;
}

/// A round trip of 160 ms (80 each way) to Redis against a 400 ms lease: the renewals, due
/// every third of it, follow one another with little room.
const FAR_RTT: Duration = Duration::from_millis(160);
const FAR_LEASE: Duration = Duration::from_millis(400);

/// A fresh client far from Redis takes the lock, and four times a holder releases it to a
/// waiter of the same client while another client keeps asking for it: each holder keeps it
/// for a lease or more. The first grant is the client's first request: its connection opens
/// then (the connect and the client's own set-up commands, a round trip or two), and that
/// opening, counted in the grant's lease, once left the first renewal no time to arrive.
async fn a_lock_handed_over_far_away_is_kept(connect: fn(&str) -> Arc<dyn DistributedLock>) {
    let redis = tokio::task::spawn_blocking(sandbox::Redis::start)
        .await
        .unwrap()
        .unwrap();
    let server: SocketAddr = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
    let delays = sandbox::Delays::round_trip(FAR_RTT);
    let relay = sandbox::Relay::start_delayed(server, delays).unwrap();
    let url = format!("redis://{}", relay.addr());
    let (client, other) = (connect(&url), connect(&url));
    let options = AcquireOptions::new(FAR_LEASE).wait(Duration::from_secs(30));

    for round in 0..4 {
        let first = client.acquire("handed", options).await.expect("free");
        let waiting = {
            let client = Arc::clone(&client);
            tokio::spawn(async move { client.acquire("handed", options).await })
        };
        // Held across a few renewal rounds, so that one is out when the lock is handed over.
        tokio::time::sleep(FAR_LEASE).await;
        assert!(
            first.release().await.expect("release"),
            "round {round}: lost before release"
        );
        let handed = waiting.await.unwrap().expect("handed over");
        for _ in 0..6 {
            tokio::time::sleep(FAR_LEASE / 2).await;
            match other
                .acquire("handed", AcquireOptions::new(FAR_LEASE))
                .await
            {
                Err(LockError::Timeout { .. }) => {}
                Ok(_) => {
                    // A lease lapsed by a stall of the machine is the contract kept when the
                    // holder hears of it; a holder never told is the lock broken.
                    let told = tokio::time::timeout(FAR_LEASE, handed.lost()).await.is_ok();
                    panic!(
                        "round {round}: a second client was granted a lock handed over (its \
                         holder told it was lost within a lease: {told})"
                    )
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(
            handed.release().await.expect("release"),
            "round {round}: the lock handed over was lost: its renewal came after its lease"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watchdog_lock_160_ms_away_keeps_its_400_ms_lease_from_a_fresh_client_and_handed_over() {
    a_lock_handed_over_far_away_is_kept(|url| Arc::new(RedisWatchdogLock::connect(url).unwrap()))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fair_lock_160_ms_away_keeps_its_400_ms_lease_from_a_fresh_client_and_handed_over() {
    a_lock_handed_over_far_away_is_kept(|url| Arc::new(RedisFairLock::connect(url).unwrap())).await;
}
