//! `RedisLock` (plain `SET NX PX`): the conformance suite, plus extend and lease-loss behaviour.

use locks::conformance;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use locks::redis::RedisLock;
use locks::{AcquireOptions, DistributedLock, LockError};
use redis::AsyncCommands;

async fn subject() -> conformance::Subject {
    let url = sandbox::shared::redis_url();
    let expire_url = url.clone();
    conformance::Subject::new(
        move || {
            let url = url.clone();
            async move {
                Arc::new(RedisLock::connect(&url).expect("client")) as Arc<dyn DistributedLock>
            }
            .boxed()
        },
        move |guard| {
            let (url, key) = (expire_url.clone(), guard.key().to_owned());
            async move { del(&url, &key).await }.boxed()
        },
    )
}

conformance::suite!(subject);

async fn del(url: &str, key: &str) {
    let mut conn = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let _: i64 = conn.del(key).await.expect("DEL");
}

#[tokio::test]
async fn lost_fires_when_the_lease_passes_unless_extended() {
    let lock = RedisLock::connect(&sandbox::shared::redis_url()).expect("client");
    let key = conformance::unique_key("plain-lost");
    let lease = Duration::from_millis(400);
    let guard = lock
        .acquire(&key, AcquireOptions::new(lease))
        .await
        .expect("grant");
    tokio::time::sleep(lease / 2).await;
    assert!(
        lock.extend(&guard, Duration::from_secs(2))
            .await
            .expect("extend")
    );
    tokio::time::sleep(lease).await;
    assert!(
        !guard.is_lost(),
        "lost fired although the lease was extended"
    );
    let other = lock.acquire(&key, AcquireOptions::new(lease)).await;
    assert!(matches!(other, Err(LockError::Timeout { .. })), "{other:?}");
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost never fired after the extended lease passed");
    assert!(
        !lock.extend(&guard, lease).await.expect("extend"),
        "extended a lost lease"
    );
    let next = lock
        .acquire(
            &key,
            AcquireOptions::new(lease).wait(Duration::from_secs(5)),
        )
        .await
        .expect("the lock was not free after the lease that lost() reported");
    assert!(
        !guard.release().await.expect("release"),
        "a lost guard released the next holder's lock"
    );
    assert!(next.release().await.expect("release"));
}
