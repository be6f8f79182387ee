//! Whether the primary's commits still wait for a replica (`--require-semi-sync`).
//!
//! With semi-synchronous replication a commit is answered only once a replica has it, so a
//! failover to that replica loses no order a buyer was told of. But a primary whose replica
//! does not acknowledge within `rpl_semi_sync_master_timeout` falls back to asynchronous
//! replication without a word to its clients: it answers every later commit at once, and the
//! only sign is a status variable, `Rpl_semi_sync_master_status`, gone `OFF` (scenario
//! `primary-failover`, its short-timeout row). A deployment that promised its buyers no lost
//! order can ask for it: the instance then reads that variable every [`EVERY`] on a connection
//! of its own and, while it reads `OFF` — or the server has no semi-synchronous replication at
//! all — refuses purchases `503 backend_unavailable` before they touch the database, rather
//! than answer orders a failover could take back. It comes back `ON` by itself once the replica
//! has caught up, and purchases are admitted again.
//!
//! What it cannot refuse: the commits made between the fallback and the next read, among them
//! the one whose wait ran out the timeout (the primary answers it, asynchronously), at most one
//! [`EVERY`] of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::{ConnectOptions, MySqlConnection};

use super::engine::{Db, Engines};

/// How often the primary is asked.
pub const EVERY: Duration = Duration::from_millis(100);

/// Whether the primary's commits waited for a replica, as last read.
#[derive(Debug)]
pub struct SemiSync {
    /// `--require-semi-sync`: the primary is read, and the reading shown in `/metrics`.
    required: bool,
    acknowledged: AtomicBool,
}

impl SemiSync {
    /// Acknowledged until [`SemiSync::watch`] reads otherwise; `required` as the setting says.
    pub fn new(required: bool) -> SemiSync {
        SemiSync {
            required,
            acknowledged: AtomicBool::new(true),
        }
    }

    /// `false` while the primary last said its commits do not wait for a replica.
    pub fn acknowledged(&self) -> bool {
        self.acknowledged.load(Ordering::Relaxed)
    }

    /// Reads the primary's status every [`EVERY`] for as long as the task lives. A read that
    /// fails (the server out of reach) changes nothing: the statements that need the server
    /// will say so themselves.
    pub async fn watch(self: Arc<Self>, pool: Db) {
        let Engines::MySql(pool) = pool else {
            return;
        };
        let options = pool.connect_options();
        let mut conn: Option<MySqlConnection> = None;
        loop {
            if conn.is_none() {
                conn = options.connect().await.ok();
            }
            if let Some(c) = conn.as_mut() {
                match waits_for_a_replica(c).await {
                    Ok(on) => self.acknowledged.store(on, Ordering::Relaxed),
                    Err(_) => conn = None,
                }
            }
            tokio::time::sleep(EVERY).await;
        }
    }

    /// `seckill_semi_sync_acknowledged` for `/metrics` when the setting is on (empty when off):
    /// an operator sees why purchases are refused, and a scenario when an instance noticed.
    pub fn render(&self) -> String {
        if !self.required {
            return String::new();
        }
        format!(
            "# HELP seckill_semi_sync_acknowledged 1 while the primary's commits wait for a \
             replica as last read; 0 while it replicates asynchronously and purchases are \
             refused (--require-semi-sync).\n\
             # TYPE seckill_semi_sync_acknowledged gauge\n\
             seckill_semi_sync_acknowledged {}\n",
            u8::from(self.acknowledged())
        )
    }
}

/// `Rpl_semi_sync_master_status` is `ON`. A server without semi-synchronous replication
/// enabled reads `OFF` (or has no such variable): its commits wait for no one.
async fn waits_for_a_replica(conn: &mut MySqlConnection) -> Result<bool, sqlx::Error> {
    let status: Option<(String, String)> =
        sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'")
            .fetch_optional(&mut *conn)
            .await?;
    Ok(status.is_some_and(|(_, value)| value.eq_ignore_ascii_case("ON")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_shows_the_last_reading_only_when_semi_sync_is_required() {
        assert_eq!(SemiSync::new(false).render(), "");
        let required = SemiSync::new(true);
        assert!(
            (required.render()).ends_with("\nseckill_semi_sync_acknowledged 1\n"),
            "{}",
            required.render()
        );
        required.acknowledged.store(false, Ordering::Relaxed);
        assert!(
            (required.render()).ends_with("\nseckill_semi_sync_acknowledged 0\n"),
            "{}",
            required.render()
        );
    }
}
