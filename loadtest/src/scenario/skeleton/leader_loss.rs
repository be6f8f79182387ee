//! What `zk-leader-loss` and `etcd-leader-loss` share: the leader of a three-member cluster is
//! killed while four clients contend for one lock, and restarted a few seconds later.
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

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use locks::Backend;
use locks::history::{self, Op};
use locks::recorded::Outage;
use serde::{Deserialize, Serialize};

use super::super::Scenario;
use super::{Judgement, Stage};
use crate::drive::lock_contention::{self, Stages};
use crate::rig::start;

/// A cluster the scenario can kill the leader of: what differs between `zk-leader-loss` and
/// `etcd-leader-loss`.
pub trait Contended: sandbox::Cluster + Sized + 'static {
    /// The lock backend the clients contend through.
    const BACKEND: Backend;
    /// The cluster in a few words (`ZooKeeper ensemble`).
    const KIND: &'static str;
    /// Starts a fresh cluster of three.
    fn start() -> sandbox::Result<Self>;
}

/// The leader of a `C` killed under contention.
pub struct LeaderLoss<C>(PhantomData<C>);

impl<C: Contended> Scenario for LeaderLoss<C> {
    type Sizes = Sizes;
    const QUICK: Sizes = QUICK;
    const FULL: Sizes = FULL;
    type Subject = String;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        fault(C::KIND, s)
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(String, Figures)>> {
        let cluster = Arc::new(start(C::start).await?);
        play(C::BACKEND, cluster, s, stage).await
    }

    fn judge(_: &Sizes, _: &String, f: &Figures) -> Judgement {
        judge(f)
    }

    fn why(_: &Sizes, rows: &[(String, Figures)]) -> String {
        rows.iter().map(|(_, f)| why(C::BACKEND, f)).collect()
    }
}

const CLIENTS: usize = 4;
/// Longer than an election on a loaded machine, so sessions survive the leader's death.
const SESSION: Duration = Duration::from_secs(10);

/// Seconds of contention before the kill, with the leader down, and after its restart.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    before: u64,
    down: u64,
    after: u64,
}

const QUICK: Sizes = Sizes {
    before: 3,
    down: 5,
    after: 4,
};

const FULL: Sizes = Sizes {
    before: 5,
    down: 8,
    after: 8,
};

/// The leader killed under contention, and what the history shows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub clients: usize,
    pub grants_before: usize,
    pub grants_after: usize,
    /// The longest stall between grants around the kill.
    pub without_grant_ms: Option<f64>,
    /// From the kill to the grant that ended that stall while the old leader was still down
    /// (`None`: none before its restart, although the other two members are a majority).
    pub regained_while_down_ms: Option<f64>,
    pub loss_notices: usize,
    pub refused_writes: usize,
    /// Violations the history checker found.
    pub violations: usize,
}

/// The row's subject: `<backend>, leader killed`.
fn subject(backend: Backend) -> String {
    format!("{backend}, leader killed")
}

/// The fault on `cluster` (`ZooKeeper ensemble`, `etcd cluster`).
fn fault(cluster: &str, s: &Sizes) -> String {
    format!(
        "{CLIENTS} clients contend for one lock on a three-member {cluster} (session/lease \
         {}s); after {}s the leader is SIGKILLed, {}s later restarted",
        SESSION.as_secs(),
        s.before,
        s.down
    )
}

/// Contends through the leader's loss on `cluster` and reads the history.
async fn play(
    backend: Backend,
    cluster: Arc<dyn sandbox::Cluster>,
    s: Sizes,
    stage: &Stage,
) -> Result<Vec<(String, Figures)>> {
    let key = format!("scenario:{backend}-leader-loss:{}", locks::new_owner_id());
    let stages = Stages {
        before: Duration::from_secs(s.before),
        down: Duration::from_secs(s.down),
        after: Duration::from_secs(s.after),
    };
    let events =
        lock_contention::through_leader_loss(cluster, backend, CLIENTS, &key, SESSION, stages)
            .await?;
    let violations = history::check_events(&events);
    let outage = Outage::of(&events);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let figures = Figures {
        clients: CLIENTS,
        grants_before: outage.grants_before,
        grants_after: outage.grants_after,
        without_grant_ms: outage.without_grant.map(ms),
        regained_while_down_ms: outage.regained_while_down.map(ms),
        loss_notices: outage.loss_notices,
        refused_writes: outage.refused_writes,
        violations: violations.len(),
    };
    let tl = stage.round(subject(backend));
    // The faults and the grants around them (not every write: a run has hundreds).
    let mut after_fault = 0;
    for e in &events {
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
            tl.log_at(e.at.as_secs_f64() * 1000.0, &e.client, e.op.to_string());
        }
    }
    for v in &violations {
        tl.log("checker", v.to_string());
    }
    Ok(vec![(subject(backend), figures)])
}

fn judge(f: &Figures) -> Judgement {
    let observed = format!(
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
    Judgement::new(
        "a clean history: no two holders, tokens rising, only the newest token written; grants \
         resume after the election, before the old leader is restarted",
        observed,
        f.violations == 0
            && f.grants_before > 0
            && f.grants_after > 0
            && f.regained_while_down_ms.is_some(),
    )
}

fn why(backend: Backend, f: &Figures) -> String {
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
