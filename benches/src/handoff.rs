//! Hand-off: how long a waiter needs to notice that the lock it waits for was released.
//!
//! Two contenders on two separate clients (two processes, in a real deployment). The holder
//! takes the lock; the waiter starts `acquire` with a wait budget and is given [`SETTLE`] to
//! queue (poll, subscribe, set its watch); then the holder calls `release`. The measured time
//! runs from that call to the moment the waiter's `acquire` returns: the release's own round
//! trip, the backend telling the waiter (or the waiter's next poll), and the winning attempt.
//! A polling lock hands off no faster than its poll interval, so its figure shows the interval;
//! a notifying lock shows a few round trips.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use locks::{AcquireOptions, DistributedLock};

/// How long the waiter is given to queue before the holder releases. Long enough for every
/// backend's waiter to be asleep in its steady state (the polling locks then poll at their
/// slowest interval), short enough to keep the benchmark brief.
pub const SETTLE: Duration = Duration::from_millis(50);

/// Lease of both contenders: far longer than a hand-off, so no lease ever runs out.
const LEASE: Duration = Duration::from_secs(10);

/// One hand-off of `key` from `holder` to `waiter`; returns release-call-to-grant time.
pub async fn once(
    holder: &dyn DistributedLock,
    waiter: Arc<dyn DistributedLock>,
    key: &str,
) -> Duration {
    let held = holder
        .acquire(key, AcquireOptions::new(LEASE))
        .await
        .expect("the holder acquires a free lock");
    let waiting = {
        let key = key.to_owned();
        tokio::spawn(async move {
            let granted = waiter
                .acquire(&key, AcquireOptions::new(LEASE).wait(LEASE))
                .await
                .expect("the waiter gets the lock once it is released");
            let at = Instant::now();
            granted.release().await.expect("the waiter releases");
            at
        })
    };
    tokio::time::sleep(SETTLE).await;
    let released = Instant::now();
    held.release().await.expect("the holder releases");
    let granted = waiting.await.expect("the waiter task");
    granted.saturating_duration_since(released)
}

/// `iters` hand-offs, for criterion's `iter_custom`: the sum of their times. Each one's time
/// is also kept in `samples`: criterion only sees sums of several, and a single hand-off stuck
/// behind a slow disk sync (ZooKeeper and etcd write to their log on every release) would
/// otherwise hide the typical one.
pub async fn total(
    holder: Arc<dyn DistributedLock>,
    waiter: Arc<dyn DistributedLock>,
    key: String,
    iters: u64,
    samples: Arc<Mutex<Vec<Duration>>>,
) -> Duration {
    let mut sum = Duration::ZERO;
    for _ in 0..iters {
        let took = once(holder.as_ref(), Arc::clone(&waiter), &key).await;
        samples.lock().unwrap_or_else(|e| e.into_inner()).push(took);
        sum += took;
    }
    sum
}

/// The median and the 90th percentile of `samples` (zero if there are none).
pub fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(i).copied().unwrap_or_default()
    };
    (at(0.5), at(0.9))
}
