//! How the ZooKeeper lock hands the lock on without listing the queue again: a waiter whose
//! deleted predecessor was granted by the same client (or was first in its listing) is the
//! owner; a waiter whose predecessor gave up is not, and waits for the holder before it.

use std::sync::Arc;
use std::time::Duration;

use locks::zookeeper::ZooKeeperLock;
use locks::{AcquireOptions, DistributedLock, Guard, LockError};

/// Session timeout: no session expires during a test.
const LONG: Duration = Duration::from_secs(30);

async fn lock() -> Arc<ZooKeeperLock> {
    let lock = ZooKeeperLock::connect(&sandbox::shared::zookeeper(), LONG).await;
    Arc::new(lock.expect("connect"))
}

fn key(test: &str) -> String {
    format!("zk-handoff-test:{test}:{}", locks::new_owner_id())
}

/// Starts a waiter for `key` with `wait` and returns once it has sent the four requests of a
/// queued waiter (create, watch itself and list, watch the predecessor) and they came back.
async fn queue(
    lock: &Arc<ZooKeeperLock>,
    key: &str,
    wait: Duration,
) -> tokio::task::JoinHandle<Result<Guard, LockError>> {
    let before = lock.backend_requests();
    let waiting = {
        let (lock, key) = (Arc::clone(lock), key.to_owned());
        tokio::spawn(async move {
            lock.acquire(&key, AcquireOptions::new(LONG).wait(wait))
                .await
        })
    };
    for _ in 0..500 {
        if lock.backend_requests() >= before + 4 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            return waiting;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the waiter never queued");
}

#[tokio::test]
async fn a_waiter_behind_a_grant_of_its_own_client_takes_the_lock_without_listing_again() {
    let (lock, key) = (lock().await, key("own-client"));
    let holder = lock
        .acquire(&key, AcquireOptions::new(LONG))
        .await
        .expect("grant");
    // The second waiter's listing shows the holder and the first waiter before it: when the
    // first waiter's node goes, only the memory of its grant tells that nothing is left before.
    let first = queue(&lock, &key, LONG).await;
    let second = queue(&lock, &key, LONG).await;
    let before = lock.backend_requests();
    assert!(holder.release().await.expect("release"));
    let next = first.await.expect("join").expect("the first waiter");
    let token = next.fencing_token();
    assert!(next.release().await.expect("release"));
    let last = second.await.expect("join").expect("the second waiter");
    assert!(last.fencing_token() > token);
    assert_eq!(
        lock.backend_requests() - before,
        2,
        "two hand-offs cost more than the two deletes: a waiter listed the queue again"
    );
    assert!(last.release().await.expect("release"));
}

#[tokio::test]
async fn a_waiter_whose_predecessor_gave_up_waits_for_the_holder_before_it() {
    let (lock, key) = (lock().await, key("gave-up"));
    let holder = lock
        .acquire(&key, AcquireOptions::new(LONG))
        .await
        .expect("grant");
    // It gives up after the next waiter has queued behind it.
    let quitter = queue(&lock, &key, Duration::from_millis(1500)).await;
    let waiter = queue(&lock, &key, LONG).await;
    let quit = quitter.await.expect("join");
    assert!(matches!(quit, Err(LockError::Timeout { .. })), "{quit:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiter.is_finished(),
        "granted (or failed) while the holder before the one that gave up still held"
    );
    assert!(holder.release().await.expect("release"));
    let granted = waiter.await.expect("join").expect("the waiter");
    assert!(granted.release().await.expect("release"));
}
