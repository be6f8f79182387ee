//! How long to hold and how long to wait.

use std::time::Duration;

/// Lease and wait budget for one [`crate::DistributedLock::acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireOptions {
    /// How long the backend keeps the lock without renewal.
    pub lease: Duration,
    /// How long to keep trying; `None` tries once.
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
}
