//! A MariaDB primary with a replica, as the flash-sale failures need it: a lagging replica
//! reads the stock as it was; a replica promoted after the primary died has lost what the
//! primary committed and never sent; a semi-synchronous primary without its replica's
//! acknowledgement falls back to asynchronous replication, saying so only in a status variable.

use std::time::Duration;

use sandbox::{ReplicatedMariaDb, Replication, WaitPoint};
use sqlx::{Connection, MySqlConnection};

const WITHIN: Duration = Duration::from_secs(60);

async fn start(replication: Replication) -> ReplicatedMariaDb {
    tokio::task::spawn_blocking(move || ReplicatedMariaDb::start(1, replication))
        .await
        .expect("start thread")
        .expect("a primary and a replica start")
}

async fn connect(set: &ReplicatedMariaDb, i: usize) -> MySqlConnection {
    MySqlConnection::connect(&set.member(i).url())
        .await
        .expect("connect")
}

async fn run(conn: &mut MySqlConnection, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn units(conn: &mut MySqlConnection) -> i64 {
    sqlx::query_scalar("SELECT CAST(units AS SIGNED) FROM shop.stock WHERE id = 1")
        .fetch_one(conn)
        .await
        .expect("the stock row")
}

/// A product of 10 units on the primary, applied on the replica.
async fn shop(set: &ReplicatedMariaDb) -> MySqlConnection {
    let mut primary = connect(set, 0).await;
    run(
        &mut primary,
        "CREATE DATABASE shop; CREATE TABLE shop.stock (id INT PRIMARY KEY, units INT NOT NULL); \
         INSERT INTO shop.stock VALUES (1, 10)",
    )
    .await;
    caught_up(set).await;
    primary
}

async fn caught_up(set: &ReplicatedMariaDb) {
    tokio::task::block_in_place(|| set.wait_caught_up(1, 0, WITHIN)).expect("caught up");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lagging_replica_reads_the_stock_before_the_sale_and_the_sale_once_caught_up() {
    sandbox::require_faults!();
    let set = start(Replication::Async).await;
    let mut primary = shop(&set).await;
    let mut replica = connect(&set, 1).await;
    assert_eq!(units(&mut replica).await, 10);

    tokio::task::block_in_place(|| set.lag(1)).unwrap();
    run(
        &mut primary,
        "UPDATE shop.stock SET units = units - 1 WHERE id = 1",
    )
    .await;
    assert_eq!(units(&mut primary).await, 9);
    assert_eq!(
        units(&mut replica).await,
        10,
        "the lagging replica reads the past"
    );

    tokio::task::block_in_place(|| set.catch_up(1)).unwrap();
    caught_up(&set).await;
    assert_eq!(units(&mut replica).await, 9);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_promoted_after_the_primary_died_has_lost_what_it_was_never_sent() {
    sandbox::require_faults!();
    let set = start(Replication::Async).await;
    let mut primary = shop(&set).await;
    tokio::task::block_in_place(|| set.disconnect(1)).unwrap();
    run(
        &mut primary,
        "UPDATE shop.stock SET units = units - 1 WHERE id = 1",
    )
    .await;
    assert_eq!(units(&mut primary).await, 9, "committed, and answered");
    drop(primary);
    tokio::task::block_in_place(|| {
        set.member(0).server().kill()?;
        set.promote(1)
    })
    .unwrap();
    let mut promoted = connect(&set, 1).await;
    assert_eq!(units(&mut promoted).await, 10, "the committed sale is gone");
    run(
        &mut promoted,
        "UPDATE shop.stock SET units = units - 1 WHERE id = 1",
    )
    .await;
    assert_eq!(
        units(&mut promoted).await,
        9,
        "the promoted replica takes writes"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_semi_synchronous_primary_without_an_acknowledgement_falls_back_to_asynchronous() {
    sandbox::require_faults!();
    let set = start(Replication::SemiSync {
        wait_point: WaitPoint::AfterSync,
        timeout: Duration::from_millis(500),
    })
    .await;
    let mut primary = shop(&set).await;
    let status = tokio::task::block_in_place(|| {
        sandbox::wait_for(WITHIN, || {
            set.semi_sync_status(0)
                .ok()
                .filter(|(_, clients)| *clients == 1)
        })
    });
    assert_eq!(status, Some((true, 1)), "semi-synchronous with one replica");

    tokio::task::block_in_place(|| set.disconnect(1)).unwrap();
    // The commit waits for an acknowledgement that cannot come, until the primary's timeout.
    run(
        &mut primary,
        "UPDATE shop.stock SET units = units - 1 WHERE id = 1",
    )
    .await;
    let (on, _) = tokio::task::block_in_place(|| set.semi_sync_status(0)).unwrap();
    assert!(!on, "fell back to asynchronous replication");
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_failover_the_replica_left_follows_the_promoted_one_and_acknowledges_its_commits() {
    sandbox::require_faults!();
    let replication = Replication::SemiSync {
        wait_point: WaitPoint::AfterSync,
        timeout: Duration::from_millis(500),
    };
    let set = tokio::task::spawn_blocking(move || ReplicatedMariaDb::start(2, replication))
        .await
        .expect("start thread")
        .expect("a primary and two replicas start");
    let primary = shop(&set).await;
    tokio::task::block_in_place(|| set.wait_caught_up(2, 0, WITHIN)).expect("caught up");
    drop(primary);
    tokio::task::block_in_place(|| {
        set.member(0).server().kill()?;
        set.promote(1)?;
        set.repoint(2, 1)?;
        set.wait_for_replicas(1)
    })
    .unwrap();
    let status = tokio::task::block_in_place(|| {
        sandbox::wait_for(WITHIN, || {
            set.semi_sync_status(1)
                .ok()
                .filter(|(_, clients)| *clients == 1)
        })
    });
    assert_eq!(
        status,
        Some((true, 1)),
        "the promoted primary waits for the replica left"
    );
    let mut promoted = connect(&set, 1).await;
    run(
        &mut promoted,
        "UPDATE shop.stock SET units = units - 1 WHERE id = 1",
    )
    .await;
    let (on, _) = tokio::task::block_in_place(|| set.semi_sync_status(1)).unwrap();
    assert!(on, "acknowledged, not fallen back");
    let mut left = connect(&set, 2).await;
    assert_eq!(
        units(&mut left).await,
        9,
        "acknowledged by the replica that follows it"
    );
}
