//! `zk-leader-loss` and `etcd-leader-loss`: the leader of a three-member cluster is killed
//! while four clients contend for one lock, and restarted a few seconds later.
//!
//! Both services commit a grant on a majority before answering, and a client's session (a
//! lease, for etcd) outlives an election shorter than its timeout. So the expected outcome is
//! not "nothing happens" but a *clean history* — checked, not hoped for: every client records
//! each attempt, grant, loss notice and release with its fencing token, the fenced store
//! records each write it accepts or refuses, and [`locks::history::check`] asserts that no two
//! clients held the lock at once (unless the earlier one had been told it lost it), that tokens
//! rose in grant order, and that the store accepted only the newest token. What the leader's
//! death costs is availability: the time around it without any grant, reported. The two
//! surviving members are a majority, so grants must resume before the old leader is back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use locks::history::{self, History};
use locks::recorded::{Contention, FencedStore, Outage, contend};
use locks::{Backend, DistributedLock};

use super::figures::{EtcdLeaderLoss, LeaderLoss, ZkLeaderLoss};
use super::{Event, Figures, Row, Scenario, ScenarioOptions, ScenarioReport, start};

const CLIENTS: usize = 4;
/// Longer than an election on a loaded machine, so sessions survive the leader's death.
const SESSION: Duration = Duration::from_secs(10);
/// A bound on any one request while the cluster has no leader.
const PATIENCE: Duration = Duration::from_secs(20);

/// One of the clusters, and what the scenario (and `lock matrix`) does with it.
pub(crate) trait Cluster: Send + Sync + 'static {
    const BACKEND: Backend;
    /// The client endpoints, rotated by `i` so clients start on different members.
    fn endpoints(&self, i: usize) -> locks::Endpoints;
    fn await_leader(&self, within: Duration) -> sandbox::Result<usize>;
    fn server(&self, member: usize) -> &sandbox::Server;
    fn figures(f: LeaderLoss) -> Figures;
}

impl Cluster for sandbox::ZooKeeperEnsemble {
    const BACKEND: Backend = Backend::ZooKeeper;
    fn endpoints(&self, i: usize) -> locks::Endpoints {
        let mut members: Vec<String> = self.members().iter().map(|m| m.connect_string()).collect();
        let n = members.len();
        members.rotate_left(i % n);
        locks::Endpoints {
            zookeeper: Some(members.join(",")),
            zookeeper_session_timeout: SESSION,
            ..Default::default()
        }
    }
    fn await_leader(&self, within: Duration) -> sandbox::Result<usize> {
        sandbox::ZooKeeperEnsemble::await_leader(self, within)
    }
    fn server(&self, member: usize) -> &sandbox::Server {
        self.member(member).server()
    }
    fn figures(f: LeaderLoss) -> Figures {
        ZkLeaderLoss(f).into()
    }
}

impl Cluster for sandbox::EtcdCluster {
    const BACKEND: Backend = Backend::Etcd;
    fn endpoints(&self, i: usize) -> locks::Endpoints {
        let mut etcd = sandbox::EtcdCluster::endpoints(self);
        let n = etcd.len();
        etcd.rotate_left(i % n);
        locks::Endpoints {
            etcd,
            ..Default::default()
        }
    }
    fn await_leader(&self, within: Duration) -> sandbox::Result<usize> {
        sandbox::EtcdCluster::await_leader(self, within)
    }
    fn server(&self, member: usize) -> &sandbox::Server {
        self.member(member).server()
    }
    fn figures(f: LeaderLoss) -> Figures {
        EtcdLeaderLoss(f).into()
    }
}

pub async fn zookeeper(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let cluster = start(sandbox::ZooKeeperEnsemble::start).await?;
    run(Scenario::ZkLeaderLoss, Arc::new(cluster), opts).await
}

pub async fn etcd(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let cluster = start(sandbox::EtcdCluster::start).await?;
    run(Scenario::EtcdLeaderLoss, Arc::new(cluster), opts).await
}

async fn run<C: Cluster>(
    scenario: Scenario,
    cluster: Arc<C>,
    opts: &ScenarioOptions,
) -> Result<ScenarioReport> {
    // Before the kill, down, after the restart.
    let (before, down, after) = match opts.quick {
        true => (3, 5, 4),
        false => (5, 8, 8),
    };
    let key = format!("scenario:{scenario}:{}", locks::new_owner_id());
    let secs = Duration::from_secs;
    let events = contend_through_leader_loss(
        cluster,
        CLIENTS,
        &key,
        (secs(before), secs(down), secs(after)),
    )
    .await?;
    let violations = history::check_events(&events);
    let outage = Outage::of(&events);
    let f = LeaderLoss {
        clients: CLIENTS,
        grants_before: outage.grants_before,
        grants_after: outage.grants_after,
        without_grant_ms: outage.without_grant.map(|d| d.as_secs_f64() * 1000.0),
        regained_while_down_ms: outage.regained_while_down.map(|d| d.as_secs_f64() * 1000.0),
        loss_notices: outage.loss_notices,
        refused_writes: outage.refused_writes,
        violations: violations.len(),
    };
    let subject = format!("{}, leader killed", C::BACKEND);
    let ok = violations.is_empty()
        && f.grants_before > 0
        && f.grants_after > 0
        && f.regained_while_down_ms.is_some();
    let mut observed = format!(
        "{} violation(s); {} grant(s) before the kill, {} after; no grant for {}; {}; {} loss \
         notice(s), {} refused write(s)",
        f.violations,
        f.grants_before,
        f.grants_after,
        f.without_grant_ms
            .map_or_else(|| "–".to_string(), |ms| format!("{ms:.0} ms")),
        f.regained_while_down_ms.map_or_else(
            || "no grant until the old leader's restart".to_string(),
            |ms| format!("granted again {ms:.0} ms after the kill, the old leader still down")
        ),
        f.loss_notices,
        f.refused_writes
    );
    for v in &violations {
        observed.push_str(&format!("; {v}"));
    }
    let row = Row::new(
        subject.clone(),
        "a clean history: no two holders, tokens rising, only the newest token written; grants \
         resume after the election, before the old leader is restarted",
        observed,
        ok,
        C::figures(f),
    );
    Ok(ScenarioReport {
        scenario,
        fault: format!(
            "{CLIENTS} clients contend for one lock on a three-member {} (session/lease {}s); \
             after {before}s the leader is SIGKILLed, {down}s later restarted",
            match C::BACKEND {
                Backend::ZooKeeper => "ZooKeeper ensemble",
                _ => "etcd cluster",
            },
            SESSION.as_secs()
        ),
        rows: vec![row],
        timeline: timeline(&events, &subject),
        why: why(C::BACKEND, &f),
    })
}

/// `clients` clients contend for the lock `key` on `cluster`, each step recorded in one history;
/// `before` in, the leader is SIGKILLed, `down` later restarted, and `after` that the contention
/// ends. Returns the record, the kill and the restart in it as faults. (`lock matrix` measures
/// its clusters' availability with it too.)
pub(crate) async fn contend_through_leader_loss<C: Cluster>(
    cluster: Arc<C>,
    clients: usize,
    key: &str,
    (before, down, after): (Duration, Duration, Duration),
) -> Result<Vec<locks::history::Event>> {
    let history = Arc::new(History::new());
    let store = Arc::new(FencedStore::new(history.clone()));
    let until = Instant::now() + before + down + after;
    let how = Contention {
        lease: SESSION,
        patience: PATIENCE,
        ..Contention::default()
    };
    let mut contenders = Vec::new();
    for i in 0..clients {
        let lock: Arc<dyn DistributedLock> = locks::connect(C::BACKEND, &cluster.endpoints(i))
            .await
            .map_err(|e| anyhow::anyhow!("connect {}: {e}", C::BACKEND))?;
        let (key, store) = (key.to_string(), store.clone());
        let name = format!("client-{}", i + 1);
        contenders.push(tokio::spawn(contend(name, lock, key, store, until, how)));
    }

    tokio::time::sleep(before).await;
    let c = cluster.clone();
    let leader = tokio::task::spawn_blocking(move || c.await_leader(PATIENCE)).await??;
    history.fault("nemesis", format!("kill the leader, member {}", leader + 1));
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.server(leader).kill()).await??;
    tokio::time::sleep(down).await;
    history.fault("nemesis", format!("restart member {}", leader + 1));
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.server(leader).start_again()).await??;
    for contender in contenders {
        contender.await?;
    }
    Ok(history.events())
}

/// The faults and the grants around them (not every write: a run has hundreds).
fn timeline(events: &[locks::history::Event], subject: &str) -> Vec<Event> {
    use locks::history::Op;
    let mut shown = Vec::new();
    let mut after_fault = 0;
    for e in events {
        let keep = match &e.op {
            Op::Fault { .. } => {
                after_fault = 3;
                true
            }
            Op::Grant { .. } | Op::Lost { .. } if after_fault > 0 => {
                after_fault -= 1;
                true
            }
            Op::Lost { .. }
            | Op::Write {
                accepted: false, ..
            } => true,
            _ => false,
        };
        if keep {
            shown.push(Event {
                t_ms: e.at.as_secs_f64() * 1000.0,
                actor: format!("{subject}: {}", e.client),
                what: e.op.to_string(),
            });
        }
    }
    shown
}

fn why(backend: Backend, f: &LeaderLoss) -> String {
    let window = f.without_grant_ms.map_or_else(
        || "no grant on one side of it".to_string(),
        |ms| format!("{ms:.0} ms without a grant"),
    );
    format!(
        "{backend} commits each grant on a majority before answering, and the clients' \
         sessions outlived the election, so the history checker found {} violation(s) in {} \
         grants: the leader's death cost availability ({window} around the kill), not safety. \
         {} loss notice(s) and {} refused write(s) were recorded.",
        f.violations,
        f.grants_before + f.grants_after,
        f.loss_notices,
        f.refused_writes
    )
}
