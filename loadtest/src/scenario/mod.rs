//! Fault scenarios: each reproduces one classic failure of stock deduction or distributed
//! locking against servers it starts itself, runs the affected strategies or lock backends
//! through it, and reports *expected* against *observed*, with the figures and the timeline.
//! The registry below says, for each, the fault and what it must show (`seckill-bench scenario
//! --help` prints the same).
//!
//! A scenario is a fault, a workload and a checker, as Jepsen composes its tests. Each one is a
//! file of this folder named as on the command line, holding only what differs from the others
//! behind the [`Scenario`] trait: its sizes, its figures, how it plays the fault, how it
//! judges a row and why the rows came out as they did. One driver plays any of them and builds
//! the report; the registry below names them, in the order `all` runs them.
//!
//! Every scenario starts private servers (and app processes), because it kills, pauses and
//! partitions them; with `SECKILL_EXTERNAL=1` it refuses to run. Verdicts are computed from
//! what was measured: for a deliberately broken variant, "pass" means its failure showed. No
//! scenario waits a fixed time for something to have happened: it waits for the state (a
//! transaction open in the database, a counter taken, a consumer's batch pending).

pub mod advisory_behind_pgbouncer;
pub mod app_failover;
pub mod batched_db_kill;
pub mod cache_stampede;
pub mod cancel_expiry_race;
pub mod cluster_failover_stock;
pub mod cluster_sale;
pub mod connection_cost;
pub mod etcd_leader_loss;
pub mod galera_for_update;
pub mod galera_partition;
pub mod herd;
pub mod holder_crash;
pub mod late_payment;
pub mod lease_distance;
pub mod lease_expiry;
pub mod local_mutex;
pub mod lua_crash_before_order;
pub mod primary_failover;
pub mod process_pause;
pub mod redis_failover;
pub mod redis_failover_stock;
pub mod replica_stock_read;
pub mod return_crash;
pub mod sentinel_failover;
pub mod shard_cut_off;
pub mod silent_path;
mod skeleton;
pub mod split_undersell;
pub mod stale_sold_out;
pub mod stream_consumer_crash;
pub mod unsafe_release;
pub mod zk_leader_loss;
pub mod zk_partition;
pub mod zk_session_expiry;

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use clap::builder::PossibleValue;
use serde::Serialize;

pub use skeleton::{Checked, Judgement, Moment, Stage, Timeline};

use crate::schema::{Row, ScenarioReport, Verdict};

/// What one fault scenario is made of; the driver does the rest.
pub trait Scenario {
    /// How big and how long: leases, stock, buyers, rounds.
    type Sizes: Copy;
    /// The form that takes seconds (tests, `run --quick`).
    const QUICK: Self::Sizes;
    /// Real leases and timeouts.
    const FULL: Self::Sizes;
    /// What a row is about: a strategy, a lock backend, a mode.
    type Subject: fmt::Display;
    /// What a row measured.
    type Figures: Serialize;

    /// The fault, in one sentence.
    fn fault(sizes: &Self::Sizes) -> String;

    /// Injects the fault and measures: one entry per row, in order.
    fn play(
        sizes: Self::Sizes,
        stage: &Stage,
    ) -> impl Future<Output = Result<Vec<(Self::Subject, Self::Figures)>>>;

    /// What the row's subject was expected to do, what it did, and whether that matched.
    fn judge(sizes: &Self::Sizes, subject: &Self::Subject, figures: &Self::Figures) -> Judgement;

    /// Why the rows came out as they did, in words chosen by the figures.
    fn why(sizes: &Self::Sizes, rows: &[(Self::Subject, Self::Figures)]) -> String;
}

/// The registry: every scenario's name, the fault it plays and what it must show, and the type
/// that plays it, in the order `all` runs them. The name is the variant's kebab-case, on the command line and in the report, and
/// the name of its file.
macro_rules! scenarios {
    ($($(#[doc = $help:literal])+ $variant:ident => $module:ident::$kind:ident;)+) => {
        /// Every scenario, in the order `all` runs them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
        pub enum Name {
            $($(#[doc = $help])+ $variant,)+
        }

        async fn play_one(name: Name, opts: &Options) -> Result<ScenarioReport> {
            match name {
                $(Name::$variant => drive::<$module::$kind>(name, opts).await,)+
            }
        }
    };
}

scenarios! {
    /// The critical section stalls past the lease: `redis-lock` oversells, `redis-watchdog` does
    /// not, `redis-lock-fenced` rejects the stale write.
    LeaseExpiry => lease_expiry::LeaseExpiry;
    /// SIGSTOP of the app instance holding the lock, past the lease: the watchdog cannot help a
    /// frozen process; fencing rejects its late write.
    ProcessPause => process_pause::ProcessPause;
    /// SIGKILL of the instance inside the critical section: how soon each lock comes back: never
    /// (`SETNX` without expiry), a lease, a session timeout, at once (row lock); no order lost or
    /// doubled.
    HolderCrash => holder_crash::HolderCrash;
    /// A lease expires, then the old holder releases: a plain `DEL` frees the next holder's lock
    /// (two holders); compare-and-delete does not.
    UnsafeRelease => unsafe_release::UnsafeRelease;
    /// PostgreSQL's session advisory lock through PgBouncer's transaction pooling: B is handed
    /// A's server session and granted at once (two holders, one in the lock table); session
    /// pooling and the transaction lock refuse B.
    AdvisoryBehindPgbouncer => advisory_behind_pgbouncer::AdvisoryBehindPgbouncer;
    /// The primary dies before replicating a grant; the replica is promoted: a second grant of the
    /// same lock; `WAIT 1` after acquiring tells the holder not to trust it.
    RedisFailover => redis_failover::RedisFailover;
    /// 1 vs 3 app instances: an in-process mutex is exclusive only within its process.
    LocalMutex => local_mutex::LocalMutex;
    /// The holder is cut off from ZooKeeper until its session expires: `lost()` fires, another
    /// contender acquires, the fenced stale write is rejected.
    ZkSessionExpiry => zk_session_expiry::ZkSessionExpiry;
    /// 64 waiters on one lock: requests per grant and hand-off latency: polling vs pub/sub vs
    /// predecessor watch.
    Herd => herd::Herd;
    /// SIGKILL of MariaDB while a `batched` transaction waits to commit: every purchase of the
    /// batch answers 503, none is recorded; after the restart exactly the stock is sold.
    BatchedDbKill => batched_db_kill::BatchedDbKill;
    /// SIGKILL of the instance between `redis-lua`'s Lua deduction and its order insert: a unit
    /// sold to nobody (undersell); after `reconcile` it is on sale again and no order is doubled.
    LuaCrashBeforeOrder => lua_crash_before_order::LuaCrashBeforeOrder;
    /// SIGKILL of an instance whose consumer holds a batch read and not acknowledged: those
    /// accepted orders missing until the claim time; then claimed by a live consumer, each placed
    /// exactly once.
    StreamConsumerCrash => stream_consumer_crash::StreamConsumerCrash;
    /// The Redis primary holding a `redis-lua` counter dies; the promoted replica missed the last
    /// deductions: oversell of Redis-held stock; with `--redis-wait-replicas 1`, those purchases
    /// are refused 503 and nothing oversells.
    RedisFailoverStock => redis_failover_stock::RedisFailoverStock;
    /// The cluster's leader is killed (and restarted) while 4 clients contend for one lock: a clean
    /// lock history (no overlap, tokens increasing, only the newest token written) and the
    /// unavailability window.
    ZkLeaderLoss => zk_leader_loss::ZkLeaderLoss;
    /// The cluster's leader is killed (and restarted) while 4 clients contend for one lock: a clean
    /// lock history (no overlap, tokens increasing, only the newest token written) and the
    /// unavailability window.
    EtcdLeaderLoss => etcd_leader_loss::EtcdLeaderLoss;
    /// The member holding A's session is cut off from the other two; B asks on the majority side: B
    /// granted after A's session expires, with a larger token; A's late write refused; A's `lost()`
    /// fires; the checker shows the overlap window.
    ZkPartition => zk_partition::ZkPartition;
    /// A `redis-watchdog` grant queued behind a filler for two frozen replicas; the primary is
    /// SIGKILLed, Sentinel promotes a replica: the promoted replica never got the grant: B is
    /// granted the same lock (the checker's overlap) and the same fencing token; with `WAIT 1`
    /// after the grant, A is told and does not act.
    SentinelFailover => sentinel_failover::SentinelFailover;
    /// A flash sale through 2 app instances on the ZooKeeper ensemble, the etcd cluster and Redis
    /// behind Sentinel; the strategy's cluster leader is SIGKILLed when a third is sold, restarted
    /// after: the fenced strategies never oversell; the unfenced ones' outcome as it was; `503`s
    /// and the time from the kill to the next sale.
    ClusterSale => cluster_sale::ClusterSale;
    /// More `db-row-lock` waiters than the pool has connections, beside lock-free purchases: with
    /// one pool the lock-free purchases wait out the pool's timeout for a connection; with the
    /// lock's own pool they do not; with a bounded wait the waiters are told `busy` and nobody
    /// waits out the pool.
    ConnectionCost => connection_cost::ConnectionCost;
    /// A buyer pays after the deadline, once the expired order's unit was sold again: a payment
    /// that does not check the order's state oversells; the conditional transition refuses it
    /// (`order_expired`).
    LatePayment => late_payment::LatePayment;
    /// A cancellation and an expiry of one order at the same instant, many times: returned
    /// read-then-write, the unit comes back twice (phantom units that sell: oversell); with one
    /// conditional transition each, once.
    CancelExpiryRace => cancel_expiry_race::CancelExpiryRace;
    /// SIGKILL of the instance between an order's expiry and its unit's return to the Redis
    /// counter: the unit stranded (undersell) until `reconcile` gives it back, once; the window
    /// measured.
    ReturnCrash => return_crash::ReturnCrash;
    /// Units come back after a sell-out while the instances remember "sold out": without
    /// invalidation buyers are refused while stock is left; with it, the returned units sell.
    StaleSoldOut => stale_sold_out::StaleSoldOut;
    /// Readers refresh a product's page while its cached copies expire: with one expiry for all
    /// and every miss reading, each expiry sends the readers to the database at once; with one
    /// read per expiry and lifetimes drawn apart, about one read per instance and lifetime.
    CacheStampede => cache_stampede::CacheStampede;
    /// The database's primary is SIGKILLed mid-sale with its replica cut off, and the replica
    /// promoted: asynchronous replication loses answered orders and sells their units again;
    /// semi-synchronous with AFTER_SYNC answers none it could lose; with AFTER_COMMIT another
    /// client reads orders the failover loses; with a short timeout it falls back to
    /// asynchronous, silently, and loses answered ones too.
    PrimaryFailover => primary_failover::PrimaryFailover;
    /// Buyers check the stock on a replica that lags and buy on the primary: an unconditional
    /// deduction trusts the stale check and oversells; a conditional one refuses them there.
    ReplicaStockRead => replica_stock_read::ReplicaStockRead;
    /// The primary under two app instances is SIGKILLed mid-sale and the address they reach
    /// it at moved to the promoted replica: asynchronous replication loses orders answered
    /// `201` (their units sold again) while the new primary's accounting balances;
    /// semi-synchronous with AFTER_SYNC answers none it could lose, and the buyers' clicks
    /// again with the same request id are placed once; fallen back to asynchronous after its
    /// timeout it loses every order answered since, unless the instances read the primary's
    /// status and refuse (`--require-semi-sync`): then only the commit that waited.
    AppFailover => app_failover::AppFailover;
    /// A product's stock split over Redis counters (`redis-split`), as many buyers as units:
    /// answered "sold out" at the buyer's empty part, buyers are refused while other parts hold
    /// units (undersell); with units moved home from the other parts, every unit sells.
    SplitUndersell => split_undersell::SplitUndersell;
    /// A Redis Cluster master SIGKILLed right after `redis-lua` decrements its replica, cut
    /// off, never received: the promoted replica offers those units again and they sell twice;
    /// `reconcile` after the failover lowers the counter from the orders and nothing oversells.
    ClusterFailoverStock => cluster_failover_stock::ClusterFailoverStock;
    /// The network between the app and one Redis Cluster shard (master and replica) cut
    /// mid-sale, the cluster's bus not: its product's purchases answer `503` and none sells,
    /// a product on another shard sells on; back, both sell exactly their stock.
    ShardCutOff => shard_cut_off::ShardCutOff;
    /// A crowd buys through `redis-lock` with MariaDB and Redis over loopback, then a round trip
    /// away, the lease the same: far away a holder is still inside when its lease runs out
    /// (oversell); `redis-watchdog`'s renewals keep it; `redis-lock-fenced` refuses the stale
    /// holder's write.
    LeaseDistance => lease_distance::LeaseDistance;
    /// The path from the instance holding a `redis-watchdog` lock to Redis goes silent while
    /// the holder works: its renewals are lost, the lease runs out, a buyer on another instance
    /// is granted it (oversell); `redis-watchdog-fenced` refuses the stale holder's write.
    SilentPath => silent_path::SilentPath;
    /// `pessimistic` on a Galera cluster: with every instance writing to one node the row lock
    /// queues the buyers; with each writing to its own, two buyers hold the lock at once, one
    /// is aborted by certification (`busy`), and nothing oversells; aborts per sale counted.
    GaleraForUpdate => galera_for_update::GaleraForUpdate;
    /// A Galera node cut off from the other two mid-sale, then one killed: its buyers are
    /// told `503` and its instance's health check fails; the majority sells on, and every
    /// answered order is kept and reaches the node when it is back.
    GaleraPartition => galera_partition::GaleraPartition;
}

impl Name {
    /// Every scenario, in the order `all` runs them.
    pub fn all() -> &'static [Name] {
        Name::value_variants()
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.to_possible_value().expect("no scenario is skipped");
        f.write_str(value.get_name())
    }
}

/// What `seckill-bench scenario` runs: one scenario, or `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    All,
    One(Name),
}

impl Selection {
    pub fn scenarios(self) -> Vec<Name> {
        match self {
            Selection::All => Name::all().to_vec(),
            Selection::One(s) => vec![s],
        }
    }
}

impl ValueEnum for Selection {
    fn value_variants<'a>() -> &'a [Selection] {
        static VARIANTS: LazyLock<Vec<Selection>> = LazyLock::new(|| {
            std::iter::once(Selection::All)
                .chain(Name::all().iter().copied().map(Selection::One))
                .collect()
        });
        &VARIANTS
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        match self {
            Selection::All => Some(PossibleValue::new("all").help("every scenario, in turn")),
            Selection::One(s) => s.to_possible_value(),
        }
    }
}

/// How to run a scenario.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Short leases, few rounds: seconds per scenario, for CI.
    pub quick: bool,
    /// The `seckill-app` binary, needed by the scenarios that run the app.
    pub app_binary: Option<PathBuf>,
    /// The round trip added between the app instances and the servers they reach (`--rtt`),
    /// by relays; none: loopback. The scenarios whose clients reach their servers themselves,
    /// and those that set their own distances, play over loopback, and their reports say so.
    pub rtt: Option<Duration>,
    /// Told of every timeline event as it is logged (the live page); in teaching mode it holds
    /// each event until "Next".
    pub live: crate::live::Feed,
}

/// Runs the selected scenario(s) and returns their reports.
pub async fn run(selection: Selection, opts: &Options) -> Result<Vec<ScenarioReport>> {
    if let Err(why) = sandbox::faults_allowed() {
        bail!("fault scenarios start, kill and pause their own servers: {why}");
    }
    let mut reports = Vec::new();
    for name in selection.scenarios() {
        reports.push(
            play_one(name, opts)
                .await
                .with_context(|| format!("scenario `{name}`"))?,
        );
    }
    Ok(reports)
}

/// The driver: plays scenario `S` in the form `opts` asks for and builds its report.
async fn drive<S: Scenario>(name: Name, opts: &Options) -> Result<ScenarioReport> {
    let sizes = if opts.quick { S::QUICK } else { S::FULL };
    let stage = Stage::new(
        name.to_string(),
        opts.app_binary.clone(),
        opts.rtt,
        opts.live.clone(),
    );
    let measured = S::play(sizes, &stage).await?;
    let rows = measured
        .iter()
        .map(|(subject, figures)| {
            let judged = S::judge(&sizes, subject, figures);
            let serde_json::Value::Object(figures) = serde_json::to_value(figures)? else {
                bail!("{name}: a row's figures are not an object");
            };
            Ok(Row {
                subject: subject.to_string(),
                expected: judged.expected,
                observed: judged.observed,
                verdict: Verdict::from_bool(judged.holds),
                figures,
            })
        })
        .collect::<Result<Vec<Row>>>()?;
    Ok(ScenarioReport {
        scenario: name.to_string(),
        fault: S::fault(&sizes),
        servers: stage.servers(),
        rows,
        timeline: stage.events(),
        why: S::why(&sizes, &measured),
    })
}
