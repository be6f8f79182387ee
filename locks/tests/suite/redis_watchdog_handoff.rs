//! How `redis-watchdog` hands the lock on: within one client, the release grants it to the
//! client's next waiter in the unlock script itself (one request per hand-off); while another
//! client listens for the release, it is published instead, and every client's front waiter
//! tries, so no client is passed over.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use locks::redis::RedisWatchdogLock;
use locks::{AcquireOptions, DistributedLock, Guard, LockError, conformance};

const LONG: Duration = Duration::from_secs(30);

fn client() -> Arc<RedisWatchdogLock> {
    Arc::new(RedisWatchdogLock::connect(&sandbox::shared::redis_url()).expect("client"))
}

/// Starts a waiter for `key` on `lock` and returns once it waits: queued, and done with its
/// attempts (try, SUBSCRIBE, try again; none when others of its client queue already).
async fn queue(
    lock: &Arc<RedisWatchdogLock>,
    key: &str,
) -> tokio::task::JoinHandle<Result<Guard, LockError>> {
    let before = lock.waiting();
    let waiting = {
        let (lock, key) = (Arc::clone(lock), key.to_owned());
        tokio::spawn(async move {
            lock.acquire(&key, AcquireOptions::new(LONG).wait(LONG))
                .await
        })
    };
    for _ in 0..500 {
        if lock.waiting() > before {
            // Let its last request come back.
            tokio::time::sleep(Duration::from_millis(200)).await;
            return waiting;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the waiter never queued");
}

#[tokio::test]
async fn a_release_hands_the_lock_to_the_next_waiter_of_its_client_in_one_request() {
    let lock = client();
    let key = conformance::unique_key("watchdog-hand-over");
    let holder = lock
        .acquire(&key, AcquireOptions::new(LONG))
        .await
        .expect("grant");
    let first = queue(&lock, &key).await;
    // A second waiter keeps the key's channel subscribed, so no UNSUBSCRIBE is counted below.
    let second = queue(&lock, &key).await;
    let before = lock.backend_requests();
    let token = holder.fencing_token();
    assert!(holder.release().await.expect("release"));
    let next = first.await.expect("join").expect("the next waiter");
    assert_eq!(
        lock.backend_requests() - before,
        1,
        "the hand-over cost more than the unlock: the waiter asked for the lock itself"
    );
    assert!(next.fencing_token() > token, "{next:?} after token {token}");
    let token = next.fencing_token();
    assert!(next.release().await.expect("release"));
    let last = second.await.expect("join").expect("the last waiter");
    assert!(last.fencing_token() > token, "{last:?} after token {token}");
    assert!(last.release().await.expect("release"));
    assert_eq!(lock.waiting(), 0);
}

#[tokio::test]
async fn a_release_is_published_not_handed_over_while_another_client_listens() {
    let lock = client();
    let key = conformance::unique_key("watchdog-publish");
    let holder = lock
        .acquire(&key, AcquireOptions::new(LONG))
        .await
        .expect("grant");
    let waiter = queue(&lock, &key).await;
    // Another client waiting for the key, as its subscriber connection sees it.
    let mut other = redis::Client::open(sandbox::shared::redis_url())
        .expect("url")
        .get_async_pubsub()
        .await
        .expect("subscriber");
    other
        .subscribe(format!("locks:released:{key}"))
        .await
        .expect("SUBSCRIBE");
    assert!(holder.release().await.expect("release"));
    let message = tokio::time::timeout(Duration::from_secs(5), other.on_message().next()).await;
    assert!(
        matches!(message, Ok(Some(_))),
        "the release was not published while another client listened: {message:?}"
    );
    // The waiter, woken by the same message, takes the lock with an attempt of its own.
    let granted = waiter.await.expect("join").expect("the waiter");
    assert!(granted.release().await.expect("release"));
}
