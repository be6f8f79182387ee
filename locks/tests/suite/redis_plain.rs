//! `RedisLock` (plain `SET NX PX`): the conformance suite, plus extend and lease-loss behaviour.

use crate::leases;

use locks::conformance;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use locks::DistributedLock;
use locks::redis::RedisLock;
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
    leases::lost_fires_when_the_lease_passes_unless_extended(
        &lock,
        async |guard, lease| lock.extend(guard, lease).await,
        &conformance::unique_key("plain-lost"),
        Duration::from_secs(5),
    )
    .await;
}
