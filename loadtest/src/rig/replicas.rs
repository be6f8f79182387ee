//! The rows on a MariaDB primary with a replica (`run --replicas`): every app instance writes
//! to the primary and reads the products' pages on the replica (`--database-replica-url`),
//! as a deployment that scales its reads does. What the world costs is the primary's: a
//! binary log written with every commit, and — semi-synchronous — a commit that waits for the
//! replica to acknowledge it. What it risks is the replica's distance: while each closed-loop
//! round runs the run watches how many transactions the replica has still to apply, and when
//! it ends, how long the replica takes to apply them, so a page's staleness under that
//! strategy's load is a measured figure.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use sandbox::{ReplicatedMariaDb, Replication, WaitPoint, gtid_sequence};
use sqlx::{Connection, MySqlConnection};
use tokio::sync::oneshot;

use super::Process;
use crate::schema::ReplicaLag;
use crate::schema::world::Topology;

/// How the primary's commits wait for the replica (`run --replicas`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Replicas {
    /// A commit returns once the primary has it; the replica follows when it can.
    Async,
    /// A commit waits for the replica's acknowledgement after the binary log is written
    /// (`AFTER_SYNC`: what makes a failover lossless), up to ten minutes before the primary
    /// would fall back to asynchronous replication — which the run would report.
    SemiSync,
}

/// How long a semi-synchronous commit waits before the primary falls back: longer than any
/// run, so a fallback is a failure the report names, not a setting.
const SEMI_SYNC_TIMEOUT: Duration = Duration::from_secs(600);

/// How long the replica may take to apply what it has after a round.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(300);

impl Replicas {
    pub fn replication(self) -> Replication {
        match self {
            Replicas::Async => Replication::Async,
            Replicas::SemiSync => Replication::SemiSync {
                wait_point: WaitPoint::AfterSync,
                timeout: SEMI_SYNC_TIMEOUT,
            },
        }
    }

    pub fn topology(self) -> Topology {
        match self {
            Replicas::Async => Topology::ReplicaAsync,
            Replicas::SemiSync => Topology::ReplicaSemiSync,
        }
    }
}

/// A primary (member 0) and its replica (member 1) holding the app's rows.
pub struct ReplicaRows {
    pub set: Arc<ReplicatedMariaDb>,
    pub replicas: Replicas,
}

impl ReplicaRows {
    /// Starts the primary and its replica.
    pub fn start(replicas: Replicas) -> Result<ReplicaRows> {
        let set = ReplicatedMariaDb::start(1, replicas.replication())?;
        Ok(ReplicaRows {
            set: Arc::new(set),
            replicas,
        })
    }

    pub fn primary_url(&self) -> String {
        self.set.member(0).url()
    }

    pub fn replica_url(&self) -> String {
        self.set.member(1).url()
    }

    /// The primary and the replica, for CPU accounting.
    pub fn processes(&self) -> Vec<Process> {
        [("primary", 0), ("replica", 1)]
            .into_iter()
            .filter_map(|(role, i)| {
                let pid = self.set.member(i).server().pid()?;
                Some(Process::new(
                    format!("mariadbd (the {role})"),
                    format!("mariadb-{role}"),
                    pid,
                ))
            })
            .collect()
    }

    /// Starts watching the replica's distance from the primary, on two connections of the
    /// watch's own: every [`SAMPLE`] it reads both positions, and keeps the most the replica
    /// was behind. Two one-row reads every 50 ms: nothing beside a closed loop's thousands.
    pub async fn watch(&self) -> Result<LagWatch> {
        let mut primary = MySqlConnection::connect(&self.primary_url()).await?;
        let mut replica = MySqlConnection::connect(&self.replica_url()).await?;
        let first = gtid_sequence(&position(&mut primary).await?);
        let semi = self.replicas == Replicas::SemiSync;
        let (stop, mut stopped) = oneshot::channel::<()>();
        let seen = Arc::new(AtomicU64::new(0));
        let most = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            let mut most_behind = 0;
            let mut tick = tokio::time::interval(SAMPLE);
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tick.tick() => {}
                }
                let (on_replica, on_primary) =
                    tokio::join!(position(&mut replica), position(&mut primary));
                let behind =
                    gtid_sequence(&on_primary?).saturating_sub(gtid_sequence(&on_replica?));
                most_behind = most_behind.max(behind);
                most.store(most_behind, Ordering::Relaxed);
            }
            // Once the load has stopped: how long the replica takes to apply what it has left.
            let target = position(&mut primary).await?;
            let start = Instant::now();
            let reached: Option<i64> = sqlx::query_scalar("SELECT MASTER_GTID_WAIT(?, ?)")
                .bind(&target)
                .bind(CATCH_UP_WITHIN.as_secs_f64())
                .fetch_one(&mut replica)
                .await?;
            anyhow::ensure!(
                reached == Some(0),
                "the replica did not reach {target} within {CATCH_UP_WITHIN:?}"
            );
            let catch_up = start.elapsed();
            let asynchronous = semi && !semi_synchronous(&mut primary).await?;
            Ok(ReplicaLag {
                transactions: gtid_sequence(&target).saturating_sub(first),
                most_behind,
                longest_catch_up_ms: u64::try_from(catch_up.as_millis()).unwrap_or(u64::MAX),
                rounds_asynchronous: u32::from(asynchronous),
            })
        });
        Ok(LagWatch { stop, seen, task })
    }
}

/// How often the watch reads the two positions.
const SAMPLE: Duration = Duration::from_millis(50);

/// A watch of the replica's distance under way ([`ReplicaRows::watch`]).
pub struct LagWatch {
    stop: oneshot::Sender<()>,
    /// The most transactions behind seen so far.
    seen: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Result<ReplicaLag>>,
}

impl LagWatch {
    /// The most transactions the replica was behind at any sample so far.
    pub fn most_behind_so_far(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// Stops watching, waits for the replica to apply what it has, and says how far it was.
    pub async fn finish(self) -> Result<ReplicaLag> {
        let _ = self.stop.send(());
        self.task.await?
    }
}

/// The server's GTID position: what it has logged, and — a replica logs what it applies —
/// applied.
async fn position(conn: &mut MySqlConnection) -> Result<String> {
    Ok(sqlx::query_scalar("SELECT @@gtid_binlog_pos")
        .fetch_one(conn)
        .await?)
}

/// Whether the primary's commits still wait for the replica (`Rpl_semi_sync_master_status`).
async fn semi_synchronous(primary: &mut MySqlConnection) -> Result<bool> {
    let status: Option<String> = sqlx::query_scalar(
        "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
         WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS'",
    )
    .fetch_optional(primary)
    .await?;
    Ok(status.as_deref() == Some("ON"))
}
