//! Holds one database lock until stdin closes — or until the process is killed, which is what
//! it is for: the test suite SIGKILLs it holding the lock to see when the database frees it
//! (`tests/suite/database/claims.rs`), and by hand it shows the same.
//!
//! ```text
//! cargo run -p locks --example hold -- DATABASE_URL BACKEND KEY [LEASE_MS]
//! ```
//! `DATABASE_URL` names the database of the lock tables (created if missing), `BACKEND` one of
//! the database locks (`db-lock`, `db-row-lock`, `db-blocking-insert`, …), `LEASE_MS` the lease
//! (600,000 by default). Prints `granted <token>` once it holds the lock, and releases it when
//! stdin closes.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context;
use locks::{AcquireOptions, Backend, Endpoints};
use tokio::io::AsyncReadExt as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args.next().context("DATABASE_URL")?;
    let backend: Backend = args.next().context("BACKEND")?.parse()?;
    let key = args.next().context("KEY")?;
    let lease_ms: u64 = args
        .next()
        .map_or(Ok(600_000), |s| s.parse())
        .context("LEASE_MS")?;
    let lease = Duration::from_millis(lease_ms);
    let endpoints = Endpoints {
        database: Some(sqlx::MySqlPool::connect_lazy(&url)?.into()),
        ..Endpoints::default()
    };
    let lock = locks::connect(backend, &endpoints).await?;
    let guard = lock
        .acquire(
            &key,
            AcquireOptions::new(lease).wait(Duration::from_secs(30)),
        )
        .await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "granted {}", guard.fencing_token())?;
        out.flush()?;
    }
    let mut rest = Vec::new();
    tokio::io::stdin().read_to_end(&mut rest).await?;
    guard.release().await?;
    Ok(())
}
