//! An optional replication requirement on a Redis grant: before `acquire` returns it, `WAIT`
//! until enough replicas confirm they have it, and give it back when too few do.
//!
//! **Why.** Redis replicates asynchronously: the primary answers the grant first and ships it
//! to its replicas afterwards. If it dies in between and Sentinel promotes a replica that never
//! received the grant, the promoted primary hands the same lock to the next client while the
//! first still acts on it — two holders, and the fencing counter, replicated the same way, may
//! hand out the same token again (scenario `sentinel-failover`). A holder that asks "did a
//! replica get my grant?" before acting learns of that hazard while it still can refrain.
//!
//! **How.** Right after a grant the client sends, in one pipeline on one connection, a write
//! only the holder can make (its own lock's lease reset, if the key still names it) and
//! `WAIT replicas timeout`. `WAIT` answers how many replicas acknowledged every write that
//! connection made before it; replication is one ordered stream, so a replica that has the
//! lease reset has the grant before it. (`WAIT` alone is not enough: if the client reconnected
//! between the grant and the `WAIT`, a connection that made no write would be answered at once
//! with every replica, including those that never saw the grant.) When fewer than `replicas`
//! confirm within `timeout`, the grant is released and `acquire` fails with
//! [`LockError::Unreplicated`].
//!
//! **What it costs, and what it is not.** One more round trip per grant, spent waiting for the
//! required replicas; while `WAIT` blocks, the client's other requests on the same connection
//! (renewals, other acquisitions) queue behind it, for up to `timeout` — which is why it is
//! capped below the connection's 500 ms reply timeout. `WAIT` narrows the window, it is not
//! consensus: a replica that confirmed may lose the key if it restarts without persistence, and
//! Sentinel may promote a replica that was not among those that confirmed (it prefers the one
//! with the most replicated data, so with one replica per failover domain, require them all).

use std::sync::LazyLock;
use std::time::Duration;

use deadpool_redis::redis::{Script, pipe};

use super::{Conn, Requests, millis};
use crate::{Guard, LockError};

/// Resets the lease of the owner's lock, if it still holds it: a write only the holder makes.
/// KEYS: lock. ARGV: owner, lease (ms). Returns 1, or 0 if the owner no longer holds it.
static TOUCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0",
    )
});

/// How many replicas must confirm a grant, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    /// Replicas that must confirm the grant (`WAIT <replicas> …`).
    pub replicas: u32,
    /// How long to wait for them; at most [`Replication::MAX_TIMEOUT`].
    pub timeout: Duration,
}

impl Replication {
    /// The longest wait for confirmations: the lock's connections give up on any reply after
    /// 500 ms, and the `WAIT` reply must come back before that.
    pub const MAX_TIMEOUT: Duration = Duration::from_millis(400);

    /// `replicas` confirmations within `timeout` (capped at [`Replication::MAX_TIMEOUT`]).
    pub fn new(replicas: u32, timeout: Duration) -> Replication {
        Replication {
            replicas,
            timeout: timeout.min(Self::MAX_TIMEOUT),
        }
    }

    /// Returns `guard` once enough replicas confirmed its grant (its lease renewed for `lease`
    /// on the way); otherwise releases it and fails with [`LockError::Unreplicated`].
    pub(super) async fn confirm(
        self,
        guard: Guard,
        conn: &Conn,
        requests: &Requests,
        lease: Duration,
    ) -> Result<Guard, LockError> {
        let timeout = self.timeout.min(Self::MAX_TIMEOUT);
        let mut request = pipe();
        request
            .load_script(&TOUCH)
            .ignore()
            .invoke_script(TOUCH.key(guard.key()).arg(guard.owner()).arg(millis(lease)))
            .cmd("WAIT")
            .arg(self.replicas)
            .arg(millis(timeout));
        // The script and the WAIT; loading the script goes with calling it.
        requests.add(2);
        let answer: Result<(i64, i64), LockError> = conn.pipeline(&request).await;
        let acked = match answer {
            Ok((1, acked)) => u32::try_from(acked).unwrap_or(0),
            // The grant is gone already: nobody confirms it.
            Ok(_) => 0,
            Err(e) => {
                let _ = guard.release().await;
                return Err(e);
            }
        };
        if acked >= self.replicas {
            return Ok(guard);
        }
        let key = guard.key().to_owned();
        let _ = guard.release().await;
        Err(LockError::Unreplicated {
            key,
            acked,
            needed: self.replicas,
        })
    }
}
