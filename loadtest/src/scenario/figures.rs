//! What each scenario measured, typed: one struct per scenario, one per row. The verdicts, the
//! "observed" column and the "why" paragraph are all computed from these values; the report
//! shows them as `name = value` and `report.json` as an object.

use serde::Serialize;

/// `lease-expiry`: A stalls past the lease inside the critical section of the last unit, B
/// asks for it meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LeaseExpiry {
    pub oversell: i64,
    pub orders: i64,
    /// A's order was placed.
    pub a_created: bool,
    /// B's order was placed.
    pub b_created: bool,
    /// A's late write was refused by the product's fence (`409 lock_lost`).
    pub stale_write_rejected: bool,
}

/// `process-pause`: the instance holding the lock for A is frozen past the lease; B buys
/// through the other instance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ProcessPause {
    pub oversell: i64,
    pub a_created: bool,
    pub b_created: bool,
    pub stale_write_rejected: bool,
    /// How long into the freeze B was answered.
    pub b_served_after_freeze_ms: f64,
}

/// `holder-crash`: the holder dies inside the critical section; probes on the other instance
/// try to buy until one does.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HolderCrash {
    /// A probe bought within the bound.
    pub recovered: bool,
    /// How long after the crash it did.
    pub lock_back_ms: Option<f64>,
    /// Probes refused `busy` (the lock or row lock still held) before one bought or the bound
    /// ran out.
    pub probes_busy: u64,
    /// Probes refused or failed otherwise.
    pub probes_other: u64,
    /// Orders beyond those the probes were told of, plus units the stock counter and the
    /// orders disagree on: 0 when no order was lost or doubled.
    pub orders_lost_or_duplicated: i64,
}

/// `lua-crash-before-order`: the instance running a `redis-lua` purchase dies between the Lua
/// deduction and the order insert; then the product is reconciled and sold out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LuaCrashBeforeOrder {
    /// Units taken from the counter without an order, right after the crash.
    pub undersell_after_crash: i64,
    /// The crashed click's retry was told `busy` before the reconciliation.
    pub retry_before_reconcile_busy: bool,
    /// The counter as the reconciliation found it (−1: none).
    pub counter_found: i64,
    pub counter_after: i64,
    pub released_requests: u64,
    /// The crashed click's retry bought after the reconciliation.
    pub retry_after_reconcile_created: bool,
    pub units_sold: i64,
    pub orders: i64,
    pub oversell: i64,
    /// Units left unsold or taken without an order at the end, although buyers wanted more.
    pub undersell_at_end: i64,
}

/// `stream-consumer-crash`: an instance dies with its consumer's batch read and not
/// acknowledged; a live consumer claims it after the claim time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StreamConsumerCrash {
    /// Buyers answered `202`.
    pub accepted: i64,
    /// Entries the dead consumer had read and not acknowledged when it died.
    pub held_by_dead_consumer: i64,
    /// Orders in the database before the claim time had passed.
    pub orders_before_claim: i64,
    pub orders: i64,
    /// Units still waiting in the stream at the end.
    pub still_pending: i64,
    pub oversell: i64,
}

/// `unsafe-release`: A outlives its lease, B acquires, then A releases late, and C asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnsafeRelease {
    /// Clients holding the lock at once after A's late release (B and maybe C).
    pub holders_at_once: u8,
    /// A's late release deleted a lock — B's — and reported it as A's own.
    pub late_release_deleted_lock: bool,
    pub token_a: u64,
    pub token_b: u64,
}

/// `redis-failover`: A is granted a lock on a primary that dies before replicating it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RedisFailover {
    /// A acts on its grant (no `WAIT`, or `WAIT` saw a replica acknowledge it).
    pub a_trusts: bool,
    /// B was granted the lock by the promoted replica.
    pub b_granted: bool,
    /// Both of the above: two clients believe they hold the lock.
    pub double_grant: bool,
    /// Replicas that acknowledged A's grant (`WAIT 1`), when asked.
    pub replicas_acked: Option<i64>,
    pub token_a: u64,
    pub token_b: Option<u64>,
    /// B's token is not above A's: the fencing counter lost its increment too.
    pub fencing_token_reused: bool,
}

/// `local-mutex`: the same sale behind one instance, then behind three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LocalMutex {
    pub instances: usize,
    pub oversell: i64,
    pub orders: i64,
    /// Orders the buyers were told of.
    pub created: usize,
    /// Sales run until one oversold (three instances only).
    pub rounds: Option<u64>,
}

/// `zk-session-expiry`: A is cut off from ZooKeeper until its session expires; B acquires and
/// writes, then A writes late. One row per store: unfenced and fenced.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ZkSessionExpiry {
    /// A's `lost()` fired.
    pub lost_fired: bool,
    pub b_granted_after_cut_ms: f64,
    pub lost_after_cut_ms: f64,
    pub token_a: u64,
    pub token_b: u64,
    /// This store accepted A's late write.
    pub stale_write_accepted: bool,
    /// Whose write the store holds in the end (`A` or `B`).
    pub final_writer: char,
}

/// `herd`: many waiters on one lock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Herd {
    pub requests_per_grant: f64,
    pub wake_p50_ms: f64,
    pub wake_p99_ms: f64,
    /// Grants that overlapped another holder's (must be 0).
    pub overlaps: usize,
}

/// `batched-db-kill`: MariaDB is killed while a batch is written and not committed; after the
/// restart the sale goes on. Both rows carry the same figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BatchedDbKill {
    /// Purchases in the killed batch.
    pub batch: usize,
    /// The batch's orders were seen written, uncommitted, before the kill.
    pub written_before_kill: bool,
    /// Purchases of the batch answered `503`.
    pub batch_503: usize,
    /// Orders in the database after the restart, before anyone bought again (must be 0).
    pub batch_orders: i64,
    /// Units gone from the stock after the restart, before anyone bought again (must be 0).
    pub batch_units_taken: i64,
    /// Purchases answered `201` after the restart.
    pub created_after_restart: u64,
    pub first_sale_after_restart_ms: Option<f64>,
    pub sold: i64,
    pub oversell: i64,
    pub lost_updates: i64,
    /// Units left although the crowd asked for twice the stock.
    pub undersell: i64,
}

impl super::Figures {
    /// `name = value, …` for the report's table (absent values left out).
    pub fn markdown(&self) -> String {
        let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(self) else {
            return String::new();
        };
        fields
            .iter()
            .filter_map(|(name, value)| {
                let value = match value {
                    serde_json::Value::Null => return None,
                    serde_json::Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
                    serde_json::Value::Number(n) => match n.as_f64() {
                        Some(v) if v.fract() != 0.0 => format!("{v:.1}"),
                        _ => n.to_string(),
                    },
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                Some(format!("{name} = {value}"))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `redis-failover-stock`, one row per mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RedisFailoverStock {
    /// Replicas each deduction waited for (`--redis-wait-replicas`).
    pub wait_replicas: u32,
    pub sold_before: usize,
    /// Purchases placed while the replica was cut off.
    pub sold_during: usize,
    /// Purchases refused `503` while the replica was cut off.
    pub refused_during: usize,
    /// The promoted replica's counter, as the app read it after the failover.
    pub counter_after_failover: i64,
    pub sold_after: usize,
    pub units_sold: i64,
    pub orders: i64,
    pub oversell: i64,
}

/// `zk-leader-loss` and `etcd-leader-loss`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LeaderLoss {
    pub clients: usize,
    pub grants_before: usize,
    pub grants_after: usize,
    /// From the last grant before the kill to the first after it.
    pub without_grant_ms: Option<f64>,
    /// From the kill to the first grant while the old leader was still down (`None`: none
    /// before its restart, although the other two members are a majority).
    pub regained_while_down_ms: Option<f64>,
    pub loss_notices: usize,
    pub refused_writes: usize,
    /// Violations the history checker found.
    pub violations: usize,
}

/// `zk-leader-loss`: [`LeaderLoss`] on the ZooKeeper ensemble.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct ZkLeaderLoss(pub LeaderLoss);

/// `etcd-leader-loss`: [`LeaderLoss`] on the etcd cluster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct EtcdLeaderLoss(pub LeaderLoss);

/// `zk-partition`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ZkPartition {
    pub session_ms: f64,
    pub token_a: u64,
    pub token_b: u64,
    pub b_granted_after_cut_ms: f64,
    /// When A's `lost()` fired, after the cut (`None`: it never did).
    pub a_lost_after_cut_ms: Option<f64>,
    pub stale_write_refused: bool,
    /// What the lock-history checker found, by rule.
    pub overlaps: usize,
    pub tokens_not_increasing: usize,
    pub stale_writes_accepted: usize,
}

/// `sentinel-failover`, one row per run: without and with a replication requirement on A.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SentinelFailover {
    /// Replicas that had to confirm each of A's grants (`WAIT`); 0: none.
    pub wait_replicas: u32,
    /// Bytes the primary still held for a replica when it was killed (the filler, then A's
    /// grant): what the frozen replicas never received.
    pub held_back_bytes: u64,
    /// How long both replicas were frozen (Sentinel's `down-after-milliseconds` is 1000).
    pub replicas_frozen_ms: f64,
    /// A's token, when A was granted the lock and acted on it.
    pub token_a: Option<u64>,
    /// A's acquire failed: only this many replicas confirmed the grant.
    pub a_unreplicated_acks: Option<u32>,
    /// The promoted replica had A's lock when it became primary.
    pub promoted_had_grant: bool,
    /// The promoted replica's fencing counter then.
    pub promoted_fence: u64,
    pub promoted_after_kill_ms: f64,
    pub b_granted_after_kill_ms: Option<f64>,
    pub token_b: Option<u64>,
    /// The fenced store's verdict on A's write after B's (`None`: A never acted).
    pub a_late_write_accepted: Option<bool>,
    /// When A's `lost()` fired (full form only).
    pub a_lost_after_kill_ms: Option<f64>,
    /// What the lock-history checker found, by rule.
    pub overlaps: usize,
    pub tokens_not_increasing: usize,
    pub stale_writes_accepted: usize,
}

/// `cluster-sale`, one row per strategy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClusterSale {
    /// The strategy fences its stock write with the lock's token.
    pub fenced: bool,
    /// Replicas every deduction of stock held in Redis waited for (`--redis-wait-replicas`;
    /// 0 for the lock strategies).
    pub wait_replicas: u32,
    pub stock: i64,
    pub buyers: usize,
    /// Clicks sent in all.
    pub requests: usize,
    /// Clicks answered `201`.
    pub created: usize,
    /// Clicks answered `503` (`backend_unavailable` or `busy`).
    pub answered_503: usize,
    /// Clicks refused `lock_lost` (a fenced write refused).
    pub lock_lost: usize,
    /// Clicks answered otherwise (not 201, 503, `lock_lost` or `sold_out`).
    pub other: usize,
    /// Purchases answered `201` before the leader was killed.
    pub sold_before_kill: usize,
    /// From the kill to the first purchase sent after it that was placed (`None`: none was).
    pub unavailable_ms: Option<f64>,
    pub units_sold: i64,
    /// The stock left at its home (the row, or the Redis counter) after the sale.
    pub final_stock: i64,
    pub oversell: i64,
    pub lost_updates: i64,
    /// Units left unsold although the buyers asked for more, plus units taken from a Redis
    /// counter without an order (a deduction whose answer died with the primary).
    pub undersell: i64,
}
