//! The world a run measures in: what the rig starts and how the app reaches it.
//!
//! Every phase measures the strategies in one world, and hands the same world to each. A
//! network sweep, a second engine, replicated or clustered servers are other worlds for the
//! same phases, not phases of their own: a phase reads from the world what it depends on (the
//! instances whose limits add up, today) and nothing decides by hand which world it is in.
//!
//! `report.json` carries the world a run measured in (`world`; absent from the reports written
//! before a run could be made in another one, which were all local).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What the rig starts and how the app reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct World {
    /// The database the strategies keep their rows in.
    pub engine: Engine,
    /// How many servers of each kind, and how they are joined.
    pub topology: Topology,
    /// What lies between the app instances and the servers.
    pub distance: Distance,
    /// What lies between the buyers (the load generator) and the app instances (`--client-rtt`;
    /// absent from the reports written before a run could put them apart: local).
    #[serde(
        default = "Distance::local",
        skip_serializing_if = "Distance::is_local"
    )]
    pub buyers: Distance,
    /// `seckill-app` processes, the purchases spread over them in turn.
    pub instances: usize,
}

/// The database engine the app instances keep their rows in (`run --engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    #[value(name = "mariadb")]
    MariaDb,
    /// PostgreSQL: the app's rows there, its baselines beside `pgbench`.
    Postgres,
}

impl Engine {
    /// Its name in a report.
    pub fn name(self) -> &'static str {
        match self {
            Engine::MariaDb => "MariaDB",
            Engine::Postgres => "PostgreSQL",
        }
    }

    /// What the report says of it, where it is not MariaDB (the engine of every run before a
    /// run could choose).
    pub fn described(self) -> Option<&'static str> {
        match self {
            Engine::MariaDb => None,
            Engine::Postgres => Some(
                "PostgreSQL holds the rows: the app instances, the run's reads and the SQL \
                 baselines (beside `pgbench`) are on it; the lock services and Redis as in \
                 every run",
            ),
        }
    }

    /// The name a run's folder carries after its time stamp, where not MariaDB.
    pub fn folder_suffix(self) -> Option<&'static str> {
        match self {
            Engine::MariaDb => None,
            Engine::Postgres => Some("postgres"),
        }
    }
}

/// How the servers are arranged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// One MariaDB, one Redis: no replica, no cluster.
    OneNode,
    /// One MariaDB; the Redis-held stock on a Redis Cluster of three masters, each with an
    /// asynchronous replica (`run --redis-cluster`). The lock services and the server
    /// baselines stay on their lone servers.
    RedisCluster,
    /// The rows on a Galera cluster of three nodes, every app instance writing to node 1
    /// (`run --galera one-writer`): the others follow, as a hot row's writes are advised to go.
    GaleraOneWriter,
    /// The rows on a Galera cluster of three nodes, app instance `n` writing to node
    /// `n mod 3 + 1` (`run --galera all-writers`): three primaries, conflicts settled by
    /// certification at commit. The baselines stay on a lone MariaDB.
    GaleraAllWriters,
    /// The rows on a Galera cluster of three nodes behind HAProxy (`run --galera haproxy`):
    /// every instance connects to the proxy, which deals each new connection to the next node,
    /// so each instance's pool writes to all three.
    GaleraHaproxy,
    /// The rows on a MariaDB primary with an asynchronous replica (`run --replicas async`):
    /// every instance writes to the primary and reads the products' pages on the replica.
    ReplicaAsync,
    /// The same with the primary's commits waiting for the replica's acknowledgement
    /// (`run --replicas semi-sync`, `AFTER_SYNC`).
    ReplicaSemiSync,
}

impl Topology {
    /// What the report says of it, where it is not one node of each.
    pub fn described(self) -> Option<&'static str> {
        match self {
            Topology::OneNode => None,
            Topology::RedisCluster => Some(
                "a Redis Cluster of 3 masters, each with an asynchronous replica, holds the \
                 Redis-held stock (the baselines' Redis is a lone one)",
            ),
            Topology::GaleraOneWriter => Some(
                "a Galera cluster of 3 MariaDB nodes holds the rows, every app instance \
                 writing to node 1 (the baselines' MariaDB is a lone one)",
            ),
            Topology::GaleraAllWriters => Some(
                "a Galera cluster of 3 MariaDB nodes holds the rows, each app instance \
                 writing to a node of its own in turn (the baselines' MariaDB is a lone one)",
            ),
            Topology::GaleraHaproxy => Some(
                "a Galera cluster of 3 MariaDB nodes holds the rows behind HAProxy, which deals \
                 each new connection of every app instance to the next node (the baselines' \
                 MariaDB is a lone one)",
            ),
            Topology::ReplicaAsync => Some(
                "a MariaDB primary with an asynchronous replica holds the rows: every app \
                 instance writes to the primary and reads the products' pages on the replica \
                 (the baselines' MariaDB is a lone one)",
            ),
            Topology::ReplicaSemiSync => Some(
                "a MariaDB primary with a semi-synchronous replica (AFTER_SYNC: each commit \
                 waits for the replica's acknowledgement) holds the rows: every app instance \
                 writes to the primary and reads the products' pages on the replica (the \
                 baselines' MariaDB is a lone one)",
            ),
        }
    }

    /// The name a run's folder carries after its time stamp, where not one node of each.
    pub fn folder_suffix(self) -> Option<&'static str> {
        match self {
            Topology::OneNode => None,
            Topology::RedisCluster => Some("redis-cluster"),
            Topology::GaleraOneWriter => Some("galera-one-writer"),
            Topology::GaleraAllWriters => Some("galera-all-writers"),
            Topology::GaleraHaproxy => Some("galera-haproxy"),
            Topology::ReplicaAsync => Some("replica-async"),
            Topology::ReplicaSemiSync => Some("replica-semi-sync"),
        }
    }
}

/// Where the app instances write on a Galera cluster (`run --galera`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GaleraWriters {
    /// Every instance to node 1.
    OneWriter,
    /// Instance `n` to node `n mod 3 + 1`.
    AllWriters,
    /// Every instance through HAProxy, which deals each new connection to the next node.
    Haproxy,
}

impl GaleraWriters {
    /// The node (0, 1, 2) instance `n` writes to; none when a proxy deals its connections.
    pub fn node_of(self, n: usize) -> Option<usize> {
        match self {
            GaleraWriters::OneWriter => Some(0),
            GaleraWriters::AllWriters => Some(n % sandbox::MEMBERS),
            GaleraWriters::Haproxy => None,
        }
    }

    /// The world's arrangement of servers with these writers.
    pub fn topology(self) -> Topology {
        match self {
            GaleraWriters::OneWriter => Topology::GaleraOneWriter,
            GaleraWriters::AllWriters => Topology::GaleraAllWriters,
            GaleraWriters::Haproxy => Topology::GaleraHaproxy,
        }
    }
}

/// The network between the app instances and the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distance {
    /// None: one machine, loopback, no delay added.
    Local,
    /// Every server behind a relay on this machine that delays each direction by half of
    /// `rtt_us` ([`crate::rig::distance`]); 0: the relays alone, what they cost.
    Relayed { rtt_us: u64 },
}

impl Distance {
    /// One machine, loopback, nothing added.
    pub fn local() -> Distance {
        Distance::Local
    }

    pub fn is_local(&self) -> bool {
        *self == Distance::Local
    }

    /// Servers behind relays adding `rtt` to every round trip, or none.
    pub fn of(rtt: Option<Duration>) -> Distance {
        match rtt {
            None => Distance::Local,
            Some(rtt) => Distance::Relayed {
                rtt_us: u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX),
            },
        }
    }

    /// The round trip the relays add; none: loopback.
    pub fn rtt(self) -> Option<Duration> {
        match self {
            Distance::Local => None,
            Distance::Relayed { rtt_us } => Some(Duration::from_micros(rtt_us)),
        }
    }

    /// What the report says of the round trip added, where relays stood between, each in
    /// front of `what`: `0.5 ms, by a relay in front of each server`.
    pub fn added(self, what: &str) -> Option<String> {
        match self {
            Distance::Local => None,
            Distance::Relayed { rtt_us } => Some(format!(
                "{} ms, by a relay in front of each {what}",
                rtt_us as f64 / 1_000.0
            )),
        }
    }
}

impl World {
    /// `instances` app processes on this machine beside one MariaDB and one Redis.
    pub fn local(instances: usize) -> World {
        World::at(instances, Distance::Local)
    }

    /// [`World::local`]'s servers at `distance` from the app instances.
    pub fn at(instances: usize, distance: Distance) -> World {
        World {
            engine: Engine::MariaDb,
            topology: Topology::OneNode,
            distance,
            buyers: Distance::Local,
            instances,
        }
    }

    /// The same world with the rows on `engine`.
    pub fn on(self, engine: Engine) -> World {
        World { engine, ..self }
    }

    /// The same world with the servers arranged as `topology`.
    pub fn arranged(self, topology: Topology) -> World {
        World { topology, ..self }
    }

    /// The same world with the buyers at `buyers` from the app instances.
    pub fn with_buyers(self, buyers: Distance) -> World {
        World { buyers, ..self }
    }

    /// Whether two runs measured on the same servers, arranged and reached the same way, by
    /// buyers as far from the app instances (however many instances): only then are their
    /// rates comparable. A run that recorded no world was local, on one node of each.
    pub fn same_servers(a: Option<World>, b: Option<World>) -> bool {
        let servers = |w: Option<World>| {
            let w = w.unwrap_or(World::local(0));
            (w.engine, w.topology, w.distance, w.buyers)
        };
        servers(a) == servers(b)
    }

    /// This world, unless it is the local one of one node each (what a run that recorded no
    /// world measured in).
    pub fn unless_local(self) -> Option<World> {
        (!World::same_servers(Some(self), None)).then_some(self)
    }
}

/// What a Galera cluster threw away, summed over its nodes: write sets certification refused
/// at `COMMIT` (`wsrep_local_cert_failures`), and local transactions aborted by a write set
/// that arrived from another node (`wsrep_local_bf_aborts`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aborts {
    pub cert_failures: u64,
    pub bf_aborts: u64,
}

impl Aborts {
    /// The aborts from `before` to these.
    pub fn since(self, before: Aborts) -> Aborts {
        Aborts {
            cert_failures: self.cert_failures.saturating_sub(before.cert_failures),
            bf_aborts: self.bf_aborts.saturating_sub(before.bf_aborts),
        }
    }

    pub fn add(&mut self, other: Aborts) {
        self.cert_failures += other.cert_failures;
        self.bf_aborts += other.bf_aborts;
    }

    pub fn total(self) -> u64 {
        self.cert_failures + self.bf_aborts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buyers_far_from_the_instances_make_another_world_and_an_old_report_reads_as_local() {
        let local = World::local(2);
        let far = local.with_buyers(Distance::of(Some(Duration::from_millis(1))));
        assert!(!World::same_servers(Some(far), Some(local)));
        assert!(World::same_servers(Some(local), None));
        assert_eq!(far.unless_local(), Some(far));

        let written = serde_json::to_value(local).unwrap();
        assert!(written.get("buyers").is_none(), "{written}");
        let read: World = serde_json::from_value(written).unwrap();
        assert_eq!(read.buyers, Distance::Local);
        let read: World = serde_json::from_value(serde_json::to_value(far).unwrap()).unwrap();
        assert_eq!(read, far);
    }
}
