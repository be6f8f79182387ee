//! Throwaway real servers for tests, benchmarks and fault scenarios.
//!
//! Every server here is a *real* one (MariaDB, PostgreSQL, Redis, ZooKeeper, etcd, memcached
//! from the system's packages), started as a child process on a free loopback port with its own
//! temporary directory. A handle can [`Server::kill`], [`Server::pause`], [`Server::resume`] and
//! [`Server::restart`] its process (with every process it started: a PostgreSQL server is a
//! tree of them), which is what the fault scenarios are made of. Dropping a handle kills the
//! process and deletes the directory; a small guardian process does the same if the owner dies
//! without dropping (a panicking test, a static that is never dropped, SIGKILL).
//!
//! ```no_run
//! let redis = sandbox::Redis::start().unwrap();
//! println!("{}", redis.url()); // redis://127.0.0.1:<port>
//! redis.server().pause().unwrap(); // SIGSTOP: clients now time out
//! redis.server().resume().unwrap();
//! ```
//!
//! Tests usually want one set of servers per run rather than per test: [`shared`] gives
//! lazily started servers, or the ones named in the environment (see [`Mode`]).
//!
//! Clusters of three: [`ZooKeeperEnsemble`], [`EtcdCluster`] and [`RedisSentinelCluster`]
//! (a primary, two replicas, three Sentinels), all driven through one interface,
//! [`Cluster`]: which member leads now, each member's [`Server`] with the same control, where
//! clients connect, and bringing a killed member back. The ZooKeeper and etcd clusters can
//! also `partition(i)` a member from its peers, because their peer traffic runs through
//! relays whose connections can be made to go silent.
//!
//! [`RedisCluster`] is three masters with a replica each; each pair, a [`RedisShard`], is a
//! [`Cluster`] of its own (which member is its master now, its promotion when the master dies).
//!
//! [`GaleraCluster`]: three MariaDB nodes that all take writes, each a [`Cluster`] member;
//! [`Haproxy`] in front of them deals each new connection to the next node, as deployments
//! reach one.
//!
//! Replicated databases: [`ReplicatedMariaDb`] (a primary and replicas, asynchronous or
//! semi-synchronous, a replica made to lag, cut off, promoted; a [`Cluster`] whose leader is
//! the member that takes writes) and [`PgBouncer`] in front of a
//! [`Postgres`], pooling by transaction or by session.
//!
//! [`Relay`] puts the same relay between a client and its server: a scenario cuts one client
//! off, black-holes it, or moves it to another server, while every other client goes on. It
//! can also delay each direction ([`Delays`]): a server at a distance, as across a zone.

/// The accessors every server handle has: the loopback port its clients connect to (`$port`,
/// a field of the handle), and its process (the `server` field).
macro_rules! listening {
    ($handle:ty, $port:ident) => {
        impl $handle {
            /// The loopback port its clients connect to.
            pub fn port(&self) -> u16 {
                self.$port
            }

            /// Process control: kill, pause, resume, restart, start again.
            pub fn server(&self) -> &$crate::Server {
                &self.server
            }
        }
    };
}

/// Locks `mutex`, taking its value even if a thread panicked holding it: the harness's shared
/// state (relays, restart positions) stays usable for the threads that go on.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

mod cluster;

mod error;
mod etcd;
mod etcd_cluster;
mod galera;
mod haproxy;
mod mariadb;
mod mariadb_replication;
mod memcached;
mod pgbouncer;
mod ports;
mod postgres;
mod priority;
mod process;
mod redis;
mod redis_cluster;
mod redis_sentinel;
mod relay;
mod resp;
mod servers;
pub mod shared;
mod zookeeper;
mod zookeeper_ensemble;

pub use cluster::{Cluster, MEMBERS, wait_for};
pub use error::Error;
pub use etcd::Etcd;
pub use etcd_cluster::{EtcdCluster, EtcdMember, EtcdStatus};
pub use galera::GaleraCluster;
pub use haproxy::Haproxy;
pub use mariadb::MariaDb;
pub use mariadb_replication::{ReplicatedMariaDb, Replication, WaitPoint, gtid_sequence};
pub use memcached::Memcached;
pub use pgbouncer::{PgBouncer, Pooling};
pub use postgres::{Postgres, program as postgres_program};
pub use priority::{at_server_priority, set_server_niceness};
pub use process::{Guardian, Server};
pub use redis::{Redis, RedisPair};
pub use redis_cluster::{RedisCluster, RedisShard, SHARDS};
pub use redis_sentinel::{MASTER_NAME, RedisSentinelCluster, Sentinel};
pub use relay::Relay;
pub use relay::delay::{Delay, Delays};
pub use relay::runtime::thread_id as relay_thread_id;
pub use servers::{Endpoints, REDLOCK_INSTANCES, Servers, Versions};
pub use shared::{Mode, faults_allowed, mode};
pub use zookeeper::ZooKeeper;
pub use zookeeper_ensemble::{ZkMode, ZooKeeperEnsemble, ZooKeeperMember};

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
