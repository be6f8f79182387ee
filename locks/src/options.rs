//! How long to hold and how long to wait.

use std::time::{Duration, Instant};

use crate::LockError;

/// How long the attempt under way when the wait budget runs out (or the only attempt of a
/// try-once acquire) may still take: long enough for a few round trips and a consensus write on
/// a busy machine, short enough that a dead or silent server is reported promptly.
pub const ATTEMPT_GRACE: Duration = Duration::from_secs(1);

/// Lease and wait budget for one [`crate::DistributedLock::acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireOptions {
    /// How long the backend keeps the lock without renewal.
    pub lease: Duration,
    /// How long to keep trying; `None` tries once. Either way the acquire returns by
    /// [`AcquireOptions::give_up_at`], whatever the server does: a server that is slow, silent
    /// or being reconnected to makes the acquire fail with [`LockError::Unavailable`], it does
    /// not make it hang.
    pub wait: Option<Duration>,
}

impl AcquireOptions {
    /// A lease of `lease`, trying once.
    pub fn new(lease: Duration) -> AcquireOptions {
        AcquireOptions { lease, wait: None }
    }

    /// Keep trying for up to `wait`.
    pub fn wait(mut self, wait: Duration) -> AcquireOptions {
        self.wait = Some(wait);
        self
    }

    /// How long a waiter that came at `since` has waited, and what is left of its wait
    /// budget; [`LockError::Timeout`] once nothing is left.
    pub(crate) fn left(
        &self,
        key: &str,
        since: Instant,
    ) -> Result<(Duration, Duration), LockError> {
        let waited = since.elapsed();
        let remaining = self
            .wait
            .and_then(|w| w.checked_sub(waited))
            .unwrap_or_default();
        if remaining.is_zero() {
            return Err(LockError::waited_since(key, since));
        }
        Ok((waited, remaining))
    }

    /// When an acquire that started at `start` gives up at the latest: the wait budget, plus
    /// [`ATTEMPT_GRACE`] for the attempt under way when it ends.
    pub fn give_up_at(&self, start: Instant) -> Instant {
        start + self.wait.unwrap_or_default() + ATTEMPT_GRACE
    }
}

/// [`within_budget`] boxed, as [`crate::DistributedLock::acquire`] returns it.
pub(crate) fn budgeted<'a>(
    key: &'a str,
    options: AcquireOptions,
    acquire: impl Future<Output = Result<crate::Guard, LockError>> + Send + 'a,
) -> crate::Acquiring<'a> {
    Box::pin(within_budget(key, options, acquire))
}

/// Runs `acquire`, an acquisition of lock `key` starting now, until
/// [`AcquireOptions::give_up_at`]; then drops it (backends clean up after a dropped acquire, as
/// the contract requires) and fails with [`LockError::Unavailable`].
pub(crate) async fn within_budget<T>(
    key: &str,
    options: AcquireOptions,
    acquire: impl Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    let give_up = options.give_up_at(Instant::now());
    match tokio::time::timeout_at(give_up.into(), acquire).await {
        Ok(outcome) => outcome,
        Err(_) => {
            let budget = options.wait.unwrap_or_default();
            Err(LockError::Unavailable(
                format!("lock `{key}`: no answer within the wait budget ({budget:?}) + grace")
                    .into(),
            ))
        }
    }
}
