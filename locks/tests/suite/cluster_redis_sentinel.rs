//! The Redis locks through Sentinel (one primary, two replicas, three Sentinels): the whole
//! conformance suite for `RedisLock` and `RedisWatchdogLock`, each client given only the
//! Sentinels' addresses and the master name (`redis+sentinel://…/<master>`).

use std::sync::Arc;

use futures::FutureExt;
use locks::redis::Target;
use locks::{DistributedLock, Guard, conformance};

/// The Sentinel address of the shared cluster.
fn sentinel_url() -> String {
    let (sentinels, master) = sandbox::shared::redis_sentinels();
    Target::sentinel_url(&sentinels, &master)
}

/// Expires `guard`'s lock by deleting its key on the current primary.
fn expire(guard: &Guard) -> futures::future::BoxFuture<'static, ()> {
    let key = guard.key().to_owned();
    async move {
        let target = Target::parse(&sentinel_url()).expect("sentinel url");
        let mut conn = target
            .client()
            .await
            .expect("the primary")
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let _: i64 = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("DEL");
    }
    .boxed()
}

mod plain {
    use super::*;
    use locks::redis::RedisLock;

    async fn subject() -> conformance::Subject {
        conformance::Subject::new(
            || {
                async {
                    Arc::new(RedisLock::connect(&sentinel_url()).expect("client"))
                        as Arc<dyn DistributedLock>
                }
                .boxed()
            },
            expire,
        )
    }

    conformance::suite!(subject);
}

mod watchdog {
    use super::*;
    use locks::redis::RedisWatchdogLock;

    async fn subject() -> conformance::Subject {
        conformance::Subject::new(
            || {
                async {
                    Arc::new(RedisWatchdogLock::connect(&sentinel_url()).expect("client"))
                        as Arc<dyn DistributedLock>
                }
                .boxed()
            },
            expire,
        )
    }

    conformance::suite!(subject);
}

/// After the primary dies and the Sentinels promote a replica, the same lock client grants
/// again, at the promoted primary, without being reconnected by hand.
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_client_given_the_sentinels_follows_a_failover_to_the_promoted_primary() {
    use std::time::{Duration, Instant};

    use locks::AcquireOptions;
    use locks::redis::RedisWatchdogLock;

    sandbox::require_faults!();
    let cluster = tokio::task::spawn_blocking(sandbox::RedisSentinelCluster::start)
        .await
        .unwrap()
        .expect("cluster");
    let url = Target::sentinel_url(&cluster.sentinel_addrs(), cluster.master_name());
    let lock = RedisWatchdogLock::connect(&url).expect("client");
    let key = conformance::unique_key("follows-failover");
    let opts = AcquireOptions::new(Duration::from_secs(5));
    let first = lock.acquire(&key, opts).await.expect("granted");
    let token = first.fencing_token();
    first.release().await.expect("released");

    let old = cluster.leader().expect("a primary");
    // Both replicas have the grant and the fence before the primary dies.
    cluster
        .server(old)
        .await_replicas_acknowledged(2, Duration::from_secs(60))
        .expect("both replicas acknowledge the grant and the fence");
    cluster
        .server(old)
        .server()
        .kill()
        .expect("kill the primary");
    let new = tokio::task::spawn_blocking(move || {
        let new = cluster.await_leader(Duration::from_secs(60));
        (cluster, new)
    });
    let (cluster, new) = new.await.unwrap();
    let new = new.expect("the Sentinels promote a replica");
    assert_ne!(new, old);

    let deadline = Instant::now() + Duration::from_secs(30);
    let again = loop {
        match lock.acquire(&key, opts).await {
            Ok(guard) => break guard,
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no grant within 30 s of the failover: {e}"),
        }
    };
    let held = cluster
        .server(new)
        .command(&["EXISTS", &key])
        .expect("EXISTS on the promoted primary");
    assert!(
        held.contains('1'),
        "the grant is not on the promoted primary: {held}"
    );
    assert!(
        again.fencing_token() > token,
        "the fence replicated before the kill"
    );
    again.release().await.expect("released");
}
