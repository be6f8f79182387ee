//! Medians of several operations measured in turn, for ratios that survive a noisy machine.
//!
//! Criterion measures one benchmark after the other; on a shared machine the load (and, for
//! ZooKeeper's and etcd's `fsync`ed writes, the disk's backlog) changes between them, and a
//! ratio of two figures taken a minute apart measures the machine as much as the code. Here
//! every round runs each operation once, so all of them see the same conditions, and the
//! ratio of their medians is what the round-trip table reports.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use rand::seq::SliceRandom;

/// One operation to time: each call makes a new future doing it once.
pub type Op<'a> = Box<dyn Fn() -> BoxFuture<'a, ()> + 'a>;

/// Runs `rounds` rounds of every op in `ops` (one call each per round, in a new random order
/// every round: an op that always followed the same other op would inherit its after-effects,
/// such as a disk still syncing) after one untimed warm-up round; returns each op's median.
pub async fn medians(ops: &[(&str, &Op<'_>)], rounds: usize) -> Vec<Duration> {
    for (_, op) in ops {
        op().await;
    }
    let mut times = vec![Vec::with_capacity(rounds); ops.len()];
    let mut order: Vec<usize> = (0..ops.len()).collect();
    for _ in 0..rounds {
        order.shuffle(&mut rand::rng());
        for &i in &order {
            let start = Instant::now();
            ops[i].1().await;
            times[i].push(start.elapsed());
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort_unstable();
            t.get(t.len() / 2).copied().unwrap_or_default()
        })
        .collect()
}
