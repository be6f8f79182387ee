//! What the three clusters share: how many members, waiting for a leader, and the one
//! interface a fault scenario drives any of them through ([`Cluster`]).

use std::time::{Duration, Instant};

use crate::{Error, Result, Server};

/// A cluster of servers (most of [`MEMBERS`]), one of which leads (the ZooKeeper ensemble's
/// leader, the etcd cluster's leader, the Redis primary the Sentinels name, the MariaDB
/// primary that takes writes): who leads now, each member's
/// process, where its clients connect, and how a member killed by a scenario is brought back.
pub trait Cluster: Send + Sync {
    /// `ZooKeeper ensemble`, `etcd cluster`, `Redis Sentinel set`.
    fn kind(&self) -> &'static str;

    /// What the leading member is called: `leader`, or `primary`.
    fn leader_title(&self) -> &'static str {
        "leader"
    }

    /// The member that leads now; `None` while the members have not agreed on one.
    fn leader(&self) -> Option<usize>;

    /// Waits up to `within` for [`Cluster::leader`] to name a member.
    fn await_leader(&self, within: Duration) -> Result<usize> {
        await_answer(self.kind(), "agree on who leads", within, || self.leader())
    }

    /// Member `i`'s process: kill, pause, resume, start again.
    fn process(&self, i: usize) -> &Server;

    /// Where a client connects, one address per member in member order (for the Sentinel set,
    /// its Sentinels, which name the primary).
    fn client_addresses(&self) -> Vec<String>;

    /// Starts member `i` again after it was killed and waits (up to `within`) until it serves
    /// in the cluster again: a follower of the leader, or a replica of the primary.
    fn rejoin(&self, i: usize, within: Duration) -> Result<()>;
}

/// Members per cluster: the smallest that survives losing one.
pub const MEMBERS: usize = 3;

/// How long a member may take to answer a status question before it counts as silent (a
/// paused member never answers).
pub(crate) const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// How many members make a majority of `n`.
pub(crate) fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// Asks `ask` every 100 ms until it answers, for up to `within`; `None` if it never did.
pub fn wait_for<T>(within: Duration, mut ask: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(answer) = ask() {
            return Some(answer);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// [`wait_for`], failing with what `cluster` did not do in time.
pub(crate) fn await_answer<T>(
    cluster: &str,
    what: &'static str,
    within: Duration,
    ask: impl FnMut() -> Option<T>,
) -> Result<T> {
    wait_for(within, ask).ok_or_else(|| Error::Control {
        server: cluster.to_string(),
        action: what,
        reason: format!("not done within {within:?}"),
    })
}

/// Runs `ask` for every member at once (a silent member costs one timeout, not one each).
pub(crate) fn ask_all<M: Sync, T: Send>(members: &[M], ask: impl Fn(&M) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let ask = &ask;
        let handles: Vec<_> = members.iter().map(|m| s.spawn(move || ask(m))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("status thread panicked"))
            .collect()
    })
}

/// Starts every member at once (members of a quorum system only become ready together).
pub(crate) fn start_all<T: Send>(
    n: usize,
    start: impl Fn(usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    std::thread::scope(|s| {
        let start = &start;
        let handles: Vec<_> = (0..n).map(|i| s.spawn(move || start(i))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("member start thread panicked"))
            .collect()
    })
}

/// Runs `start` again (up to three times in all) when a member failed because its port was
/// taken between being picked and being bound: ports are picked before the members start, and
/// other processes on the machine pick ports too.
pub(crate) fn retry_port_clash<T>(start: impl Fn() -> Result<T>) -> Result<T> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(Error::StartFailed { tail, .. })
                if attempt < 3 && tail.to_lowercase().contains("address already in use") =>
            {
                attempt += 1;
            }
            result => return result,
        }
    }
}
