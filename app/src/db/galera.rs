//! Whether this instance's database node may serve, on a Galera cluster.
//!
//! A Galera node cut off from the others counts itself out of the *primary component* — the
//! majority that may go on — and stops serving: it refuses every statement that touches a table
//! (`1047 WSREP has not yet prepared node for application use`), answers a causal read at once
//! with a lock wait timeout (`1205`, which would read as `busy`), yet still answers `SELECT 1`.
//! So the instance asks the node itself (`wsrep_ready`) every [`EVERY`], on a connection of its
//! own, and while the node is out it refuses purchases `503 backend_unavailable` before they
//! touch the database, and its health check fails, so that a balancer sends the buyers to an
//! instance on the majority's side. On a server that is not a Galera node nothing is asked.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::{ConnectOptions, MySqlConnection};

use super::engine::{Db, Engines};

/// How often the node is asked whether it is in the primary component.
pub const EVERY: Duration = Duration::from_millis(200);

/// Whether the node is in its cluster's primary component, as last asked.
#[derive(Debug)]
pub struct Membership {
    ready: AtomicBool,
}

impl Default for Membership {
    fn default() -> Membership {
        Membership {
            ready: AtomicBool::new(true),
        }
    }
}

impl Membership {
    /// `false` only while the node last said it is outside the primary component.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Asks the node every [`EVERY`] for as long as the task lives; ends at once when the
    /// server is not a Galera node. A question that fails (the server out of reach) changes
    /// nothing: the statements that need the server will say so themselves.
    pub async fn watch(self: Arc<Self>, pool: Db) {
        let Engines::MySql(pool) = pool else {
            return;
        };
        let options = pool.connect_options();
        let mut conn: Option<MySqlConnection> = None;
        let mut known_galera = false;
        loop {
            if conn.is_none() {
                conn = options.connect().await.ok();
            }
            if let (false, Some(c)) = (known_galera, conn.as_mut()) {
                match is_galera_node(c).await {
                    Ok(false) => return,
                    Ok(true) => known_galera = true,
                    Err(_) => conn = None,
                }
            }
            if let (true, Some(c)) = (known_galera, conn.as_mut()) {
                match node_ready(c).await {
                    Ok(ready) => self.ready.store(ready, Ordering::Relaxed),
                    Err(_) => conn = None,
                }
            }
            tokio::time::sleep(EVERY).await;
        }
    }
}

/// Whether the session's server is a Galera node (`wsrep_on`). A server built without Galera
/// does not know the variable, and is not one.
pub async fn is_galera_node(conn: &mut MySqlConnection) -> Result<bool, sqlx::Error> {
    let on: Option<(String, String)> = sqlx::query_as("SHOW VARIABLES LIKE 'wsrep_on'")
        .fetch_optional(&mut *conn)
        .await?;
    Ok(on.is_some_and(|(_, value)| value.eq_ignore_ascii_case("ON")))
}

/// Whether the node says it is ready for the application (`wsrep_ready`): synced in a primary
/// component.
async fn node_ready(conn: &mut MySqlConnection) -> Result<bool, sqlx::Error> {
    let ready: Option<(String, String)> = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'wsrep_ready'")
        .fetch_optional(&mut *conn)
        .await?;
    Ok(ready.is_none_or(|(_, value)| value.eq_ignore_ascii_case("ON")))
}
