//! `ZooKeeperLock` on a three-server ensemble: the whole conformance suite, with clients given
//! every member in their connect string (each client picks a member; the suite's contenders
//! end up spread over the ensemble, so grants and watches cross members).

use locks::conformance;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use locks::DistributedLock;
use locks::zookeeper::{ZooKeeperLock, lock_dir};
use zookeeper_client::Client;

/// The suite's session timeout, as for the single server (`zookeeper.rs`).
const SESSION: Duration = Duration::from_secs(4);

async fn subject() -> conformance::Subject {
    conformance::Subject::new(
        || {
            async {
                let connect = sandbox::shared::zookeeper_ensemble();
                let lock = ZooKeeperLock::connect(&connect, SESSION)
                    .await
                    .expect("connect to the ensemble");
                Arc::new(lock) as Arc<dyn DistributedLock>
            }
            .boxed()
        },
        |guard| {
            let (key, owner) = (guard.key().to_owned(), guard.owner().to_owned());
            async move { delete_node_of(&key, &owner).await }.boxed()
        },
    )
    .lease(SESSION)
}

conformance::suite!(subject);

/// Deletes the node of acquisition `owner` behind its back, as session expiry would.
async fn delete_node_of(key: &str, owner: &str) {
    let zk = Client::connect(&sandbox::shared::zookeeper_ensemble())
        .await
        .expect("raw client");
    let dir = lock_dir(key);
    let name = zk
        .list_children(&dir)
        .await
        .expect("list")
        .into_iter()
        .find(|name| name.starts_with(&format!("_c_{owner}-")))
        .expect("the guard's node");
    zk.delete(&format!("{dir}/{name}"), None)
        .await
        .expect("delete");
}
