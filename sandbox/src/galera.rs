//! Galera: three MariaDB nodes on one host that all take writes (multi-primary).
//!
//! Every node replicates every transaction synchronously in one sense only: at `COMMIT` its
//! write set is sent to the group and *certified* — a transaction that wrote a row another
//! node's transaction wrote first is aborted (`1213 Deadlock: wsrep aborted transaction`).
//! Nothing is locked across nodes before that: a `SELECT … FOR UPDATE` locks the row on the
//! node it runs on, so two buyers on two nodes both "hold" it, and the second to commit loses.
//! Autocommit statements are retried by the node (`wsrep_retry_autocommit`, once by default);
//! multi-statement transactions are not.
//!
//! Built as MariaDB's own test suite builds one (`mysql-test/suite/galera_3nodes`): each node
//! with its own client port, group communication port (`base_port`), incremental and snapshot
//! transfer ports, all on 127.0.0.1; the first node founds the cluster
//! (`--wsrep-new-cluster`), the others join it and receive its data by an rsync state
//! snapshot transfer. Each node is a [`Cluster`] member: the "leader" is the node the others
//! would be told to send a hot row's writes to — the lowest-numbered node that is synced in a
//! primary component — and a killed node started again rejoins (by transfer) rather than
//! founding a cluster of its own.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::cluster::{self, Cluster, MEMBERS};
use crate::process::Server;
use crate::{MariaDb, Result, ports};

/// The ports of one node.
#[derive(Debug, Clone, Copy)]
struct Ports {
    client: u16,
    /// Group communication (`base_port`, `gmcast.listen_addr`).
    group: u16,
    /// Incremental state transfer.
    ist: u16,
    /// State snapshot transfer (the joiner's rsync daemon).
    sst: u16,
}

/// How one node is launched: its ports, every node's group port, and whether it founds the
/// cluster (only the first node, only at its first start).
pub(crate) struct Node {
    index: usize,
    ports: Ports,
    group: Vec<u16>,
    found: AtomicBool,
}

impl Node {
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Whether this start founds the cluster (and so needs a data directory of its own).
    pub(crate) fn founds(&self) -> bool {
        self.found.load(Ordering::SeqCst)
    }

    /// The node's wsrep settings; founding the cluster only the first time they are asked for.
    pub(crate) fn args(&self) -> Vec<String> {
        let p = self.ports;
        let members: Vec<String> = self
            .group
            .iter()
            .map(|g| format!("127.0.0.1:{g}"))
            .collect();
        let mut args = vec![
            "--wsrep-on=ON".to_string(),
            format!("--wsrep-provider={PROVIDER}"),
            format!("--wsrep-cluster-address=gcomm://{}", members.join(",")),
            format!("--wsrep-node-address=127.0.0.1:{}", p.group),
            format!("--wsrep-node-name=node{}", self.index + 1),
            format!(
                "--wsrep-provider-options=base_port={};gmcast.listen_addr=tcp://127.0.0.1:{};\
                 ist.recv_addr=127.0.0.1:{}",
                p.group, p.group, p.ist
            ),
            format!("--wsrep-sst-receive-address=127.0.0.1:{}", p.sst),
            "--wsrep-sst-method=rsync".to_string(),
            // Galera replicates row events, and interleaved auto-increment locks.
            "--binlog-format=ROW".to_string(),
            "--innodb-autoinc-lock-mode=2".to_string(),
        ];
        if self.found.swap(false, Ordering::SeqCst) {
            args.push("--wsrep-new-cluster".to_string());
        }
        args
    }
}

/// The Galera provider Debian's `galera-4` installs (`mariadb-server` depends on it).
const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

/// Node `node` of a Galera cluster, on `port`: the first initialises a data directory and
/// founds the cluster; the others start empty and receive the first one's data (a state
/// snapshot transfer by rsync) as they join.
fn start_node(port: u16, node: Node) -> Result<MariaDb> {
    let name = format!("galera-{}", node.index() + 1);
    let founds = node.founds();
    MariaDb::start_with(&name, port, node.args(), |dir, as_root| match founds {
        true => crate::mariadb::install_db(dir, as_root),
        false => prepare_joiner(dir, as_root),
    })
}

/// A joining node's directory: an empty data directory, which the donor's snapshot fills. As
/// root, the rsync daemon the transfer starts on the joiner drops to `nobody`, so the data
/// directory is that user's and the node's directory can be entered by it.
pub(crate) fn prepare_joiner(dir: &Path, as_root: bool) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir.join("tmp"))?;
    let data = dir.join("data");
    std::fs::create_dir_all(&data)?;
    if as_root {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        let nobody = nobody()?;
        std::os::unix::fs::chown(&data, Some(nobody.uid.as_raw()), Some(nobody.gid.as_raw()))?;
    }
    Ok(())
}

/// The user the snapshot transfer's rsync daemon drops to when started as root.
fn nobody() -> std::io::Result<nix::unistd::User> {
    nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .ok_or_else(|| std::io::Error::other("no user `nobody` for the rsync transfer"))
}

/// Gives `dir` and everything under it to `nobody`, as [`prepare_joiner`] gives a new joiner's
/// empty data directory.
fn give_to_nobody(dir: &Path) -> Result<()> {
    let nobody = nobody()?;
    let (uid, gid) = (nobody.uid.as_raw(), nobody.gid.as_raw());
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
        if path.is_dir() && !path.is_symlink() {
            for entry in std::fs::read_dir(&path)? {
                pending.push(entry?.path());
            }
        }
    }
    Ok(())
}

/// Three Galera nodes.
pub struct GaleraCluster {
    nodes: Vec<MariaDb>,
}

impl GaleraCluster {
    /// Starts the first node (founding the cluster), then the other two one after the other
    /// (each receives a snapshot from a synced node), and waits until all three are synced in
    /// one primary component.
    pub fn start() -> Result<GaleraCluster> {
        // Quiet ports: a node killed and started again binds the same ones.
        let ports: Vec<Ports> = (0..MEMBERS)
            .map(|_| {
                Ok(Ports {
                    client: ports::quiet_port()?,
                    group: ports::quiet_port()?,
                    ist: ports::quiet_port()?,
                    sst: ports::quiet_port()?,
                })
            })
            .collect::<std::io::Result<_>>()?;
        let group: Vec<u16> = ports.iter().map(|p| p.group).collect();
        let mut cluster = GaleraCluster { nodes: Vec::new() };
        for (index, p) in ports.iter().enumerate() {
            let node = Node {
                index,
                ports: *p,
                group: group.clone(),
                found: AtomicBool::new(index == 0),
            };
            cluster.nodes.push(start_node(p.client, node)?);
            cluster.await_synced(index, index + 1, START)?;
        }
        Ok(cluster)
    }

    /// Node `i` (0, 1, 2).
    pub fn node(&self, i: usize) -> &MariaDb {
        &self.nodes[i]
    }

    /// `mysql://root@127.0.0.1:<port>` of node `i`.
    pub fn url(&self, i: usize) -> String {
        self.nodes[i].url()
    }

    /// Runs `statements` on node `i` with the `mariadb` client; tab-separated rows.
    pub fn sql(&self, i: usize, statements: &str) -> Result<String> {
        let name = format!("Galera node {}", i + 1);
        crate::mariadb::client(self.nodes[i].port(), &name, statements, &["-N", "-B"])
    }

    /// A `wsrep_%` status variable of node `i`, if it answers.
    pub fn status(&self, i: usize, variable: &str) -> Option<String> {
        let out = self
            .sql(i, &format!("SHOW STATUS LIKE '{variable}'"))
            .ok()?;
        out.lines()
            .find_map(|l| l.split_once('\t').map(|(_, v)| v.to_string()))
    }

    /// Cuts node `i` off from the others' group communication (`gmcast.isolate`), as a network
    /// partition would, and waits until it knows itself outside the primary component: from
    /// then on it refuses every statement (`1047 WSREP has not yet prepared node for
    /// application use`), while the other two, a majority, go on.
    pub fn isolate(&self, i: usize, within: Duration) -> Result<()> {
        self.sql(i, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=1'")?;
        cluster::await_answer("galera", "isolate a node", within, || {
            (self.status(i, "wsrep_cluster_status").as_deref() == Some("non-Primary")).then_some(())
        })
    }

    /// Undoes [`GaleraCluster::isolate`]: node `i` reconnects, receives what it missed and is
    /// synced with all three again.
    pub fn heal(&self, i: usize, within: Duration) -> Result<()> {
        self.sql(i, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=0'")?;
        self.await_synced(i, MEMBERS, within)
    }

    /// Whether node `i` is synced in a primary component of `size` nodes or more.
    fn synced(&self, i: usize, size: usize) -> bool {
        self.status(i, "wsrep_local_state_comment").as_deref() == Some("Synced")
            && self.status(i, "wsrep_cluster_status").as_deref() == Some("Primary")
            && self
                .status(i, "wsrep_cluster_size")
                .and_then(|s| s.parse::<usize>().ok())
                .is_some_and(|n| n >= size)
    }

    fn await_synced(&self, i: usize, size: usize, within: Duration) -> Result<()> {
        cluster::await_answer("galera", "sync a node", within, || {
            self.synced(i, size).then_some(())
        })
    }
}

impl Cluster for GaleraCluster {
    fn kind(&self) -> &'static str {
        "Galera cluster"
    }

    fn leader_title(&self) -> &'static str {
        "writer"
    }

    /// The lowest-numbered node synced in a primary component with a majority of the nodes.
    fn leader(&self) -> Option<usize> {
        let size = cluster::majority(MEMBERS);
        let synced = cluster::ask_all(&(0..MEMBERS).collect::<Vec<_>>(), |&i| self.synced(i, size));
        synced.iter().position(|s| *s)
    }

    fn process(&self, i: usize) -> &Server {
        self.nodes[i].server()
    }

    fn client_addresses(&self) -> Vec<String> {
        (self.nodes.iter())
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect()
    }

    /// The node starts again with its data directory as it was and joins the others: an
    /// incremental transfer of what it missed, or — after a kill, which leaves it no
    /// recorded position — a snapshot, written into its directory by the transfer's rsync
    /// daemon, which as root runs as `nobody`: the files the node made since it joined are
    /// given to that user first.
    fn rejoin(&self, i: usize, within: Duration) -> Result<()> {
        let server = self.nodes[i].server();
        if !server.is_running() && nix::unistd::Uid::effective().is_root() {
            give_to_nobody(&server.dir().join("data"))?;
        }
        server.start_again()?;
        self.await_synced(i, MEMBERS, within)
    }
}

/// How long building the cluster may take (two snapshot transfers).
const START: Duration = Duration::from_secs(120);
