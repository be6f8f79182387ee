//! One acquisition's key in the revision-ordered queue, and the held key it becomes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, WatchOptions,
};
use futures::FutureExt;
use futures::future::BoxFuture;

use super::lease::Lease;
use crate::{Guard, Held, LockError, new_owner_id};

/// A queued acquisition. Dropping it before [`Contender::into_guard`] or
/// [`Contender::withdraw`] deletes its key in the background.
pub(super) struct Contender {
    client: Client,
    lock: String,
    prefix: String,
    owner: String,
    /// The create revision of our key: our place in the queue, and the fencing token.
    revision: i64,
    requests: Arc<AtomicU64>,
    queued: bool,
}

impl Contender {
    /// Puts this acquisition's key under the lock's prefix, attached to `lease`.
    pub(super) async fn enqueue(
        client: Client,
        lock: &str,
        lease: &Lease,
        requests: Arc<AtomicU64>,
    ) -> Result<Contender, LockError> {
        let owner = new_owner_id();
        // Queued (so dropped = deleted) before the put: a put whose reply is lost is cleaned
        // up by name.
        let mut contender = Contender {
            client,
            lock: lock.to_owned(),
            prefix: super::lock_prefix(lock),
            owner,
            revision: 0,
            requests,
            queued: true,
        };
        contender.count();
        let put = contender
            .client
            .put(
                contender.key(),
                contender.owner.as_str(),
                Some(PutOptions::new().with_lease(lease.id())),
            )
            .await
            .map_err(LockError::unavailable)?;
        contender.revision = put.header().map(|h| h.revision()).ok_or_else(|| {
            LockError::Unavailable("etcd answered a put without a revision".into())
        })?;
        Ok(contender)
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

    /// Gives up: deletes our key and waits for the answer. After an error the key holds its
    /// place in the queue until this client's lease ends.
    pub(super) async fn withdraw(mut self) {
        self.queued = false;
        self.count();
        if let Err(e) = self.client.delete(self.key(), None).await {
            tracing::debug!(error = %e, key = %self.key(), "withdrawing a lock key failed");
        }
    }

    /// No key before ours: the lock is held, for as long as `lease` lives.
    pub(super) fn into_guard(mut self, lease: Arc<Lease>) -> Result<Guard, LockError> {
        if lease.is_lost() {
            return Err(LockError::Unavailable(
                "the etcd lease ran out just as the lock was granted".into(),
            ));
        }
        self.queued = false;
        let held = HeldKey {
            client: self.client.clone(),
            key: self.key(),
            revision: self.revision,
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
        if self.queued
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            self.count();
            let (mut client, key) = (self.client.clone(), self.key());
            runtime.spawn(async move {
                if let Err(e) = client.delete(key.as_str(), None).await {
                    tracing::debug!(error = %e, %key, "deleting a dropped contender's key failed");
                }
            });
        }
    }
}

/// The key of a held lock. It does not hold the lease: a leaked guard must not keep it alive.
struct HeldKey {
    client: Client,
    key: String,
    revision: i64,
    requests: Arc<AtomicU64>,
}

impl Held for HeldKey {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        async move {
            // Delete only the key we created: after a lease expiry the same name cannot come
            // back (owner ids are per acquisition), but the check costs nothing extra.
            let ours = Compare::create_revision(self.key.as_str(), CompareOp::Equal, self.revision);
            let release = Txn::new()
                .when([ours])
                .and_then([TxnOp::delete(self.key.as_str(), None)]);
            self.requests.fetch_add(1, Ordering::Relaxed);
            let answer = self
                .client
                .clone()
                .txn(release)
                .await
                .map_err(LockError::unavailable)?;
            Ok(answer.succeeded())
        }
        .boxed()
    }
}
