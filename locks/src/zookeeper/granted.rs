//! The lock nodes this client was granted lately: what lets a waiter skip a listing.
//!
//! A waiter watches the node just before its own. When that node goes, the waiter owns the lock
//! if every node before it is gone too; the recipe as Curator and kazoo write it lists the
//! children again to find out: one more round trip between a release and the next grant. Two
//! facts settle it without a listing:
//!
//! * **The predecessor was first in the waiter's last listing.** Nothing was before it then, and
//!   nothing can come before it later: ZooKeeper numbers a parent's children in creation order,
//!   and the waiter's own node keeps the parent (a container) from being reaped and numbered
//!   afresh.
//! * **The predecessor held the lock.** When it was granted, every node before it was gone, and
//!   again none can come back. The waiter knows this when the predecessor was granted through
//!   the same client: the client remembers the paths of its last [`RECENT`] grants here (a path
//!   names one acquisition, so an old entry can never match a new node).
//!
//! A predecessor that gave up instead (out of wait budget, cancelled) is neither, and the waiter
//! lists again, since a node further up may still hold the lock.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

/// How many grants a client remembers. A waiter looks its predecessor up within milliseconds of
/// the release; this many grants take far longer.
pub(super) const RECENT: usize = 256;

/// Paths of the nodes this client was granted lately, oldest first.
#[derive(Debug, Default)]
pub(super) struct Granted(Mutex<VecDeque<String>>);

impl Granted {
    /// The node at `path` has just been granted the lock.
    pub(super) fn add(&self, path: String) {
        let mut recent = self.lock();
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(path);
    }

    /// Whether the node at `path` was granted the lock (as far as this client remembers).
    pub(super) fn contains(&self, path: &str) -> bool {
        self.lock().iter().any(|p| p == path)
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_remembers_its_last_grants_and_forgets_older_ones() {
        let granted = Granted::default();
        for n in 0..=RECENT {
            granted.add(format!("/locks/k/_c_{n}-lock-{n:010}"));
        }
        assert!(!granted.contains("/locks/k/_c_0-lock-0000000000"));
        assert!(granted.contains("/locks/k/_c_1-lock-0000000001"));
        assert!(granted.contains(&format!("/locks/k/_c_{RECENT}-lock-{RECENT:010}")));
        assert!(!granted.contains("/locks/k/_c_x-lock-0000000001"));
    }
}
