//! The handle of a held lock.

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::LockError;
use crate::line::{InLine, Place};

/// What a backend keeps for one held lock: how to give it back.
pub trait Held: Send + Sync {
    /// Releases the lock if this acquisition still owns it; returns whether it did.
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>>;
}

/// A held lock. See the crate docs for what holding means.
pub struct Guard {
    key: String,
    owner: String,
    fencing_token: u64,
    lost: watch::Receiver<bool>,
    held: Option<Box<dyn Held>>,
}

impl Guard {
    /// Made by backends. `lost` must turn `true` when the backend knows the lock is gone; a
    /// backend that never learns of loss passes a receiver whose sender it keeps alive.
    pub fn new(
        key: impl Into<String>,
        owner: impl Into<String>,
        fencing_token: u64,
        lost: watch::Receiver<bool>,
        held: Box<dyn Held>,
    ) -> Guard {
        Guard {
            key: key.into(),
            owner: owner.into(),
            fencing_token,
            lost,
            held: Some(held),
        }
    }

    /// The lock's name.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This acquisition's random owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Strictly increasing per grant of this lock name; pass it to the resource you protect.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The flag behind [`Guard::lost`], for a backend that hands out another guard of the same
    /// hold (a re-entry) and must report its loss with this one's.
    #[cfg(feature = "mysql")]
    pub(crate) fn lost_flag(&self) -> watch::Receiver<bool> {
        self.lost.clone()
    }

    /// Whether the library already knows the lock is gone.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Resolves when the library knows the lock is gone (renewal failed, session expired,
    /// lease passed). Pending forever while the lock holds.
    pub async fn lost(&self) {
        let mut rx = self.lost.clone();
        if rx.wait_for(|lost| *lost).await.is_err() {
            // The backend dropped its sender: it can no longer tell, so never fire.
            std::future::pending::<()>().await;
        }
    }

    /// This guard, heading `place`'s line until it is released or known lost.
    pub(crate) fn in_line(mut self, place: Place) -> Guard {
        let held = self
            .held
            .take()
            .map(|held| Box::new(InLine::new(held, place, self.lost.clone())) as Box<dyn Held>);
        Guard {
            key: std::mem::take(&mut self.key),
            owner: std::mem::take(&mut self.owner),
            fencing_token: self.fencing_token,
            lost: self.lost.clone(),
            held,
        }
    }

    /// Releases the lock; `Ok(true)` if this guard still owned it, `Ok(false)` if it had
    /// already lost it (someone else's lock is never touched).
    pub async fn release(mut self) -> Result<bool, LockError> {
        match self.held.take() {
            Some(held) => held.release().await,
            None => Ok(false),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(held) = self.held.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                if let Err(e) = held.release().await {
                    tracing::warn!(error = %e, "background release of a dropped guard failed");
                }
            });
        }
    }
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("fencing_token", &self.fencing_token)
            .field("lost", &self.is_lost())
            .finish()
    }
}
