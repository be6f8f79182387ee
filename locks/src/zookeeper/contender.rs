//! One acquisition's node in the queue, from creation to grant or withdrawal.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use zookeeper_client::{Acls, Client, CreateMode, Error, OneshotWatcher};

use super::delete::{self, Gone, is_session_end};
use super::granted::Granted;
use super::held::{HeldNode, OwnWatch};
use super::path::{self, LOCK_ROOT};
use super::successors::Successors;
use crate::{Guard, LockError, new_owner_id};

/// Where a contender's node stands in the queue.
pub(super) enum Place {
    /// First: it holds the lock.
    First,
    /// Right behind `predecessor`; `first`: nothing was before that one in the listing.
    Behind { predecessor: String, first: bool },
}

/// How often a create is retried after connection loss or a vanished lock directory.
const CREATE_ATTEMPTS: usize = 5;

/// A queued acquisition. Dropping it before [`Contender::into_guard`] or
/// [`Contender::withdraw`] deletes its node (the request is queued on the session at once, and
/// retried in the background until the node is gone).
pub(super) struct Contender {
    client: Arc<Client>,
    key: String,
    owner: String,
    dir: String,
    name: String,
    czxid: i64,
    requests: Arc<AtomicU64>,
    granted: Arc<Granted>,
    successors: Arc<Successors>,
    queued: bool,
}

impl Contender {
    /// Creates this acquisition's sequential node under the lock's directory; `granted` is the
    /// client's memory of its grants (`granted.rs`), `successors` its waiters that a release
    /// hands the lock to (`successors.rs`).
    pub(super) async fn enqueue(
        client: Arc<Client>,
        key: &str,
        requests: Arc<AtomicU64>,
        granted: Arc<Granted>,
        successors: Arc<Successors>,
    ) -> Result<Contender, LockError> {
        let owner = new_owner_id();
        let dir = path::lock_dir(key);
        let prefix = path::node_prefix(&dir, &owner);
        let node = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let count = || requests.fetch_add(1, Ordering::Relaxed);
        // Until we know our node's name, only the owner id can find it: if this future is
        // dropped (or fails) with a create in flight, look the node up and delete it.
        let mut unplaced = Unplaced {
            client: Arc::clone(&client),
            dir: dir.clone(),
            owner: owner.clone(),
            requests: Arc::clone(&requests),
            armed: true,
        };
        let mut last_error = None;
        for _ in 0..CREATE_ATTEMPTS {
            count();
            let error = match client.create(&prefix, &[], &node).await {
                Ok((stat, sequence)) => {
                    unplaced.armed = false;
                    let name = format!("{}{sequence}", &prefix[dir.len() + 1..]);
                    let node = Node {
                        owner,
                        dir,
                        name,
                        czxid: stat.czxid,
                    };
                    return Ok(Contender::queued(
                        client, key, node, requests, granted, successors,
                    ));
                }
                Err(e) => e,
            };
            match error {
                // First use of this name, or its container was just reaped: make the path.
                Error::NoNode => ensure_dir(&client, &dir, &requests).await?,
                // The create may have been applied with its reply lost: look for our node
                // before creating another one (the "protection" of the recipe).
                Error::ConnectionLoss => {
                    let found = find_own(&client, &dir, &owner, &requests, Some(CREATE_ATTEMPTS));
                    if let Some((name, czxid)) = found.await.map_err(LockError::unavailable)? {
                        unplaced.armed = false;
                        let node = Node {
                            owner,
                            dir,
                            name,
                            czxid,
                        };
                        return Ok(Contender::queued(
                            client, key, node, requests, granted, successors,
                        ));
                    }
                }
                e => return Err(LockError::unavailable(e)),
            }
            last_error = Some(error);
        }
        Err(LockError::unavailable(last_error.unwrap_or(Error::NoNode)))
    }

    fn queued(
        client: Arc<Client>,
        key: &str,
        node: Node,
        requests: Arc<AtomicU64>,
        granted: Arc<Granted>,
        successors: Arc<Successors>,
    ) -> Contender {
        Contender {
            client,
            key: key.to_owned(),
            owner: node.owner,
            dir: node.dir,
            name: node.name,
            czxid: node.czxid,
            requests,
            granted,
            successors,
            queued: true,
        }
    }

    fn path(&self) -> String {
        self.path_of(&self.name)
    }

    /// The path of the node `name` in this lock's queue.
    pub(super) fn path_of(&self, name: &str) -> String {
        format!("{}/{name}", self.dir)
    }

    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Watches this node (for the guard, which must learn when it goes) and lists the queue, in
    /// one round trip: both requests are queued on the session at once, and it answers them in
    /// order.
    pub(super) async fn watch_self_and_place(&self) -> Result<(Place, OwnWatch), LockError> {
        self.count();
        self.count();
        let path = self.path();
        let (own, children) = tokio::join!(
            self.client.check_and_watch_stat(&path),
            self.client.list_children(&self.dir)
        );
        let (stat, watcher) = own.map_err(LockError::unavailable)?;
        if stat.is_none() {
            return Err(self.vanished());
        }
        let place = self.place(children.map_err(LockError::unavailable)?)?;
        Ok((place, watcher.changed().boxed()))
    }

    /// Lists the queue again.
    pub(super) async fn place_again(&self) -> Result<Place, LockError> {
        self.count();
        let children = self
            .client
            .list_children(&self.dir)
            .await
            .map_err(LockError::unavailable)?;
        self.place(children)
    }

    fn place(&self, children: Vec<String>) -> Result<Place, LockError> {
        let queue = path::queue(children);
        match queue.iter().position(|name| *name == self.name) {
            Some(0) => Ok(Place::First),
            Some(i) => Ok(Place::Behind {
                predecessor: queue[i - 1].clone(),
                first: i == 1,
            }),
            None => Err(self.vanished()),
        }
    }

    fn vanished(&self) -> LockError {
        LockError::Unavailable(
            format!(
                "lock node {} vanished while queued (session expired?)",
                self.path()
            )
            .into(),
        )
    }

    /// Whether this node is first now that `predecessor` is gone, without listing again: it was
    /// first in the listing (`was_first`), or this client granted it the lock (`granted.rs`).
    pub(super) fn first_after(&self, predecessor: &str, was_first: bool) -> bool {
        was_first || self.granted.contains(&self.path_of(predecessor))
    }

    /// Watches `predecessor`'s deletion; `None` if it is already gone.
    pub(super) async fn watch(
        &self,
        predecessor: &str,
    ) -> Result<Option<OneshotWatcher>, LockError> {
        self.count();
        let (stat, watcher) = self
            .client
            .check_and_watch_stat(&format!("{}/{predecessor}", self.dir))
            .await
            .map_err(LockError::unavailable)?;
        Ok(stat.map(|_| watcher))
    }

    /// Gives up: deletes this node, retrying until it is gone or the session ended (see
    /// `delete.rs`). The delete goes on if this future is dropped.
    pub(super) async fn withdraw(mut self) {
        self.queued = false;
        let deleting = delete::delete(&self.client, self.path(), self.requests.clone());
        if let Ok(Gone::Refused(_)) | Err(_) = deleting.await {
            tracing::warn!(path = %self.path(), "a withdrawn lock node may be left behind");
        }
    }

    /// The node is first in the queue: the lock is held. `own` (from
    /// [`Contender::watch_self_and_place`]) tells the guard when the node goes.
    pub(super) fn into_guard(mut self, own: OwnWatch) -> Result<Guard, LockError> {
        // On error the lock is not handed out, and dropping `self` deletes the node.
        let successors = Arc::clone(&self.successors);
        let (held, lost) = HeldNode::start(
            &self.client,
            self.path(),
            self.requests.clone(),
            successors,
            own,
        )?;
        self.granted.add(self.path());
        self.queued = false;
        Ok(Guard::new(
            self.key.clone(),
            self.owner.clone(),
            u64::try_from(self.czxid).unwrap_or_default(),
            lost,
            Box::new(held),
        ))
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        if !self.queued {
            return;
        }
        // The first request is queued on the session now, in order with everything this
        // acquisition sent before; the retries, if any, need a runtime.
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(delete::delete(
                &self.client,
                self.path(),
                self.requests.clone(),
            ));
        } else {
            delete::delete_once(&self.client, &self.path(), &self.requests);
        }
    }
}

/// A contender's node, once created.
struct Node {
    owner: String,
    dir: String,
    name: String,
    czxid: i64,
}

/// An acquisition whose create may be in flight: on drop, finds its node by owner id and
/// deletes it, in the background (if a runtime is there to run it). The search is queued on the
/// session after the create, and ZooKeeper answers a session's requests in order, so it sees
/// the create's outcome: the delete can never come before the node it is meant for.
struct Unplaced {
    client: Arc<Client>,
    dir: String,
    owner: String,
    requests: Arc<AtomicU64>,
    armed: bool,
}

impl Drop for Unplaced {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.armed {
            return;
        }
        let (client, dir, owner) = (self.client.clone(), self.dir.clone(), self.owner.clone());
        let requests = self.requests.clone();
        runtime.spawn(async move {
            match find_own(&client, &dir, &owner, &requests, None).await {
                Ok(Some((name, _))) => {
                    let _ = delete::delete(&client, format!("{dir}/{name}"), requests).await;
                }
                Ok(None) => {}
                // The session ended, and with it any node it had created.
                Err(e) => tracing::debug!(error = %e, %dir, "no node to clean up"),
            }
        });
    }
}

/// Creates `/locks` (persistent) and `dir` (a container the server reaps once empty).
async fn ensure_dir(client: &Client, dir: &str, requests: &AtomicU64) -> Result<(), LockError> {
    let parents = [
        (LOCK_ROOT, CreateMode::Persistent),
        (dir, CreateMode::Container),
    ];
    for (path, mode) in parents {
        requests.fetch_add(1, Ordering::Relaxed);
        match client
            .create(path, &[], &mode.with_acls(Acls::anyone_all()))
            .await
        {
            Ok(_) | Err(Error::NodeExists) => {}
            Err(e) => return Err(LockError::unavailable(e)),
        }
    }
    Ok(())
}

/// Pause before looking for our node again while the session reconnects; it grows with each
/// attempt, up to [`MAX_RECONNECT_PAUSE`].
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// Finds the node `owner` created, with its czxid, if the create was applied. A listing that
/// fails with the connection is retried up to `attempts` times (`None`: until the session is
/// known to have ended, which is then the error): giving up while the node may exist would
/// orphan it.
async fn find_own(
    client: &Client,
    dir: &str,
    owner: &str,
    requests: &AtomicU64,
    attempts: Option<usize>,
) -> Result<Option<(String, i64)>, Error> {
    let mut attempt = 0;
    loop {
        match find_once(client, dir, owner, requests).await {
            Err(Error::NoNode) => return Ok(None),
            Err(e) if is_session_end(&e) || client.state().is_terminated() => return Err(e),
            Err(e) if attempts.is_none_or(|limit| attempt < limit) => {
                tracing::debug!(error = %e, %dir, "looking for our lock node failed; retrying");
                attempt += 1;
                let pause = RECONNECT_PAUSE * u32::try_from(attempt).unwrap_or(u32::MAX);
                tokio::time::sleep(pause.min(MAX_RECONNECT_PAUSE)).await;
            }
            found => return found,
        }
    }
}

async fn find_once(
    client: &Client,
    dir: &str,
    owner: &str,
    requests: &AtomicU64,
) -> Result<Option<(String, i64)>, Error> {
    requests.fetch_add(1, Ordering::Relaxed);
    let children = client.list_children(dir).await?;
    let Some(name) = children.into_iter().find(|n| path::is_owned_by(n, owner)) else {
        return Ok(None);
    };
    requests.fetch_add(1, Ordering::Relaxed);
    Ok(client
        .check_stat(&format!("{dir}/{name}"))
        .await?
        .map(|stat| (name, stat.czxid)))
}
