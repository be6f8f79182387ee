//! Database connections held one per load worker, as `mysqlslap` holds one per client thread:
//! the direct SQL baselines' connections.
//!
//! Why not a sqlx pool: per query, a pool checkout arms an acquire timeout and a release
//! spawns a task to put the connection back — work on the generator's side of every
//! statement, on the two cores it shares with the database. A worker here takes its own
//! connection out of its slot and puts it back, nothing else.

use std::sync::{Arc, Mutex};

use sqlx::{ConnectOptions, Connection};

/// `n` connections of one engine (`C`: `MySqlConnection`, `PgConnection`), slot `w` for worker
/// `w`.
pub struct Dedicated<C>(Arc<[Mutex<Option<C>>]>);

impl<C> Clone for Dedicated<C> {
    fn clone(&self) -> Self {
        Dedicated(Arc::clone(&self.0))
    }
}

impl<C: Connection> Dedicated<C> {
    /// Opens `n` connections to `url`, with statement logging off (the generator should not
    /// time and filter every statement for a log nobody reads).
    pub async fn open(url: &str, n: usize) -> Result<Dedicated<C>, sqlx::Error> {
        let options = url.parse::<C::Options>()?.disable_statement_logging();
        let connections = futures::future::try_join_all((0..n).map(|_| options.connect())).await?;
        Ok(Dedicated(
            connections
                .into_iter()
                .map(|c| Mutex::new(Some(c)))
                .collect(),
        ))
    }

    /// How many connections (and workers) there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Worker `w`'s connection, until [`Dedicated::put`] gives it back.
    ///
    /// # Panics
    /// If `w`'s connection is already out: each worker has one request in flight at a time.
    pub fn take(&self, w: usize) -> C {
        self.slot(w)
            .take()
            .expect("one request in flight per worker")
    }

    pub fn put(&self, w: usize, conn: C) {
        *self.slot(w) = Some(conn);
    }

    fn slot(&self, w: usize) -> std::sync::MutexGuard<'_, Option<C>> {
        self.0[w % self.0.len()].lock().expect("connection slot")
    }

    /// Closes every connection that is in its slot.
    pub async fn close(&self) {
        for slot in self.0.iter() {
            let conn = slot.lock().expect("connection slot").take();
            if let Some(conn) = conn {
                let _ = conn.close().await;
            }
        }
    }
}
