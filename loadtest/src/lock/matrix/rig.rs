//! The servers a row runs on: the harness's set (one of each, five Redis for Redlock), shared
//! by the rows, and for ZooKeeper and etcd a three-member cluster, for PostgreSQL's advisory
//! locks a PostgreSQL, started for the row.

use std::sync::Arc;

use anyhow::Result;
use app::api::Service;
use locks::Backend;
use sandbox::{Cluster, Endpoints, EtcdCluster, Postgres, Server, ZooKeeperEnsemble};

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
    postgres: Option<Arc<Postgres>>,
}

impl Rig {
    /// `servers`, plus the cluster `backend` runs on if it is ZooKeeper or etcd, or the
    /// PostgreSQL of its advisory locks.
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
        let postgres = match Service::of(backend) {
            Service::Postgres => Some(Arc::new(
                tokio::task::spawn_blocking(Postgres::start).await??,
            )),
            _ => None,
        };
        Ok(Rig {
            backend,
            servers,
            cluster,
            postgres,
        })
    }

    /// The harness's endpoints, ZooKeeper's or etcd's replaced by the row's cluster, and the
    /// row's PostgreSQL.
    pub fn endpoints(&self) -> Endpoints {
        let mut endpoints = self.servers.0.endpoints();
        endpoints.postgres_url = self.postgres.as_ref().map(|p| p.url());
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
            Service::Postgres => "1 PostgreSQL",
            Service::Zookeeper => "3-member ensemble",
            Service::Etcd => "3-member cluster",
            Service::Process => "in-process",
        }
    }

    /// The version of the row's PostgreSQL, if it has one.
    pub async fn postgres_version(&self) -> Option<String> {
        let postgres = self.postgres.clone()?;
        tokio::task::spawn_blocking(move || postgres.version().ok())
            .await
            .ok()
            .flatten()
    }

    /// Whether the backend runs on one server ([`Rig::on_single_server`]).
    pub fn runs_on_one_server(&self) -> bool {
        match Service::of(self.backend) {
            Service::Mariadb | Service::Redis | Service::Memcached | Service::Postgres => true,
            Service::Redlock | Service::Zookeeper | Service::Etcd | Service::Process => false,
        }
    }

    /// Runs `act` (killing, starting again: both block) on the one server of a backend that
    /// runs on one, off the async threads.
    pub async fn on_single_server(&self, act: fn(&Server) -> sandbox::Result<()>) -> Result<()> {
        let (servers, postgres) = (self.servers.0.clone(), self.postgres.clone());
        let service = Service::of(self.backend);
        let acted = tokio::task::spawn_blocking(move || match (service, postgres) {
            (Service::Postgres, Some(postgres)) => act(postgres.server()),
            (Service::Mariadb, _) => act(servers.mariadb.server()),
            (Service::Redis, _) => act(servers.redis.server()),
            (Service::Memcached, _) => act(servers.memcached.server()),
            _ => Err(sandbox::Error::Control {
                server: service.name().into(),
                action: "kill or start",
                reason: "the backend runs on no single server of the row".into(),
            }),
        });
        Ok(acted.await??)
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
