//! The database locks on a Galera cluster of three MariaDB nodes, each taking writes: their tables
//! are made there, each lock is granted on every node, and the unique-key lock's token, bumped by
//! a statement the cluster certifies, is above every token granted before it on any node — the
//! order a fence needs, whichever node its holder writes through.
//!
//! The locks held by a transaction draw theirs from a sequence, on the node's own copy, and the
//! draw reaches the others with the holder's transaction: a node that has not yet applied
//! another's draw hands out the same token again or a lower one (seen under load: 5 on node 1,
//! then 4 on node 3). Their grants are only checked to succeed here; the fence's strict
//! comparison refuses the second writer with such a token (`lock_lost`), which the committed
//! Galera run counts.

use std::sync::Arc;
use std::time::Duration;

use locks::database::{DbInsertLock, DbLock, DbRowLock};
use locks::{AcquireOptions, DistributedLock, conformance};
use sandbox::GaleraCluster;
use sqlx::MySqlPool;

/// Grants in turn on the three nodes, several on one before the next: enough for a token kept
/// per node to be drawn below one another node drew before.
const TURNS: [usize; 9] = [0, 0, 0, 1, 0, 2, 2, 1, 0];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_galera_every_database_lock_is_granted_and_the_unique_key_locks_tokens_rise() {
    sandbox::require_faults!();
    let galera = Arc::new(
        tokio::task::spawn_blocking(GaleraCluster::start)
            .await
            .expect("start")
            .expect("a Galera cluster"),
    );
    let g = galera.clone();
    tokio::task::spawn_blocking(move || g.sql(0, "CREATE DATABASE locks"))
        .await
        .expect("create")
        .expect("a database");
    let pools: Vec<MySqlPool> = (0..3)
        .map(|i| {
            sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(2)
                .connect_lazy(&format!("{}/locks", galera.url(i)))
                .expect("url")
        })
        .collect();
    DbLock::create_table(&pools[0])
        .await
        .expect("the lock tables on a Galera node");
    for (name, make) in [
        (
            "row-lock",
            row_lock as fn(MySqlPool) -> Arc<dyn DistributedLock>,
        ),
        ("blocking-insert", blocking_insert),
        ("unique-key", unique_key),
    ] {
        let locks: Vec<Arc<dyn DistributedLock>> = pools.iter().cloned().map(make).collect();
        let key = conformance::unique_key(name);
        let mut drawn: Vec<(usize, u64)> = Vec::new();
        for node in TURNS {
            // A release reaches the other nodes a moment after it commits: the next acquirer
            // waits for it as it would for a holder.
            let options =
                AcquireOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(30));
            let guard = locks[node]
                .acquire(&key, options)
                .await
                .unwrap_or_else(|e| panic!("{name} on node {}: {e}", node + 1));
            drawn.push((node + 1, guard.fencing_token()));
            guard.release().await.expect("released");
        }
        if name == "unique-key" {
            assert!(
                drawn.windows(2).all(|w| w[0].1 < w[1].1),
                "{name}: (node, token) in the order granted: {drawn:?}"
            );
        }
    }
    for pool in pools {
        pool.close().await;
    }
}

fn row_lock(pool: MySqlPool) -> Arc<dyn DistributedLock> {
    Arc::new(DbRowLock::new(pool))
}

fn blocking_insert(pool: MySqlPool) -> Arc<dyn DistributedLock> {
    Arc::new(DbInsertLock::new(pool))
}

fn unique_key(pool: MySqlPool) -> Arc<dyn DistributedLock> {
    Arc::new(DbLock::leased(pool))
}
