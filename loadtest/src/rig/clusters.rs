//! The three-member clusters as the scenarios and the lock matrix drive them, through
//! [`sandbox::Cluster`]: where a lock client connects, and the blocking member control run off
//! the async threads.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use app::api::{Service, Strategy};
use sandbox::Cluster;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Where a client of `backend` on `cluster` connects: every member's address, starting with
/// member `first % members` (so that clients begin on different members), and the ZooKeeper
/// session of `session`.
pub fn cluster_lock_endpoints(
    backend: locks::Backend,
    cluster: &dyn sandbox::Cluster,
    first: usize,
    session: std::time::Duration,
) -> locks::Endpoints {
    let mut addresses = cluster.client_addresses();
    let n = addresses.len().max(1);
    addresses.rotate_left(first % n);
    let mut endpoints = locks::Endpoints {
        zookeeper_session_timeout: session,
        ..Default::default()
    };
    match backend {
        locks::Backend::ZooKeeper => endpoints.zookeeper = Some(addresses.join(",")),
        locks::Backend::Etcd => endpoints.etcd = addresses,
        _ => endpoints.redis = addresses.first().cloned(),
    }
    endpoints
}

/// Waits (up to `within`) for `cluster`'s leader and returns its member index.
pub async fn leader(cluster: &Arc<dyn Cluster>, within: Duration) -> Result<usize> {
    let c = cluster.clone();
    Ok(tokio::task::spawn_blocking(move || c.await_leader(within)).await??)
}

/// SIGKILLs member `i` of `cluster`.
pub async fn kill(cluster: &Arc<dyn Cluster>, i: usize) -> Result<()> {
    let c = cluster.clone();
    Ok(tokio::task::spawn_blocking(move || c.process(i).kill()).await??)
}

/// Starts member `i` of `cluster` again, in the background, and waits (up to `within`) until
/// it is back in the cluster.
pub fn rejoin(cluster: &Arc<dyn Cluster>, i: usize, within: Duration) -> JoinHandle<Result<()>> {
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || Ok(c.rejoin(i, within)?))
}

/// [`rejoin`] of member `i`, once another member leads: a Redis started before the Sentinels
/// promoted a replica would come back as an empty primary that they still name. Returns when
/// the member was back.
pub fn rejoin_after_failover(
    cluster: &Arc<dyn Cluster>,
    i: usize,
    within: Duration,
) -> JoinHandle<Result<Instant>> {
    let c = cluster.clone();
    tokio::spawn(async move {
        let r = c.clone();
        tokio::task::spawn_blocking(move || {
            sandbox::wait_for(within, || r.leader().filter(|&l| l != i))
        })
        .await?
        .context("no other member took the lead")?;
        rejoin(&c, i, within).await??;
        Ok(Instant::now())
    })
}

/// The three clusters a flash sale can run on: the ZooKeeper ensemble, the etcd cluster and
/// Redis behind its Sentinels.
#[derive(Clone)]
pub struct Clusters {
    pub zookeeper: Arc<sandbox::ZooKeeperEnsemble>,
    pub etcd: Arc<sandbox::EtcdCluster>,
    pub redis: Arc<sandbox::RedisSentinelCluster>,
}

impl Clusters {
    /// Starts the three at once.
    pub async fn start() -> Result<Clusters> {
        let (zookeeper, etcd, redis) = tokio::try_join!(
            super::start(sandbox::ZooKeeperEnsemble::start),
            super::start(sandbox::EtcdCluster::start),
            super::start(sandbox::RedisSentinelCluster::start),
        )?;
        Ok(Clusters {
            zookeeper: Arc::new(zookeeper),
            etcd: Arc::new(etcd),
            redis: Arc::new(redis),
        })
    }

    /// The flags that point an app instance at the three clusters.
    pub fn app_flags(&self) -> Vec<String> {
        vec![
            format!("--zookeeper={}", self.zookeeper.connect_string()),
            format!("--etcd={}", self.etcd.endpoints().join(",")),
            format!(
                "--redis-sentinels={}",
                self.redis.sentinel_addrs().join(",")
            ),
            format!("--redis-master-name={}", self.redis.master_name()),
        ]
    }

    /// The cluster `strategy`'s lock (or, for `redis-lua`, its stock) lives on.
    pub fn of(&self, strategy: Strategy) -> Arc<dyn Cluster> {
        match strategy.service() {
            Service::Zookeeper => self.zookeeper.clone(),
            Service::Etcd => self.etcd.clone(),
            _ => self.redis.clone(),
        }
    }
}
