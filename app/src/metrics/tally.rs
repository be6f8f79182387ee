//! The two sums the counters keep per strategy: a latency histogram with fixed buckets, and a
//! stage's count and total time. Each is atomics only, added to by every thread of a shard and
//! summed across the shards when rendered.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the histogram buckets, in seconds.
pub(super) const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Default)]
pub(super) struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    pub(super) count: AtomicU64,
    pub(super) sum_ns: AtomicU64,
}

impl Histogram {
    /// Adds what `other` counted.
    pub(super) fn add(&self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter().zip(&other.counts) {
            add(mine, theirs);
        }
        add(&self.count, &other.count);
        add(&self.sum_ns, &other.sum_ns);
    }

    pub(super) fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|&b| secs <= b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub(super) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub(super) fn render(&self, out: &mut String, name: &str, strategy: &str) {
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(&self.counts) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{strategy=\"{strategy}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        // Read after the buckets: a purchase counted meanwhile shows in `+Inf` and the count
        // before its bucket, never the other way round.
        let count = self.count().max(cumulative);
        let _ = writeln!(
            out,
            "{name}_bucket{{strategy=\"{strategy}\",le=\"+Inf\"}} {count}"
        );
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{strategy=\"{strategy}\"}} {sum}");
        let _ = writeln!(out, "{name}_count{{strategy=\"{strategy}\"}} {count}");
    }
}

/// A stage's purchases and their time there.
#[derive(Debug, Default)]
pub(super) struct StageTotal {
    pub(super) count: AtomicU64,
    pub(super) sum_ns: AtomicU64,
}

impl StageTotal {
    pub(super) fn observe(&self, d: Duration) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub(super) fn add(&self, other: &StageTotal) {
        add(&self.count, &other.count);
        add(&self.sum_ns, &other.sum_ns);
    }
}

/// Adds `theirs` to `mine`: one shard's count to the sum.
pub(super) fn add(mine: &AtomicU64, theirs: &AtomicU64) {
    mine.fetch_add(theirs.load(Ordering::Relaxed), Ordering::Relaxed);
}
