//! The servers a row runs on: the harness's set (one of each, five Redis for Redlock), shared
//! by the rows, and for ZooKeeper and etcd a three-member cluster started for the row.

use std::sync::Arc;

use anyhow::Result;
use app::api::Service;
use locks::Backend;
use sandbox::{Endpoints, EtcdCluster, Server, ZooKeeperEnsemble};

/// The harness's set of servers.
#[derive(Clone)]
pub struct Servers(Arc<sandbox::Servers>);

impl Servers {
    pub async fn start() -> Result<Servers> {
        let servers = tokio::task::spawn_blocking(sandbox::Servers::start).await??;
        Ok(Servers(Arc::new(servers)))
    }

    pub async fn versions(&self) -> Option<sandbox::Versions> {
        let servers = self.0.clone();
        tokio::task::spawn_blocking(move || servers.versions().ok())
            .await
            .ok()
            .flatten()
    }
}

/// A row's cluster.
pub enum Cluster {
    ZooKeeper(Arc<ZooKeeperEnsemble>),
    Etcd(Arc<EtcdCluster>),
}

/// What one row runs on.
pub struct Rig {
    backend: Backend,
    servers: Servers,
    cluster: Option<Cluster>,
}

impl Rig {
    /// `servers`, plus the cluster `backend` runs on if it is ZooKeeper or etcd.
    pub async fn start(backend: Backend, servers: Servers) -> Result<Rig> {
        let cluster = match Service::of(backend) {
            Service::Zookeeper => Some(Cluster::ZooKeeper(Arc::new(
                tokio::task::spawn_blocking(ZooKeeperEnsemble::start).await??,
            ))),
            Service::Etcd => Some(Cluster::Etcd(Arc::new(
                tokio::task::spawn_blocking(EtcdCluster::start).await??,
            ))),
            _ => None,
        };
        Ok(Rig {
            backend,
            servers,
            cluster,
        })
    }

    /// The harness's endpoints, ZooKeeper's or etcd's replaced by the row's cluster.
    pub fn endpoints(&self) -> Endpoints {
        let mut endpoints = self.servers.0.endpoints();
        match &self.cluster {
            Some(Cluster::ZooKeeper(ensemble)) => endpoints.zookeeper = ensemble.connect_string(),
            Some(Cluster::Etcd(cluster)) => endpoints.etcd = cluster.endpoints(),
            None => {}
        }
        endpoints
    }

    pub fn cluster(&self) -> Option<&Cluster> {
        self.cluster.as_ref()
    }

    /// The servers the row runs on, in a few words.
    pub fn deployment(&self) -> &'static str {
        match Service::of(self.backend) {
            Service::Mariadb => "1 MariaDB",
            Service::Redis => "1 Redis",
            Service::Redlock => "5 independent Redis",
            Service::Memcached => "1 memcached",
            Service::Zookeeper => "3-member ensemble",
            Service::Etcd => "3-member cluster",
            Service::Process => "in-process",
        }
    }

    /// The one server of a backend that runs on one.
    pub fn single_server(&self) -> Option<fn(&sandbox::Servers) -> &Server> {
        match Service::of(self.backend) {
            Service::Mariadb => Some(mariadb),
            Service::Redis => Some(redis),
            Service::Memcached => Some(memcached),
            Service::Redlock | Service::Zookeeper | Service::Etcd | Service::Process => None,
        }
    }

    /// Runs `control` (killing, starting: both block) on the harness's servers off the async
    /// threads.
    pub async fn control<F>(&self, control: F) -> Result<()>
    where
        F: FnOnce(&sandbox::Servers) -> sandbox::Result<()> + Send + 'static,
    {
        let servers = self.servers.0.clone();
        Ok(tokio::task::spawn_blocking(move || control(servers.as_ref())).await??)
    }
}

fn mariadb(s: &sandbox::Servers) -> &Server {
    s.mariadb.server()
}

fn redis(s: &sandbox::Servers) -> &Server {
    s.redis.server()
}

fn memcached(s: &sandbox::Servers) -> &Server {
    s.memcached.server()
}
