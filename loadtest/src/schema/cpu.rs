//! Where the processor time of a measurement went, per process.

use serde::{Deserialize, Serialize};

/// From this many cores busy over a measurement on, a process counts as saturated.
pub const SATURATED_CORES: f64 = 0.9;

/// The groups of servers that run every command on one thread (Redis, a Redis Cluster's
/// shards): one core is all such a server can use, however many the machine has.
pub const SINGLE_THREADED: [&str; 4] = [
    "redis-server",
    "redis-shard-1",
    "redis-shard-2",
    "redis-shard-3",
];

/// One process's share of a measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessCpu {
    pub process: String,
    pub group: String,
    pub cpu_seconds: f64,
    /// CPU-seconds per wall-clock second: 1.0 is one core busy throughout.
    pub busy_cores: f64,
    /// CPU-seconds per 1,000 successful operations (deductions).
    pub per_1000_successes: Option<f64>,
    /// Seconds its threads were ready to run and waited for a core, per wall-clock second
    /// (absent from runs that did not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_cores: Option<f64>,
}

/// The CPU of every process over a measurement (all runs of it together).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuUse {
    pub wall_seconds: f64,
    /// Successful operations in that time (estimated as the runs' rates × their wall time).
    pub successes: f64,
    pub processes: Vec<ProcessCpu>,
    /// The busiest process at or above [`SATURATED_CORES`], if any.
    pub saturated: Option<String>,
    /// All CPUs of the machine, every program on it: busy cores on average.
    pub machine_busy_cores: Option<f64>,
    /// What programs outside the run took (other users of a shared machine), in cores.
    pub rest_of_machine_cores: Option<f64>,
    /// The run's processes whose CPU could not be read across the measurement (one that ended
    /// in it): left out of [`Self::processes`], their time counted in the rest of the machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
}

impl CpuUse {
    /// A group's processes summed: (CPU-seconds per 1,000 successes, busy cores).
    pub fn group(&self, group: &str) -> Option<(Option<f64>, f64)> {
        let members: Vec<&ProcessCpu> =
            self.processes.iter().filter(|p| p.group == group).collect();
        if members.is_empty() {
            return None;
        }
        let per_1000 = members
            .iter()
            .map(|p| p.per_1000_successes)
            .sum::<Option<f64>>();
        Some((per_1000, members.iter().map(|p| p.busy_cores).sum()))
    }

    /// A group's processes summed: the cores' worth of time they waited for one, if read.
    pub fn waiting(&self, group: &str) -> Option<f64> {
        let members = self.processes.iter().filter(|p| p.group == group);
        members.map(|p| p.waiting_cores).sum::<Option<f64>>()
    }

    /// The single-threaded server (see [`SINGLE_THREADED`]) that was ready to run the longest,
    /// on a core or waiting for one, if that was at least [`SATURATED_CORES`] of the time: it
    /// had work throughout, and every command waited its turn on its one thread.
    pub fn ready_throughout(&self) -> Option<&ProcessCpu> {
        (self.processes.iter())
            .filter(|p| SINGLE_THREADED.contains(&p.group.as_str()))
            .filter_map(|p| Some((p, p.busy_cores + p.waiting_cores?)))
            .filter(|(_, ready)| *ready >= SATURATED_CORES)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(p, _)| p)
    }

    /// The busiest process: (name, busy cores).
    pub fn busiest(&self) -> Option<(&str, f64)> {
        self.processes
            .iter()
            .max_by(|a, b| a.busy_cores.total_cmp(&b.busy_cores))
            .map(|p| (p.process.as_str(), p.busy_cores))
    }
}

/// The CPU groups in the order the report lists them, with their words.
pub const GROUPS: [(&str, &str); 17] = [
    ("app", "the app instances"),
    ("mariadbd", "mariadbd"),
    // PostgreSQL's postmaster and its process per connection (`run --engine postgres`).
    ("postgres", "PostgreSQL"),
    // A primary and its replica (`run --replicas`).
    ("mariadb-primary", "the MariaDB primary"),
    ("mariadb-replica", "the MariaDB replica"),
    // A Galera cluster's nodes (`run --galera`).
    ("galera-node-1", "Galera node 1"),
    ("galera-node-2", "Galera node 2"),
    ("galera-node-3", "Galera node 3"),
    // HAProxy in front of them (`run --galera haproxy`).
    ("haproxy", "HAProxy"),
    ("redis-server", "Redis"),
    // A Redis Cluster's shards (`run --redis-cluster`), each its master and its replica.
    ("redis-shard-1", "Redis Cluster shard 1"),
    ("redis-shard-2", "Redis Cluster shard 2"),
    ("redis-shard-3", "Redis Cluster shard 3"),
    ("zookeeper", "ZooKeeper"),
    ("etcd", "etcd"),
    ("memcached", "memcached"),
    ("generator", "the load generator"),
];
