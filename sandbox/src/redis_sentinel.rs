//! Redis with Sentinel: one primary, two asynchronous replicas, three Sentinels (quorum 2).
//!
//! This is the set-up in which a lock granted on the primary can be lost: replication is
//! asynchronous, so when the primary dies the Sentinels promote a replica that may never have
//! received the lock's key, and a second client is granted it (the hazard Redisson documents).
//! Timeouts are short (`down-after-milliseconds` 1000, `failover-timeout` 3000) so a failover
//! takes a few seconds.
//!
//! Each data server and each Sentinel is a [`Server`] with the usual kill / pause / resume /
//! restart control. There is no relay-based partition here: Redis peers do not say who they
//! are on a connection, and Sentinels rewrite the replicas' primary address on every failover.
//! Pausing a member (SIGSTOP) is the partition this cluster offers: to the others it looks
//! exactly like a member cut off by the network, but its clients are frozen too. Note that a
//! restarted server comes back with the role it was *started* with (the original primary as
//! a primary, the replicas replicating from the original primary's port); the Sentinels
//! correct it within a few seconds.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::cluster::{self, Cluster, MEMBERS, STATUS_TIMEOUT};
use crate::process::{Launch, Server, find_program};
use crate::{Redis, Result, ports, resp};

/// The name the Sentinels monitor the primary under.
pub const MASTER_NAME: &str = "seckill";

struct SentinelLaunch {
    port: u16,
}

impl Launch for SentinelLaunch {
    fn command(&self, dir: &Path) -> Command {
        let mut c = Command::new(find_program("redis-sentinel"));
        c.arg(dir.join("sentinel.conf"));
        c
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn probe(&self) -> std::result::Result<(), String> {
        match resp::command(self.port, &["PING"])?.as_str() {
            "PONG" => Ok(()),
            other => Err(format!("PING answered {other}")),
        }
    }
}

/// One Sentinel process.
pub struct Sentinel {
    server: Server,
    port: u16,
}

listening!(Sentinel, port);

impl Sentinel {
    /// `127.0.0.1:<port>`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs one command (`SENTINEL …`) and returns its reply as text.
    pub fn command(&self, args: &[&str]) -> Result<String> {
        resp::control("redis-sentinel", self.port, args)
    }

    /// The port of the primary this Sentinel names now; `None` if it does not answer.
    pub fn primary_port(&self) -> Option<u16> {
        let reply = resp::command_timeout(
            self.port,
            &["SENTINEL", "get-master-addr-by-name", MASTER_NAME],
            STATUS_TIMEOUT,
        )
        .ok()?;
        reply.lines().nth(1)?.parse().ok()
    }

    /// A field of `SENTINEL master <name>` (e.g. `num-slaves`, `num-other-sentinels`).
    fn master_field(&self, field: &str) -> Option<String> {
        let reply = self.command(&["SENTINEL", "master", MASTER_NAME]).ok()?;
        let lines: Vec<&str> = reply.lines().collect();
        lines
            .chunks(2)
            .find(|kv| kv[0] == field)
            .and_then(|kv| kv.get(1))
            .map(|v| v.to_string())
    }
}

/// One primary, two replicas, three Sentinels.
pub struct RedisSentinelCluster {
    sentinels: Vec<Sentinel>,
    /// `servers[0]` is the primary at start.
    servers: Vec<Redis>,
}

impl RedisSentinelCluster {
    /// Starts the data servers, waits until both replicas are in sync, starts the Sentinels
    /// and waits until each sees both replicas and the two other Sentinels.
    pub fn start() -> Result<RedisSentinelCluster> {
        cluster::retry_port_clash(Self::start_once)
    }

    fn start_once() -> Result<RedisSentinelCluster> {
        let primary = Redis::start()?;
        let primary_port = primary.port();
        let mut servers = vec![primary];
        servers.extend(cluster::start_all(MEMBERS - 1, |_| {
            Redis::launch(Some(primary_port))
        })?);
        let ready = cluster::await_answer("redis", "sync both replicas", START, || {
            let info = servers[0].command(&["INFO", "replication"]).ok()?;
            let online = (0..MEMBERS - 1)
                .filter(|i| {
                    resp::info_field(&info, &format!("slave{i}"))
                        .is_some_and(|s| s.contains("state=online"))
                })
                .count();
            (online == MEMBERS - 1).then_some(())
        });
        ready?;
        let sentinels = cluster::start_all(MEMBERS, |i| {
            let port = ports::quiet_port()?;
            let server = Server::start(
                &format!("redis-sentinel-{}", i + 1),
                SentinelLaunch { port },
                |dir| {
                    std::fs::write(dir.join("sentinel.conf"), config(dir, port, primary_port))?;
                    Ok(())
                },
            )?;
            Ok(Sentinel { server, port })
        })?;
        let cluster = RedisSentinelCluster { sentinels, servers };
        cluster::await_answer("redis-sentinel", "discover the cluster", START, || {
            cluster
                .sentinels
                .iter()
                .all(|s| {
                    s.master_field("num-slaves").as_deref() == Some("2")
                        && s.master_field("num-other-sentinels").as_deref() == Some("2")
                })
                .then_some(())
        })?;
        Ok(cluster)
    }

    /// The data servers; `server(0)` was the primary at start.
    pub fn servers(&self) -> &[Redis] {
        &self.servers
    }

    pub fn server(&self, i: usize) -> &Redis {
        &self.servers[i]
    }

    pub fn sentinels(&self) -> &[Sentinel] {
        &self.sentinels
    }

    pub fn sentinel(&self, i: usize) -> &Sentinel {
        &self.sentinels[i]
    }

    /// `127.0.0.1:<port>` of every Sentinel, for a Sentinel-aware client.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::addr).collect()
    }

    /// The name the Sentinels know the primary by.
    pub fn master_name(&self) -> &'static str {
        MASTER_NAME
    }

    /// The data server that is primary now: a majority of Sentinels name it, and it answers
    /// `ROLE` as master. `None` during a failover.
    pub fn leader(&self) -> Option<usize> {
        let named = cluster::ask_all(&self.sentinels, Sentinel::primary_port);
        let index = self.servers.iter().position(|r| {
            named.iter().filter(|p| **p == Some(r.port())).count() >= cluster::majority(MEMBERS)
        })?;
        let role = resp::command_timeout(self.servers[index].port(), &["ROLE"], STATUS_TIMEOUT);
        role.is_ok_and(|r| r.starts_with("master")).then_some(index)
    }

    /// Waits up to `within` for [`Self::leader`] to name a server.
    pub fn await_leader(&self, within: Duration) -> Result<usize> {
        Cluster::await_leader(self, within)
    }
}

impl Cluster for RedisSentinelCluster {
    fn kind(&self) -> &'static str {
        "Redis Sentinel set"
    }

    fn leader_title(&self) -> &'static str {
        "primary"
    }

    fn leader(&self) -> Option<usize> {
        RedisSentinelCluster::leader(self)
    }

    fn process(&self, i: usize) -> &Server {
        self.servers[i].server()
    }

    fn client_addresses(&self) -> Vec<String> {
        self.sentinel_addrs()
    }

    /// A restarted Redis comes back with the role it was started with, and empty; it is
    /// pointed at the current primary at once, as the Sentinels would do a few seconds later,
    /// so that it can never be promoted empty. Call it once the Sentinels have promoted
    /// another member: started before, the member would come back as an empty primary they
    /// still name.
    fn rejoin(&self, i: usize, within: Duration) -> Result<()> {
        let member = &self.servers[i];
        member.server().start_again()?;
        let primary = self.servers[self.await_leader(within)?].port();
        member.command(&["REPLICAOF", "127.0.0.1", &primary.to_string()])?;
        cluster::await_answer(self.kind(), "take a member back", within, || {
            let info = member.command(&["INFO", "replication"]).ok()?;
            info.contains("master_link_status:up").then_some(())
        })
    }
}

/// How long the whole set-up may take (replica sync, Sentinel discovery every 2 s).
const START: Duration = Duration::from_secs(60);

/// A Sentinel's configuration; Sentinel rewrites this file as it learns, so it lives in the
/// Sentinel's own directory.
fn config(dir: &Path, port: u16, primary_port: u16) -> String {
    format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         protected-mode no\n\
         dir {dir}\n\
         sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
         sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
         sentinel failover-timeout {MASTER_NAME} 3000\n\
         sentinel parallel-syncs {MASTER_NAME} 1\n",
        dir = dir.display(),
    )
}
