//! High availability, measured by killing servers under the lock.
//!
//! * **One server** (the database, Redis, memcached): it is SIGKILLed, and a client that was
//!   working a moment before asks for the lock once. Such a lock is exactly as available as its
//!   one server; what is measured is how promptly the client is told (a failure, not a hang),
//!   and whether the same client is granted again once the server is back.
//! * **Redlock**: two of the five instances are killed and grants are counted (the other three
//!   are still a majority); then a third is killed, and the answer must be "no quorum".
//! * **ZooKeeper, etcd**: two clients contend on the three-member cluster while its leader is
//!   SIGKILLed; the figure is the time from the kill to the grant that ended the longest stall
//!   between grants while the old leader is still down ([`Outage`]), and the run's history is
//!   checked ([`locks::history`]) like the `zk-leader-loss` scenario's, whose workload this is
//!   ([`crate::drive::lock_contention`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use locks::history;
use locks::recorded::Outage;
use locks::{AcquireOptions, Backend};
use sandbox::{MEMBERS, REDLOCK_INSTANCES};
use serde::Serialize;

use super::rig::Rig;
use super::{LEASE, Settings, answer, duration, fresh_key, grouped, warm};
use crate::drive::lock_contention::{self, Stages};
use crate::lock::connect_backend;

/// How long a client may take to be granted again after its server restarted.
const RECOVERY: Duration = Duration::from_secs(10);
/// Clients contending on a cluster whose leader is killed.
pub(super) const CONTENDERS: usize = 2;
/// Contention before the kill, and after the restart.
const AROUND: Duration = Duration::from_secs(1);
/// The contenders' session (lease): longer than an election on a loaded machine, so sessions
/// survive the leader's death.
const CLUSTER_SESSION: Duration = Duration::from_secs(10);

/// What killing servers under the lock showed.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Availability {
    /// The backend's one server was killed; one acquire was asked of it.
    SingleServer {
        /// From the acquire's start to its answer.
        failed_after_ms: f64,
        /// `unavailable` expected.
        answer: &'static str,
        /// Whether the same client was granted the lock again after the restart.
        granted_after_restart: bool,
    },
    /// Redlock with instances killed.
    Quorum {
        instances: usize,
        minority_down: usize,
        window_ms: u64,
        grants_with_minority_down: u64,
        /// The answer with a majority down; `no quorum` expected.
        with_majority_down: &'static str,
    },
    /// A cluster whose leader was killed under contention.
    Cluster {
        members: usize,
        leader_down_ms: u64,
        /// From the kill to the first grant while the old leader was down; `None`: no grant
        /// until its restart.
        regained_after_ms: Option<f64>,
        grants: usize,
        /// Found by the lock-history checker.
        violations: usize,
    },
}

impl Availability {
    pub fn cell(&self) -> String {
        match self {
            Availability::SingleServer {
                failed_after_ms,
                answer,
                granted_after_restart,
            } => {
                let told = match *answer {
                    "unavailable" => "acquire fails".to_string(),
                    other => format!("acquire answered {other}"),
                };
                let back = match granted_after_restart {
                    true => "",
                    false => "; no grant after restart",
                };
                format!(
                    "single server: {told} in {} while down{back}",
                    duration(*failed_after_ms)
                )
            }
            Availability::Quorum {
                instances,
                minority_down,
                window_ms,
                grants_with_minority_down,
                with_majority_down,
            } => format!(
                "{minority_down} of {instances} down: {} grants in {}; {} down: {with_majority_down}",
                grouped(*grants_with_minority_down),
                duration(*window_ms as f64),
                minority_down + 1
            ),
            Availability::Cluster {
                members,
                leader_down_ms,
                regained_after_ms,
                violations,
                ..
            } => {
                let up = format!("{} of {members} up", members - 1);
                let mut text = match regained_after_ms {
                    Some(ms) => {
                        format!("leader killed: grants again after {} ({up})", duration(*ms))
                    }
                    None => format!(
                        "leader killed: no grant in {} ({up})",
                        duration(*leader_down_ms as f64)
                    ),
                };
                if *violations > 0 {
                    text.push_str(&format!("; {violations} history violation(s)"));
                }
                text
            }
        }
    }
}

pub async fn measure(backend: Backend, rig: &Rig, settings: &Settings) -> Result<Availability> {
    match rig.cluster() {
        Some(cluster) => leader_killed(backend, cluster, settings).await,
        None if rig.runs_on_one_server() => single_server(backend, rig).await,
        None => quorum(backend, rig, settings).await,
    }
}

async fn single_server(backend: Backend, rig: &Rig) -> Result<Availability> {
    let lock = connect_backend(backend, &rig.endpoints()).await?;
    warm(lock.as_ref()).await?;
    rig.on_single_server(sandbox::Server::kill).await?;
    let key = fresh_key("down");
    let start = Instant::now();
    let outcome = lock.acquire(&key, AcquireOptions::new(LEASE)).await;
    let failed_after = start.elapsed();
    let answer = answer(outcome).await;
    rig.on_single_server(sandbox::Server::start_again).await?;
    let again = lock
        .acquire(&key, AcquireOptions::new(LEASE).wait(RECOVERY))
        .await;
    Ok(Availability::SingleServer {
        failed_after_ms: failed_after.as_secs_f64() * 1000.0,
        answer,
        granted_after_restart: super::answer(again).await == "granted",
    })
}

async fn quorum(backend: Backend, rig: &Rig, settings: &Settings) -> Result<Availability> {
    let lock = connect_backend(backend, &rig.endpoints()).await?;
    warm(lock.as_ref()).await?;
    let minority = REDLOCK_INSTANCES - (REDLOCK_INSTANCES / 2 + 1);
    rig.control(move |s| (0..minority).try_for_each(|i| s.redlock[i].server().kill()))
        .await?;
    let key = fresh_key("quorum");
    let window = Duration::from_millis(settings.minority_window_ms);
    let start = Instant::now();
    let mut grants = 0;
    while start.elapsed() < window {
        match lock.acquire(&key, AcquireOptions::new(LEASE)).await {
            Ok(guard) => {
                grants += 1;
                // The killed instances cannot answer the release; the majority does.
                let _ = guard.release().await;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    rig.control(move |s| s.redlock[minority].server().kill())
        .await?;
    let with_majority_down = answer(lock.acquire(&key, AcquireOptions::new(LEASE)).await).await;
    rig.control(move |s| (0..=minority).try_for_each(|i| s.redlock[i].server().start_again()))
        .await?;
    Ok(Availability::Quorum {
        instances: REDLOCK_INSTANCES,
        minority_down: minority,
        window_ms: settings.minority_window_ms,
        grants_with_minority_down: grants,
        with_majority_down,
    })
}

async fn leader_killed(
    backend: Backend,
    cluster: Arc<dyn sandbox::Cluster>,
    settings: &Settings,
) -> Result<Availability> {
    let stages = Stages {
        before: AROUND,
        down: Duration::from_millis(settings.leader_down_ms),
        after: AROUND,
    };
    let key = fresh_key("leader");
    let events = lock_contention::through_leader_loss(
        cluster,
        backend,
        CONTENDERS,
        &key,
        CLUSTER_SESSION,
        stages,
    )
    .await?;
    let outage = Outage::of(&events);
    Ok(Availability::Cluster {
        members: MEMBERS,
        leader_down_ms: settings.leader_down_ms,
        regained_after_ms: (outage.regained_while_down).map(|d| d.as_secs_f64() * 1000.0),
        grants: outage.grants_before + outage.grants_after,
        violations: history::check_events(&events).len(),
    })
}
