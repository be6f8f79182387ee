//! One set of servers per test run, started on first use, or named by the environment.
//!
//! Three modes, chosen by environment variables:
//!
//! | mode | set by | servers used | fault injection |
//! |---|---|---|---|
//! | [`Mode::Spawn`] | nothing | started lazily by this process, one per kind | yes |
//! | [`Mode::Shared`] | `SECKILL_SANDBOX_SHARED=1` (what `cargo xtask test` sets) | the harness servers named in `DATABASE_URL`, … | yes, on private servers |
//! | [`Mode::External`] | `SECKILL_EXTERNAL=1` (your own servers, e.g. docker-compose) | the ones named in `DATABASE_URL`, … | skipped |
//!
//! Other variables are ignored unless one of the two flags is set, so a `DATABASE_URL` that
//! happens to be in a developer's shell never points the tests at a real database.
//!
//! The clusters ([`zookeeper_ensemble`], [`etcd_cluster`], [`redis_sentinels`]) and PostgreSQL
//! ([`postgres_url`]) follow the same rule with their own variables ([`ZOOKEEPER_ENSEMBLE`],
//! [`POSTGRES_URL`], …), except that in shared mode one the environment does not name is
//! started by this process: only some tests use them, so starting one per test process costs
//! less than three extra JVMs in every run. (`cargo xtask test` starts one PostgreSQL for the
//! whole run and names it.)

use std::sync::OnceLock;

use crate::servers::var;
use crate::{
    Endpoints, Etcd, EtcdCluster, MariaDb, Memcached, Postgres, REDLOCK_INSTANCES, Redis,
    RedisSentinelCluster, Result, ZooKeeper, ZooKeeperEnsemble,
};

/// Where the shared servers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Spawn,
    Shared,
    External,
}

pub const EXTERNAL_FLAG: &str = "SECKILL_EXTERNAL";
pub const SHARED_FLAG: &str = "SECKILL_SANDBOX_SHARED";

/// The mode the environment selects.
pub fn mode() -> Mode {
    let on = |name| std::env::var(name).is_ok_and(|v| v == "1" || v == "true");
    if on(EXTERNAL_FLAG) {
        Mode::External
    } else if on(SHARED_FLAG) {
        Mode::Shared
    } else {
        Mode::Spawn
    }
}

/// Whether this run may start, kill and pause servers of its own; `Err` says why not.
pub fn faults_allowed() -> std::result::Result<(), String> {
    match mode() {
        Mode::External => Err(format!(
            "{EXTERNAL_FLAG}=1: fault injection needs servers this harness started itself"
        )),
        _ => Ok(()),
    }
}

/// Returns early from a test, saying why, when fault injection is not allowed (external mode).
#[macro_export]
macro_rules! require_faults {
    () => {
        if let Err(why) = $crate::faults_allowed() {
            eprintln!("skipped: {why}");
            return;
        }
    };
}

fn from_env_or<T: Send + Sync>(
    cell: &'static OnceLock<T>,
    start: fn() -> Result<T>,
) -> Option<&'static T> {
    match mode() {
        Mode::Spawn => Some(cell.get_or_init(|| {
            start().unwrap_or_else(|e| panic!("sandbox: could not start a shared server: {e}"))
        })),
        _ => None,
    }
}

fn env_or_panic(name: &'static str) -> String {
    var(name).unwrap_or_else(|e| panic!("sandbox: {e}"))
}

/// MariaDB server URL without a database; create your own database per test.
pub fn database_url() -> String {
    static CELL: OnceLock<MariaDb> = OnceLock::new();
    from_env_or(&CELL, MariaDb::start)
        .map(MariaDb::url)
        .unwrap_or_else(|| env_or_panic(Endpoints::DATABASE_URL))
}

/// Redis URL; isolate tests by key prefix.
pub fn redis_url() -> String {
    static CELL: OnceLock<Redis> = OnceLock::new();
    from_env_or(&CELL, Redis::start)
        .map(Redis::url)
        .unwrap_or_else(|| env_or_panic(Endpoints::REDIS_URL))
}

/// The independent Redis instances for Redlock; isolate tests by key prefix.
pub fn redlock_urls() -> Vec<String> {
    static CELL: OnceLock<Vec<Redis>> = OnceLock::new();
    from_env_or(&CELL, || Redis::start_many(REDLOCK_INSTANCES))
        .map(|set| set.iter().map(Redis::url).collect())
        .unwrap_or_else(|| {
            env_or_panic(Endpoints::REDLOCK_URLS)
                .split(',')
                .map(|s| s.trim().to_string())
                .collect()
        })
}

/// ZooKeeper connect string; isolate tests by znode path.
pub fn zookeeper() -> String {
    static CELL: OnceLock<ZooKeeper> = OnceLock::new();
    from_env_or(&CELL, ZooKeeper::start)
        .map(ZooKeeper::connect_string)
        .unwrap_or_else(|| env_or_panic(Endpoints::ZOOKEEPER_CONNECT))
}

/// etcd client endpoints; isolate tests by key prefix.
pub fn etcd() -> Vec<String> {
    static CELL: OnceLock<Etcd> = OnceLock::new();
    from_env_or(&CELL, Etcd::start)
        .map(|e| vec![e.endpoint()])
        .unwrap_or_else(|| {
            env_or_panic(Endpoints::ETCD_ENDPOINTS)
                .split(',')
                .map(|s| s.trim().to_string())
                .collect()
        })
}

/// memcached address (`host:port`); isolate tests by key prefix.
pub fn memcached() -> String {
    static CELL: OnceLock<Memcached> = OnceLock::new();
    from_env_or(&CELL, Memcached::start)
        .map(Memcached::addr)
        .unwrap_or_else(|| env_or_panic(Endpoints::MEMCACHED_ADDR))
}

/// A ZooKeeper ensemble's connect string (`host:port,host:port,…`), for the cluster tests.
pub const ZOOKEEPER_ENSEMBLE: &str = "ZOOKEEPER_ENSEMBLE_CONNECT";
/// An etcd cluster's client endpoints, comma-separated, for the cluster tests.
pub const ETCD_CLUSTER: &str = "ETCD_CLUSTER_ENDPOINTS";
/// Redis Sentinels (`host:port,…`), for the cluster tests.
pub const REDIS_SENTINELS: &str = "REDIS_SENTINELS";
/// The name the Sentinels monitor the primary under.
pub const REDIS_SENTINEL_MASTER: &str = "REDIS_SENTINEL_MASTER";

/// A PostgreSQL server's URL (`postgres://user@host:port`, without a database).
pub const POSTGRES_URL: &str = Endpoints::POSTGRES_URL;

/// PostgreSQL server URL without a database; create your own database per test.
pub fn postgres_url() -> String {
    static CELL: OnceLock<Postgres> = OnceLock::new();
    match cluster(&CELL, POSTGRES_URL, Postgres::start) {
        Cluster::Started(postgres) => postgres.url(),
        Cluster::Named(url) => url,
    }
}

/// Where a cluster (or a server only some tests use) comes from.
enum Cluster<T: 'static> {
    /// Started by this process on first use.
    Started(&'static T),
    /// Named by the environment: the variable's value.
    Named(String),
}

/// The cluster the environment names in `var_name`, else (spawn and shared mode) the one this
/// process starts on first use.
fn cluster<T: Send + Sync>(
    cell: &'static OnceLock<T>,
    var_name: &'static str,
    start: fn() -> Result<T>,
) -> Cluster<T> {
    match (mode(), var(var_name)) {
        (Mode::External | Mode::Shared, Ok(v)) => Cluster::Named(v),
        (Mode::External, Err(e)) => panic!("sandbox: {e}"),
        _ => Cluster::Started(cell.get_or_init(|| {
            start().unwrap_or_else(|e| panic!("sandbox: could not start a shared cluster: {e}"))
        })),
    }
}

fn split(list: &str) -> Vec<String> {
    list.split(',').map(|s| s.trim().to_string()).collect()
}

/// A three-server ZooKeeper ensemble's connect string; isolate tests by znode path.
pub fn zookeeper_ensemble() -> String {
    static CELL: OnceLock<ZooKeeperEnsemble> = OnceLock::new();
    match cluster(&CELL, ZOOKEEPER_ENSEMBLE, ZooKeeperEnsemble::start) {
        Cluster::Started(zk) => zk.connect_string(),
        Cluster::Named(connect) => connect,
    }
}

/// A three-member etcd cluster's client endpoints; isolate tests by key prefix.
pub fn etcd_cluster() -> Vec<String> {
    static CELL: OnceLock<EtcdCluster> = OnceLock::new();
    match cluster(&CELL, ETCD_CLUSTER, EtcdCluster::start) {
        Cluster::Started(etcd) => etcd.endpoints(),
        Cluster::Named(endpoints) => split(&endpoints),
    }
}

/// Redis Sentinels' addresses and the master name they monitor; isolate tests by key prefix.
pub fn redis_sentinels() -> (Vec<String>, String) {
    static CELL: OnceLock<RedisSentinelCluster> = OnceLock::new();
    match cluster(&CELL, REDIS_SENTINELS, RedisSentinelCluster::start) {
        Cluster::Started(c) => (c.sentinel_addrs(), c.master_name().to_string()),
        Cluster::Named(named) => (
            split(&named),
            var(REDIS_SENTINEL_MASTER).unwrap_or_else(|_| crate::MASTER_NAME.to_string()),
        ),
    }
}
