//! Redis Cluster: three masters, each with one replica, on one host.
//!
//! The keyspace is cut into 16,384 slots, each served by one master; a key's slot is the CRC16
//! of its name, or of the part between its first `{` and `}` (its hash tag), so keys that must
//! be read and written together — by one script, one `MULTI` — carry the same tag. Each master
//! has one replica, which replicates it *asynchronously*: when a master dies, the other
//! masters agree it failed (after `cluster-node-timeout`, 1 s here) and its replica promotes
//! itself, with whatever it had received. Writes the old master answered and had not shipped
//! are gone: the hazard a counter of stock meets on a cluster as it does behind Sentinels.
//!
//! Built as Redis's own tooling builds one: six empty members started with `cluster-enabled`,
//! then `redis-cli --cluster create … --cluster-replicas 1`, which gives the slots out in
//! three ranges and pairs each master with a replica. The pairs are read back from the
//! cluster rather than assumed. Each pair is a [`RedisShard`], one [`Cluster`] the fault
//! scenarios drive as they drive the others: which member is the master now, each member's
//! process, bringing a killed one back (as a replica of the promoted one: a member keeps its
//! identity in its `nodes.conf` and learns on its return that its slots moved).
//!
//! The members tell clients and each other their own addresses, so a relay in front of one is
//! bypassed as soon as a client learns the slots — unless the member *announces* the relay
//! (`cluster-announce-port`, as a member behind NAT announces its public address).
//! [`RedisCluster::start_behind_relays`] starts each member behind a relay it announces:
//! clients, and a replica linking to its master, go through the relays, while the members'
//! cluster bus stays direct. Cutting a shard's relays ([`RedisShard::cut_off`]) then cuts the
//! shard off from every client and its replica from its master, as a partition between the
//! clients' network and the shard's would, while the cluster still sees the shard alive and
//! fails nothing over. Pausing a member (SIGSTOP) is the partition [`RedisCluster::start`]'s
//! direct members offer. To make a replica miss writes for certain — a paused one reads them
//! from its socket once it resumes — its link to its master is cut
//! ([`RedisShard::cut_replication`]).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::{self, Cluster, STATUS_TIMEOUT};
use crate::process::{Server, find_program};
use crate::{Error, Redis, Relay, Result, resp};

/// Masters in the cluster (each with one replica).
pub const SHARDS: usize = 3;

/// Three masters, three replicas.
pub struct RedisCluster {
    shards: Vec<Arc<RedisShard>>,
}

/// One master and its replica, serving one range of slots.
pub struct RedisShard {
    /// `members[0]` was the master at start.
    members: [Arc<Redis>; 2],
    /// The port each member announces (its relay's, or its own).
    announced: [u16; 2],
    /// The relays in front of the members, when they announce relays.
    relays: Vec<Arc<Relay>>,
    /// Every member of the cluster, to ask who serves this shard's slots.
    everyone: Vec<Arc<Redis>>,
    /// The first and last slot the shard serves.
    slots: (u16, u16),
}

/// A member as started: the server, and the relay it announces, if any.
type Member = (Arc<Redis>, Option<Arc<Relay>>);

/// The port a member announces.
fn announced((redis, relay): &Member) -> u16 {
    relay.as_ref().map_or(redis.port(), |r| r.addr().port())
}

impl RedisCluster {
    /// Starts six members, makes them one cluster and waits until every slot is served and
    /// every replica is in sync with its master.
    pub fn start() -> Result<RedisCluster> {
        RedisCluster::start_with(false)
    }

    /// [`RedisCluster::start`] with every member behind a relay it announces as its address,
    /// so that a shard can be cut off from its clients ([`RedisShard::cut_off`]).
    pub fn start_behind_relays() -> Result<RedisCluster> {
        RedisCluster::start_with(true)
    }

    fn start_with(relayed: bool) -> Result<RedisCluster> {
        let started: Vec<Member> = cluster::start_all(SHARDS * 2, |i| {
            let name = format!("redis-cluster-{}", i + 1);
            match relayed {
                true => Redis::launch_cluster_member_behind_relay(&name)
                    .map(|(redis, relay)| (Arc::new(redis), Some(Arc::new(relay)))),
                false => Redis::launch_cluster_member(&name).map(|redis| (Arc::new(redis), None)),
            }
        })?;
        let members: Vec<Arc<Redis>> = started.iter().map(|(m, _)| m.clone()).collect();
        let addresses: Vec<String> = started
            .iter()
            .map(|m| format!("127.0.0.1:{}", announced(m)))
            .collect();
        let output = Command::new(find_program("redis-cli"))
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()?;
        if !output.status.success() {
            return Err(Error::Control {
                server: "redis-cluster".into(),
                action: "create",
                reason: String::from_utf8_lossy(&output.stdout).into_owned()
                    + &String::from_utf8_lossy(&output.stderr),
            });
        }
        cluster::await_answer("redis-cluster", "serve every slot", START, || {
            members
                .iter()
                .all(|m| {
                    let info = m.command(&["CLUSTER", "INFO"]).unwrap_or_default();
                    resp::info_field(&info, "cluster_state").as_deref() == Some("ok")
                        && resp::info_field(&info, "cluster_known_nodes").as_deref() == Some("6")
                })
                .then_some(())
        })?;
        // The replicas' roles reach every member by gossip, after the slots: wait until the
        // view names a replica for each of the three masters.
        let view = cluster::await_answer("redis-cluster", "learn every replica", START, || {
            let view = members[0].command(&["CLUSTER", "NODES"]).ok()?;
            let nodes = parse_nodes(&view);
            let paired = (nodes.iter().filter(|n| n.master && n.slots.is_some()))
                .filter(|m| nodes.iter().any(|r| r.replica_of.as_deref() == Some(&m.id)))
                .count();
            (paired == SHARDS).then_some(view)
        })?;
        let nodes = parse_nodes(&view);
        let by_port = |port: u16| started.iter().find(|m| announced(m) == port).cloned();
        let mut shards = Vec::new();
        for master in nodes.iter().filter(|n| n.master) {
            let replica = nodes
                .iter()
                .find(|n| n.replica_of.as_deref() == Some(&master.id))
                .and_then(|r| by_port(r.port));
            let (Some(m), Some(r), Some(slots)) = (by_port(master.port), replica, master.slots)
            else {
                return Err(Error::Control {
                    server: "redis-cluster".into(),
                    action: "pair masters with replicas",
                    reason: view,
                });
            };
            shards.push(Arc::new(RedisShard {
                announced: [announced(&m), announced(&r)],
                relays: [&m.1, &r.1].into_iter().flatten().cloned().collect(),
                members: [m.0, r.0],
                everyone: members.clone(),
                slots,
            }));
        }
        shards.sort_by_key(|s| s.slots.0);
        let cluster = RedisCluster { shards };
        for shard in &cluster.shards {
            shard.await_replica_in_sync(0, START)?;
        }
        Ok(cluster)
    }

    /// The shards, in slot order.
    pub fn shards(&self) -> &[Arc<RedisShard>] {
        &self.shards
    }

    /// The shard that serves `slot`.
    pub fn shard_of_slot(&self, slot: u16) -> &Arc<RedisShard> {
        self.shards
            .iter()
            .find(|s| (s.slots.0..=s.slots.1).contains(&slot))
            .expect("the three shards serve every slot")
    }

    /// `redis+cluster://127.0.0.1:<port>,…`: every member, for a cluster client (it learns
    /// the slots from whichever answers).
    pub fn url(&self) -> String {
        let ports: Vec<String> = self
            .shards
            .iter()
            .flat_map(|s| s.announced.iter().map(|p| format!("127.0.0.1:{p}")))
            .collect();
        format!("redis+cluster://{}", ports.join(","))
    }
}

impl RedisShard {
    /// Member `i` (`0` was the master at start).
    pub fn member(&self, i: usize) -> &Redis {
        &self.members[i]
    }

    /// The first and last slot this shard serves.
    pub fn slots(&self) -> (u16, u16) {
        self.slots
    }

    /// The member a majority of the cluster's answering members name as serving this shard's
    /// slots, and which answers `ROLE` as a master; `None` while they do not agree (a
    /// failover under way).
    pub fn master(&self) -> Option<usize> {
        let named = cluster::ask_all(&self.everyone, |m| self.named_by(m));
        let answered = named.iter().filter(|n| n.is_some()).count();
        let index = (0..2).find(|&i| {
            let port = self.announced[i];
            named.iter().filter(|n| **n == Some(port)).count() >= cluster::majority(answered)
        })?;
        let role =
            resp::command_timeout(self.members[index].port(), &["ROLE"], STATUS_TIMEOUT).ok()?;
        (answered > 0 && role.starts_with("master")).then_some(index)
    }

    /// Cuts the shard off from its clients: every connection through its members' relays is
    /// closed and new ones are refused, so no client reaches it and its replica loses its
    /// master, while the cluster's bus, direct, still sees both alive and fails nothing over.
    /// A shard of a cluster not started behind relays has none to cut.
    pub fn cut_off(&self) {
        for relay in &self.relays {
            relay.cut();
        }
    }

    /// Undoes [`RedisShard::cut_off`]: clients and the replica reach the members again.
    pub fn reconnect(&self) {
        for relay in &self.relays {
            relay.heal();
        }
    }

    /// The port of the master `asked` says serves this shard's first slot, failed or not.
    fn named_by(&self, asked: &Redis) -> Option<u16> {
        let view =
            resp::command_timeout(asked.port(), &["CLUSTER", "NODES"], STATUS_TIMEOUT).ok()?;
        parse_nodes(&view)
            .into_iter()
            .find(|n| n.master && !n.failed && n.slots.is_some_and(|(a, _)| a == self.slots.0))
            .map(|n| n.port)
    }

    /// Cuts the replica off from its master: its link is dropped and it cannot make another
    /// (its handshake is refused: it is given a password the master does not have), so it
    /// receives nothing the master writes from now on, while both go on serving the cluster —
    /// to the replica, a master it cannot reach. Returns the master's member index.
    pub fn cut_replication(&self) -> Result<usize> {
        let master = self.await_leader(START)?;
        let replica = &self.members[1 - master];
        replica.command(&["CONFIG", "SET", "masterauth", CUT_OFF])?;
        self.members[master].command(&["CLIENT", "KILL", "TYPE", "replica"])?;
        cluster::await_answer("redis-cluster", "cut a replica off", START, || {
            let info = replica.command(&["INFO", "replication"]).ok()?;
            (resp::info_field(&info, "master_link_status").as_deref() == Some("down")).then_some(())
        })?;
        Ok(master)
    }

    /// Waits until the replica has received everything its master had written when this was
    /// called (the replication offsets), so that what the master writes next is all it can
    /// miss.
    pub fn await_replica_caught_up(&self, within: Duration) -> Result<()> {
        let master = self.await_leader(within)?;
        let info = self.members[master].command(&["INFO", "replication"])?;
        let written: u64 = resp::info_field(&info, "master_repl_offset")
            .and_then(|o| o.parse().ok())
            .unwrap_or(0);
        let replica = &self.members[1 - master];
        cluster::await_answer("redis-cluster", "catch a replica up", within, || {
            let info = replica.command(&["INFO", "replication"]).ok()?;
            let received: u64 = resp::info_field(&info, "slave_repl_offset")?.parse().ok()?;
            (received >= written).then_some(())
        })
    }

    /// Undoes [`RedisShard::cut_replication`] on every member that answers: a replica among
    /// them links to its master again.
    pub fn heal_replication(&self) {
        for member in self.members.iter() {
            let _ = member.command(&["CONFIG", "SET", "masterauth", ""]);
        }
    }

    /// Waits until the member other than `master` replicates it with its link up.
    fn await_replica_in_sync(&self, master: usize, within: Duration) -> Result<()> {
        let replica = &self.members[1 - master];
        cluster::await_answer("redis-cluster", "sync a replica", within, || {
            let info = replica.command(&["INFO", "replication"]).ok()?;
            (resp::info_field(&info, "role").as_deref() == Some("slave")
                && resp::info_field(&info, "master_port")
                    .is_some_and(|p| p == self.announced[master].to_string())
                && resp::info_field(&info, "master_link_status").as_deref() == Some("up"))
            .then_some(())
        })
    }
}

impl Cluster for RedisShard {
    fn kind(&self) -> &'static str {
        "Redis Cluster shard"
    }

    fn leader_title(&self) -> &'static str {
        "master"
    }

    fn leader(&self) -> Option<usize> {
        self.master()
    }

    fn process(&self, i: usize) -> &Server {
        self.members[i].server()
    }

    fn client_addresses(&self) -> Vec<String> {
        (self.announced.iter())
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// The member comes back empty (no snapshot, no append-only file) but as itself; the
    /// cluster tells it its slots moved to the member promoted meanwhile, and it replicates
    /// that one. Call it once the other member is master: started before, it would serve its
    /// slots again, empty.
    fn rejoin(&self, i: usize, within: Duration) -> Result<()> {
        let master = self.await_leader(within)?;
        if master == i {
            return Ok(());
        }
        self.members[i].server().start_again()?;
        self.await_replica_in_sync(master, within)
    }
}

/// The password a cut-off replica offers its master, which has none.
const CUT_OFF: &str = "cut-off-by-the-harness";

/// How long building the cluster may take (six members, a gossip round, two full syncs).
const START: Duration = Duration::from_secs(60);

/// One line of `CLUSTER NODES`, as much of it as the shards need.
#[derive(Debug, PartialEq)]
struct Node {
    id: String,
    port: u16,
    master: bool,
    failed: bool,
    replica_of: Option<String>,
    slots: Option<(u16, u16)>,
}

/// `<id> <ip:port@bus> <flags> <master id or -> <ping> <pong> <epoch> <link> <slot range>…`
fn parse_nodes(view: &str) -> Vec<Node> {
    view.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = fields.get(1)?.split('@').next()?.rsplit(':').next()?;
            let flags: Vec<&str> = fields.get(2)?.split(',').collect();
            let slots = fields.get(8).and_then(|range| {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                Some((a.parse().ok()?, b.parse().ok()?))
            });
            Some(Node {
                id: fields[0].to_string(),
                port: port.parse().ok()?,
                master: flags.contains(&"master"),
                failed: flags.contains(&"fail"),
                replica_of: fields.get(3).filter(|m| **m != "-").map(|m| m.to_string()),
                slots,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_view_names_each_master_s_slots_and_each_replica_s_master() {
        let view = "\
a1 127.0.0.1:20001@20002 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:20003@20004 slave a1 0 1 1 connected
c3 127.0.0.1:20005@20006,host master,fail - 0 1 2 connected 5461-10922
";
        let nodes = parse_nodes(view);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].slots, Some((0, 5460)));
        assert!(nodes[0].master && !nodes[0].failed);
        assert_eq!(nodes[1].replica_of.as_deref(), Some("a1"));
        assert_eq!((nodes[1].port, nodes[1].master), (20003, false));
        assert!(nodes[2].failed);
        assert_eq!(nodes[2].port, 20005);
    }
}
