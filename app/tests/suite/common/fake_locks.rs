//! In-process locks for the app's tests, put behind the locked strategies with
//! `Registry::set_lock`: a correct one, one that admits everyone (the worst case of an expired
//! lease), failing ones, and one that counts its releases.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use locks::{AcquireOptions, DistributedLock, Guard, Held, LockError};
use tokio::sync::{OwnedMutexGuard, watch};

/// A grant of `key`; `lost` is whether the guard already reports the lock lost.
fn grant(key: &str, token: u64, lost: bool, held: impl Held + 'static) -> Guard {
    // The sender is dropped: `lost()` then never fires, `is_lost()` keeps `lost`.
    let (_, lost_rx) = watch::channel(lost);
    Guard::new(key, locks::new_owner_id(), token, lost_rx, Box::new(held))
}

/// A release that only answers whether the lock was still ours.
struct Answers(bool);

impl Held for Answers {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        let ours = self.0;
        Box::pin(async move { Ok(ours) })
    }
}

/// A correct lock for one process: a tokio mutex per key, tokens from a counter.
#[derive(Default)]
pub struct MutexLock {
    keys: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    tokens: AtomicU64,
}

struct MutexHeld(OwnedMutexGuard<()>);

impl Held for MutexHeld {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        drop(self.0);
        Box::pin(async { Ok(true) })
    }
}

impl DistributedLock for MutexLock {
    fn backend(&self) -> &'static str {
        "test-mutex"
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        options: AcquireOptions,
    ) -> BoxFuture<'a, Result<Guard, LockError>> {
        Box::pin(async move {
            let mutex = self
                .keys
                .lock()
                .unwrap()
                .entry(key.to_string())
                .or_default()
                .clone();
            let wait = options.wait.unwrap_or_default();
            let held = tokio::time::timeout(wait, mutex.lock_owned())
                .await
                .map_err(|_| LockError::Timeout {
                    key: key.to_string(),
                    waited: wait,
                })?;
            let token = self.tokens.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(grant(key, token, false, MutexHeld(held)))
        })
    }

    fn backend_requests(&self) -> u64 {
        self.tokens.load(Ordering::SeqCst)
    }
}

/// Grants every request at once, with strictly increasing tokens: what every holder sees when
/// leases expire under them.
#[derive(Default)]
pub struct AdmitEveryone {
    tokens: AtomicU64,
}

impl DistributedLock for AdmitEveryone {
    fn backend(&self) -> &'static str {
        "test-admit-everyone"
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        _: AcquireOptions,
    ) -> BoxFuture<'a, Result<Guard, LockError>> {
        Box::pin(async move {
            let token = self.tokens.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(grant(key, token, true, Answers(false)))
        })
    }

    fn backend_requests(&self) -> u64 {
        self.tokens.load(Ordering::SeqCst)
    }
}

/// Fails every acquisition with the error the function builds.
pub struct Failing(pub fn(&str) -> LockError);

impl DistributedLock for Failing {
    fn backend(&self) -> &'static str {
        "test-failing"
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        _: AcquireOptions,
    ) -> BoxFuture<'a, Result<Guard, LockError>> {
        Box::pin(async move { Err((self.0)(key)) })
    }

    fn backend_requests(&self) -> u64 {
        0
    }
}

/// Grants freely until `down` is set, then answers "unavailable" like a dead lock service.
#[derive(Default)]
pub struct GoesDown {
    pub down: AtomicBool,
}

impl DistributedLock for GoesDown {
    fn backend(&self) -> &'static str {
        "test-goes-down"
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        _: AcquireOptions,
    ) -> BoxFuture<'a, Result<Guard, LockError>> {
        Box::pin(async move {
            if self.down.load(Ordering::SeqCst) {
                return Err(LockError::unavailable(std::io::Error::other(
                    "lock service down",
                )));
            }
            Ok(grant(key, 1, false, Answers(true)))
        })
    }

    fn backend_requests(&self) -> u64 {
        0
    }
}

/// Grants at once and counts the releases it receives.
#[derive(Default)]
pub struct CountsReleases {
    pub released: Arc<AtomicU64>,
}

struct Counted(Arc<AtomicU64>);

impl Held for Counted {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<bool, LockError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(true) })
    }
}

impl DistributedLock for CountsReleases {
    fn backend(&self) -> &'static str {
        "test-counts-releases"
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        _: AcquireOptions,
    ) -> BoxFuture<'a, Result<Guard, LockError>> {
        Box::pin(async move { Ok(grant(key, 1, false, Counted(Arc::clone(&self.released)))) })
    }

    fn backend_requests(&self) -> u64 {
        0
    }
}
