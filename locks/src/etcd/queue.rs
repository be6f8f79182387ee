//! One acquisition's key in the revision-ordered queue, and the held key it becomes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{oneshot, watch};

use super::delete;
use super::lease::Lease;
use crate::{Guard, Held, LockError, new_owner_id};

/// A queued acquisition. Dropping it before [`Contender::into_guard`] or
/// [`Contender::withdraw`] deletes its key in the background, retrying until it is gone.
pub(super) struct Contender {
    client: Client,
    lock: String,
    prefix: String,
    owner: String,
    /// The create revision of our key: our place in the queue, and the fencing token.
    revision: i64,
    /// The flag of the lease our key hangs off: once it is set, the key is gone.
    lease_lost: watch::Receiver<bool>,
    requests: Arc<AtomicU64>,
    queued: bool,
}

impl Contender {
    /// Puts this acquisition's key under the lock's prefix, attached to `lease`.
    ///
    /// The put runs in a task of its own, which also cleans up after it: if this future is
    /// dropped before the answer, or the answer is an error (the put may have landed anyway),
    /// the key is deleted by name — *after* the put's outcome, never racing it. A delete sent
    /// while the put is still in flight could commit first and leave the put's key behind,
    /// renewed with the lease for as long as the client lives.
    pub(super) async fn enqueue(
        client: Client,
        lock: &str,
        lease: &Lease,
        requests: Arc<AtomicU64>,
    ) -> Result<Contender, LockError> {
        let contender = Contender {
            client,
            lock: lock.to_owned(),
            prefix: super::lock_prefix(lock),
            owner: new_owner_id(),
            revision: 0,
            lease_lost: lease.lost_flag(),
            requests,
            queued: false,
        };
        let (answer, answered) = oneshot::channel();
        tokio::spawn(contender.put(lease.id(), answer));
        answered.await.map_err(LockError::unavailable)?
    }

    /// Puts our key, then hands this contender over through `answer`. From then on, whoever
    /// holds the contender owns the key — and if nobody takes it (the acquire was dropped), it
    /// is dropped with the channel, which deletes the key.
    async fn put(mut self, lease: i64, answer: oneshot::Sender<Result<Contender, LockError>>) {
        self.count();
        let options = PutOptions::new().with_lease(lease);
        let put = self
            .client
            .put(self.key(), self.owner.as_str(), Some(options))
            .await
            .map_err(LockError::unavailable)
            .and_then(|put| {
                put.header().map(|h| h.revision()).ok_or_else(|| {
                    LockError::Unavailable("etcd answered a put without a revision".into())
                })
            });
        match put {
            Ok(revision) => {
                self.revision = revision;
                self.queued = true;
                let _ = answer.send(Ok(self));
            }
            Err(e) => {
                // Landed or not, nobody knows: delete by name.
                let doomed = self.doomed(None);
                let _ = answer.send(Err(e));
                let (client, lost, requests) = (
                    self.client.clone(),
                    self.lease_lost.clone(),
                    self.requests.clone(),
                );
                let gone = delete::until_gone(client, doomed, lost, requests).await;
                tracing::debug!(?gone, "cleaned up after a failed put");
            }
        }
    }

    /// Our key, and, once known, its create revision.
    fn doomed(&self, revision: Option<i64>) -> delete::Doomed {
        delete::Doomed {
            key: self.key(),
            revision,
        }
    }

    fn key(&self) -> String {
        format!("{}{}", self.prefix, self.owner)
    }

    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Ranges the queue: `None` if no key was created before ours (the lock is ours), else the
    /// predecessor's key and the revision the answer was read at.
    pub(super) async fn predecessor(&self) -> Result<Option<(Vec<u8>, i64)>, LockError> {
        let before_us = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(self.revision - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1);
        // Our own key in the same read: if the lease took it, there is no place to wait in.
        let read = Txn::new().and_then([
            TxnOp::get(self.key(), None),
            TxnOp::get(self.prefix.as_str(), Some(before_us)),
        ]);
        self.count();
        let answer = self
            .client
            .clone()
            .txn(read)
            .await
            .map_err(LockError::unavailable)?;
        let at = answer.header().map(|h| h.revision()).unwrap_or_default();
        let [TxnOpResponse::Get(own), TxnOpResponse::Get(before)] = &answer.op_responses()[..]
        else {
            return Err(LockError::Unavailable(
                "etcd answered a two-read transaction with something else".into(),
            ));
        };
        if own.kvs().is_empty() {
            return Err(LockError::Unavailable(
                format!(
                    "lock key {} vanished while queued (lease lost?)",
                    self.key()
                )
                .into(),
            ));
        }
        Ok(before.kvs().first().map(|kv| (kv.key().to_vec(), at)))
    }

    /// Watches `predecessor` from just after revision `at`; `true` once it was deleted, `false`
    /// if the watch ended without (cancelled by the server: look again).
    pub(super) async fn deleted(&self, predecessor: &[u8], at: i64) -> Result<bool, LockError> {
        self.count();
        let mut watch = self
            .client
            .clone()
            .watch(
                predecessor,
                Some(WatchOptions::new().with_start_revision(at + 1)),
            )
            .await
            .map_err(LockError::unavailable)?;
        while let Some(answer) = watch.message().await.map_err(LockError::unavailable)? {
            if answer
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                return Ok(true);
            }
            if answer.canceled() {
                return Ok(false);
            }
        }
        Ok(false)
    }

    /// Gives up: deletes our key, retrying until it is gone or the lease is (see `delete.rs`).
    /// The delete goes on if this future is dropped.
    pub(super) async fn withdraw(mut self) {
        self.queued = false;
        if let Err(e) = self.delete().await {
            tracing::warn!(error = %e, key = %self.key(), "withdrawn lock key may be left");
        }
    }

    fn delete(&self) -> tokio::task::JoinHandle<delete::Gone> {
        delete::delete(
            self.client.clone(),
            self.doomed(Some(self.revision)),
            self.lease_lost.clone(),
            self.requests.clone(),
        )
    }

    /// No key before ours: the lock is held, for as long as `lease` lives. Handed out only once
    /// the lease lasts `needed` from `since`, when the acquire began (the contract's promise),
    /// renewing first if it does not; dropping this future meanwhile withdraws.
    pub(super) async fn into_guard(
        mut self,
        lease: Arc<Lease>,
        since: Instant,
        needed: Duration,
    ) -> Result<Guard, LockError> {
        lease.lasts(since, needed).await?;
        self.queued = false;
        let held = HeldKey {
            client: self.client.clone(),
            key: self.key(),
            revision: self.revision,
            lease_lost: self.lease_lost.clone(),
            requests: self.requests.clone(),
        };
        Ok(Guard::new(
            self.lock.clone(),
            self.owner.clone(),
            u64::try_from(self.revision).unwrap_or_default(),
            lease.lost_flag(),
            Box::new(held),
        ))
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        if self.queued && tokio::runtime::Handle::try_current().is_ok() {
            drop(self.delete());
        }
    }
}

/// The key of a held lock. It does not hold the lease (a leaked guard must not keep it alive),
/// only its flag.
struct HeldKey {
    client: Client,
    key: String,
    revision: i64,
    lease_lost: watch::Receiver<bool>,
    requests: Arc<AtomicU64>,
}

impl Held for HeldKey {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        async move {
            // Delete only the key we created: after a lease expiry the same name cannot come
            // back (owner ids are per acquisition), but the check costs nothing extra. Retried
            // until it is gone, and on in the background if this future is dropped.
            let doomed = delete::Doomed {
                key: self.key,
                revision: Some(self.revision),
            };
            let deleting = delete::delete(self.client, doomed, self.lease_lost, self.requests);
            Ok(deleting.await.map_err(LockError::unavailable)? == delete::Gone::Deleted)
        }
        .boxed()
    }
}
