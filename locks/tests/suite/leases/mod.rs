//! Lease behaviour shared by the locks whose holder extends its lease by hand (`extend`)
//! instead of through a watchdog: the plain Redis lock and the memcached lock.

use std::time::Duration;

use locks::{AcquireOptions, DistributedLock, Guard, LockError};

/// An extended lease is not lost at its first deadline; once the extension passes without
/// another, `lost()` fires, `extend` refuses the guard, the next acquirer is granted within
/// `free_within`, and the lost guard's release leaves the new holder's lock alone.
pub async fn lost_fires_when_the_lease_passes_unless_extended(
    lock: &impl DistributedLock,
    extend: impl AsyncFn(&Guard, Duration) -> Result<bool, LockError>,
    key: &str,
    free_within: Duration,
) {
    let lease = Duration::from_millis(400);
    let guard = lock
        .acquire(key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    tokio::time::sleep(lease / 2).await;
    assert!(
        extend(&guard, Duration::from_secs(2))
            .await
            .expect("extend")
    );
    tokio::time::sleep(lease).await;
    assert!(
        !guard.is_lost(),
        "lost fired although the lease was extended"
    );
    let other = lock.acquire(key, AcquireOptions::new(lease)).await;
    assert!(matches!(other, Err(LockError::Timeout { .. })), "{other:?}");
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost never fired after the extended lease passed");
    assert!(
        !extend(&guard, lease).await.expect("extend"),
        "extended a lost lease"
    );
    let next = lock
        .acquire(key, AcquireOptions::new(lease).wait(free_within))
        .await
        .expect("the lock was not free after the lease that lost() reported");
    assert!(
        !guard.release().await.expect("release"),
        "a lost guard released the next holder's lock"
    );
    assert!(next.release().await.expect("release"));
}
