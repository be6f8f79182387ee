//! Deleting a contender's key until it is gone.
//!
//! A delete can fail with the connection (applied or not, nobody knows), and the lease the key
//! hangs off outlives that: the client reconnects and renews it for as long as the
//! [`super::EtcdLock`] lives. A key whose delete was given up would hold its place in the queue
//! all that time, and every later contender would wait behind it. So a delete is retried, with a
//! backoff capped at [`MAX_PAUSE`], until etcd answers it or the lease is known to be gone
//! (which takes the key with it).
//!
//! Each attempt is bounded by [`super::ATTEMPT`]: a delete sent to a follower while the leader has just
//! died is forwarded to the dead leader and answered only by etcd's own request timeout (7 s
//! with the default election timeout) — every waiter behind the key would wait that long,
//! although the surviving majority elects a new leader in about a second. An abandoned attempt
//! is "in doubt", like one lost with the connection: the next one finds the key gone or deletes
//! it (only the key we created: the compare on its create revision).
//!
//! The retries run in a task of their own: a caller that stops waiting for its release or
//! withdrawal (or is dropped) does not stop the delete.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{ATTEMPT, timed_out};

/// Pause before the first retry; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// How a delete ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gone {
    /// This delete removed the key (an attempt whose answer was lost counts: key names are per
    /// acquisition, so only our delete, someone else's, or the lease could have removed it).
    Deleted,
    /// The key was not there (or no longer the one we created).
    Missing,
    /// The lease is known to be gone, and the key with it.
    WithLease,
}

/// What to delete: `key`, and, when known, only while its create revision is `revision` (the
/// key we created, not a later one of the same name).
pub(super) struct Doomed {
    pub(super) key: String,
    pub(super) revision: Option<i64>,
}

/// Deletes `doomed` until it is gone; see the module docs. `lease_lost` is the flag of the lease
/// the key hangs off.
pub(super) fn delete(
    client: Client,
    doomed: Doomed,
    lease_lost: watch::Receiver<bool>,
    requests: Arc<AtomicU64>,
) -> JoinHandle<Gone> {
    tokio::spawn(until_gone(client, doomed, lease_lost, requests))
}

/// [`delete`], in the calling task.
pub(super) async fn until_gone(
    mut client: Client,
    doomed: Doomed,
    mut lease_lost: watch::Receiver<bool>,
    requests: Arc<AtomicU64>,
) -> Gone {
    let key = doomed.key.as_str();
    let delete = TxnOp::delete(key, None);
    let txn = match doomed.revision {
        Some(revision) => Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, revision)])
            .and_then([delete]),
        None => Txn::new().and_then([delete]),
    };
    let mut in_doubt = false;
    let mut pause = FIRST_PAUSE;
    loop {
        requests.fetch_add(1, Ordering::Relaxed);
        let answer = tokio::select! {
            answer = tokio::time::timeout(ATTEMPT, client.txn(txn.clone())) => answer
                .unwrap_or_else(|_| Err(timed_out())),
            _ = lease_lost.wait_for(|lost| *lost) => return Gone::WithLease,
        };
        match answer {
            Ok(answer) => {
                let deleted = answer.succeeded()
                    && answer
                        .op_responses()
                        .iter()
                        .any(|op| matches!(op, TxnOpResponse::Delete(d) if d.deleted() > 0));
                return if deleted || in_doubt {
                    Gone::Deleted
                } else {
                    Gone::Missing
                };
            }
            // Connection loss, a leader election, our timeout: try again. (A refusal for good —
            // permissions — cannot happen to a key this client was allowed to put.)
            Err(e) => {
                tracing::debug!(error = %e, key, "deleting a lock key failed; retrying");
                in_doubt = true;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = lease_lost.wait_for(|lost| *lost) => return Gone::WithLease,
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}
