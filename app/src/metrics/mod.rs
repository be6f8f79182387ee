//! Prometheus text exposition of what the service did: purchases by strategy and outcome,
//! their latency, lock wait time and retries. Hand-rolled: a handful of counters and
//! fixed-bucket histograms, rendered on `GET /metrics`. Every count is an atomic in a slot
//! fixed by the strategy's and the outcome's place, so that counting a refusal from memory
//! costs a few additions and no lock the crowd's other clicks would queue on. The counts every
//! request adds to are kept in shards, one per thread as far as there are shards, and summed
//! when rendered: a count all cores add to is a cache line passed between them on every click,
//! a cost a refusal from memory would pay several times over.

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::api::{ErrorCode, Strategy};

mod labels;
mod tally;

pub use labels::{Outcome, Stage};
use tally::{Histogram, StageTotal, add};

/// Shards of the per-request counts: more than the threads that serve requests on most
/// machines, so that two of them rarely share one.
const SHARDS: usize = 16;

/// What one strategy's purchases did in this instance.
#[derive(Debug, Default)]
struct Counts {
    outcomes: [AtomicU64; Outcome::COUNT],
    latency: Histogram,
    lock_wait: Histogram,
    retries: AtomicU64,
    /// Purchases that held a lock whose calls were counted, and those calls.
    lock_holds: AtomicU64,
    calls_under_lock: AtomicU64,
    stages: [StageTotal; Stage::COUNT],
}

impl Counts {
    /// Adds what `other` counted.
    fn add(&self, other: &Counts) {
        for (mine, theirs) in self.outcomes.iter().zip(&other.outcomes) {
            add(mine, theirs);
        }
        self.latency.add(&other.latency);
        self.lock_wait.add(&other.lock_wait);
        add(&self.retries, &other.retries);
        add(&self.lock_holds, &other.lock_holds);
        add(&self.calls_under_lock, &other.calls_under_lock);
        for (mine, theirs) in self.stages.iter().zip(&other.stages) {
            mine.add(theirs);
        }
    }
}

/// The counts every purchase request adds to, as the threads of one shard counted them.
#[derive(Debug)]
struct Shard {
    /// By the strategy's place in the catalogue.
    strategies: Vec<Counts>,
    /// Purchase requests received (refused at admission or not).
    received: AtomicU64,
}

impl Default for Shard {
    fn default() -> Shard {
        Shard {
            strategies: Strategy::ALL.iter().map(|_| Counts::default()).collect(),
            received: AtomicU64::new(0),
        }
    }
}

/// The shard the calling thread counts in: threads take the shards in turn as they first count.
fn shard_of_this_thread() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|shard| *shard)
}

/// The service's counters.
#[derive(Debug)]
pub struct Metrics {
    /// What every purchase request counts, in shards by thread.
    shards: Box<[CachePadded<Shard>]>,
    /// Entries in the order stream of `redis-lua-stream`, as last seen by the consumer, plus
    /// one (0: never seen).
    stream_lag: AtomicU64,
    /// Purchases that reached a strategy, ever.
    started: AtomicU64,
    /// Purchases a strategy is working on now.
    in_flight: AtomicU64,
    /// Orders this instance moved out of `reserved`, by how.
    paid: AtomicU64,
    expired: AtomicU64,
    cancelled: AtomicU64,
    /// Returns a dead instance left half-way that this one finished, and batches of its sweep
    /// that failed (left for a later round).
    returns_finished: AtomicU64,
    sweep_failures: AtomicU64,
    /// Returns that took the selling strategy's lock, and their microseconds waiting for it
    /// and holding it.
    return_locks: AtomicU64,
    return_lock_wait_us: AtomicU64,
    return_lock_held_us: AtomicU64,
    /// How late the oldest reserved order past its deadline was at the last sweep, in
    /// milliseconds plus one (0: no sweep yet).
    oldest_overdue_ms: AtomicU64,
    /// Reads of a product's rules from its backend into an instance's memory.
    product_reads: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            shards: (0..SHARDS).map(|_| CachePadded::default()).collect(),
            stream_lag: AtomicU64::new(0),
            started: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            paid: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            returns_finished: AtomicU64::new(0),
            sweep_failures: AtomicU64::new(0),
            return_locks: AtomicU64::new(0),
            return_lock_wait_us: AtomicU64::new(0),
            return_lock_held_us: AtomicU64::new(0),
            oldest_overdue_ms: AtomicU64::new(0),
            product_reads: AtomicU64::new(0),
        }
    }
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
    pub strategy: Strategy,
    pub outcome: Outcome,
    pub latency: Duration,
    pub lock_wait: Option<Duration>,
    pub retries: u32,
    /// The calls it sent while holding a lock, if it held one and they were counted
    /// ([`crate::strategy::under_lock`]).
    pub under_lock: Option<u32>,
    /// Its time in each [`Stage`] it went through, by the stage's place in [`Stage::ALL`].
    pub stages: [Option<Duration>; Stage::COUNT],
}

impl Metrics {
    /// Counts a purchase request as it arrives, before anything is decided about it.
    pub fn purchase_received(&self) {
        (self.shard().received).fetch_add(1, Ordering::Relaxed);
    }

    /// The calling thread's shard.
    fn shard(&self) -> &Shard {
        &self.shards[shard_of_this_thread()]
    }

    /// Counts a purchase that reaches its strategy, until the returned guard is dropped.
    pub fn purchase_started(self: &Arc<Self>) -> InFlight {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    pub fn observe(&self, o: Observation) {
        let counts = &self.shard().strategies[o.strategy as usize];
        counts.outcomes[o.outcome.index()].fetch_add(1, Ordering::Relaxed);
        counts.latency.observe(o.latency);
        if let Some(waited) = o.lock_wait {
            counts.lock_wait.observe(waited);
        }
        if o.retries > 0 {
            counts
                .retries
                .fetch_add(u64::from(o.retries), Ordering::Relaxed);
        }
        if let Some(calls) = o.under_lock {
            counts.lock_holds.fetch_add(1, Ordering::Relaxed);
            (counts.calls_under_lock).fetch_add(u64::from(calls), Ordering::Relaxed);
        }
        for (total, spent) in counts.stages.iter().zip(o.stages) {
            if let Some(spent) = spent {
                total.observe(spent);
            }
        }
    }

    pub fn order_paid(&self) {
        self.paid.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` orders expired (one, or a batch of one product's).
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

    pub fn sweep_failed(&self) {
        self.sweep_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// A return waited this long for the selling strategy's lock, and got it.
    pub fn return_lock_waited(&self, wait: Duration) {
        self.return_locks.fetch_add(1, Ordering::Relaxed);
        (self.return_lock_wait_us).fetch_add(micros(wait), Ordering::Relaxed);
    }

    /// A return held the selling strategy's lock this long (the purchases queued for it waited
    /// behind this).
    pub fn return_lock_held(&self, held: Duration) {
        (self.return_lock_held_us).fetch_add(micros(held), Ordering::Relaxed);
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
        self.stream_lag
            .store(entries.saturating_add(1), Ordering::Relaxed);
    }

    /// Purchases that reached their strategy, ever.
    pub fn purchases_started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Purchases turned away for want of room (`503 overloaded`), of every strategy, ever.
    pub fn turned_away(&self) -> u64 {
        let slot = Outcome::Refused(ErrorCode::Overloaded).index();
        (self.shards.iter())
            .flat_map(|shard| &shard.strategies)
            .map(|counts| counts.outcomes[slot].load(Ordering::Relaxed))
            .sum()
    }

    /// What every shard counted, summed.
    fn summed(&self) -> Shard {
        let sum = Shard::default();
        for shard in &self.shards {
            for (mine, theirs) in sum.strategies.iter().zip(&shard.strategies) {
                mine.add(theirs);
            }
            add(&sum.received, &shard.received);
        }
        sum
    }

    /// The strategies that counted anything, by name (the order the text lists them in).
    fn by_name(sum: &Shard) -> Vec<(&'static str, &Counts)> {
        let mut seen: Vec<_> = (Strategy::ALL.iter().zip(&sum.strategies))
            .filter(|(_, c)| c.latency.count() > 0)
            .map(|(s, c)| (s.name(), c))
            .collect();
        seen.sort_by_key(|(name, _)| *name);
        seen
    }

    /// The Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let sum = self.summed();
        let strategies = Metrics::by_name(&sum);
        let mut out = String::new();
        out.push_str("# HELP seckill_purchases_total Purchase requests by strategy and outcome.\n");
        out.push_str("# TYPE seckill_purchases_total counter\n");
        for (strategy, counts) in &strategies {
            let mut outcomes: Vec<_> = Outcome::all()
                .map(|o| (o.name(), counts.outcomes[o.index()].load(Ordering::Relaxed)))
                .filter(|(_, n)| *n > 0)
                .collect();
            outcomes.sort_by_key(|(outcome, _)| *outcome);
            for (outcome, n) in outcomes {
                let _ = writeln!(
                    out,
                    "seckill_purchases_total{{strategy=\"{strategy}\",outcome=\"{outcome}\"}} {n}"
                );
            }
        }
        out.push_str(
            "# HELP seckill_purchase_duration_seconds Time to answer a purchase request.\n",
        );
        out.push_str("# TYPE seckill_purchase_duration_seconds histogram\n");
        for (strategy, counts) in &strategies {
            (counts.latency).render(&mut out, "seckill_purchase_duration_seconds", strategy);
        }
        out.push_str("# HELP seckill_lock_wait_seconds Time spent acquiring a lock before the critical section.\n");
        out.push_str("# TYPE seckill_lock_wait_seconds histogram\n");
        for (strategy, counts) in &strategies {
            if counts.lock_wait.count() > 0 {
                (counts.lock_wait).render(&mut out, "seckill_lock_wait_seconds", strategy);
            }
        }
        out.push_str(
            "# HELP seckill_purchase_stage_seconds Time purchases spent in each stage the service times, by strategy: admission, strategy, and the strategy's parts (lock_wait, queued, batch with its lookup, stock_update, order_insert and commit, script, order_write).\n",
        );
        out.push_str("# TYPE seckill_purchase_stage_seconds summary\n");
        for (strategy, counts) in &strategies {
            for (stage, total) in Stage::ALL.iter().zip(&counts.stages) {
                let n = total.count.load(Ordering::Relaxed);
                if n == 0 {
                    continue;
                }
                let sum = total.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
                let labels = format!("strategy=\"{strategy}\",stage=\"{}\"", stage.name());
                let _ = writeln!(out, "seckill_purchase_stage_seconds_sum{{{labels}}} {sum}");
                let _ = writeln!(out, "seckill_purchase_stage_seconds_count{{{labels}}} {n}");
            }
        }
        out.push_str(
            "# HELP seckill_retries_total Retries made by strategies that retry (optimistic).\n",
        );
        out.push_str("# TYPE seckill_retries_total counter\n");
        for (strategy, counts) in &strategies {
            let n = counts.retries.load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(out, "seckill_retries_total{{strategy=\"{strategy}\"}} {n}");
            }
        }
        out.push_str("# HELP seckill_lock_holds_total Purchases that held a lock (the product's row lock or a distributed lock) and counted the calls they sent under it.\n");
        out.push_str("# TYPE seckill_lock_holds_total counter\n");
        out.push_str("# HELP seckill_calls_under_lock_total Calls those purchases sent after the call that took the lock, through the one that released it: the round trips every other buyer of the product waited for.\n");
        out.push_str("# TYPE seckill_calls_under_lock_total counter\n");
        for (strategy, counts) in &strategies {
            let holds = counts.lock_holds.load(Ordering::Relaxed);
            if holds > 0 {
                let calls = counts.calls_under_lock.load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "seckill_lock_holds_total{{strategy=\"{strategy}\"}} {holds}"
                );
                let _ = writeln!(
                    out,
                    "seckill_calls_under_lock_total{{strategy=\"{strategy}\"}} {calls}"
                );
            }
        }
        out.push_str(
            "# HELP seckill_purchase_requests_total Purchase requests received, refused at admission or not.\n",
        );
        out.push_str("# TYPE seckill_purchase_requests_total counter\n");
        let received = sum.received.load(Ordering::Relaxed);
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
        out.push_str("# HELP seckill_expiry_failures_total Batches of this instance's expiry sweep (a product's due orders, or its returns left half-way) that failed and wait for a later round; the other products' went on.\n");
        out.push_str("# TYPE seckill_expiry_failures_total counter\n");
        let failures = self.sweep_failures.load(Ordering::Relaxed);
        let _ = writeln!(out, "seckill_expiry_failures_total {failures}");
        out.push_str(
            "# HELP seckill_return_locks_total Returns that took the selling strategy's lock.\n",
        );
        out.push_str("# TYPE seckill_return_locks_total counter\n");
        let locks = self.return_locks.load(Ordering::Relaxed);
        let _ = writeln!(out, "seckill_return_locks_total {locks}");
        for (name, what, us) in [
            ("wait", "waiting for", &self.return_lock_wait_us),
            ("held", "holding", &self.return_lock_held_us),
        ] {
            let _ = writeln!(
                out,
                "# HELP seckill_return_lock_{name}_seconds_total Time returns spent {what} the selling strategy's lock.\n# TYPE seckill_return_lock_{name}_seconds_total counter"
            );
            let seconds = us.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(out, "seckill_return_lock_{name}_seconds_total {seconds}");
        }
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
        if let Some(lag) = self.stream_lag.load(Ordering::Relaxed).checked_sub(1) {
            out.push_str("# HELP seckill_stream_lag_entries Orders accepted (202) and not yet placed in the database.\n");
            out.push_str("# TYPE seckill_stream_lag_entries gauge\n");
            let _ = writeln!(out, "seckill_stream_lag_entries {lag}");
        }
        out
    }
}

/// Whole microseconds of `d`, saturating.
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_made_on_many_threads_are_summed_in_the_text_stages_too() {
        let metrics = Arc::new(Metrics::default());
        let threads: Vec<_> = (0..SHARDS + 3)
            .map(|_| {
                let metrics = Arc::clone(&metrics);
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        metrics.purchase_received();
                        metrics.observe(Observation {
                            strategy: Strategy::Conditional,
                            outcome: Outcome::Refused(ErrorCode::SoldOut),
                            latency: Duration::from_micros(50),
                            lock_wait: None,
                            retries: 1,
                            under_lock: Some(2),
                            stages: {
                                let mut stages = [None; Stage::COUNT];
                                stages[Stage::Strategy as usize] = Some(Duration::from_micros(20));
                                stages
                            },
                        });
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let n = (SHARDS + 3) * 100;
        let text = metrics.render();
        for line in [
            format!("seckill_purchase_requests_total {n}"),
            format!(r#"seckill_purchases_total{{strategy="conditional",outcome="sold_out"}} {n}"#),
            format!(
                r#"seckill_purchase_duration_seconds_bucket{{strategy="conditional",le="0.0005"}} {n}"#
            ),
            format!(r#"seckill_purchase_duration_seconds_count{{strategy="conditional"}} {n}"#),
            format!(r#"seckill_retries_total{{strategy="conditional"}} {n}"#),
            format!(r#"seckill_lock_holds_total{{strategy="conditional"}} {n}"#),
            format!(
                r#"seckill_calls_under_lock_total{{strategy="conditional"}} {}"#,
                2 * n
            ),
            format!(
                r#"seckill_purchase_stage_seconds_count{{strategy="conditional",stage="strategy"}} {n}"#
            ),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }

    #[test]
    fn every_outcome_has_a_slot_of_its_own() {
        let slots: Vec<usize> = Outcome::all().map(Outcome::index).collect();
        assert_eq!(slots, (0..Outcome::COUNT).collect::<Vec<_>>());
    }

    #[test]
    fn the_text_counts_each_strategy_and_outcome_apart_and_lists_them_by_name() {
        let metrics = Metrics::default();
        let seen = |strategy, outcome| Observation {
            strategy,
            outcome,
            latency: Duration::from_millis(3),
            lock_wait: None,
            retries: 0,
            under_lock: None,
            stages: [None; Stage::COUNT],
        };
        metrics.observe(seen(Strategy::Pessimistic, Outcome::Created));
        metrics.observe(seen(
            Strategy::Conditional,
            Outcome::Refused(ErrorCode::SoldOut),
        ));
        metrics.observe(seen(
            Strategy::Conditional,
            Outcome::Refused(ErrorCode::SoldOut),
        ));
        metrics.observe(seen(Strategy::Conditional, Outcome::Created));
        let text = metrics.render();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("seckill_purchases_total{"))
            .collect();
        assert_eq!(
            lines,
            [
                r#"seckill_purchases_total{strategy="conditional",outcome="created"} 1"#,
                r#"seckill_purchases_total{strategy="conditional",outcome="sold_out"} 2"#,
                r#"seckill_purchases_total{strategy="pessimistic",outcome="created"} 1"#,
            ]
        );
        assert!(text.contains(
            r#"seckill_purchase_duration_seconds_bucket{strategy="conditional",le="0.005"} 3"#
        ));
        assert!(
            text.contains(r#"seckill_purchase_duration_seconds_count{strategy="conditional"} 3"#)
        );
        assert!(
            !text.contains("seckill_lock_wait_seconds_count"),
            "no lock was waited for"
        );
    }
}
