//! The reentrant unique-key lock beyond the conformance suite: a history-checked contention
//! run, and re-entry — its holder enters again through its guard, and the lock is free only
//! when every guard was released.

use std::sync::Arc;
use std::time::Duration;

use locks::database::DbReentrantLock;
use locks::{AcquireOptions, DistributedLock, LockError, conformance};

use super::claims::contention_history_shows_no_violation;
use super::{database_url, pool};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_history_checked_contention_run_shows_no_violation() {
    contention_history_shows_no_violation(|pool| Arc::new(DbReentrantLock::new(pool)) as Arc<_>)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reentered_row_is_held_until_its_last_guard_is_released() {
    let url = tokio::task::spawn_blocking(database_url)
        .await
        .expect("database");
    let (lock, other) = (
        DbReentrantLock::new(pool(&url)),
        DbReentrantLock::new(pool(&url)),
    );
    let key = conformance::unique_key("reentrant");
    let options = AcquireOptions::new(Duration::from_secs(600));
    let outer = lock.acquire(&key, options).await.expect("grant");
    let inner = lock
        .reenter(&outer)
        .await
        .expect("reenter")
        .expect("the owner re-entered");
    let third = lock
        .reenter(&inner)
        .await
        .expect("reenter")
        .expect("the owner re-entered twice");
    assert_eq!(
        (inner.fencing_token(), third.fencing_token()),
        (outer.fencing_token(), outer.fencing_token())
    );
    for released in [inner, outer] {
        assert!(released.release().await.expect("release"));
        let held = other.acquire(&key, options).await;
        assert!(
            matches!(held, Err(LockError::Timeout { .. })),
            "freed before the last release: {held:?}"
        );
    }
    let token = third.fencing_token();
    assert!(third.release().await.expect("last release"));
    let free = other
        .acquire(&key, options)
        .await
        .expect("free after the last release");
    assert!(free.fencing_token() > token);
    assert!(free.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_guard_whose_lease_passed_cannot_reenter() {
    let url = tokio::task::spawn_blocking(database_url)
        .await
        .expect("database");
    let lock = DbReentrantLock::new(pool(&url));
    let key = conformance::unique_key("reentrant-expired");
    let guard = lock
        .acquire(&key, AcquireOptions::new(Duration::from_millis(200)))
        .await
        .expect("grant");
    guard.lost().await;
    // The row's expiry is the database's clock; wait until it agrees the lease passed.
    let admin = pool(&url);
    while sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM db_locks WHERE name = ? AND expires_at > NOW(6)",
    )
    .bind(&key)
    .fetch_one(&admin)
    .await
    .expect("count")
        > 0
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(lock.reenter(&guard).await.expect("reenter").is_none());
}
