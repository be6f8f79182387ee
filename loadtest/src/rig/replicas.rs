//! The rows on a MariaDB primary with a replica (`run --replicas`): every app instance writes
//! to the primary and reads the products' pages on the replica (`--database-replica-url`),
//! as a deployment that scales its reads does. What the world costs is the primary's: a
//! binary log written with every commit, and — semi-synchronous — a commit that waits for the
//! replica to acknowledge it. What it risks is the replica's distance: after each closed-loop
//! round the run reads how many transactions the replica still had to apply, and how long it
//! took to apply them, so a page's staleness under that strategy's load is a measured figure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use sandbox::{ReplicatedMariaDb, Replication, WaitPoint};
use serde::{Deserialize, Serialize};

use super::{Process, world::Topology};

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

    /// How far the replica is behind now: the transactions it still has to apply, how long
    /// it takes to apply them (waited for here), and whether the primary still waits for it.
    pub async fn lag(&self) -> Result<ReplicaLag> {
        let set = Arc::clone(&self.set);
        let semi = self.replicas == Replicas::SemiSync;
        super::control(move || {
            let behind = set
                .last_transaction(0)?
                .saturating_sub(set.last_transaction(1)?);
            let start = Instant::now();
            set.wait_caught_up(1, 0, CATCH_UP_WITHIN)?;
            let catch_up = start.elapsed();
            let asynchronous = semi && !set.semi_sync_status(0)?.0;
            Ok(ReplicaLag {
                most_behind: behind,
                longest_catch_up_ms: u64::try_from(catch_up.as_millis()).unwrap_or(u64::MAX),
                rounds_asynchronous: u32::from(asynchronous),
            })
        })
        .await
    }
}

/// How far the replica fell behind the primary under one strategy's closed loops, read at the
/// end of each round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaLag {
    /// The most transactions the replica still had to apply when a round ended.
    pub most_behind: u64,
    /// The longest it then took to apply them, in milliseconds.
    pub longest_catch_up_ms: u64,
    /// Rounds at whose end a semi-synchronous primary had fallen back to asynchronous
    /// replication (0 for an asynchronous one).
    pub rounds_asynchronous: u32,
}

impl ReplicaLag {
    /// This and `other`, the worst of each.
    pub fn add(&mut self, other: ReplicaLag) {
        self.most_behind = self.most_behind.max(other.most_behind);
        self.longest_catch_up_ms = self.longest_catch_up_ms.max(other.longest_catch_up_ms);
        self.rounds_asynchronous += other.rounds_asynchronous;
    }
}
