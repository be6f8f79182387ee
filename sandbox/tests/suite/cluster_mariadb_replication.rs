//! The replicated MariaDB set through the `Cluster` interface the other clusters share: who is
//! primary, a member killed and rejoined — a replica catches up; a failed-over primary follows
//! its successor if it has nothing the successor lacks, and is refused if it does.

use std::time::Duration;

use sandbox::{Cluster, ReplicatedMariaDb, Replication};
use sqlx::{Connection, MySqlConnection};

const WITHIN: Duration = Duration::from_secs(60);

fn start() -> ReplicatedMariaDb {
    ReplicatedMariaDb::start(1, Replication::Async).expect("a primary and a replica start")
}

async fn run(set: &ReplicatedMariaDb, i: usize, sql: &str) {
    let mut conn = MySqlConnection::connect(&set.member(i).url())
        .await
        .expect("connect");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn units(set: &ReplicatedMariaDb, i: usize) -> i64 {
    let mut conn = MySqlConnection::connect(&set.member(i).url())
        .await
        .expect("connect");
    sqlx::query_scalar("SELECT CAST(units AS SIGNED) FROM shop.stock WHERE id = 1")
        .fetch_one(&mut conn)
        .await
        .expect("the stock row")
}

const SELL_ONE: &str = "UPDATE shop.stock SET units = units - 1 WHERE id = 1";

/// A set whose primary holds a product of 10 units, applied on the replica.
async fn shop() -> ReplicatedMariaDb {
    let set = tokio::task::spawn_blocking(start)
        .await
        .expect("start thread");
    run(
        &set,
        0,
        "CREATE DATABASE shop; CREATE TABLE shop.stock (id INT PRIMARY KEY, units INT NOT NULL); \
         INSERT INTO shop.stock VALUES (1, 10)",
    )
    .await;
    tokio::task::block_in_place(|| set.wait_caught_up(1, 0, WITHIN)).expect("caught up");
    set
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_replica_rejoins_and_applies_what_it_missed() {
    sandbox::require_faults!();
    let set = shop().await;
    assert_eq!(set.leader(), Some(0));
    set.process(1).kill().expect("kill the replica");
    run(&set, 0, SELL_ONE).await;
    tokio::task::block_in_place(|| {
        set.rejoin(1, WITHIN)?;
        set.wait_caught_up(1, 0, WITHIN)
    })
    .expect("rejoined and caught up");
    assert_eq!(units(&set, 1).await, 9);
    assert_eq!(set.leader(), Some(0), "a rejoined replica is not a primary");
    assert_eq!(
        set.last_transaction(1).unwrap(),
        set.last_transaction(0).unwrap(),
        "the replica logs what it applied, as far as the primary"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_over_primary_that_lost_nothing_follows_its_successor() {
    sandbox::require_faults!();
    let set = shop().await;
    tokio::task::block_in_place(|| {
        set.process(0).kill()?;
        set.promote(1)
    })
    .expect("failed over");
    assert_eq!(set.leader(), Some(1), "the promoted replica is the primary");
    run(&set, 1, SELL_ONE).await;
    tokio::task::block_in_place(|| {
        set.rejoin(0, WITHIN)?;
        set.wait_caught_up(0, 1, WITHIN)
    })
    .expect("the old primary follows the new one");
    assert_eq!(units(&set, 0).await, 9, "it applied the new primary's sale");
    assert_eq!(set.leader(), Some(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_over_primary_with_a_sale_its_successor_never_got_is_refused_on_rejoin() {
    sandbox::require_faults!();
    let set = shop().await;
    tokio::task::block_in_place(|| set.disconnect(1)).expect("cut the replica off");
    run(&set, 0, SELL_ONE).await;
    tokio::task::block_in_place(|| {
        set.process(0).kill()?;
        set.promote(1)
    })
    .expect("failed over");
    run(&set, 1, SELL_ONE).await;
    let refused = tokio::task::block_in_place(|| set.rejoin(0, WITHIN))
        .expect_err("the old primary holds a sale nobody else has");
    assert!(
        refused.to_string().contains("1236"),
        "the new primary refuses the position it never had: {refused}"
    );
    assert_eq!(units(&set, 0).await, 9, "its own sale, not its successor's");
    assert_eq!(
        units(&set, 1).await,
        9,
        "the successor's sale, not the lost one"
    );
}
