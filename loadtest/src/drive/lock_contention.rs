//! Clients contending for one lock on a cluster whose leader is killed and restarted, every
//! step recorded in one history ([`locks::history`]): the workload of the `zk-leader-loss` and
//! `etcd-leader-loss` scenarios and of the lock matrix's availability column.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use locks::history::{Event, History};
use locks::recorded::{Contention, FencedStore, contend};
use locks::{Backend, DistributedLock};

use crate::rig::clusters::{self, cluster_lock_endpoints};

/// A bound on any one request while the cluster has no leader.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// How long each stage of the contention lasts.
#[derive(Debug, Clone, Copy)]
pub struct Stages {
    /// Before the kill.
    pub before: Duration,
    /// From the kill to the restart.
    pub down: Duration,
    /// After the restart.
    pub after: Duration,
}

/// `clients` clients of `backend` contend for the lock `key` on `cluster` with a lease (a
/// ZooKeeper session) of `lease`; `stages.before` in, the leader is SIGKILLed, `stages.down`
/// later restarted, and `stages.after` that the contention ends. Returns the record, the kill
/// and the restart in it as faults.
pub async fn through_leader_loss(
    cluster: Arc<dyn sandbox::Cluster>,
    backend: Backend,
    clients: usize,
    key: &str,
    lease: Duration,
    stages: Stages,
) -> Result<Vec<Event>> {
    let history = Arc::new(History::new());
    let store = Arc::new(FencedStore::new(history.clone()));
    let until = Instant::now() + stages.before + stages.down + stages.after;
    let how = Contention {
        lease,
        patience: PATIENCE,
        ..Contention::default()
    };
    let mut contenders = Vec::new();
    for i in 0..clients {
        let endpoints = cluster_lock_endpoints(backend, cluster.as_ref(), i, lease);
        let lock: Arc<dyn DistributedLock> = locks::connect(backend, &endpoints)
            .await
            .map_err(|e| anyhow::anyhow!("connect {backend}: {e}"))?;
        let (key, store) = (key.to_string(), store.clone());
        let name = format!("client-{}", i + 1);
        contenders.push(tokio::spawn(contend(name, lock, key, store, until, how)));
    }

    tokio::time::sleep(stages.before).await;
    let leader = clusters::leader(&cluster, PATIENCE).await?;
    history.fault("nemesis", format!("kill the leader, member {}", leader + 1));
    clusters::kill(&cluster, leader).await?;
    tokio::time::sleep(stages.down).await;
    history.fault("nemesis", format!("restart member {}", leader + 1));
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.process(leader).start_again()).await??;
    for contender in contenders {
        contender.await?;
    }
    Ok(history.events())
}
