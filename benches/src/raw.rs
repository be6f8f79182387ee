//! The raw round trip of each backend: the yardstick a lock's latency is divided by.
//!
//! Each is the cheapest request its server answers, over the same kind of connection the locks
//! use (one multiplexed Redis connection, one ZooKeeper session, one etcd gRPC channel, a sqlx
//! pool that does not ping before handing out a connection). ZooKeeper and etcd get a write too:
//! their writes go through the transaction log (`fsync`) and cost several reads, so a lock made
//! of writes and reads is compared with the writes and reads it is made of.

use std::sync::{Arc, LazyLock};

use etcd_client::Client as Etcd;
use futures::future::join_all;
use redis::aio::MultiplexedConnection;
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use zookeeper_client::{Acls, Client as ZooKeeper, CreateMode};

/// `PING` over one multiplexed connection per Redis instance.
#[derive(Clone)]
pub struct RedisPing {
    connections: Vec<MultiplexedConnection>,
}

impl RedisPing {
    /// One connection to each of `urls`.
    pub async fn connect(urls: &[String]) -> RedisPing {
        let mut connections = Vec::with_capacity(urls.len());
        for url in urls {
            let client = redis::Client::open(url.as_str()).expect("a Redis URL");
            let connection = client
                .get_multiplexed_async_connection()
                .await
                .unwrap_or_else(|e| panic!("cannot connect to Redis at {url}: {e}"));
            connections.push(connection);
        }
        RedisPing { connections }
    }

    /// One `PING` to the first instance.
    pub async fn ping(&self) {
        ping(&self.connections[0]).await;
    }

    /// One call of a script that does nothing (`return 1`) on the first instance: a `PING`
    /// plus the fixed cost of `EVALSHA` (argument parsing, the Lua call), which every
    /// script-based lock pays per request.
    pub async fn empty_script(&self) {
        static EMPTY: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new("return 1"));
        let one: i64 = EMPTY
            .key("bench:empty")
            .arg("x")
            .invoke_async(&mut self.connections[0].clone())
            .await
            .expect("EVALSHA");
        debug_assert_eq!(one, 1);
    }

    /// One `PING` to every instance at once, as Redlock sends its scripts: the time of the
    /// slowest answer.
    pub async fn ping_all(&self) {
        join_all(self.connections.iter().map(ping)).await;
    }
}

async fn ping(connection: &MultiplexedConnection) {
    let pong: String = redis::cmd("PING")
        .query_async(&mut connection.clone())
        .await
        .expect("PING");
    debug_assert_eq!(pong, "PONG");
}

/// A ZooKeeper session with an ephemeral node of its own to write to.
pub struct ZooKeeperOps {
    client: Arc<ZooKeeper>,
    node: String,
}

impl ZooKeeperOps {
    pub async fn connect(connect_string: &str) -> ZooKeeperOps {
        let client = ZooKeeper::connect(connect_string)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to ZooKeeper at {connect_string}: {e}"));
        let node = format!("/bench-rtt-{}", uuid::Uuid::new_v4().simple());
        let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        client
            .create(&node, b"0", &ephemeral)
            .await
            .expect("create the benchmark's znode");
        ZooKeeperOps {
            client: Arc::new(client),
            node,
        }
    }

    /// A read: `exists` on the node.
    pub async fn exists(&self) {
        let stat = self.client.check_stat(&self.node).await.expect("exists");
        debug_assert!(stat.is_some());
    }

    /// A write: `setData` on the node (a logged, synced transaction).
    pub async fn set_data(&self) {
        self.client
            .set_data(&self.node, b"1", None)
            .await
            .expect("setData");
    }
}

/// An etcd client and a key of its own.
pub struct EtcdOps {
    client: Etcd,
    key: String,
}

impl EtcdOps {
    pub async fn connect(endpoints: &[String]) -> EtcdOps {
        let client = Etcd::connect(endpoints, None)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to etcd at {endpoints:?}: {e}"));
        let key = format!("/bench/rtt/{}", uuid::Uuid::new_v4().simple());
        let ops = EtcdOps { client, key };
        ops.put().await;
        ops
    }

    /// A read: a linearizable `get` of the key (the default, as the locks' ranges are).
    pub async fn get(&self) {
        self.client
            .clone()
            .get(self.key.as_str(), None)
            .await
            .expect("etcd get");
    }

    /// A write: a `put` of the key (a Raft entry, synced to disk).
    pub async fn put(&self) {
        self.client
            .clone()
            .put(self.key.as_str(), "x", None)
            .await
            .expect("etcd put");
    }
}

/// A MariaDB pool configured as the app's: no health-check ping before each use.
pub async fn mariadb_pool(url: &str, connections: u32) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(connections)
        .test_before_acquire(false)
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to MariaDB at {url}: {e}"))
}

/// `SELECT 1`: a MariaDB round trip through the pool.
pub async fn select_one(pool: &MySqlPool) {
    sqlx::query("SELECT 1")
        .execute(pool)
        .await
        .expect("SELECT 1");
}
