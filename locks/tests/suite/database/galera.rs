//! The database locks on a Galera cluster of three MariaDB nodes, each taking writes: their tables
//! are made there, and a fencing token drawn on any node is above every token drawn before it on
//! any other — the one order a fence needs, whichever node its holder writes through.

use std::sync::Arc;
use std::time::Duration;

use locks::database::{DbInsertLock, DbLock, DbRowLock};
use locks::{AcquireOptions, DistributedLock, conformance};
use sandbox::GaleraCluster;
use sqlx::MySqlPool;

/// Grants in turn on the three nodes, several on one before the next: enough for a token kept
/// per node (a cache, or a node's own stride) to be drawn below one another node drew before.
const TURNS: [usize; 9] = [0, 0, 0, 1, 0, 2, 2, 1, 0];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_galera_the_lock_tables_are_made_and_tokens_drawn_on_any_node_rise() {
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
            let guard = locks[node]
                .acquire(&key, AcquireOptions::new(Duration::from_secs(30)))
                .await
                .unwrap_or_else(|e| panic!("{name} on node {}: {e}", node + 1));
            drawn.push((node + 1, guard.fencing_token()));
            guard.release().await.expect("released");
        }
        assert!(
            drawn.windows(2).all(|w| w[0].1 < w[1].1),
            "{name}: (node, token) in the order granted: {drawn:?}"
        );
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
