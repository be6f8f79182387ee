//! What a run stands on: the servers (throwaway ones, or the external ones named in the
//! environment; at a distance behind delaying relays when asked, [`distance`]), the fleets of
//! `seckill-app` processes the fault scenarios start, the clusters they kill members of,
//! HTTP's floor for the baselines, the record of the machine and the servers' settings, and
//! the world a run's phases measure in ([`world::World`]).

pub mod clusters;
pub mod distance;
pub mod environment;
pub mod fleet;
pub mod http_floor;
pub mod order_life;
pub mod replicas;
pub mod replication;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use sandbox::{Endpoints, Mode, Servers};

use crate::schema::world::{self, Aborts, Distance};

/// A process to account for: its name in the report, the group it is summed in (`app` for
/// every instance, `redis-server` for every Redis) and its pid — or one thread of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub name: String,
    pub group: String,
    pub pid: u32,
    /// One thread of the process: only its time is counted.
    pub thread: Option<u32>,
    /// Its child processes' time is counted with its own, the living and the ended: a server
    /// with a process per connection (PostgreSQL).
    pub with_children: bool,
}

impl Process {
    pub fn new(name: impl Into<String>, group: impl Into<String>, pid: u32) -> Process {
        Process {
            name: name.into(),
            group: group.into(),
            pid,
            thread: None,
            with_children: false,
        }
    }

    /// A server and the processes it starts, one group (PostgreSQL's postmaster and its
    /// process per connection).
    pub fn with_children(name: impl Into<String>, group: impl Into<String>, pid: u32) -> Process {
        Process {
            with_children: true,
            ..Process::new(name, group, pid)
        }
    }

    /// This process (the load generator).
    pub fn generator() -> Process {
        Process::new("generator", "generator", std::process::id())
    }

    /// The thread `tid` of this process, alone.
    pub fn thread_of_generator(
        name: impl Into<String>,
        group: impl Into<String>,
        tid: u32,
    ) -> Process {
        Process {
            thread: Some(tid),
            ..Process::new(name, group, std::process::id())
        }
    }

    /// Where its CPU times are read. (`/proc/<tid>/stat` of a thread holds its whole
    /// process's times: a thread's own are under its process's `task/`.)
    pub fn stat_path(&self) -> String {
        match self.thread {
            None => format!("/proc/{}/stat", self.pid),
            Some(tid) => format!("/proc/{}/task/{tid}/stat", self.pid),
        }
    }

    /// Where its living child processes are listed (those its main thread started).
    pub fn children_path(&self) -> String {
        format!("/proc/{0}/task/{0}/children", self.pid)
    }
}

/// Where a run goes: servers, the app binary, the database the app instances use.
pub struct Target {
    /// Where the servers are reached: their own addresses, or their relays' (`distance`).
    pub endpoints: Endpoints,
    /// What lies between the app instances and the servers.
    pub distance: Distance,
    /// What lies between the buyers and the app instances: a run with a round trip there puts
    /// a relay in front of each instance ([`distance::buyers_apart`]).
    pub buyers: Distance,
    /// `spawned` or `external`, for the report.
    pub servers: &'static str,
    pub versions: Option<sandbox::Versions>,
    pub app_binary: PathBuf,
    /// `seckill-bench` itself, which serves HTTP's floor for the baselines (`http-floor`).
    pub bench_binary: PathBuf,
    /// Database name the app instances create and use.
    pub database: String,
    /// The engine the app instances keep their rows in: the lone MariaDB of `endpoints`, or
    /// its PostgreSQL (`endpoints.postgres_url`), which the SQL baselines then measure.
    pub engine: world::Engine,
    /// The servers' processes, for CPU accounting (none for external servers).
    pub processes: Vec<Process>,
    /// The relays that stand between, when the servers are at a distance: they count the
    /// round trips made to each server.
    pub relays: Option<Arc<distance::Relays>>,
    /// The Redis Cluster the app instances keep Redis-held stock on (`redis+cluster://…`),
    /// instead of the lone Redis of `endpoints`, which the baselines go on measuring.
    pub redis_cluster: Option<String>,
    /// The Galera cluster the app instances keep their rows on instead of the lone MariaDB of
    /// `endpoints` (which the baselines go on measuring), and where they write.
    pub galera: Option<GaleraRows>,
    /// The MariaDB primary and replica the app instances keep their rows on instead of the
    /// lone MariaDB of `endpoints` (which the baselines go on measuring).
    pub replicas: Option<replicas::ReplicaRows>,
}

/// A Galera cluster holding the app's rows, and which node each instance writes to.
pub struct GaleraRows {
    pub cluster: Arc<sandbox::GaleraCluster>,
    pub writers: world::GaleraWriters,
    /// HAProxy in front of the nodes, which the instances reach them through when the writers
    /// are [`world::GaleraWriters::Haproxy`].
    pub proxy: Option<Arc<sandbox::Haproxy>>,
}

impl GaleraRows {
    /// The rows on `cluster`, written as `writers` says: with
    /// [`world::GaleraWriters::Haproxy`], HAProxy is started in front of its nodes.
    pub fn on(cluster: sandbox::GaleraCluster, writers: world::GaleraWriters) -> Result<Self> {
        let proxy = match writers {
            world::GaleraWriters::Haproxy => {
                let nodes: Vec<u16> = (0..sandbox::MEMBERS)
                    .map(|n| cluster.node(n).port())
                    .collect();
                Some(Arc::new(
                    sandbox::Haproxy::round_robin(&nodes).context("starting HAProxy")?,
                ))
            }
            _ => None,
        };
        Ok(GaleraRows {
            cluster: Arc::new(cluster),
            writers,
            proxy,
        })
    }

    /// The nodes' processes and the proxy's, for CPU accounting.
    pub fn processes(&self) -> Vec<Process> {
        let mut all = galera_processes(&self.cluster);
        if let Some(pid) = self.proxy.as_ref().and_then(|p| p.server().pid()) {
            all.push(Process::new("haproxy", "haproxy", pid));
        }
        all
    }

    /// The server app instance `n` writes to: its node, or the proxy in front of them all.
    fn server_of(&self, n: usize) -> String {
        match self.writers.node_of(n) {
            Some(node) => self.cluster.url(node),
            None => (self.proxy.as_ref())
                .expect("HAProxy is started for the writers that go through it")
                .mysql_url(),
        }
    }
}

impl Target {
    /// Where the app instances reach the servers: `endpoints`, with the Redis Cluster in
    /// place of the lone Redis when there is one.
    pub fn app_endpoints(&self) -> Endpoints {
        let mut endpoints = self.endpoints.clone();
        if let Some(cluster) = &self.redis_cluster {
            endpoints.redis_url = cluster.clone();
        }
        endpoints
    }

    /// The URL of the run's database (`database`) on the server of the run's engine that
    /// `endpoints` name.
    pub fn database_url(&self, endpoints: &Endpoints) -> String {
        self.database_on(&self.database_server(endpoints))
    }

    /// The server of the run's engine that `endpoints` name, without a database: where the
    /// SQL baselines run.
    pub fn database_server(&self, endpoints: &Endpoints) -> String {
        match self.engine {
            world::Engine::MariaDb => endpoints.database_url.clone(),
            world::Engine::Postgres => (endpoints.postgres_url.clone())
                .expect("a run on PostgreSQL stands on servers with a PostgreSQL"),
        }
    }

    fn database_on(&self, server: &str) -> String {
        format!("{}/{}", server.trim_end_matches('/'), self.database)
    }

    /// Where the run reads what the app instances wrote: the database on `endpoints`, or on
    /// the first Galera node.
    pub fn run_database_url(&self) -> String {
        match (&self.galera, &self.replicas) {
            (Some(g), _) => self.database_on(&g.cluster.url(0)),
            (None, Some(r)) => self.database_on(&r.primary_url()),
            (None, None) => self.database_url(&self.endpoints),
        }
    }

    /// The database each of `count` app instances uses, in turn: the one on `endpoints`, or
    /// the Galera node its writers put it on.
    fn app_database_urls(&self, endpoints: &Endpoints, count: usize) -> Vec<String> {
        match (&self.galera, &self.replicas) {
            (Some(g), _) => (0..count.clamp(1, sandbox::MEMBERS))
                .map(|n| self.database_on(&g.server_of(n)))
                .collect(),
            (None, Some(r)) => vec![self.database_on(&r.primary_url())],
            (None, None) => vec![self.database_url(endpoints)],
        }
    }

    /// How the servers the app instances use are arranged.
    pub fn topology(&self) -> world::Topology {
        match (&self.redis_cluster, &self.galera, &self.replicas) {
            (Some(_), _, _) => world::Topology::RedisCluster,
            (None, Some(g), _) => g.writers.topology(),
            (None, None, Some(r)) => r.replicas.topology(),
            (None, None, None) => world::Topology::OneNode,
        }
    }

    /// Certification failures and brute-force aborts so far, summed over the Galera nodes
    /// the rows are on; `None` without Galera.
    pub async fn galera_aborts(&self) -> Result<Option<world::Aborts>> {
        match &self.galera {
            Some(g) => Ok(Some(aborts_of(&g.cluster).await?)),
            None => Ok(None),
        }
    }

    /// A watch of the replica's distance from the primary, to [`replicas::LagWatch::finish`]
    /// when the load it measures under ends; `None` without a replica.
    pub async fn watch_replica(&self) -> Result<Option<replicas::LagWatch>> {
        match &self.replicas {
            Some(r) => Ok(Some(r.watch().await?)),
            None => Ok(None),
        }
    }

    /// `count` app instances reaching the servers at `endpoints`, logging into `logs`, with
    /// keys and lock names under `prefix` (Redis holds no databases apart: two runs on the same
    /// servers would otherwise share the order stream and its consumers, one run's consumers
    /// placing the other's orders in their own database, and each other's locks); and a client
    /// for them, which signs its buyers' tokens as a real sale's buyers would carry them.
    pub async fn start_instances(
        &self,
        endpoints: &Endpoints,
        logs: &std::path::Path,
        prefix: &str,
        count: usize,
    ) -> Result<(testkit::Apps, testkit::Api)> {
        let admin_token = uuid::Uuid::new_v4().simple().to_string();
        let buyer_key = uuid::Uuid::new_v4().simple().to_string();
        let mut launch = testkit::Launch::new(&self.app_binary, logs)
            .endpoints(endpoints)
            .arg("--lock-prefix", prefix)
            .arg("--admin-token", &admin_token)
            .arg("--buyer-key", &buyer_key);
        if let Some(r) = &self.replicas {
            launch = launch.arg("--database-replica-url", self.database_on(&r.replica_url()));
        }
        let launches = (self.app_database_urls(endpoints, count).into_iter())
            .map(|url| launch.clone().arg("--database-url", url))
            .collect();
        let apps = testkit::Apps::start_each(launches, count).await?;
        let api = testkit::Api::new(apps.bases(), Some(admin_token))?
            .with_buyer_key(app::buyer::BuyerKey::new(buyer_key.as_bytes()));
        Ok((apps, api))
    }

    /// A few connections to the database at `db_url`, of the engine its scheme names (the
    /// run's reads of what the app wrote), and the environment the run measured in, its Redis
    /// at `redis_url`.
    pub async fn connect(
        &self,
        db_url: &str,
        redis_url: &str,
    ) -> Result<(app::db::Db, crate::schema::Environment)> {
        let db =
            (app::db::open(db_url).await).with_context(|| format!("connecting to {db_url}"))?;
        let environment =
            environment::gather(self.servers, self.versions.clone(), &db, redis_url).await;
        Ok((db, environment))
    }
}

/// The servers a command stands on, and where it reaches them. Dropping it closes the relays
/// and stops the throwaway servers.
pub struct Stand {
    /// Where the servers are reached: their own addresses, or their relays'.
    pub endpoints: Endpoints,
    /// The servers' own addresses, relays or not.
    pub direct: Endpoints,
    /// What lies between the servers and whoever reaches them through [`Stand::endpoints`].
    pub distance: Distance,
    // Fields drop in declaration order: the relays before the servers they lead to (a
    // target's clone of them is dropped before the stand).
    pub relays: Option<Arc<distance::Relays>>,
    /// The throwaway servers; none for external ones.
    pub servers: Option<Servers>,
    /// A throwaway PostgreSQL, for PostgreSQL's advisory locks ([`servers_with_postgres`]).
    pub postgres: Option<sandbox::Postgres>,
}

/// Fails when an app instance exited (during `during`: a strategy's sale or loop, a phase),
/// naming where the instances' logs say why.
pub fn ensure_running(
    apps: &mut testkit::Apps,
    during: impl std::fmt::Display,
    logs: &std::path::Path,
) -> Result<()> {
    if !apps.all_running() {
        anyhow::bail!(
            "an app instance exited during {during}; see {}",
            logs.display()
        );
    }
    Ok(())
}

/// Throwaway servers, or the external ones named in the environment (`SECKILL_EXTERNAL=1`);
/// with `rtt`, each behind a relay that adds that round trip ([`distance`]), else reached
/// directly.
pub fn servers(rtt: Option<Duration>) -> Result<Stand> {
    stand(rtt, false)
}

/// [`servers`] and a PostgreSQL, for the locks that keep their lock there: the one
/// `POSTGRES_URL` names with `SECKILL_EXTERNAL=1`, else a throwaway one.
pub fn servers_with_postgres(rtt: Option<Duration>) -> Result<Stand> {
    stand(rtt, true)
}

fn stand(rtt: Option<Duration>, with_postgres: bool) -> Result<Stand> {
    let (servers, mut direct) = if sandbox::mode() == Mode::External {
        (None, Endpoints::from_env()?)
    } else {
        eprintln!("starting throwaway servers (MariaDB, Redis ×6, ZooKeeper, etcd, memcached)…");
        let servers = Servers::start().context("starting the servers (try `cargo xtask setup`)")?;
        let endpoints = servers.endpoints();
        (Some(servers), endpoints)
    };
    let mut postgres = None;
    if with_postgres && direct.postgres_url.is_none() {
        eprintln!("starting a throwaway PostgreSQL…");
        let started = sandbox::Postgres::start().context("starting PostgreSQL")?;
        direct.postgres_url = Some(started.url());
        postgres = Some(started);
    }
    let (relays, endpoints) = match rtt {
        None => (None, direct.clone()),
        Some(rtt) => {
            eprintln!("every server behind a relay adding {rtt:?} to each round trip");
            let (relays, endpoints) = distance::apart(&direct, rtt)?;
            (Some(Arc::new(relays)), endpoints)
        }
    };
    Ok(Stand {
        endpoints,
        direct,
        distance: Distance::of(rtt),
        relays,
        servers,
        postgres,
    })
}

/// Every server process of `s`, for CPU accounting.
pub fn server_processes(s: &Servers) -> Vec<Process> {
    let mut all = vec![
        ("mariadbd".to_owned(), "mariadbd", s.mariadb.server().pid()),
        (
            "redis-server".to_owned(),
            "redis-server",
            s.redis.server().pid(),
        ),
        (
            "zookeeper".to_owned(),
            "zookeeper",
            s.zookeeper.server().pid(),
        ),
        ("etcd".to_owned(), "etcd", s.etcd.server().pid()),
        (
            "memcached".to_owned(),
            "memcached",
            s.memcached.server().pid(),
        ),
    ];
    for (n, r) in s.redlock.iter().enumerate() {
        all.push((
            format!("redis-server (redlock {})", n + 1),
            "redis-server",
            r.server().pid(),
        ));
    }
    all.into_iter()
        .filter_map(|(name, group, pid)| Some(Process::new(name, group, pid?)))
        .collect()
}

/// Every node of the Galera cluster `cluster`, each a group of its own (`galera-node-1`, …),
/// for CPU accounting.
pub fn galera_processes(cluster: &sandbox::GaleraCluster) -> Vec<Process> {
    (0..sandbox::MEMBERS)
        .filter_map(|i| {
            let pid = cluster.node(i).server().pid()?;
            let group = format!("galera-node-{}", i + 1);
            Some(Process::new(
                format!("mariadbd (Galera node {})", i + 1),
                group,
                pid,
            ))
        })
        .collect()
}

/// Every process of the Redis Cluster `cluster`, each in its shard's group (`redis-shard-1`,
/// …: a shard's master and replica together), for CPU accounting.
pub fn cluster_processes(cluster: &sandbox::RedisCluster) -> Vec<Process> {
    let mut all = Vec::new();
    for (k, shard) in cluster.shards().iter().enumerate() {
        for (i, role) in ["master", "replica"].into_iter().enumerate() {
            if let Some(pid) = shard.member(i).server().pid() {
                let name = format!("redis-server (shard {} {role})", k + 1);
                all.push(Process::new(name, format!("redis-shard-{}", k + 1), pid));
            }
        }
    }
    all
}

/// Starts a sandbox server off the async threads (starting blocks for about a second).
pub async fn start<T: Send + 'static>(start: fn() -> sandbox::Result<T>) -> Result<T> {
    Ok(tokio::task::spawn_blocking(start).await??)
}

/// Runs a blocking server-control call off the async threads.
pub async fn control<F, T>(f: F) -> Result<T>
where
    F: FnOnce() -> sandbox::Result<T> + Send + 'static,
    T: Send + 'static,
{
    Ok(tokio::task::spawn_blocking(f).await??)
}

/// What a Galera cluster threw away so far, summed over its nodes (a node that does not answer
/// counts nothing).
pub fn read_aborts(cluster: &sandbox::GaleraCluster) -> Aborts {
    let sum = |variable: &str| -> u64 {
        (0..sandbox::MEMBERS)
            .filter_map(|i| cluster.status(i, variable)?.parse::<u64>().ok())
            .sum()
    };
    Aborts {
        cert_failures: sum("wsrep_local_cert_failures"),
        bf_aborts: sum("wsrep_local_bf_aborts"),
    }
}

/// [`read_aborts`] off the async threads (each node is asked through the `mariadb` client).
pub async fn aborts_of(cluster: &std::sync::Arc<sandbox::GaleraCluster>) -> Result<Aborts> {
    let cluster = std::sync::Arc::clone(cluster);
    control(move || Ok(read_aborts(&cluster))).await
}
