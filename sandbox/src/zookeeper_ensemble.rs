//! A three-server ZooKeeper ensemble on loopback, each member under the same control as a
//! single server, plus [`ZooKeeperEnsemble::partition`].
//!
//! Each member has its own `zoo.cfg` (client port, data directory with `myid`) and its own
//! view of the `server.N=127.0.0.1:<quorum>:<election>` lines: its own line names its real
//! ports, the other two name relays that lead to them, one relay per directed pair of members
//! and port (see the `relay` module). ZooKeeper reads peer addresses only from its
//! configuration, so every byte between two members crosses a relay that knows both ends, and
//! a partition can silence exactly the links of one member.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::cluster::{self, Cluster, MEMBERS, STATUS_TIMEOUT};
use crate::process::{Launch, Server};
use crate::relay::{Relays, Source};
use crate::zookeeper::{PROBE_TIMEOUT, TICK_MS, four_letter, java_command};
use crate::{Result, ports};

/// What `srvr` says a member is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZkMode {
    Leader,
    Follower,
    /// Answers, but is not serving (electing, or cut off from a quorum).
    NotServing,
}

struct MemberLaunch {
    client_port: u16,
}

impl Launch for MemberLaunch {
    /// Elections tuned for a member cut off on purpose: a connection attempt to an unreachable
    /// peer gives up after 1 s (5 s by default), and a member that has not heard enough votes
    /// asks again at least every 2 s (its pause doubles up to 60 s by default, which on a
    /// loaded machine let an election outlast a minute).
    fn command(&self, dir: &Path) -> Command {
        java_command(
            dir,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            &[
                "-Dzookeeper.cnxTimeout=1000",
                "-Dzookeeper.fastleader.maxNotificationInterval=2000",
            ],
        )
    }

    /// Ready once it serves as part of a quorum.
    fn port(&self) -> u16 {
        self.client_port
    }

    fn probe(&self) -> std::result::Result<(), String> {
        match mode(self.client_port, PROBE_TIMEOUT)? {
            ZkMode::Leader | ZkMode::Follower => Ok(()),
            ZkMode::NotServing => Err("not serving yet".into()),
        }
    }
}

fn mode(client_port: u16, timeout: Duration) -> std::result::Result<ZkMode, String> {
    let answer = four_letter(client_port, "srvr", timeout)?;
    Ok(if answer.contains("Mode: leader") {
        ZkMode::Leader
    } else if answer.contains("Mode: follower") {
        ZkMode::Follower
    } else {
        ZkMode::NotServing
    })
}

/// One server of the ensemble.
pub struct ZooKeeperMember {
    server: Server,
    client_port: u16,
}

listening!(ZooKeeperMember, client_port);

impl ZooKeeperMember {
    /// `127.0.0.1:<port>`: a connect string naming this member only.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// What the member says it is doing; `None` if it does not answer within a second (killed
    /// or paused).
    pub fn mode(&self) -> Option<ZkMode> {
        mode(self.client_port, STATUS_TIMEOUT).ok()
    }
}

/// Three ZooKeeper servers forming one ensemble.
pub struct ZooKeeperEnsemble {
    members: Vec<ZooKeeperMember>,
    // Dropped after the members, so their peer links stay up until they are killed.
    relays: Relays,
}

impl ZooKeeperEnsemble {
    /// Starts three members and waits until each serves as leader or follower.
    pub fn start() -> Result<ZooKeeperEnsemble> {
        cluster::retry_port_clash(Self::start_once)
    }

    fn start_once() -> Result<ZooKeeperEnsemble> {
        let relays = Relays::new();
        let client: Vec<u16> = (0..MEMBERS)
            .map(|_| ports::quiet_port())
            .collect::<Result<_, _>>()?;
        let quorum: Vec<u16> = (0..MEMBERS)
            .map(|_| ports::quiet_port())
            .collect::<Result<_, _>>()?;
        let election: Vec<u16> = (0..MEMBERS)
            .map(|_| ports::quiet_port())
            .collect::<Result<_, _>>()?;
        // server_lines[i]: the `server.N` lines member i is given.
        let mut server_lines = vec![String::new(); MEMBERS];
        for (i, lines) in server_lines.iter_mut().enumerate() {
            for j in 0..MEMBERS {
                let (q, e) = if i == j {
                    (quorum[j], election[j])
                } else {
                    let relay = |port: u16| {
                        relays
                            .relay(
                                ([127, 0, 0, 1], port).into(),
                                Source::Fixed(i.to_string()),
                                &j.to_string(),
                            )
                            .map(|relay| relay.port())
                    };
                    (relay(quorum[j])?, relay(election[j])?)
                };
                writeln!(lines, "server.{}=127.0.0.1:{q}:{e}", j + 1).expect("write to String");
            }
        }
        let members = cluster::start_all(MEMBERS, |i| {
            let launch = MemberLaunch {
                client_port: client[i],
            };
            let server = Server::start(&format!("zookeeper-{}", i + 1), launch, |dir| {
                let data = dir.join("data");
                std::fs::create_dir_all(&data)?;
                std::fs::write(data.join("myid"), format!("{}\n", i + 1))?;
                std::fs::write(
                    dir.join("zoo.cfg"),
                    config(&data, client[i], &server_lines[i]),
                )?;
                Ok(())
            })?;
            Ok(ZooKeeperMember {
                server,
                client_port: client[i],
            })
        })?;
        Ok(ZooKeeperEnsemble { members, relays })
    }

    pub fn members(&self) -> &[ZooKeeperMember] {
        &self.members
    }

    pub fn member(&self, i: usize) -> &ZooKeeperMember {
        &self.members[i]
    }

    /// `127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>`, the connect string naming every member.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(ZooKeeperMember::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The member that leads now: the only one that says `Mode: leader`, with a majority of
    /// the ensemble serving (leader plus followers). `None` while electing, or while a cut off
    /// old leader has not yet noticed that another one was elected.
    pub fn leader(&self) -> Option<usize> {
        let modes = cluster::ask_all(&self.members, ZooKeeperMember::mode);
        let leaders: Vec<usize> = (0..MEMBERS)
            .filter(|&i| modes[i] == Some(ZkMode::Leader))
            .collect();
        let serving = modes
            .iter()
            .filter(|m| matches!(m, Some(ZkMode::Leader | ZkMode::Follower)))
            .count();
        match leaders[..] {
            [leader] if serving >= cluster::majority(MEMBERS) => Some(leader),
            _ => None,
        }
    }

    /// Waits up to `within` for [`Self::leader`] to name a member.
    pub fn await_leader(&self, within: Duration) -> Result<usize> {
        Cluster::await_leader(self, within)
    }

    /// Cuts member `i` off from the other two (see the module docs); its clients still reach
    /// it. A cut off member stops serving once it misses `syncLimit` ticks of its peers.
    pub fn partition(&self, i: usize) {
        self.relays.isolate(&[i.to_string()]);
    }

    /// Reconnects member `i` to the others.
    pub fn heal(&self, i: usize) {
        self.relays.heal(&[i.to_string()]);
    }
}

impl Cluster for ZooKeeperEnsemble {
    fn kind(&self) -> &'static str {
        "ZooKeeper ensemble"
    }

    fn leader(&self) -> Option<usize> {
        ZooKeeperEnsemble::leader(self)
    }

    fn process(&self, i: usize) -> &Server {
        self.members[i].server()
    }

    fn client_addresses(&self) -> Vec<String> {
        self.members
            .iter()
            .map(ZooKeeperMember::connect_string)
            .collect()
    }

    fn rejoin(&self, i: usize, within: Duration) -> Result<()> {
        let member = &self.members[i];
        member.server().start_again()?;
        cluster::await_answer(self.kind(), "take a member back", within, || {
            matches!(member.mode(), Some(ZkMode::Leader | ZkMode::Follower)).then_some(())
        })
    }
}

/// One member's `zoo.cfg`. Ticks are short so that expiry and election take seconds; the
/// limits leave a loaded machine some slack (sync within 10 ticks = 2 s, else the follower
/// drops out and the leader counts it lost).
fn config(data: &Path, client_port: u16, server_lines: &str) -> String {
    format!(
        "tickTime={TICK_MS}\n\
         initLimit=50\n\
         syncLimit=10\n\
         dataDir={data}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         minSessionTimeout={min}\n\
         maxSessionTimeout=30000\n\
         maxClientCnxns=0\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=ruok,srvr,stat,mntr\n\
         {server_lines}",
        data = data.display(),
        min = 2 * TICK_MS,
    )
}
