//! The recording side of [`crate::history`]: a fenced store and contending clients that write
//! down every step in one [`History`], and what a recorded run says about an outage.
//!
//! A test or a fault scenario starts a few [`contend`] tasks on one lock name, injects its
//! fault (recorded with [`History::fault`]), waits for the tasks and hands the history to
//! [`crate::history::check`]. [`Outage::of`] then reads the availability side from the same
//! record: how many grants came before and after the first fault, and the longest time around
//! it without any grant.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::history::{Event, History, Op};
use crate::{AcquireOptions, DistributedLock};

/// A resource that remembers the highest fencing token it has seen and refuses lower ones. It
/// records each decision while holding its own mutex, so the history shows the store's order.
#[derive(Debug)]
pub struct FencedStore {
    highest: Mutex<u64>,
    history: Arc<History>,
}

impl FencedStore {
    pub fn new(history: Arc<History>) -> FencedStore {
        FencedStore {
            highest: Mutex::new(0),
            history,
        }
    }

    pub fn history(&self) -> &Arc<History> {
        &self.history
    }

    /// A write by `client` carrying `token`: accepted if no higher token was seen.
    pub fn write(&self, client: &str, token: u64) -> bool {
        let mut highest = self.highest.lock().unwrap_or_else(|e| e.into_inner());
        let accepted = token >= *highest;
        if accepted {
            *highest = token;
        }
        self.history.write(client, token, accepted);
        accepted
    }
}

/// How a contender uses the lock.
#[derive(Debug, Clone, Copy)]
pub struct Contention {
    /// The lease of each acquisition (a session timeout for ZooKeeper).
    pub lease: Duration,
    /// The wait budget of each `acquire`.
    pub wait: Duration,
    /// A bound on any one call, for backends that stop answering during a fault.
    pub patience: Duration,
    /// Writes to the store per holding, `pause` apart.
    pub writes: usize,
    pub pause: Duration,
}

impl Default for Contention {
    fn default() -> Contention {
        Contention {
            lease: Duration::from_secs(10),
            wait: Duration::from_secs(5),
            patience: Duration::from_secs(20),
            writes: 3,
            pause: Duration::from_millis(20),
        }
    }
}

/// One client: acquire, write to the store, release — recording each step — until `until`.
/// A loss notice ends the holding at once (recorded before anything else is done about it).
pub async fn contend(
    name: String,
    lock: Arc<dyn DistributedLock>,
    key: String,
    store: Arc<FencedStore>,
    until: Instant,
    how: Contention,
) {
    contend_while(name, lock, key, store, move || Instant::now() < until, how).await
}

/// [`contend`] for as long as `going()` says, checked before each attempt: for a run that ends
/// on a state it waits for (a grant after a fault) rather than at a time.
pub async fn contend_while(
    name: String,
    lock: Arc<dyn DistributedLock>,
    key: String,
    store: Arc<FencedStore>,
    going: impl Fn() -> bool,
    how: Contention,
) {
    let history = store.history();
    while going() {
        history.attempt(&name);
        let options = AcquireOptions::new(how.lease).wait(how.wait);
        let guard = match tokio::time::timeout(how.patience, lock.acquire(&key, options)).await {
            Ok(Ok(guard)) => guard,
            Ok(Err(e)) => {
                history.failed(&name, e);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(_) => {
                history.failed(&name, format!("no answer within {:?}", how.patience));
                continue;
            }
        };
        let token = guard.fencing_token();
        history.grant(&name, token);
        let work = async {
            for _ in 0..how.writes {
                store.write(&name, token);
                tokio::time::sleep(how.pause).await;
            }
        };
        tokio::select! {
            () = work => history.release(&name, token),
            () = guard.lost() => history.lost(&name, token),
        }
        let _ = tokio::time::timeout(how.patience, guard.release()).await;
    }
}

/// What a recorded run says about availability around its first fault (a kill) and its second
/// (the restart, when there is one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outage {
    pub grants_before: usize,
    pub grants_after: usize,
    /// The longest time without a grant that overlaps the fault: between consecutive grants
    /// from the last one before the kill to the first one after the restart (`None`: no grant
    /// on one side). Not simply the time to the first grant after the kill: a grant the dying
    /// server committed can reach its client just after the kill, and the stall follows it.
    pub without_grant: Option<Duration>,
    /// From the kill to the grant that ended that stall, when it came before the restart
    /// (`None`: no grant after the stall until the restart).
    pub regained_while_down: Option<Duration>,
    pub loss_notices: usize,
    pub refused_writes: usize,
}

impl Outage {
    pub fn of(events: &[Event]) -> Outage {
        let mut faults = (events.iter().enumerate())
            .filter(|(_, e)| matches!(e.op, Op::Fault { .. }))
            .map(|(i, e)| (i, e.at));
        let (fault, killed_at) = faults.next().unwrap_or((events.len(), Duration::MAX));
        let restarted_at = faults.next().map(|(_, at)| at);
        let grant_at = |e: &Event| matches!(e.op, Op::Grant { .. }).then_some(e.at);
        let grants: Vec<Duration> = events.iter().filter_map(grant_at).collect();
        let before = events[..fault].iter().filter_map(grant_at).count();
        // The gaps between consecutive grants that overlap the time the fault lasted.
        let stall = (grants.windows(2))
            .map(|w| (w[0], w[1]))
            .filter(|&(from, to)| to > killed_at && restarted_at.is_none_or(|r| from < r))
            .max_by_key(|&(from, to)| to - from);
        Outage {
            grants_before: before,
            grants_after: grants.len() - before,
            without_grant: stall.map(|(from, to)| to - from),
            regained_while_down: stall
                .filter(|&(_, to)| restarted_at.is_none_or(|r| to < r))
                .map(|(_, to)| to - killed_at),
            loss_notices: events
                .iter()
                .filter(|e| matches!(e.op, Op::Lost { .. }))
                .count(),
            refused_writes: events
                .iter()
                .filter(|e| {
                    matches!(
                        e.op,
                        Op::Write {
                            accepted: false,
                            ..
                        }
                    )
                })
                .count(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outage_is_measured_from_the_last_grant_before_the_fault_to_the_first_after() {
        let h = History::new();
        h.grant("a", 1);
        h.release("a", 1);
        std::thread::sleep(Duration::from_millis(5));
        h.fault("nemesis", "kill");
        std::thread::sleep(Duration::from_millis(20));
        h.grant("b", 2);
        h.lost("b", 2);
        h.write("a", 1, false);
        let events = h.events();
        let o = Outage::of(&events);
        assert_eq!((o.grants_before, o.grants_after), (1, 1));
        assert_eq!((o.loss_notices, o.refused_writes), (1, 1));
        assert!(o.without_grant.unwrap() >= Duration::from_millis(25));
    }

    #[test]
    fn a_grant_answered_just_after_the_kill_does_not_hide_the_stall_that_follows() {
        // A grant the old leader committed before it died can reach its client just after the
        // kill; the election's stall comes after it.
        let h = History::new();
        h.grant("a", 1);
        h.release("a", 1);
        h.fault("nemesis", "kill the leader");
        std::thread::sleep(Duration::from_millis(1));
        h.grant("b", 2);
        h.release("b", 2);
        std::thread::sleep(Duration::from_millis(60));
        h.grant("c", 3);
        h.release("c", 3);
        std::thread::sleep(Duration::from_millis(5));
        h.fault("nemesis", "restart the leader");
        h.grant("d", 4);
        let o = Outage::of(&h.events());
        assert!(
            o.without_grant.unwrap() >= Duration::from_millis(60),
            "{o:?}"
        );
        assert!(
            o.regained_while_down.unwrap() >= Duration::from_millis(60),
            "{o:?}"
        );
    }

    #[test]
    fn no_grant_between_the_kill_and_the_restart_is_not_regained_while_down() {
        let h = History::new();
        h.grant("a", 1);
        h.fault("nemesis", "kill the leader");
        std::thread::sleep(Duration::from_millis(20));
        h.fault("nemesis", "restart the leader");
        h.grant("b", 2);
        let o = Outage::of(&h.events());
        assert_eq!(o.regained_while_down, None, "{o:?}");
        assert!(
            o.without_grant.unwrap() >= Duration::from_millis(20),
            "{o:?}"
        );
    }

    #[test]
    fn a_store_refuses_a_token_below_the_highest_it_accepted() {
        let store = FencedStore::new(Arc::new(History::new()));
        assert!(store.write("b", 2));
        assert!(!store.write("a", 1));
        assert!(store.write("b", 2));
    }
}
