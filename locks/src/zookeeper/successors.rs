//! Hand-off within one client: a release tells the client's own waiter behind the released node
//! that it is the owner, before the node's delete has even reached the server.
//!
//! Why that is safe: a held node has nothing before it (that is what granted it), and its
//! immediate successor waits for nothing but it. Once its holder calls release, the holder no
//! longer uses the lock, so the successor may — whether the server has deleted the node yet or
//! not: every other contender is behind the successor and waits for it in turn. The successor's
//! fencing token (its node's czxid) is larger than the released one's, as the queue order is
//! creation order. The delete goes on as before (queued on the session before the successor is
//! told, so the session's deletes reach the server in grant order); a contender of another
//! client behind them lists the queue after it is woken and waits for any node still there.
//! A release hands off this way only while the session is connected: the client then heard from
//! the server within a fraction of the session timeout, so the server has not expired the
//! session (and deleted the waiter's node with it); otherwise the waiter waits for the server.
//!
//! A waiter registers here as its predecessor's successor before it sets its watch, and leaves
//! when it stops waiting on that node (woken, out of budget, dropped): a release that finds no
//! one registered does nothing more, and the waiter learns of the release from the node's
//! deletion, as it would from another client's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// This client's waiters, by the path of the node each one waits behind.
#[derive(Debug, Default)]
pub(super) struct Successors {
    waiting: Mutex<HashMap<String, (u64, oneshot::Sender<()>)>>,
    next_id: AtomicU64,
}

/// A waiter's registration; dropping it leaves.
pub(super) struct Registration {
    successors: Arc<Successors>,
    predecessor: String,
    id: u64,
    released: oneshot::Receiver<()>,
}

impl Successors {
    /// Registers a waiter behind the node at `predecessor`.
    pub(super) fn register(self: &Arc<Self>, predecessor: String) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, released) = oneshot::channel();
        self.lock().insert(predecessor.clone(), (id, tx));
        Registration {
            successors: Arc::clone(self),
            predecessor,
            id,
            released,
        }
    }

    /// The holder of the node at `path` releases it: tells the waiter behind it, if it is this
    /// client's.
    pub(super) fn released(&self, path: &str) {
        if let Some((_, tx)) = self.lock().remove(path) {
            let _ = tx.send(());
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, (u64, oneshot::Sender<()>)>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Registration {
    /// Resolves when the predecessor's holder releases it through this client; pending forever
    /// otherwise.
    pub(super) async fn released(&mut self) {
        if (&mut self.released).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut waiting = self.successors.lock();
        if waiting
            .get(&self.predecessor)
            .is_some_and(|(id, _)| *id == self.id)
        {
            waiting.remove(&self.predecessor);
        }
    }
}
