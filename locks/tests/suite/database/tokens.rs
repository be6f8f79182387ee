//! The database lock's fencing tokens when many contenders' inserts reach a busy database at once:
//! each grant of a name must carry a larger token than every grant of it before, whatever order
//! the inserts were numbered and decided in.
//!
//! Each round holds the name's gap in the unique index with a locking read, lets 24 contenders'
//! inserts pile up behind it (24 clients, as 24 processes: one client's waiters stand in a local
//! line, and only its first inserts), and opens it at once, while two sessions keep the server's CPU busy
//! (as a benchmark's load does). The burst is decided in an order of InnoDB's making, so a race
//! that depends on it may take a few rounds to show: the test stops at the first token that goes
//! backwards.

use std::sync::Arc;
use std::time::Duration;

use locks::database::DbLock;
use locks::history::{self, History, Rule};
use locks::{AcquireOptions, DistributedLock, conformance};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{Connection, MySqlConnection};

use super::database_url;

/// Contenders released at once in each round.
const CONTENDERS: usize = 24;
/// Rounds at most (the test ends at the first token out of order).
const ROUNDS: usize = 40;
/// Sessions that keep the server's CPU busy meanwhile.
const BUSY_SESSIONS: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn db_lock_tokens_rise_with_every_grant_when_24_inserts_reach_a_busy_server_at_once() {
    let url = tokio::task::spawn_blocking(database_url)
        .await
        .expect("database");
    let key = conformance::unique_key("token-order");
    let pool = MySqlPoolOptions::new()
        .max_connections(CONTENDERS as u32)
        .min_connections(CONTENDERS as u32)
        .connect(&url)
        .await
        .expect("pool");
    let clients: Vec<Arc<dyn DistributedLock>> = (0..CONTENDERS)
        .map(|_| Arc::new(DbLock::leased(pool.clone())) as Arc<dyn DistributedLock>)
        .collect();
    let mut busy = tokio::task::JoinSet::new();
    for _ in 0..BUSY_SESSIONS {
        let mut session = MySqlConnection::connect(&url).await.expect("session");
        busy.spawn(async move {
            while sqlx::query("SELECT BENCHMARK(5000000, MD5('seckill'))")
                .execute(&mut session)
                .await
                .is_ok()
            {}
        });
    }
    let mut gate = MySqlConnection::connect(&url).await.expect("gate");
    let mut observer = MySqlConnection::connect(&url).await.expect("observer");
    let history = Arc::new(History::new());
    let mut grants = 0;
    let mut backwards = Vec::new();
    for round in 0..ROUNDS {
        // The name is free, so a locking read of it holds the gap of the name index where it
        // would go: each contender's insert takes its id, then waits there.
        sqlx::raw_sql("BEGIN")
            .execute(&mut gate)
            .await
            .expect("begin");
        sqlx::query("SELECT id FROM db_locks WHERE name = ? FOR UPDATE")
            .bind(&key)
            .fetch_optional(&mut gate)
            .await
            .expect("hold the name's gap");
        let mut contenders = tokio::task::JoinSet::new();
        for (c, client) in clients.iter().enumerate() {
            let (lock, key) = (Arc::clone(client), key.clone());
            let history = Arc::clone(&history);
            let name = format!("r{round}c{c}");
            contenders.spawn(async move {
                let options =
                    AcquireOptions::new(Duration::from_secs(600)).wait(Duration::from_secs(60));
                let guard = lock.acquire(&key, options).await.expect("acquire");
                let token = guard.fencing_token();
                history.grant(&name, token);
                history.release(&name, token);
                assert!(guard.release().await.expect("release"));
            });
        }
        while inserting(&mut observer).await < CONTENDERS {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sqlx::raw_sql("COMMIT")
            .execute(&mut gate)
            .await
            .expect("open the gate");
        contenders.join_all().await;
        grants += CONTENDERS;
        backwards = tokens_out_of_order(&history);
        if !backwards.is_empty() {
            break;
        }
    }
    busy.abort_all();
    assert!(
        backwards.is_empty(),
        "{} of {grants} grants carried a token smaller than an earlier grant's:\n{}",
        backwards.len(),
        backwards.join("\n")
    );
}

/// How many sessions are running a lock-row insert now.
async fn inserting(observer: &mut MySqlConnection) -> usize {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE DB = DATABASE() AND INFO LIKE 'INSERT INTO db_locks%'",
    )
    .fetch_one(observer)
    .await
    .expect("processlist");
    usize::try_from(n).unwrap_or(0)
}

/// The history checker's findings of tokens that went backwards, as text.
fn tokens_out_of_order(history: &History) -> Vec<String> {
    match history::check(history) {
        Ok(()) => Vec::new(),
        Err(violations) => (violations.0.iter())
            .filter(|v| matches!(v.rule, Rule::TokenNotIncreasing { .. }))
            .map(ToString::to_string)
            .collect(),
    }
}
