//! A MariaDB primary with replicas: asynchronous, or semi-synchronous with either wait point.
//!
//! Each member is a sandbox MariaDB ([`MariaDb`]) with a binary log of row events and a
//! `server_id` of its own; the replicas follow the primary by GTID (`MASTER_USE_GTID =
//! slave_pos`) and are read-only until promoted. What the flash-sale failures need of it:
//!
//! * **Lag**: [`ReplicatedMariaDb::lag`] stops a replica's SQL thread, so it keeps receiving
//!   the primary's events and applies none of them until [`ReplicatedMariaDb::catch_up`]; a
//!   read there sees the past. [`ReplicatedMariaDb::wait_caught_up`] waits until a replica has
//!   applied everything the primary had logged when asked.
//! * **Failover**: [`ReplicatedMariaDb::promote`] makes a replica the primary (its slave
//!   threads stopped and forgotten, writes allowed), with whatever it had applied: under
//!   asynchronous replication, transactions the old primary committed and never sent are gone.
//! * **Semi-synchronous replication** ([`Replication::SemiSync`]): the primary's commit waits
//!   for a replica to acknowledge the events, after writing them to its binary log
//!   (`AFTER_SYNC`: no client sees a commit a failover could lose) or after committing
//!   (`AFTER_COMMIT`, MariaDB's default: other clients may read a transaction that a failover
//!   then loses). Past `rpl_semi_sync_master_timeout` without an acknowledgement the primary
//!   falls back to asynchronous replication, silently.
//!
//! * **A [`Cluster`]**: the primary is the member that takes writes; a killed member rejoins
//!   as a replica of it — refused, with the primary's own words (`1236`, "the slave has
//!   diverged"), when it is a former primary holding commits its successor never received.
//!
//! Commands go through the `mariadb` client the server package installs.

use std::time::Duration;

use crate::cluster::{self, Cluster};
use crate::{Error, MariaDb, Result, Server};

/// How the primary's commits wait for the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// A commit returns once the primary has it; the replicas follow when they can.
    Async,
    /// A commit waits for one replica's acknowledgement, up to `timeout`, at `wait_point`.
    SemiSync {
        wait_point: WaitPoint,
        timeout: Duration,
    },
}

/// Where a semi-synchronous commit waits for the replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitPoint {
    /// After the binary log is written, before the storage engine commits.
    AfterSync,
    /// After the storage engine commits (MariaDB's default).
    AfterCommit,
}

impl WaitPoint {
    fn sql(self) -> &'static str {
        match self {
            WaitPoint::AfterSync => "AFTER_SYNC",
            WaitPoint::AfterCommit => "AFTER_COMMIT",
        }
    }
}

/// A primary and its replicas, members numbered from 0 (the first primary).
pub struct ReplicatedMariaDb {
    members: Vec<MariaDb>,
    replication: Replication,
}

/// How long a replica may take to connect to its primary.
const CONNECT_WITHIN: Duration = Duration::from_secs(30);

impl ReplicatedMariaDb {
    /// Starts a primary and `replicas` replicas following it, replicating as `replication`
    /// says; returns once every replica's threads run.
    pub fn start(replicas: usize, replication: Replication) -> Result<ReplicatedMariaDb> {
        let members = (0..=replicas)
            .map(|i| MariaDb::start_member(u32::try_from(i + 1).unwrap_or(u32::MAX)))
            .collect::<Result<Vec<_>>>()?;
        let set = ReplicatedMariaDb {
            members,
            replication,
        };
        set.wait_for_replicas(0)?;
        for i in 1..=replicas {
            set.follow(i, 0)?;
        }
        Ok(set)
    }

    /// Member `i`: its URL, version and process.
    pub fn member(&self, i: usize) -> &MariaDb {
        &self.members[i]
    }

    pub fn members(&self) -> usize {
        self.members.len()
    }

    pub fn replication(&self) -> Replication {
        self.replication
    }

    /// Makes member `i` a read-only replica of member `primary` and waits until its threads
    /// run.
    pub fn follow(&self, i: usize, primary: usize) -> Result<()> {
        self.point_at(i, primary, "slave_pos")?;
        crate::cluster::await_answer(
            "MariaDB replica",
            "connect to its primary",
            CONNECT_WITHIN,
            || {
                let status = self.slave_status(i).ok()?;
                (field(&status, "Slave_IO_Running") == Some("Yes")
                    && field(&status, "Slave_SQL_Running") == Some("Yes"))
                .then_some(())
            },
        )
    }

    /// Makes replica `i` follow member `primary` instead of its own primary, from what it has
    /// applied, and waits until its threads run: after a failover, the replicas left follow the
    /// promoted member.
    pub fn repoint(&self, i: usize, primary: usize) -> Result<()> {
        self.sql(i, "STOP SLAVE")?;
        self.follow(i, primary)
    }

    /// Member `i`'s commits wait for a replica as the set's replication says (nothing for
    /// asynchronous replication): the first primary's from the start, a promoted member's once
    /// [`ReplicatedMariaDb::promote`] made it primary and the replicas left follow it.
    pub fn wait_for_replicas(&self, i: usize) -> Result<()> {
        let Replication::SemiSync {
            wait_point,
            timeout,
        } = self.replication
        else {
            return Ok(());
        };
        self.sql(
            i,
            &format!(
                "SET GLOBAL rpl_semi_sync_master_enabled = ON; \
                 SET GLOBAL rpl_semi_sync_master_wait_point = '{}'; \
                 SET GLOBAL rpl_semi_sync_master_timeout = {}",
                wait_point.sql(),
                timeout.as_millis()
            ),
        )
        .map(drop)
    }

    /// Makes member `i` read-only and starts it replicating from member `primary`, from the
    /// GTID position `gtid` names (`slave_pos`: what it applied as a replica; `current_pos`:
    /// that, or what it committed as a primary, whichever is later).
    fn point_at(&self, i: usize, primary: usize, gtid: &str) -> Result<()> {
        let semi = matches!(self.replication, Replication::SemiSync { .. });
        self.sql(
            i,
            &format!(
                "SET GLOBAL read_only = ON; \
                 SET GLOBAL rpl_semi_sync_slave_enabled = {}; \
                 CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
                 MASTER_USER = 'root', MASTER_USE_GTID = {gtid}; \
                 START SLAVE",
                if semi { "ON" } else { "OFF" },
                self.members[primary].port()
            ),
        )
        .map(drop)
    }

    /// Stops member `i`'s I/O thread: it receives nothing more from its primary, as if the
    /// network between them were cut.
    pub fn disconnect(&self, i: usize) -> Result<()> {
        self.sql(i, "STOP SLAVE IO_THREAD").map(drop)
    }

    /// Starts member `i`'s I/O thread again.
    pub fn reconnect(&self, i: usize) -> Result<()> {
        self.sql(i, "START SLAVE IO_THREAD").map(drop)
    }

    /// Stops member `i`'s SQL thread: it keeps receiving the primary's events and applies none.
    pub fn lag(&self, i: usize) -> Result<()> {
        self.sql(i, "STOP SLAVE SQL_THREAD").map(drop)
    }

    /// Starts member `i`'s SQL thread again.
    pub fn catch_up(&self, i: usize) -> Result<()> {
        self.sql(i, "START SLAVE SQL_THREAD").map(drop)
    }

    /// Waits up to `within` until member `i` has applied every transaction member `primary`
    /// had logged when this was called.
    pub fn wait_caught_up(&self, i: usize, primary: usize, within: Duration) -> Result<()> {
        let position = self.sql(primary, "SELECT @@gtid_binlog_pos")?;
        let reached = self.sql(
            i,
            &format!(
                "SELECT MASTER_GTID_WAIT('{}', {})",
                position.trim(),
                within.as_secs_f64()
            ),
        )?;
        match reached.trim() {
            "0" => Ok(()),
            other => Err(Error::Control {
                server: "MariaDB replica".into(),
                action: "apply the primary's transactions",
                reason: format!("MASTER_GTID_WAIT answered {other} after {within:?}"),
            }),
        }
    }

    /// The sequence number of the last transaction in member `i`'s binary log: committed
    /// there, or — a replica logs what it applies — applied there (0 before any).
    pub fn last_transaction(&self, i: usize) -> Result<u64> {
        let position = self.sql(i, "SELECT @@gtid_binlog_pos")?;
        Ok(gtid_sequence(&position))
    }

    /// Makes member `i` a primary: its replication stopped and forgotten, with what it had
    /// applied (what it had received and not applied is dropped with its relay log), writes
    /// allowed.
    pub fn promote(&self, i: usize) -> Result<()> {
        self.sql(
            i,
            "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF; \
             SET GLOBAL rpl_semi_sync_slave_enabled = OFF",
        )
        .map(drop)
    }

    /// The primary's `Rpl_semi_sync_master_status` (`ON` while its commits wait for a replica,
    /// `OFF` once it fell back to asynchronous replication) and how many semi-synchronous
    /// replicas it has.
    pub fn semi_sync_status(&self, primary: usize) -> Result<(bool, u32)> {
        let status = self.sql(
            primary,
            "SHOW STATUS WHERE Variable_name IN \
             ('Rpl_semi_sync_master_status', 'Rpl_semi_sync_master_clients')",
        )?;
        let value = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let on = value("Rpl_semi_sync_master_status") == "ON";
        let clients = value("Rpl_semi_sync_master_clients").parse().unwrap_or(0);
        Ok((on, clients))
    }

    /// Commits on member `primary` waiting for a replica's acknowledgement now
    /// (`Rpl_semi_sync_master_wait_sessions`).
    pub fn waiting_commits(&self, primary: usize) -> Result<u64> {
        let status = self.sql(
            primary,
            "SHOW STATUS LIKE 'Rpl_semi_sync_master_wait_sessions'",
        )?;
        Ok((status.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }

    /// Whether member `i` answers, within a second, and takes writes (`read_only` off).
    fn writable(&self, i: usize) -> bool {
        self.client(
            i,
            "SELECT @@read_only",
            &["-N", "-B", "--connect-timeout=1"],
        )
        .is_ok_and(|out| out.trim() == "0")
    }

    fn slave_status(&self, i: usize) -> Result<String> {
        self.vertical(i, "SHOW SLAVE STATUS")
    }

    /// Runs `statements` on member `i` with the `mariadb` client; its output, tab-separated
    /// without headers.
    fn sql(&self, i: usize, statements: &str) -> Result<String> {
        self.client(i, statements, &["-N", "-B"])
    }

    /// The same, each row as `name: value` lines.
    fn vertical(&self, i: usize, statements: &str) -> Result<String> {
        self.client(i, statements, &["-E"])
    }

    fn client(&self, i: usize, statements: &str, format: &[&str]) -> Result<String> {
        let member = format!("MariaDB member {i}");
        crate::mariadb::client(self.members[i].port(), &member, statements, format)
    }
}

/// The highest sequence number in a GTID position (`0-1-1234`, or several, comma-separated):
/// how many transactions the one domain of a replicated set has logged up to it.
pub fn gtid_sequence(position: &str) -> u64 {
    (position.trim().split(','))
        .filter_map(|gtid| gtid.trim().rsplit('-').next()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// The value of `name` in vertical (`-E`) output.
fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|line| {
        let (key, value) = line.trim().split_once(": ")?;
        (key == name).then_some(value.trim())
    })
}

impl Cluster for ReplicatedMariaDb {
    fn kind(&self) -> &'static str {
        "MariaDB replication set"
    }

    fn leader_title(&self) -> &'static str {
        "primary"
    }

    /// The lowest-numbered member that answers and takes writes: the first primary, until a
    /// replica is promoted ([`ReplicatedMariaDb::promote`]).
    fn leader(&self) -> Option<usize> {
        let members: Vec<usize> = (0..self.members.len()).collect();
        let writable = cluster::ask_all(&members, |&i| self.writable(i));
        writable.iter().position(|w| *w)
    }

    fn process(&self, i: usize) -> &Server {
        self.members[i].server()
    }

    fn client_addresses(&self) -> Vec<String> {
        (self.members.iter())
            .map(|m| format!("127.0.0.1:{}", m.port()))
            .collect()
    }

    /// Member `i` starts again with its data as it was, read-only, and follows the primary
    /// from the last transaction it has — received from a primary, or committed as one
    /// (`MASTER_USE_GTID = current_pos`). A former primary that committed transactions its
    /// successor never received cannot follow: the primary refuses the position (`1236`) and
    /// this answers that refusal — the member holds writes nobody else has and is to be
    /// rebuilt from the primary, not rejoined.
    fn rejoin(&self, i: usize, within: Duration) -> Result<()> {
        let server = self.members[i].server();
        server.start_again()?;
        // A server starts writable; until it is told otherwise it would pass for a primary.
        self.sql(i, "STOP SLAVE; SET GLOBAL read_only = ON")?;
        let primary = cluster::await_answer(self.kind(), "name a primary", within, || {
            (0..self.members.len()).find(|&p| p != i && self.writable(p))
        })?;
        self.point_at(i, primary, "current_pos")?;
        cluster::await_answer(self.kind(), "follow the primary again", within, || {
            let status = self.slave_status(i).ok()?;
            let failed = ["Last_IO", "Last_SQL"].into_iter().find_map(|thread| {
                let errno = field(&status, &format!("{thread}_Errno"))?;
                (errno != "0").then(|| field(&status, &format!("{thread}_Error")).unwrap_or(errno))
            });
            match failed {
                Some(reason) => Some(Err(Error::Control {
                    server: format!("MariaDB member {i}"),
                    action: "follow the primary again",
                    reason: reason.to_string(),
                })),
                None => (field(&status, "Slave_IO_Running") == Some("Yes")
                    && field(&status, "Slave_SQL_Running") == Some("Yes"))
                .then_some(Ok(())),
            }
        })?
    }
}
