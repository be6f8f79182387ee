//! What a statement costs when the connection's statement cache is full. sqlx keeps each
//! connection's prepared statements in a cache (100 by default) and, to make room for a new
//! one, closes the least recently used — a `COM_STMT_CLOSE`, which MariaDB does not answer —
//! before it executes the new one. `batched` and the stream's consumers write a batch with one
//! statement per batch size, more shapes than the cache holds, so in a sale this happens to
//! them batch after batch.
//!
//! `statement/cached`: two statements taking turns on a connection whose cache holds both.
//! `statement/evicting`: the same on a connection whose cache holds one, so each execution
//! closes the other statement and prepares its own first: a close, a prepare's round trip and
//! the execution's. With sqlx 0.9.0, whose sockets kept Nagle's algorithm on, the execution
//! was held until MariaDB acknowledged the close, which Linux delays up to 40 ms; `evicting`
//! is the figure to read again after changing the database driver or its socket options.
//!
//! Run with `cargo bench -p benches --bench statements`.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::Mutex;

const GROUP: &str = "statement";

/// Two statement shapes: each is prepared on its own.
const SHAPES: [&str; 2] = ["SELECT ? + 1", "SELECT ? + 2"];

/// A connection to the server of `url` whose statement cache holds `capacity` statements.
async fn connection(url: &str, capacity: usize) -> Mutex<MySqlConnection> {
    let options = MySqlConnectOptions::from_str(url).expect("database URL");
    let conn = options.statement_cache_capacity(capacity).connect().await;
    Mutex::new(conn.expect("connect"))
}

/// The next shape's turn on `conn`.
async fn select(conn: &Mutex<MySqlConnection>, turn: &AtomicUsize) {
    let i = turn.fetch_add(1, Ordering::Relaxed);
    let mut conn = conn.lock().await;
    let (sum,): (i64,) = sqlx::query_as(SHAPES[i % SHAPES.len()])
        .bind(i as i64)
        .fetch_one(&mut *conn)
        .await
        .expect("select");
    assert!(sum > i as i64, "{sum} for {i}");
}

fn main() {
    let rt = benches::runtime();
    let mut c = benches::criterion();
    let url = &benches::env().endpoints.database_url;
    let cached = rt.block_on(connection(url, 100));
    let evicting = rt.block_on(connection(url, 1));
    let mut group = c.benchmark_group(GROUP);
    for (id, conn) in [("cached", &cached), ("evicting", &evicting)] {
        let turn = AtomicUsize::new(0);
        group.bench_function(id, |b| b.to_async(&rt).iter(|| select(conn, &turn)));
    }
    group.finish();
    c.final_summary();
    for conn in [cached, evicting] {
        rt.block_on(conn.into_inner().close()).expect("close");
    }
}
