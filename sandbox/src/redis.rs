//! Redis: a single instance, a primary with an asynchronous replica, or N independent
//! instances (for Redlock).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::{Launch, Server};
use crate::{Error, Relay, Result, ports, resp};

struct RedisLaunch {
    port: u16,
    replica_of: Option<u16>,
    /// A member of a Redis Cluster, whose peers talk to it on this port (its cluster bus).
    cluster_bus: Option<u16>,
    /// The client port the member tells clients and its peers to reach it at, when that is
    /// not its own: a relay in front of it.
    announced: Option<u16>,
}

impl Launch for RedisLaunch {
    fn command(&self, dir: &Path) -> Command {
        let mut c = Command::new("redis-server");
        c.args(["--bind", "127.0.0.1", "--protected-mode", "no"])
            .args(["--port", &self.port.to_string()])
            // Throwaway: no snapshots, no append-only file, so a restart comes back empty,
            // which is exactly the "crashed before persisting" case the scenarios need.
            .args(["--save", "", "--appendonly", "no"])
            .args(["--maxclients", "10000"])
            // Serve a replica's full sync at once instead of waiting 5 s for more replicas.
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(dir);
        if let Some(primary) = self.replica_of {
            c.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
        }
        if let Some(bus) = self.cluster_bus {
            // `nodes.conf` (the member's identity and its view of the cluster) lives in its
            // directory, so a member started again rejoins as itself. A silent member is
            // judged failed after 1 s, and a replica may always stand in for its master,
            // however long since it last heard from it.
            c.args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-port", &bus.to_string()])
                .args(["--cluster-node-timeout", "1000"])
                .args(["--cluster-replica-validity-factor", "0"]);
            if let Some(announced) = self.announced {
                // Clients, and a replica linking to it, are sent to the relay; the members'
                // own bus connections stay direct, so cutting the relay cuts the shard off
                // from its clients and its replica, not from the cluster's failure detection.
                c.args(["--cluster-announce-ip", "127.0.0.1"])
                    .args(["--cluster-announce-port", &announced.to_string()])
                    .args(["--cluster-announce-bus-port", &bus.to_string()]);
            }
        }
        c
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn probe(&self) -> std::result::Result<(), String> {
        let pong = resp::command(self.port, &["PING"])?;
        if pong != "PONG" {
            return Err(format!("PING answered {pong}"));
        }
        Ok(())
    }
}

/// One throwaway Redis server.
pub struct Redis {
    server: Server,
    port: u16,
}

listening!(Redis, port);

impl Redis {
    /// Starts a standalone Redis on a free port.
    pub fn start() -> Result<Redis> {
        Self::launch(None)
    }

    /// Starts `n` independent instances (the topology Redlock assumes).
    pub fn start_many(n: usize) -> Result<Vec<Redis>> {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n).map(|_| s.spawn(Redis::start)).collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("redis start thread panicked"))
                .collect()
        })
    }

    pub(crate) fn launch(replica_of: Option<u16>) -> Result<Redis> {
        crate::cluster::retry_port_clash(|| Self::launch_once(replica_of))
    }

    fn launch_once(replica_of: Option<u16>) -> Result<Redis> {
        let port = ports::free_port()?;
        let launch = RedisLaunch {
            port,
            replica_of,
            cluster_bus: None,
            announced: None,
        };
        let server = Server::start("redis", launch, |_| Ok(()))?;
        Ok(Redis { server, port })
    }

    /// Starts a member of a Redis Cluster, not yet in any cluster: its client port and its
    /// bus port are quiet ports, which no other process takes while it is down between a kill
    /// and its restart.
    pub(crate) fn launch_cluster_member(name: &str) -> Result<Redis> {
        crate::cluster::retry_port_clash(|| {
            let port = ports::quiet_port()?;
            let launch = RedisLaunch {
                port,
                replica_of: None,
                cluster_bus: Some(ports::quiet_port()?),
                announced: None,
            };
            let server = Server::start(name, launch, |_| Ok(()))?;
            Ok(Redis { server, port })
        })
    }

    /// [`Redis::launch_cluster_member`] behind a relay of its own, which the member announces
    /// as its address: clients and its replica reach it through the relay, its peers' bus
    /// connections directly.
    pub(crate) fn launch_cluster_member_behind_relay(name: &str) -> Result<(Redis, Relay)> {
        crate::cluster::retry_port_clash(|| {
            let port = ports::quiet_port()?;
            let relay = Relay::start(std::net::SocketAddr::from(([127, 0, 0, 1], port)))?;
            let launch = RedisLaunch {
                port,
                replica_of: None,
                cluster_bus: Some(ports::quiet_port()?),
                announced: Some(relay.addr().port()),
            };
            let server = Server::start(name, launch, |_| Ok(()))?;
            Ok((Redis { server, port }, relay))
        })
    }

    /// `redis://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs one command synchronously and returns its reply as text.
    pub fn command(&self, args: &[&str]) -> Result<String> {
        resp::control("redis", self.port, args)
    }

    /// Waits until `replicas` of this primary's replicas have acknowledged everything it had
    /// written when this was called (the offsets of `INFO replication`). `WAIT` cannot say
    /// it from the harness: it waits for the writes of its own connection, and each harness
    /// command comes on a new one, which has written nothing.
    pub fn await_replicas_acknowledged(&self, replicas: usize, within: Duration) -> Result<()> {
        let info = self.command(&["INFO", "replication"])?;
        let written: u64 = resp::info_field(&info, "master_repl_offset")
            .and_then(|o| o.parse().ok())
            .unwrap_or(0);
        crate::cluster::await_answer("redis", "replicate to the replicas", within, || {
            let info = self.command(&["INFO", "replication"]).ok()?;
            let acknowledged = (info.lines())
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .filter_map(|l| l.split(',').find_map(|f| f.strip_prefix("offset=")))
                .filter_map(|o| o.parse::<u64>().ok())
                .filter(|&o| o >= written)
                .count();
            (acknowledged >= replicas).then_some(())
        })
    }

    /// The server's version, e.g. `7.0.15`.
    pub fn version(&self) -> Result<String> {
        let info = self.command(&["INFO", "server"])?;
        Ok(resp::info_field(&info, "redis_version").unwrap_or_default())
    }
}

/// A primary with one asynchronous replica: the set-up in which a lock granted on the primary
/// can vanish when the primary dies before replicating and the replica is promoted.
pub struct RedisPair {
    pub primary: Redis,
    pub replica: Redis,
}

impl RedisPair {
    /// Starts both and waits until the replica's link to the primary is up.
    pub fn start() -> Result<RedisPair> {
        let primary = Redis::start()?;
        let replica = Redis::launch(Some(primary.port))?;
        let pair = RedisPair { primary, replica };
        pair.wait_for_link()?;
        Ok(pair)
    }

    fn wait_for_link(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // Both ends must agree: the replica's link is up and the primary counts it online.
            let info = self.replica.command(&["INFO", "replication"])?;
            let primary = self.primary.command(&["INFO", "replication"])?;
            if resp::info_field(&info, "master_link_status").as_deref() == Some("up")
                && resp::info_field(&primary, "slave0").is_some_and(|s| s.contains("state=online"))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Control {
                    server: "redis replica".into(),
                    action: "replicate",
                    reason: format!("link to primary not up after 30 s:\n{info}"),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Makes the replica a primary (`REPLICAOF NO ONE`), as a failover would.
    pub fn promote_replica(&self) -> Result<()> {
        self.replica.command(&["REPLICAOF", "NO", "ONE"]).map(drop)
    }
}
