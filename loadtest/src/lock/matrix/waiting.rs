//! Notification against polling: one client holds the lock while waiters, each with a client
//! of its own, wait for it.
//!
//! A polling lock costs requests per waiter per interval for as long as the lock is held; a
//! notifying one (a pub/sub message, a watch on the predecessor) costs none until the release.
//! So the waiters' clients' request counts ([`locks::DistributedLock::backend_requests`]) are
//! read once the waiters have settled and again just before the release: requests per waiter
//! per second, whose inverse is a polling lock's interval. Then the holder releases, and the
//! time to the first waiter's grant says how soon a release is noticed.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use locks::{AcquireOptions, Backend, DistributedLock};
use serde::Serialize;
use tokio::time::Instant;

use super::{LEASE, Settings, WAIT, duration, fresh_key, warm};
use crate::lock::connect_backend;

/// Time for the waiters' first attempts (and subscriptions, watches) before counting.
const SETTLE: Duration = Duration::from_millis(200);
/// Below this many requests per waiter per second, waiting is not polling.
pub(super) const POLLING: f64 = 1.0;

/// What waiting for a held lock cost, and how soon its release was noticed.
#[derive(Debug, Clone, Serialize)]
pub struct Waiting {
    pub waiters: usize,
    pub held_ms: u64,
    /// Requests all waiters' clients sent while the lock was held, after settling.
    pub requests_while_held: u64,
    pub requests_per_waiter_per_sec: f64,
    /// From the holder's release to the first waiter's grant.
    pub wake_ms: Option<f64>,
}

impl Waiting {
    pub fn cell(&self, backend: Backend) -> String {
        let woke = self.wake_ms.map_or_else(|| "–".to_string(), duration);
        let rate = self.requests_per_waiter_per_sec;
        if rate < POLLING {
            let how = match backend {
                Backend::RedisWatchdog | Backend::RedisFair => "pub/sub",
                Backend::ZooKeeper | Backend::Etcd => "watch",
                Backend::DbRowLock | Backend::DbBlockingInsert => "blocked statement",
                _ => "notified",
            };
            format!("{how}: {rate:.1} requests/s per waiter while held; woke in {woke}")
        } else {
            format!(
                "polls: a request every {} per waiter; woke in {woke}",
                duration(1000.0 / rate)
            )
        }
    }
}

pub async fn measure(
    backend: Backend,
    endpoints: &sandbox::Endpoints,
    s: &Settings,
) -> Result<Waiting> {
    let key = fresh_key("waiting");
    let held = Duration::from_millis(s.held_ms);
    let holder = connect_backend(backend, endpoints).await?;
    let mut clients: Vec<Arc<dyn DistributedLock>> = Vec::new();
    for _ in 0..s.waiters {
        let client = connect_backend(backend, endpoints).await?;
        warm(client.as_ref()).await?;
        clients.push(client);
    }
    let guard = holder
        .acquire(&key, AcquireOptions::new(LEASE).wait(WAIT))
        .await?;
    // Long enough for every waiter's turn after the release.
    let budget = SETTLE + held + WAIT * s.waiters as u32;
    let waiters: Vec<_> = clients
        .iter()
        .map(|client| {
            let (client, key) = (client.clone(), key.clone());
            tokio::spawn(async move {
                let guard = client
                    .acquire(&key, AcquireOptions::new(LEASE).wait(budget))
                    .await?;
                let granted = Instant::now();
                guard.release().await?;
                anyhow::Ok(granted)
            })
        })
        .collect();
    let requests = || clients.iter().map(|c| c.backend_requests()).sum::<u64>();
    tokio::time::sleep(SETTLE).await;
    let before = requests();
    tokio::time::sleep(held).await;
    let during = requests() - before;
    let released = Instant::now();
    guard.release().await?;
    let mut first: Option<Instant> = None;
    for waiter in waiters {
        let granted = waiter.await??;
        first = Some(first.map_or(granted, |f| f.min(granted)));
    }
    Ok(Waiting {
        waiters: s.waiters,
        held_ms: s.held_ms,
        requests_while_held: during,
        requests_per_waiter_per_sec: during as f64 / s.waiters as f64 / held.as_secs_f64(),
        wake_ms: first.map(|f| f.saturating_duration_since(released).as_secs_f64() * 1000.0),
    })
}
