//! The servers a row runs on: the harness's set (one of each, five Redis for Redlock), shared
//! by the rows, and for ZooKeeper and etcd a three-member cluster started for the row.

use std::sync::Arc;

use anyhow::Result;
use app::api::Service;
use locks::Backend;
use sandbox::{Cluster, Endpoints, EtcdCluster, Server, ZooKeeperEnsemble};

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

/// What one row runs on.
pub struct Rig {
    backend: Backend,
    servers: Servers,
    cluster: Option<Arc<dyn Cluster>>,
}

impl Rig {
    /// `servers`, plus the cluster `backend` runs on if it is ZooKeeper or etcd.
    pub async fn start(backend: Backend, servers: Servers) -> Result<Rig> {
        let cluster: Option<Arc<dyn Cluster>> = match Service::of(backend) {
            Service::Zookeeper => Some(Arc::new(
                tokio::task::spawn_blocking(ZooKeeperEnsemble::start).await??,
            )),
            Service::Etcd => Some(Arc::new(
                tokio::task::spawn_blocking(EtcdCluster::start).await??,
            )),
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
        if let Some(cluster) = &self.cluster {
            let addresses = cluster.client_addresses();
            match self.backend {
                Backend::ZooKeeper => endpoints.zookeeper = addresses.join(","),
                Backend::Etcd => endpoints.etcd = addresses,
                _ => {}
            }
        }
        endpoints
    }

    /// The row's cluster, for the ZooKeeper and etcd rows.
    pub fn cluster(&self) -> Option<Arc<dyn Cluster>> {
        self.cluster.clone()
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
