//! Fault scenarios: each reproduces one classic failure of stock deduction or distributed
//! locking against servers it starts itself, runs the affected strategies or lock backends
//! through it, and reports *expected* against *observed*, with the figures and the timeline.
//!
//! | scenario | fault | must show |
//! |---|---|---|
//! | `lease-expiry` | the critical section stalls past the lease | `redis-lock` oversells, `redis-watchdog` does not, `redis-lock-fenced` rejects the stale write |
//! | `process-pause` | SIGSTOP of the app instance holding the lock, past the lease | the watchdog cannot help a frozen process; fencing rejects its late write |
//! | `holder-crash` | SIGKILL of the instance inside the critical section | how soon each lock comes back: never (`SETNX` without expiry), a lease, a session timeout, at once (row lock); no order lost or doubled |
//! | `unsafe-release` | a lease expires, then the old holder releases | a plain `DEL` frees the next holder's lock (two holders); compare-and-delete does not |
//! | `redis-failover` | the primary dies before replicating a grant; the replica is promoted | a second grant of the same lock; `WAIT 1` after acquiring tells the holder not to trust it |
//! | `local-mutex` | 1 vs 3 app instances | an in-process mutex is exclusive only within its process |
//! | `zk-session-expiry` | the holder is cut off from ZooKeeper until its session expires | `lost()` fires, another contender acquires, the fenced stale write is rejected |
//! | `lua-crash-before-order` | SIGKILL of the instance between `redis-lua`'s Lua deduction and its order insert | a unit sold to nobody (undersell); after `reconcile` it is on sale again and no order is doubled |
//! | `stream-consumer-crash` | SIGKILL of an instance whose consumer holds a batch read and not acknowledged | those accepted orders missing until the claim time; then claimed by a live consumer, each placed exactly once |
//! | `zk-leader-loss`, `etcd-leader-loss` | the cluster's leader is killed (and restarted) while 4 clients contend for one lock | a clean lock history (no overlap, tokens increasing, only the newest token written) and the unavailability window |
//! | `zk-partition` | the member holding A's session is cut off from the other two; B asks on the majority side | B granted after A's session expires, with a larger token; A's late write refused; A's `lost()` fires; the checker shows the overlap window |
//! | `sentinel-failover` | a `redis-watchdog` grant queued behind a filler for two frozen replicas; the primary is SIGKILLed, Sentinel promotes a replica | the promoted replica never got the grant: B is granted the same lock (the checker's overlap) and the same fencing token; with `WAIT 1` after the grant, A is told and does not act |
//! | `cluster-sale` | a flash sale through 2 app instances on the ZooKeeper ensemble, the etcd cluster and Redis behind Sentinel; the strategy's cluster leader is SIGKILLed when a third is sold, restarted after | the fenced strategies never oversell; the unfenced ones' outcome as it was; `503`s and the time from the kill to the next sale |
//! | `herd` | 64 waiters on one lock | requests per grant and hand-off latency: polling vs pub/sub vs predecessor watch |
//! | `redis-failover-stock` | the Redis primary holding a `redis-lua` counter dies; the promoted replica missed the last deductions | oversell of Redis-held stock; with `--redis-wait-replicas 1`, those purchases are refused 503 and nothing oversells |
//! | `batched-db-kill` | SIGKILL of MariaDB while a `batched` transaction waits to commit | every purchase of the batch answers 503, none is recorded; after the restart exactly the stock is sold |
//!
//! Every scenario starts private servers (and app processes), because it kills, pauses and
//! partitions them; with `SECKILL_EXTERNAL=1` it refuses to run. Verdicts are computed from
//! what was measured: for a deliberately broken variant, "pass" means its failure showed.

mod batched_db_kill;
mod cluster_sale;
mod failover;
mod fenced_store;
pub mod figures;
mod herd;
mod holder_crash;
mod leader_loss;
mod lease_expiry;
mod local_mutex;
mod lua_crash;
mod process_pause;
mod redis_failover_stock;
mod report;
mod sentinel_failover;
mod stream_crash;
mod unsafe_release;
mod zk_expiry;
mod zk_partition;

use std::fmt;
use std::path::PathBuf;
use std::sync::LazyLock;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use clap::builder::PossibleValue;
use serde::Serialize;

pub use report::{Event, Row, ScenarioReport, Timeline, Verdict};

use crate::rig::{control, start};

/// Every scenario, one line each: its variant and the function that plays it.
///
/// The variant is the scenario's name (its kebab-case on the command line and in the report)
/// and the name of its figures struct in [`figures`]. From the lines come the [`Scenario`]
/// enum (in the order `all` runs them), the [`Figures`] enum and the dispatch: a scenario is
/// added by one module and one line.
macro_rules! scenarios {
    ($($variant:ident => $run:path;)+) => {
        /// Every scenario, in the order `all` runs them; the names are the variants' kebab-case.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ValueEnum)]
        #[serde(rename_all = "kebab-case")]
        pub enum Scenario {
            $($variant,)+
        }

        /// The figures of one row, by scenario.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(untagged)]
        pub enum Figures {
            $($variant(figures::$variant),)+
        }

        $(impl From<figures::$variant> for Figures {
            fn from(f: figures::$variant) -> Figures {
                Figures::$variant(f)
            }
        })+

        async fn run_one(scenario: Scenario, opts: &ScenarioOptions) -> Result<ScenarioReport> {
            match scenario {
                $(Scenario::$variant => $run(opts).await,)+
            }
        }
    };
}

scenarios! {
    LeaseExpiry => lease_expiry::run;
    ProcessPause => process_pause::run;
    HolderCrash => holder_crash::run;
    UnsafeRelease => unsafe_release::run;
    RedisFailover => failover::run;
    LocalMutex => local_mutex::run;
    ZkSessionExpiry => zk_expiry::run;
    Herd => herd::run;
    BatchedDbKill => batched_db_kill::run;
    LuaCrashBeforeOrder => lua_crash::run;
    StreamConsumerCrash => stream_crash::run;
    RedisFailoverStock => redis_failover_stock::run;
    ZkLeaderLoss => leader_loss::zookeeper;
    EtcdLeaderLoss => leader_loss::etcd;
    ZkPartition => zk_partition::run;
    SentinelFailover => sentinel_failover::run;
    ClusterSale => cluster_sale::run;
}

impl Scenario {
    /// Every scenario, in the order `all` runs them.
    pub fn all() -> &'static [Scenario] {
        Scenario::value_variants()
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.to_possible_value().expect("no scenario is skipped");
        f.write_str(value.get_name())
    }
}

/// What `seckill-bench scenario` runs: one scenario, or `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    All,
    One(Scenario),
}

impl Selection {
    pub fn scenarios(self) -> Vec<Scenario> {
        match self {
            Selection::All => Scenario::all().to_vec(),
            Selection::One(s) => vec![s],
        }
    }
}

impl ValueEnum for Selection {
    fn value_variants<'a>() -> &'a [Selection] {
        static VARIANTS: LazyLock<Vec<Selection>> = LazyLock::new(|| {
            std::iter::once(Selection::All)
                .chain(Scenario::all().iter().copied().map(Selection::One))
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
pub struct ScenarioOptions {
    /// Short leases, few rounds: seconds per scenario, for CI.
    pub quick: bool,
    /// The `seckill-app` binary, needed by the scenarios that run the app.
    pub app_binary: Option<PathBuf>,
}

impl ScenarioOptions {
    /// The app binary, which `scenario` needs.
    fn app_binary(&self, scenario: Scenario) -> Result<&std::path::Path> {
        self.app_binary
            .as_deref()
            .with_context(|| format!("{scenario} runs seckill-app: its binary is needed"))
    }
}

/// Runs the selected scenario(s) and returns their reports.
pub async fn run(selection: Selection, opts: &ScenarioOptions) -> Result<Vec<ScenarioReport>> {
    if let Err(why) = sandbox::faults_allowed() {
        bail!("fault scenarios start, kill and pause their own servers: {why}");
    }
    let mut reports = Vec::new();
    for scenario in selection.scenarios() {
        reports.push(
            run_one(scenario, opts)
                .await
                .with_context(|| format!("scenario `{scenario}`"))?,
        );
    }
    Ok(reports)
}
