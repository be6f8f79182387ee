//! `EtcdLock` on a three-member cluster: the whole conformance suite, with clients given every
//! member's endpoint.

use locks::conformance;

use std::sync::Arc;

use etcd_client::Client;
use futures::FutureExt;
use locks::DistributedLock;
use locks::etcd::{EtcdLock, lock_prefix};

async fn subject() -> conformance::Subject {
    conformance::Subject::new(
        || {
            async {
                let lock = EtcdLock::connect(&sandbox::shared::etcd_cluster())
                    .await
                    .expect("connect to the cluster");
                Arc::new(lock) as Arc<dyn DistributedLock>
            }
            .boxed()
        },
        |guard| {
            let key = format!("{}{}", lock_prefix(guard.key()), guard.owner());
            async move {
                let mut etcd = Client::connect(sandbox::shared::etcd_cluster(), None)
                    .await
                    .expect("raw client");
                etcd.delete(key, None).await.expect("delete");
            }
            .boxed()
        },
    )
}

conformance::suite!(subject);
