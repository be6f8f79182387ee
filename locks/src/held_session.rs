//! What the locks held by a database session share, whichever the database (the MariaDB row
//! locks, PostgreSQL's advisory locks): a connection checked out within the acquire's budget,
//! and the task that keeps a holder's session alive for as long as its lease allows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sqlx::pool::PoolConnection;
use tokio::sync::watch;

use crate::options::ATTEMPT_GRACE;
use crate::{AcquireOptions, LockError};

/// An acquisition under way: when it began, when its wait budget ends (`None`: one try), and
/// the connection it was handed within that budget ([`checkout`]).
pub(crate) struct Acquisition<DB: sqlx::Database> {
    pub started: Instant,
    pub deadline: Option<Instant>,
    pub conn: PoolConnection<DB>,
}

impl<DB: sqlx::Database> Acquisition<DB> {
    /// Begins an acquisition of `key`: checks out a connection of `pool` by the end of the wait
    /// budget (or of the grace of a single try).
    pub async fn begin(
        pool: &sqlx::Pool<DB>,
        key: &str,
        options: AcquireOptions,
    ) -> Result<Acquisition<DB>, LockError> {
        let started = Instant::now();
        let deadline = options.wait.map(|w| started + w);
        let checkout_by = deadline.unwrap_or(started + ATTEMPT_GRACE);
        let conn = checkout(pool, key, started, checkout_by).await?;
        Ok(Acquisition {
            started,
            deadline,
            conn,
        })
    }
}

/// A connection of `pool` by `by`, or [`LockError::Unavailable`]: every connection is held or
/// waiting (or the database is unreachable). `started`: when the acquire of `key` began.
pub(crate) async fn checkout<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    key: &str,
    started: Instant,
    by: Instant,
) -> Result<PoolConnection<DB>, LockError> {
    let no_connection = || {
        LockError::Unavailable(
            format!(
                "lock `{key}`: no database connection free after {:?} (every connection \
                 of the pool is held or waiting)",
                started.elapsed()
            )
            .into(),
        )
    };
    match tokio::time::timeout_at(by.into(), pool.acquire()).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(sqlx::Error::PoolTimedOut)) | Err(_) => Err(no_connection()),
        Ok(Err(e)) => Err(LockError::unavailable(e)),
    }
}

/// Pings the holder's `session` every third of the lease while the client lives, so that the
/// server's idle timeout (the lease) does not end it. A ping that fails or goes unanswered for a
/// lease, or the client's drop, ends the session: taken out and dropped (closed, so the server
/// frees its locks), one lease after the last answered ping after the client's drop, as the
/// server would; then it fires the guard's `lost()` through `lost`. A session already gone
/// (released, or ended by its owner) ends it quietly.
pub(crate) async fn keep_alive<S>(
    session: &tokio::sync::Mutex<Option<S>>,
    key: &str,
    requests: &AtomicU64,
    lease: Duration,
    mut client: watch::Receiver<()>,
    ping: impl for<'s> Fn(&'s mut S) -> BoxFuture<'s, Result<(), sqlx::Error>>,
    lost: &watch::Sender<bool>,
) {
    let mut answered = Instant::now();
    loop {
        tokio::select! {
            () = tokio::time::sleep(lease / 3) => {}
            // Only the client's drop closes the channel; nothing is ever sent on it.
            _ = client.changed() => {
                tokio::time::sleep_until((answered + lease).into()).await;
                break;
            }
        }
        let mut held = session.lock().await;
        let Some(open) = held.as_mut() else {
            return;
        };
        requests.fetch_add(1, Ordering::Relaxed);
        let by = answered + lease;
        match tokio::time::timeout_at(by.into(), ping(open)).await {
            Ok(Ok(())) => answered = Instant::now(),
            Ok(Err(e)) => {
                tracing::warn!(key, error = %e, "the lock's session failed a ping");
                break;
            }
            Err(_) => {
                tracing::warn!(key, "the lock's session answered no ping for a lease");
                break;
            }
        }
    }
    session.lock().await.take();
    let _ = lost.send(true);
}
