//! ZooKeeper lock: Curator's `InterProcessMutex` recipe, written out by hand.
//!
//! # The recipe
//! 1. Each acquisition creates an `EPHEMERAL_SEQUENTIAL` node
//!    `/locks/<key>/_c_<owner>-lock-<seq>`. ZooKeeper appends `<seq>`, a counter of the parent,
//!    so the children of `/locks/<key>` form a queue in creation order. The node is ephemeral:
//!    it lives exactly as long as the creating *session*, so a dead holder's place in the queue
//!    disappears without anyone deleting it.
//! 2. List the children and sort them by sequence. The lowest holds the lock. (The watch the
//!    guard needs on its own node, see "Loss" below, is set in the same round trip: both
//!    requests are sent at once.)
//! 3. Any other contender sets a watch on its **immediate predecessor only**. When that node is
//!    deleted, the contender is first if the predecessor was first in its listing or held the
//!    lock (a grant this client made, which it remembers: `granted.rs`) — and when the
//!    predecessor is a lock of the same client, its release tells the contender so at once,
//!    without waiting for the delete to reach the server (`successors.rs`); otherwise the
//!    predecessor gave up rather than being granted, and the contender re-lists, since a node
//!    further up may still hold. Releasing the lock wakes exactly one waiter: no herd of N
//!    clients re-listing on every release, and no polling — a waiter sends nothing while it
//!    waits ([`ZooKeeperLock::backend_requests`] stays flat, which the tests check).
//! 4. **Protection.** `<owner>` is a random id per acquisition. When the reply to the create is
//!    lost (connection loss after the server applied it), the client lists the children and
//!    finds its own node by that id instead of creating a second one and leaving the first as
//!    an orphan that would hold the queue until the session ends.
//! 5. A contender that runs out of wait budget deletes its own node; so does a dropped
//!    `acquire` future (the delete is sent from `Drop`: this client queues requests
//!    synchronously, so no runtime is needed to send it). Dropped while its create is still
//!    unanswered, it does not know its node's name yet: a background task finds the node by
//!    its id, as in 4, and deletes it. That search is queued on the session after the create,
//!    and ZooKeeper answers one session's requests in order, so it sees the create's outcome.
//! 6. Every delete — release, withdrawal, cleanup — is retried until the server answers it or
//!    the session is known to have ended (`delete.rs`). The session survives a broken
//!    connection (the client reconnects within the session timeout), so a delete lost with
//!    the connection and not retried would leave a node that blocks the lock for as long as
//!    the process lives.
//!
//! `/locks/<key>` is a *container* node: the server removes it some time after its last child
//! goes, so lock names do not pile up. That is also why the sequence number is **not** the
//! fencing token: a recreated parent counts from 0 again.
//!
//! # Why it is safe, and where it stops being
//! A grant is a create committed by ZooKeeper's consensus (ZAB) on a quorum before the reply:
//! no failover can forget it, unlike a Redis primary that dies before replicating. The queue
//! gives FIFO fairness, and ephemeral nodes free a crashed holder's lock without a lease clock
//! in the client. What it cannot prevent is a holder that *thinks* it holds after its session
//! ended: a process stalled (GC, swap, SIGSTOP) or cut off for longer than the session timeout
//! has its session expired by the server, which deletes its node and wakes the next waiter,
//! while the old holder learns of it only when it runs or reconnects again. The
//! partitioned-holder test shows exactly that: the waiter is granted, and only then does the
//! old guard's `lost()` fire. Writes to the protected resource must carry the fencing token.
//!
//! # Fencing token: the node's `czxid`
//! Every ZooKeeper write gets a zxid, unique and increasing across the whole ensemble (epoch in
//! the high 32 bits, counter in the low). Within one parent, sequence order *is* creation order,
//! so the holder order is czxid order; and a parent recreated later only gets children with
//! larger zxids. So the czxid of the granted node strictly increases per lock name — across
//! container removal, session expiry and leader changes alike.
//!
//! # What a hand-off costs
//! A grant that waited costs five requests: the create, the own-node watch and the listing
//! (one round trip), the predecessor watch, and the release's delete. Between a release and the
//! next grant lies, across clients, the delete's commit (a write to the quorum's logs) and its
//! notification to the one waiter, plus one listing unless the released node was first in the
//! waiter's listing. Within one client (workers sharing one [`ZooKeeperLock`]) nothing: the
//! release queues the delete and tells the waiter behind, which goes on at once, while the
//! delete and the next create commit in the background. Curator's and kazoo's recipe re-lists
//! after every wake-up, and the guard's watch used to cost one more round trip after that: the
//! commit plus two round trips per hand-off, six requests per grant. (Dropping a watch that has
//! not fired, as a waiter handed the lock drops its watch on the predecessor, makes the client
//! library send the server a remove-watches request; it is not counted.)
//!
//! # Contract notes
//! * **Lease.** [`AcquireOptions::lease`](crate::AcquireOptions) has no meaning here: a holder
//!   keeps the lock exactly as long as its session lives, and the session timeout given to
//!   [`ZooKeeperLock::connect`] plays the lease's role. A holder process that stalls longer
//!   than that loses its session, its node, and the lock — hence the fencing token.
//! * **Loss.** Each guard watches its own node, set while it queued. `lost()` fires when that node
//!   is deleted or the session reports `Expired`/`Closed`. `Disconnected` is *in doubt*, not
//!   lost: the client reconnects and, if the session survived, the lock was held throughout.
//!   The server may expire a partitioned session before the client can learn it (it learns on
//!   reconnect, or when its own session clock runs out), which is the window fencing covers.
//! * **Requests** counted: creates, lists, exists-watches, deletes, connects. Session pings
//!   are sent by the client library per session, independently of how many locks it holds or
//!   waits for, and are not counted.
//! * **Dropping the [`ZooKeeperLock`]** abandons its session without closing it, as a crash
//!   would: the nodes of guards still alive (or leaked) go when the server expires the
//!   session, one session timeout later. Guards hold only a weak handle on the session for
//!   that reason. Released guards delete their node at once (retrying while the session lives).
//! * After a session expired, the next `acquire` opens a new one.
//! * **Wait budget.** An `acquire` gives up at the end of its budget plus one attempt's grace
//!   ([`AcquireOptions::give_up_at`]), even when the server does not answer (the client
//!   library itself waits 2/5 of the session timeout before it calls a silent connection
//!   lost); its node is then cleaned up as for a dropped `acquire` (5 and 6 above).

mod contender;
mod delete;
mod granted;
mod held;
mod path;
mod successors;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use zookeeper_client::{Client, EventType};

use crate::options::budgeted;
use crate::{AcquireOptions, Acquiring, DistributedLock, Guard, LockError};
use contender::{Contender, Place};
use granted::Granted;
use successors::Successors;

pub use path::{LOCK_ROOT, lock_dir};

/// A ZooKeeper lock service over one session (renewed after expiry).
pub struct ZooKeeperLock {
    connect_string: String,
    session_timeout: Duration,
    session: tokio::sync::Mutex<Arc<Client>>,
    requests: Arc<AtomicU64>,
    granted: Arc<Granted>,
    successors: Arc<Successors>,
}

impl ZooKeeperLock {
    /// Opens a session to `connect_string` (`host:port[,host:port…]`) with `session_timeout`,
    /// which the server may clamp to its own bounds.
    pub async fn connect(
        connect_string: &str,
        session_timeout: Duration,
    ) -> Result<ZooKeeperLock, LockError> {
        let requests = Arc::new(AtomicU64::new(0));
        let client = open_session(connect_string, session_timeout, &requests).await?;
        Ok(ZooKeeperLock {
            connect_string: connect_string.to_owned(),
            session_timeout,
            session: tokio::sync::Mutex::new(Arc::new(client)),
            requests,
            granted: Arc::default(),
            successors: Arc::default(),
        })
    }

    /// The current session; a new one if the last expired or closed.
    async fn client(&self) -> Result<Arc<Client>, LockError> {
        let mut session = self.session.lock().await;
        if session.state().is_terminated() {
            *session = Arc::new(
                open_session(&self.connect_string, self.session_timeout, &self.requests).await?,
            );
        }
        Ok(Arc::clone(&session))
    }

    async fn acquire_inner(&self, key: &str, options: AcquireOptions) -> Result<Guard, LockError> {
        let started = Instant::now();
        let deadline = options.wait.map(|wait| started + wait);
        let client = self.client().await?;
        let requests = self.requests.clone();
        let (granted, successors) = (self.granted.clone(), self.successors.clone());
        let contender = Contender::enqueue(client, key, requests, granted, successors).await?;
        let (mut place, own) = contender.watch_self_and_place().await?;
        loop {
            let (predecessor, was_first) = match place {
                Place::First => return contender.into_guard(own),
                Place::Behind { predecessor, first } => (predecessor, first),
            };
            let timed_out = || LockError::waited_since(key, started);
            let Some(deadline) = deadline.filter(|d| Instant::now() < *d) else {
                contender.withdraw().await;
                return Err(timed_out());
            };
            // Registered before the watch is set: a release through this client between the two
            // is then heard one way or the other.
            let mut handed = self.successors.register(contender.path_of(&predecessor));
            let woken = match contender.watch(&predecessor).await? {
                // Gone between the list and the watch.
                None => Woken::Deleted,
                Some(watcher) => tokio::select! {
                    event = watcher.changed() => match event.event_type {
                        EventType::NodeDeleted => Woken::Deleted,
                        _ => Woken::Other,
                    },
                    () = handed.released() => Woken::Released,
                    () = tokio::time::sleep_until(deadline.into()) => {
                        drop(handed);
                        contender.withdraw().await;
                        return Err(timed_out());
                    }
                },
            };
            drop(handed);
            // Released by its holder through this client (`successors.rs`), or deleted after it
            // was first or held the lock (`granted.rs`): first. Otherwise (it gave up) re-list,
            // since a node further up may still hold. Any other event (data change, session
            // end) re-lists too, and a dead session then fails the list.
            place = match woken {
                Woken::Released => Place::First,
                Woken::Deleted if contender.first_after(&predecessor, was_first) => Place::First,
                Woken::Deleted | Woken::Other => contender.place_again().await?,
            };
        }
    }
}

/// What ended a contender's wait on its predecessor.
enum Woken {
    /// Its holder released it through this client.
    Released,
    Deleted,
    /// Any other event of the watch.
    Other,
}

async fn open_session(
    connect_string: &str,
    session_timeout: Duration,
    requests: &AtomicU64,
) -> Result<Client, LockError> {
    requests.fetch_add(1, Ordering::Relaxed);
    Client::connector()
        .with_session_timeout(session_timeout)
        // Dropping the last handle abandons the session instead of closing it, as a crash
        // would: its nodes stay until the session times out (see "Contract notes").
        .with_detached()
        .connect(connect_string)
        .await
        .map_err(LockError::unavailable)
}

impl DistributedLock for ZooKeeperLock {
    fn backend(&self) -> &'static str {
        "zookeeper"
    }

    fn acquire<'a>(&'a self, key: &'a str, options: AcquireOptions) -> Acquiring<'a> {
        budgeted(key, options, self.acquire_inner(key, options))
    }

    fn backend_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}
