//! `--require-semi-sync`: a primary whose semi-synchronous replication fell back to
//! asynchronous (its replica silent past `rpl_semi_sync_master_timeout`) answers commits a
//! failover could lose, and says so only in a status variable. The instance reads it and
//! refuses purchases `503` rather than promise orders; once the replica is back and caught up
//! the primary waits for it again, and purchases are admitted. Without the setting the same
//! primary's purchases are answered `201`. `/metrics` shows the reading it acts on.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use sandbox::{ReplicatedMariaDb, Replication, WaitPoint};

use crate::common::life::buy;
use crate::common::{spawn_app, test_config, wait_until};

/// Runs `action` on the replicated set (it blocks on the `mariadb` client) off the runtime.
async fn control<T: Send + 'static>(
    set: &Arc<ReplicatedMariaDb>,
    action: impl FnOnce(&ReplicatedMariaDb) -> sandbox::Result<T> + Send + 'static,
) -> T {
    let set = Arc::clone(set);
    tokio::task::spawn_blocking(move || action(&set))
        .await
        .expect("join")
        .expect("the replicated set's control")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_fallen_back_to_asynchronous_replication_is_refused_until_its_replica_is_back() {
    sandbox::require_faults!();
    let replication = Replication::SemiSync {
        wait_point: WaitPoint::AfterSync,
        timeout: Duration::from_millis(300),
    };
    let set = tokio::task::spawn_blocking(move || ReplicatedMariaDb::start(1, replication))
        .await
        .expect("join")
        .expect("a primary with a semi-synchronous replica");
    let set = Arc::new(set);
    let url = format!(
        "{}/t_{}",
        set.member(0).url(),
        uuid::Uuid::new_v4().simple()
    );
    let mut config = test_config(&url);
    config.require_semi_sync = true;
    let watching = spawn_app(config.clone()).await;
    config.require_semi_sync = false;
    let trusting = spawn_app(config).await;
    watching.reset(1, 10).await;
    let (status, answer) = buy(&watching, 1, "a", "a-1", "conditional").await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the replica acknowledges: {answer}"
    );

    // The replica stops receiving: the next commit waits out the timeout, and the primary
    // falls back to asynchronous replication.
    control(&set, |s| s.disconnect(1)).await;
    let (status, answer) = buy(&trusting, 1, "b", "b-1", "conditional").await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "answered after the timeout: {answer}"
    );
    assert!(!control(&set, |s| s.semi_sync_status(0)).await.0);
    wait_until("the watching instance refuses", || async {
        buy(&watching, 1, "c", "c-1", "conditional").await.0 == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    let (status, answer) = buy(&watching, 1, "c", "c-2", "conditional").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer["error"], "backend_unavailable", "{answer}");
    let gauge = "seckill_semi_sync_acknowledged";
    assert_eq!(
        watching.metric(gauge).await,
        Some(0),
        "the refusal's reason"
    );
    assert_eq!(
        trusting.metric(gauge).await,
        None,
        "not read without the setting"
    );
    let (status, answer) = buy(&trusting, 1, "d", "d-1", "conditional").await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the other instance promises: {answer}"
    );

    // The replica is back and catches up: the primary waits for it again.
    control(&set, |s| s.reconnect(1)).await;
    wait_until("the watching instance admits again", || async {
        buy(&watching, 1, "e", "e-1", "conditional").await.0 == StatusCode::CREATED
    })
    .await;
    assert!(control(&set, |s| s.semi_sync_status(0)).await.0);
    assert_eq!(watching.metric(gauge).await, Some(1));
    watching.stop().await;
    trusting.stop().await;
}
