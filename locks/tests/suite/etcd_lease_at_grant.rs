//! An etcd grant carries at least the requested lease, even when the client's shared lease has
//! gone unrenewed for a while: the contract promises `options.lease` from the grant on.
//!
//! All of an `EtcdLock`'s keys hang off one lease, renewed every third of its TTL. When the
//! renewals fail for a while (here: a relay refuses connections) and then the link comes back,
//! a lock granted before the next renewal lands would carry only what is left of the old TTL.
//! The test grants such a lock, cuts the holder off again at once, and checks that nobody else
//! gets the lock for `lease` — which only holds if the grant renewed the lease first.

use crate::relay;

use std::time::Duration;

use locks::etcd::EtcdLock;
use locks::{AcquireOptions, DistributedLock, LockError};
use relay::Relay;

/// The requested lease: a TTL of 4 s, renewed every 1.33 s.
const LEASE: Duration = Duration::from_secs(4);
/// How long renewals fail: 2 to 3.6 s of the TTL are gone by the grant, so at most 2 s of it are
/// left, and at least 0.4 s (the lease is still alive).
const RENEWALS_FAIL: Duration = Duration::from_secs(2);
/// What an unrenewed lease leaves at most (2 s), plus the server's expiry sweep (0.5 s), plus
/// slack — and still less than the lease the grant promised.
const CHALLENGER_WAIT: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_grant_made_after_renewals_failed_still_carries_the_whole_lease() {
    sandbox::require_faults!();
    let direct = sandbox::shared::etcd().remove(0);
    let relay = Relay::start(&direct).await;
    let holder = EtcdLock::connect(&[relay.http_url()])
        .await
        .expect("holder");
    let challenger = EtcdLock::connect(&[direct]).await.expect("challenger");
    let key = format!("lease-at-grant-test:{}", locks::new_owner_id());
    // The holder's lease exists and is being renewed.
    let warm = holder
        .acquire(&format!("{key}:warm-up"), AcquireOptions::new(LEASE))
        .await
        .expect("grant");
    assert!(warm.release().await.expect("release"));

    relay.refuse();
    tokio::time::sleep(RENEWALS_FAIL).await;
    // Heal just after a renewal attempt failed (and the client saw it fail): the next attempt
    // is a retry pause away, and the grant comes first.
    relay.next_refusal().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    relay.heal();
    let guard = holder
        .acquire(&key, AcquireOptions::new(LEASE))
        .await
        .expect("grant once the link is back");
    // Cut off again: from now on only what the grant carried keeps the lock.
    relay.refuse();
    let stolen = challenger
        .acquire(&key, AcquireOptions::new(LEASE).wait(CHALLENGER_WAIT))
        .await;
    assert!(
        matches!(stolen, Err(LockError::Timeout { .. })),
        "the lock granted with a {LEASE:?} lease was free for someone else within \
         {CHALLENGER_WAIT:?}: {stolen:?}"
    );
    drop(guard);
}
