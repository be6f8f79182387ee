//! Prometheus text exposition of what the service did: purchases by strategy and outcome,
//! their latency, lock wait time and retries. Hand-rolled: a handful of counters and
//! fixed-bucket histograms behind one mutex, rendered on `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the histogram buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|&b| secs <= b) {
            self.counts[i] += 1;
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, out: &mut String, name: &str, strategy: &str) {
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(self.counts) {
            cumulative += n;
            let _ = writeln!(
                out,
                "{name}_bucket{{strategy=\"{strategy}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{strategy=\"{strategy}\",le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{{strategy=\"{strategy}\"}} {}", self.sum);
        let _ = writeln!(
            out,
            "{name}_count{{strategy=\"{strategy}\"}} {}",
            self.count
        );
    }
}

#[derive(Debug, Default)]
struct Inner {
    requests: BTreeMap<(&'static str, &'static str), u64>,
    latency: BTreeMap<&'static str, Histogram>,
    lock_wait: BTreeMap<&'static str, Histogram>,
    retries: BTreeMap<&'static str, u64>,
    /// Entries in the order stream of `redis-lua-stream`, as last seen by the consumer.
    stream_lag: Option<u64>,
}

/// The service's counters. Strategy names come from the registry, so label values are few and
/// need no escaping.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    /// Purchase requests the service received, ever (refused at admission or not).
    received: AtomicU64,
    /// Purchases that reached a strategy, ever.
    started: AtomicU64,
    /// Purchases a strategy is working on now.
    in_flight: AtomicU64,
    /// Orders this instance moved out of `reserved`, by how.
    paid: AtomicU64,
    expired: AtomicU64,
    cancelled: AtomicU64,
    /// Returns a dead instance left half-way that this one finished.
    returns_finished: AtomicU64,
    /// How late the oldest reserved order past its deadline was at the last sweep, in
    /// milliseconds plus one (0: no sweep yet).
    oldest_overdue_ms: AtomicU64,
    /// Reads of a product's rules from its backend into an instance's memory.
    product_reads: AtomicU64,
}

/// A purchase being worked on: counted in `seckill_purchases_in_flight` until dropped.
#[derive(Debug)]
pub struct InFlight(Arc<Metrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What one purchase request did.
#[derive(Debug, Clone, Copy)]
pub struct Observation {
    pub strategy: &'static str,
    /// `created`, `replayed`, or the error code.
    pub outcome: &'static str,
    pub latency: Duration,
    pub lock_wait: Option<Duration>,
    pub retries: u32,
}

impl Metrics {
    /// Counts a purchase request as it arrives, before anything is decided about it.
    pub fn purchase_received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a purchase that reaches its strategy, until the returned guard is dropped.
    pub fn purchase_started(self: &Arc<Self>) -> InFlight {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    pub fn observe(&self, o: Observation) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *inner.requests.entry((o.strategy, o.outcome)).or_default() += 1;
        inner
            .latency
            .entry(o.strategy)
            .or_default()
            .observe(o.latency);
        if let Some(waited) = o.lock_wait {
            inner
                .lock_wait
                .entry(o.strategy)
                .or_default()
                .observe(waited);
        }
        if o.retries > 0 {
            *inner.retries.entry(o.strategy).or_default() += u64::from(o.retries);
        }
    }

    pub fn order_paid(&self) {
        self.paid.fetch_add(1, Ordering::Relaxed);
    }

    pub fn order_expired(&self) {
        self.orders_expired(1);
    }

    /// `n` orders expired together (a batch of one product's).
    pub fn orders_expired(&self, n: u64) {
        self.expired.fetch_add(n, Ordering::Relaxed);
    }

    pub fn order_cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` returns a dead instance left half-way finished.
    pub fn returns_finished(&self, n: u64) {
        self.returns_finished.fetch_add(n, Ordering::Relaxed);
    }

    /// Records how late the oldest overdue reserved order is (the sweep, each round).
    pub fn set_oldest_overdue(&self, late: Duration) {
        let ms = u64::try_from(late.as_millis()).unwrap_or(u64::MAX - 1);
        self.oldest_overdue_ms
            .store(ms.saturating_add(1), Ordering::Relaxed);
    }

    /// Counts a read of a product's rules from its backend (the memory was empty or aged).
    pub fn product_read(&self) {
        self.product_reads.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the stream's lag: orders accepted and not yet placed in the database.
    pub fn set_stream_lag(&self, entries: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.stream_lag = Some(entries);
    }

    /// The Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        out.push_str("# HELP seckill_purchases_total Purchase requests by strategy and outcome.\n");
        out.push_str("# TYPE seckill_purchases_total counter\n");
        for ((strategy, outcome), n) in &inner.requests {
            let _ = writeln!(
                out,
                "seckill_purchases_total{{strategy=\"{strategy}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP seckill_purchase_duration_seconds Time to answer a purchase request.\n",
        );
        out.push_str("# TYPE seckill_purchase_duration_seconds histogram\n");
        for (strategy, h) in &inner.latency {
            h.render(&mut out, "seckill_purchase_duration_seconds", strategy);
        }
        out.push_str("# HELP seckill_lock_wait_seconds Time spent acquiring a lock before the critical section.\n");
        out.push_str("# TYPE seckill_lock_wait_seconds histogram\n");
        for (strategy, h) in &inner.lock_wait {
            h.render(&mut out, "seckill_lock_wait_seconds", strategy);
        }
        out.push_str(
            "# HELP seckill_retries_total Retries made by strategies that retry (optimistic).\n",
        );
        out.push_str("# TYPE seckill_retries_total counter\n");
        for (strategy, n) in &inner.retries {
            let _ = writeln!(out, "seckill_retries_total{{strategy=\"{strategy}\"}} {n}");
        }
        out.push_str(
            "# HELP seckill_purchase_requests_total Purchase requests received, refused at admission or not.\n",
        );
        out.push_str("# TYPE seckill_purchase_requests_total counter\n");
        let received = self.received.load(Ordering::Relaxed);
        let _ = writeln!(out, "seckill_purchase_requests_total {received}");
        out.push_str(
            "# HELP seckill_purchases_started_total Purchases that reached their strategy.\n",
        );
        out.push_str("# TYPE seckill_purchases_started_total counter\n");
        let started = self.started.load(Ordering::Relaxed);
        let _ = writeln!(out, "seckill_purchases_started_total {started}");
        out.push_str("# HELP seckill_purchases_in_flight Purchases their strategy is working on now (a buyer who hung up included).\n");
        out.push_str("# TYPE seckill_purchases_in_flight gauge\n");
        let in_flight = self.in_flight.load(Ordering::Relaxed);
        let _ = writeln!(out, "seckill_purchases_in_flight {in_flight}");
        out.push_str("# HELP seckill_orders_ended_total Orders this instance moved out of reserved: paid, expired (by its sweep) or cancelled.\n");
        out.push_str("# TYPE seckill_orders_ended_total counter\n");
        for (how, n) in [
            ("paid", &self.paid),
            ("expired", &self.expired),
            ("cancelled", &self.cancelled),
        ] {
            let n = n.load(Ordering::Relaxed);
            let _ = writeln!(out, "seckill_orders_ended_total{{how=\"{how}\"}} {n}");
        }
        out.push_str("# HELP seckill_orders_expired_total Orders this instance expired.\n");
        out.push_str("# TYPE seckill_orders_expired_total counter\n");
        let expired = self.expired.load(Ordering::Relaxed);
        let _ = writeln!(out, "seckill_orders_expired_total {expired}");
        out.push_str("# HELP seckill_returns_finished_total Returns of units to Redis left half-way by a dead instance, finished by this one.\n");
        out.push_str("# TYPE seckill_returns_finished_total counter\n");
        let finished = self.returns_finished.load(Ordering::Relaxed);
        let _ = writeln!(out, "seckill_returns_finished_total {finished}");
        // Stored plus one, so that 0 means "no sweep yet".
        if let Some(ms) = self
            .oldest_overdue_ms
            .load(Ordering::Relaxed)
            .checked_sub(1)
        {
            out.push_str("# HELP seckill_oldest_overdue_seconds How late the oldest reserved order past its payment deadline was at this instance's last sweep (0: none).\n");
            out.push_str("# TYPE seckill_oldest_overdue_seconds gauge\n");
            let _ = writeln!(out, "seckill_oldest_overdue_seconds {}", ms as f64 / 1000.0);
        }
        out.push_str("# HELP seckill_product_reads_total Reads of a product's rules into memory, from its backend.\n");
        out.push_str("# TYPE seckill_product_reads_total counter\n");
        let reads = self.product_reads.load(Ordering::Relaxed);
        let _ = writeln!(out, "seckill_product_reads_total {reads}");
        if let Some(lag) = inner.stream_lag {
            out.push_str("# HELP seckill_stream_lag_entries Orders accepted (202) and not yet placed in the database.\n");
            out.push_str("# TYPE seckill_stream_lag_entries gauge\n");
            let _ = writeln!(out, "seckill_stream_lag_entries {lag}");
        }
        out
    }
}
