//! A granted lock node: its release, and the watch that tells the guard it is gone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::watch;
use zookeeper_client::{Client, Error, EventType, OneshotWatcher, SessionState, WatchedEvent};

use super::delete::{self, Gone};
use super::successors::Successors;

use crate::{Held, LockError};

/// The watch on a contender's own node, set as soon as the node exists: its first event is the
/// node's deletion or the session's end (nobody changes a lock node's data).
pub(super) type OwnWatch = BoxFuture<'static, WatchedEvent>;

/// Pause before re-arming the watch after a transient error.
const REWATCH_PAUSE: Duration = Duration::from_millis(100);

/// The node of a held lock. It keeps only a weak handle on the session: a guard must not keep
/// a session alive after its [`super::ZooKeeperLock`] is gone (a leaked guard would otherwise
/// hold the lock forever).
pub(super) struct HeldNode {
    client: Weak<Client>,
    path: String,
    requests: Arc<AtomicU64>,
    /// The client's waiters, the one behind this node among them if it is this client's.
    successors: Arc<Successors>,
}

impl HeldNode {
    /// Starts the task that turns the granted node's deletion (or the session's end), as `own`
    /// (the watch set on the node while it queued) reports it, into the guard's `lost` flag.
    /// Fails if `own` has fired already: the node went while it queued.
    ///
    /// When the server's answer made us first (our predecessor's deletion, or the listing),
    /// that check is exact: the session delivers events in the server's order, so an event
    /// about our node that came before has been handed to `own` by now. When a release of this
    /// client did (`successors.rs`), it is as of the last event the session delivered; a
    /// deletion of our node behind our back that is still on its way fires `lost()` right after
    /// the grant, as a deletion after the grant would.
    pub(super) fn start(
        client: &Arc<Client>,
        path: String,
        requests: Arc<AtomicU64>,
        successors: Arc<Successors>,
        mut own: OwnWatch,
    ) -> Result<(HeldNode, watch::Receiver<bool>), LockError> {
        if let Some(event) = (&mut own).now_or_never() {
            return Err(LockError::Unavailable(
                format!("lock node {path} went while it queued ({event:?})").into(),
            ));
        }
        let (lost_tx, lost_rx) = watch::channel(false);
        let held = HeldNode {
            client: Arc::downgrade(client),
            path,
            requests,
            successors,
        };
        tokio::spawn(held.monitor(own, lost_tx));
        Ok((held, lost_rx))
    }

    /// A copy of what the monitor task needs.
    fn monitor(
        &self,
        mut watcher: OwnWatch,
        lost: watch::Sender<bool>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let client = self.client.clone();
        let path = self.path.clone();
        let requests = self.requests.clone();
        async move {
            loop {
                let event = tokio::select! {
                    event = &mut watcher => event,
                    // The guard is gone: nobody is left to tell.
                    () = lost.closed() => return,
                };
                let gone = match event.event_type {
                    EventType::NodeDeleted => true,
                    EventType::Session => event.session_state.is_terminated(),
                    _ => false,
                };
                if gone {
                    break;
                }
                // Anything else (a data change nobody should make) fired the one-shot watch:
                // set it again.
                match rewatch(&client, &path, &requests).await {
                    Some(next) => watcher = next.changed().boxed(),
                    None => break,
                }
            }
            tracing::debug!(%path, "lock node gone: the lock is lost");
            let _ = lost.send(true);
        }
    }
}

/// Watches `path` again; `None` once the node, the session or the lock client is gone.
async fn rewatch(
    client: &Weak<Client>,
    path: &str,
    requests: &AtomicU64,
) -> Option<OneshotWatcher> {
    loop {
        let client = client.upgrade()?;
        requests.fetch_add(1, Ordering::Relaxed);
        match client.check_and_watch_stat(path).await {
            Ok((Some(_), watcher)) => return Some(watcher),
            Ok((None, _)) => return None,
            Err(Error::SessionExpired | Error::ClientClosed) => return None,
            Err(_) if client.state().is_terminated() => return None,
            // Connection loss: in doubt, not lost. Try again once reconnected.
            Err(_) => tokio::time::sleep(REWATCH_PAUSE).await,
        }
    }
}

impl Held for HeldNode {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        async move {
            let Some(client) = self.client.upgrade() else {
                return Err(LockError::Unavailable(
                    "the ZooKeeperLock was dropped: the lock ends with its session".into(),
                ));
            };
            // The node's name carries this acquisition's id: deleting it can never remove
            // another holder's lock. Retried until the node or the session is gone, and on in
            // the background if this future is dropped (see `delete.rs`).
            let deleting = delete::delete(&client, self.path.clone(), self.requests.clone());
            // The delete is queued on the session: the waiter behind, if it is this client's,
            // may go on now (`successors.rs`) — if the session is connected, so that the server
            // cannot have expired it: a session cut off leaves the waiter to the server's word.
            if client.state() == SessionState::SyncConnected {
                self.successors.released(&self.path);
            }
            drop(client);
            match deleting.await.map_err(LockError::unavailable)? {
                Gone::Deleted => Ok(true),
                Gone::Missing | Gone::WithSession => Ok(false),
                Gone::Refused(e) => Err(LockError::unavailable(e)),
            }
        }
        .boxed()
    }
}
