//! Deleting a lock node until it is gone.
//!
//! A node's delete can fail with the connection (the server may or may not have applied it),
//! and the session usually outlives that: the client reconnects within the session timeout and
//! the session — with the node — lives on for as long as the process. A node whose delete was
//! simply given up would hold its place in the queue all that time, and every later contender
//! would wait behind it. So a delete is retried, with a backoff capped at [`MAX_PAUSE`], until
//! the server says the node is gone or the session is known to have ended (which removes its
//! ephemeral nodes).
//!
//! The retries run in a task of their own: a caller that stops waiting for its release or
//! withdrawal (or is dropped) does not stop the delete.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;
use zookeeper_client::{Client, Error};

/// Pause before the first retry; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// How a delete ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Gone {
    /// This delete removed the node (an attempt whose answer was lost counts, see
    /// [`delete`]).
    Deleted,
    /// The node was not there: someone else deleted it.
    Missing,
    /// The session ended, or the lock client was dropped and abandoned it: the server removes
    /// the session's nodes with it.
    WithSession,
    /// The server refused the delete for good (ACLs, a malformed path): nothing to retry.
    Refused(Error),
}

/// Deletes `path` on `client`'s session until it is gone; see the module docs.
///
/// The first request is queued on the session before this returns, so it is ordered after
/// every request sent before and before every one sent after (ZooKeeper answers a session's
/// requests in order). `NoNode` after an attempt that may have been applied counts as our
/// delete: on a live session, only our delete or someone else's can remove the node, and a
/// lock node belongs to this acquisition alone.
pub(super) fn delete(
    client: &Arc<Client>,
    path: String,
    requests: Arc<AtomicU64>,
) -> JoinHandle<Gone> {
    requests.fetch_add(1, Ordering::Relaxed);
    let first = client.delete(&path, None);
    let client = Arc::downgrade(client);
    tokio::spawn(retry(client, path, requests, first))
}

/// [`delete`] without a runtime to retry on (a drop outside Tokio): one request, queued now.
pub(super) fn delete_once(client: &Client, path: &str, requests: &AtomicU64) {
    requests.fetch_add(1, Ordering::Relaxed);
    drop(client.delete(path, None));
}

async fn retry(
    client: Weak<Client>,
    path: String,
    requests: Arc<AtomicU64>,
    first: impl Future<Output = Result<(), Error>>,
) -> Gone {
    let mut answer = first.await;
    let mut in_doubt = false;
    let mut pause = FIRST_PAUSE;
    loop {
        match answer {
            Ok(()) => return Gone::Deleted,
            Err(Error::NoNode) if in_doubt => return Gone::Deleted,
            Err(Error::NoNode) => return Gone::Missing,
            Err(e) if is_session_end(&e) => return Gone::WithSession,
            Err(
                e @ (Error::NoAuth
                | Error::BadArguments(_)
                | Error::NotEmpty
                | Error::BadVersion
                | Error::InvalidAcl
                | Error::Unimplemented),
            ) => {
                tracing::warn!(error = %e, %path, "the server refused to delete a lock node");
                return Gone::Refused(e);
            }
            // Connection loss or a timeout: applied or not, nobody knows. Try again once the
            // session is back.
            Err(e) => {
                tracing::debug!(error = %e, %path, "deleting a lock node failed; retrying");
                in_doubt = true;
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
        let Some(client) = client.upgrade() else {
            return Gone::WithSession;
        };
        if client.state().is_terminated() {
            return Gone::WithSession;
        }
        requests.fetch_add(1, Ordering::Relaxed);
        answer = client.delete(&path, None).await;
    }
}

/// Errors after which the session (and its ephemeral nodes) is gone for good.
pub(super) fn is_session_end(error: &Error) -> bool {
    matches!(
        error,
        Error::SessionExpired | Error::ClientClosed | Error::AuthFailed | Error::NoHosts
    )
}
