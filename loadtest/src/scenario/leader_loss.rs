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
use std::time::Duration;

use anyhow::Result;
use locks::Backend;
use locks::history;
use locks::recorded::Outage;

use super::figures::{EtcdLeaderLoss, LeaderLoss, ZkLeaderLoss};
use super::{Event, Figures, Row, Scenario, ScenarioOptions, ScenarioReport, start};
use crate::drive::lock_contention::{self, Stages};

const CLIENTS: usize = 4;
/// Longer than an election on a loaded machine, so sessions survive the leader's death.
const SESSION: Duration = Duration::from_secs(10);

pub async fn zookeeper(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let cluster = start(sandbox::ZooKeeperEnsemble::start).await?;
    let figures = |f| ZkLeaderLoss(f).into();
    run(
        Scenario::ZkLeaderLoss,
        Backend::ZooKeeper,
        Arc::new(cluster),
        figures,
        opts,
    )
    .await
}

pub async fn etcd(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let cluster = start(sandbox::EtcdCluster::start).await?;
    let figures = |f| EtcdLeaderLoss(f).into();
    run(
        Scenario::EtcdLeaderLoss,
        Backend::Etcd,
        Arc::new(cluster),
        figures,
        opts,
    )
    .await
}

async fn run(
    scenario: Scenario,
    backend: Backend,
    cluster: Arc<dyn sandbox::Cluster>,
    figures: fn(LeaderLoss) -> Figures,
    opts: &ScenarioOptions,
) -> Result<ScenarioReport> {
    // Before the kill, down, after the restart.
    let (before, down, after) = match opts.quick {
        true => (3, 5, 4),
        false => (5, 8, 8),
    };
    let key = format!("scenario:{scenario}:{}", locks::new_owner_id());
    let secs = Duration::from_secs;
    let stages = Stages {
        before: secs(before),
        down: secs(down),
        after: secs(after),
    };
    let events =
        lock_contention::through_leader_loss(cluster, backend, CLIENTS, &key, SESSION, stages)
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
    let subject = format!("{}, leader killed", backend);
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
        figures(f),
    );
    Ok(ScenarioReport {
        scenario,
        fault: format!(
            "{CLIENTS} clients contend for one lock on a three-member {} (session/lease {}s); \
             after {before}s the leader is SIGKILLed, {down}s later restarted",
            match backend {
                Backend::ZooKeeper => "ZooKeeper ensemble",
                _ => "etcd cluster",
            },
            SESSION.as_secs()
        ),
        rows: vec![row],
        timeline: timeline(&events, &subject),
        why: why(backend, &f),
    })
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
