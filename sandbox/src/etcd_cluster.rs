//! A three-member etcd cluster on loopback, each member under the same control as a single
//! server, plus [`EtcdCluster::partition`].
//!
//! Every member listens for peers on a port of its own but *advertises* a relay in front of it
//! (`--initial-advertise-peer-urls` and `--initial-cluster` name the relays), so all peer
//! traffic crosses a relay. Unlike ZooKeeper, etcd derives member and cluster ids from the
//! advertised peer URLs, so every member must see the same addresses: one relay per member,
//! not per pair. Traffic *from* a member is recognised by the `X-Server-From: <member id>`
//! header etcd puts on every peer request (raft streams, pipelined messages, snapshots), which
//! is how a partition can silence a member's outgoing links as well as its incoming ones.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::cluster::{self, Cluster, MEMBERS, STATUS_TIMEOUT};
use crate::etcd::http;
use crate::process::{Launch, Server};
use crate::relay::{Relays, Source};
use crate::{Error, Result, ports};

struct MemberLaunch {
    name: String,
    client_port: u16,
    peer_port: u16,
    advertised_peer_port: u16,
    initial_cluster: String,
    token: String,
}

impl Launch for MemberLaunch {
    fn command(&self, dir: &Path) -> Command {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let mut c = Command::new("etcd");
        c.args(["--name", &self.name])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{}", self.peer_port))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{}", self.advertised_peer_port))
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", &self.token])
            // Ignored once the data directory exists, so a restarted member rejoins.
            .args(["--initial-cluster-state", "new"])
            .args(["--logger", "zap", "--log-level", "warn"]);
        c
    }

    /// Ready once the member knows a leader and can serve a quorum read.
    fn port(&self) -> u16 {
        self.client_port
    }

    fn probe(&self) -> std::result::Result<(), String> {
        let body = http(
            self.client_port,
            "GET",
            "/health",
            "",
            Duration::from_secs(5),
        )?;
        if body.contains("\"health\":\"true\"") {
            Ok(())
        } else {
            Err(format!("/health answered {body:?}"))
        }
    }
}

/// What one member says about itself and the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdStatus {
    pub member_id: u64,
    /// The leader this member follows; 0 while it knows none.
    pub leader_id: u64,
}

fn status(client_port: u16, timeout: Duration) -> std::result::Result<EtcdStatus, String> {
    let body = http(client_port, "POST", "/v3/maintenance/status", "{}", timeout)?;
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    // The JSON gateway writes 64-bit ids as decimal strings.
    let id = |v: &serde_json::Value| -> std::result::Result<u64, String> {
        v.as_str()
            .unwrap_or("0")
            .parse()
            .map_err(|e| format!("{e} in {body}"))
    };
    Ok(EtcdStatus {
        member_id: id(&v["header"]["member_id"])?,
        leader_id: id(&v["leader"])?,
    })
}

/// One member of the cluster.
pub struct EtcdMember {
    server: Server,
    client_port: u16,
    id: u64,
}

listening!(EtcdMember, client_port);

impl EtcdMember {
    /// `http://127.0.0.1:<port>`, this member's client endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The member id etcd gave this member.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The member's own view; `None` if it does not answer within a second.
    pub fn status(&self) -> Option<EtcdStatus> {
        status(self.client_port, STATUS_TIMEOUT).ok()
    }
}

/// Three etcd members forming one cluster.
pub struct EtcdCluster {
    members: Vec<EtcdMember>,
    // Dropped after the members, so their peer links stay up until they are killed.
    relays: Relays,
}

impl EtcdCluster {
    /// Starts three members and waits until each is healthy (knows a leader).
    pub fn start() -> Result<EtcdCluster> {
        cluster::retry_port_clash(Self::start_once)
    }

    fn start_once() -> Result<EtcdCluster> {
        let relays = Relays::new();
        let client: Vec<u16> = (0..MEMBERS)
            .map(|_| ports::quiet_port())
            .collect::<Result<_, _>>()?;
        let peer: Vec<u16> = (0..MEMBERS)
            .map(|_| ports::quiet_port())
            .collect::<Result<_, _>>()?;
        let relay: Vec<u16> = (0..MEMBERS)
            .map(|k| {
                relays
                    .relay(
                        ([127, 0, 0, 1], peer[k]).into(),
                        Source::HttpHeader("X-Server-From"),
                        &to_label(k),
                    )
                    .map(|relay| relay.port())
            })
            .collect::<Result<_, _>>()?;
        let initial_cluster = (0..MEMBERS)
            .map(|k| format!("{}=http://127.0.0.1:{}", name(k), relay[k]))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("sandbox-{}-{}", std::process::id(), client[0]);
        let members = cluster::start_all(MEMBERS, |k| {
            let launch = MemberLaunch {
                name: name(k),
                client_port: client[k],
                peer_port: peer[k],
                advertised_peer_port: relay[k],
                initial_cluster: initial_cluster.clone(),
                token: token.clone(),
            };
            let server = Server::start(&name(k), launch, |_| Ok(()))?;
            let id = status(client[k], Duration::from_secs(5))
                .map_err(|reason| Error::Control {
                    server: name(k),
                    action: "status",
                    reason,
                })?
                .member_id;
            Ok(EtcdMember {
                server,
                client_port: client[k],
                id,
            })
        })?;
        Ok(EtcdCluster { members, relays })
    }

    pub fn members(&self) -> &[EtcdMember] {
        &self.members
    }

    pub fn member(&self, i: usize) -> &EtcdMember {
        &self.members[i]
    }

    /// Every member's client endpoint, for a client that fails over between them.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdMember::endpoint).collect()
    }

    /// The member that leads now: a majority of members name it as leader, and it answers and
    /// names itself. `None` while electing, or while the members that answer disagree.
    pub fn leader(&self) -> Option<usize> {
        let statuses = cluster::ask_all(&self.members, EtcdMember::status);
        let index_of = |id: u64| self.members.iter().position(|m| m.id == id);
        let votes = |id: u64| {
            statuses
                .iter()
                .flatten()
                .filter(|s| s.leader_id == id)
                .count()
        };
        statuses.iter().flatten().find_map(|s| {
            let me = index_of(s.member_id)?;
            (s.leader_id == s.member_id && votes(s.member_id) >= cluster::majority(MEMBERS))
                .then_some(me)
        })
    }

    /// Waits up to `within` for [`Self::leader`] to name a member.
    pub fn await_leader(&self, within: Duration) -> Result<usize> {
        Cluster::await_leader(self, within)
    }

    /// Cuts member `i` off from the other two: its peer links in both directions go silent
    /// (see the `relay` module); its clients still reach it.
    pub fn partition(&self, i: usize) {
        self.relays.isolate(&self.labels(i));
    }

    /// Reconnects member `i` to the others.
    pub fn heal(&self, i: usize) {
        self.relays.heal(&self.labels(i));
    }

    /// Member `i` as destination of its relay, and as the sender etcd's header names.
    fn labels(&self, i: usize) -> Vec<String> {
        vec![to_label(i), format!("{:x}", self.members[i].id)]
    }
}

impl Cluster for EtcdCluster {
    fn kind(&self) -> &'static str {
        "etcd cluster"
    }

    fn leader(&self) -> Option<usize> {
        EtcdCluster::leader(self)
    }

    fn process(&self, i: usize) -> &Server {
        self.members[i].server()
    }

    fn client_addresses(&self) -> Vec<String> {
        self.endpoints()
    }

    fn rejoin(&self, i: usize, within: Duration) -> Result<()> {
        let member = &self.members[i];
        member.server().start_again()?;
        cluster::await_answer(self.kind(), "take a member back", within, || {
            member.status().filter(|s| s.leader_id != 0).map(drop)
        })
    }
}

fn name(k: usize) -> String {
    format!("etcd-{}", k + 1)
}

fn to_label(k: usize) -> String {
    format!("etcd-member-{k}")
}
