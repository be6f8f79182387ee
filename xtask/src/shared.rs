//! The throwaway servers `cargo xtask test` starts once and shares among the tests: the
//! single servers (tests isolate themselves by database, key prefix and znode path, and start
//! private servers for fault injection), PostgreSQL, and the ZooKeeper ensemble and etcd
//! cluster the lock suites run on (nextest runs every test in a process of its own, and each
//! would otherwise start its own: an `initdb`, or three JVMs). Everything is stopped when
//! [`Shared`] is dropped.

use std::process::Command;

use anyhow::{Context, Result};

/// The shared servers, or nothing in external mode (the user points at their own servers).
pub struct Shared {
    servers: Option<sandbox::Servers>,
    postgres: Option<sandbox::Postgres>,
    clusters: Option<(sandbox::ZooKeeperEnsemble, sandbox::EtcdCluster)>,
}

impl Shared {
    /// Starts the single servers, PostgreSQL and the clusters, unless in external mode.
    pub fn start() -> Result<Shared> {
        let servers = Shared::start_servers()?;
        let (postgres, clusters) = match servers {
            Some(_) => (Some(start_postgres()?), Some(start_clusters()?)),
            None => (None, None),
        };
        Ok(Shared {
            servers,
            postgres,
            clusters,
        })
    }

    /// Starts the single servers, unless the user points at their own (external mode).
    pub fn start_servers() -> Result<Option<sandbox::Servers>> {
        if sandbox::mode() == sandbox::Mode::External {
            println!("xtask: external mode, using the servers named in the environment");
            return Ok(None);
        }
        let started = std::time::Instant::now();
        let servers = sandbox::Servers::start().context("starting the throwaway servers")?;
        println!(
            "xtask: servers up in {:.1} s: {:?}",
            started.elapsed().as_secs_f64(),
            servers.endpoints()
        );
        Ok(Some(servers))
    }

    /// Where the single servers are: the shared ones, or the environment's (external mode).
    pub fn endpoints(&self) -> Result<sandbox::Endpoints> {
        match &self.servers {
            Some(servers) => Ok(servers.endpoints()),
            None => Ok(sandbox::Endpoints::from_env()?),
        }
    }

    /// Points a test run at the shared servers (nothing to do in external mode, where the
    /// tests read the same environment the user set).
    pub fn apply(&self, c: &mut Command) {
        if let Some(servers) = &self.servers {
            servers.endpoints().apply(c);
            c.env(sandbox::shared::SHARED_FLAG, "1");
        }
        if let Some(postgres) = &self.postgres {
            c.env(sandbox::shared::POSTGRES_URL, postgres.url());
        }
        if let Some((zookeeper, etcd)) = &self.clusters {
            c.env(
                sandbox::shared::ZOOKEEPER_ENSEMBLE,
                zookeeper.connect_string(),
            );
            c.env(sandbox::shared::ETCD_CLUSTER, etcd.endpoints().join(","));
        }
    }
}

/// Starts PostgreSQL.
fn start_postgres() -> Result<sandbox::Postgres> {
    let started = std::time::Instant::now();
    let postgres = sandbox::Postgres::start().context("starting PostgreSQL")?;
    println!(
        "xtask: PostgreSQL up in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        postgres.url()
    );
    Ok(postgres)
}

/// Starts the ZooKeeper ensemble and the etcd cluster.
fn start_clusters() -> Result<(sandbox::ZooKeeperEnsemble, sandbox::EtcdCluster)> {
    let started = std::time::Instant::now();
    let zookeeper = sandbox::ZooKeeperEnsemble::start().context("starting a ZooKeeper ensemble")?;
    let etcd = sandbox::EtcdCluster::start().context("starting an etcd cluster")?;
    println!(
        "xtask: clusters up in {:.1} s: ZooKeeper {}, etcd {}",
        started.elapsed().as_secs_f64(),
        zookeeper.connect_string(),
        etcd.endpoints().join(",")
    );
    Ok((zookeeper, etcd))
}
