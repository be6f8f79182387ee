//! `cluster-failover-stock`: on a Redis Cluster, the master serving a `redis-lua` counter dies
//! right after deductions its replica never received; the replica takes its slots and offers
//! those units again.
//!
//! A cluster shard replicates as a lone Redis does, asynchronously: a script's decrement is
//! answered, then shipped. The orders placed on decrements the replica never received stay in
//! the database, while the promoted replica's counter — and its charge records, which would
//! have told a retry its purchase was made — still has their units. Buyers take them:
//! **oversell**, from the fastest safe strategy on one server, and the cluster's client
//! follows the failover without a word. The set-up is made certain rather than lucky: the
//! replica is cut off from its master (its link dropped, its handshake refused) before the
//! last sales, as a partition between the two would.
//!
//! `reconcile`, run once the promoted master answers, counts what the orders and the stream
//! account for and lowers the counter found above it: the lost decrements are made again from
//! the database, and nothing oversells. What it cannot shorten is the window: from the
//! promotion until someone reconciles, the units are on sale twice.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use app::api::{ErrorCode, Home, Strategy};
use app::redis_stock::{CLUSTER_LANES, Keys};
use sandbox::{Cluster, RedisCluster, RedisShard};
use serde::{Deserialize, Serialize};
use testkit::Clicks;

use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::{AppBinary, Fleet, accounting};
use crate::rig::{control, start};

pub struct ClusterFailoverStock;

/// The master of a counter's shard dies after its replica missed the last deductions; one row
/// per mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub stock: i64,
    pub sold_before: usize,
    /// Purchases placed while the replica was cut off: decrements only the master had.
    pub sold_during: usize,
    /// The counter as the app read it before the kill.
    pub counter_before_kill: i64,
    /// The promoted replica's counter, as the app read it after the failover.
    pub counter_after_failover: i64,
    /// Units the promoted counter offers that orders already hold.
    pub offered_again: i64,
    /// `reconcile`'s counter, when it ran.
    pub counter_after_reconcile: Option<i64>,
    /// From the kill to the app reading the promoted replica's counter, in ms: the cluster's
    /// failure detection, its vote, and the client finding the new master.
    pub unavailable_ms: u64,
    pub sold_after: usize,
    pub units_sold: i64,
    pub orders: i64,
    pub oversell: i64,
}

/// Whether the counter is reconciled after the failover, before buyers take what is left.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    reconcile: bool,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.reconcile {
            false => "redis-lua on a cluster, no reconcile",
            true => "redis-lua on a cluster, reconcile after the failover",
        })
    }
}

/// The instances' key prefix, so the scenario can name the counters' keys.
const PREFIX: &str = "cfs:";
/// Where each mode's product id search starts.
const PRODUCTS: u64 = 960;
const STOCK: i64 = 20;
/// Units sold while the replica keeps up.
const BEFORE: u64 = 5;
/// Purchases made while the replica is cut off.
const DURING: u64 = 5;
/// How long the cluster may take to promote a replica, and the app to find it.
const PATIENCE: Duration = Duration::from_secs(60);

impl Scenario for ClusterFailoverStock {
    type Sizes = ();
    const QUICK: () = ();
    const FULL: () = ();
    type Subject = Mode;
    type Figures = Figures;

    fn fault(_: &()) -> String {
        format!(
            "{STOCK} units in a `redis-lua` counter on a Redis Cluster (3 masters, an async \
             replica each); {BEFORE} sell, the counter's replica is cut off from its master, \
             {DURING} more sell, the master is SIGKILLed and the cluster promotes the replica; \
             buyers take what is left"
        )
    }

    async fn play(_: (), stage: &Stage) -> Result<Vec<(Mode, Figures)>> {
        let cluster = Arc::new(start(RedisCluster::start).await?);
        let flags = vec![format!("--lock-prefix={PREFIX}")];
        // The cluster's members announce their own addresses, which a relay cannot stand in
        // for: the instances reach them over loopback whatever `--rtt` says.
        let app = AppBinary::local(stage.app_path()?);
        let fleet = Fleet::start_with_redis(app, 1, &flags, cluster.url()).await?;
        let mut rows = Vec::new();
        // Each mode kills the master of a shard of its own: the first shard, then the second.
        for (n, reconcile) in [false, true].into_iter().enumerate() {
            let mode = Mode { reconcile };
            let (product, shard) =
                product_on(&cluster, PREFIX, n, PRODUCTS + 100 * n as u64).await?;
            rows.push((mode, one(stage, mode, &fleet, product, shard).await?));
        }
        Ok(rows)
    }

    fn judge(_: &(), mode: &Mode, f: &Figures) -> Judgement {
        let observed = format!(
            "{} sold while the replica was cut off; counter {} before the kill, {} on the \
             promoted replica ({} offered again){}; {} unit(s) in {} order(s): oversell {}",
            f.sold_during,
            f.counter_before_kill,
            f.counter_after_failover,
            f.offered_again,
            f.counter_after_reconcile
                .map(|c| format!(", {c} after reconcile"))
                .unwrap_or_default(),
            f.units_sold,
            f.orders,
            f.oversell
        );
        let during = f.sold_during as i64;
        match mode.reconcile {
            false => Judgement::new(
                format!(
                    "the {DURING} units sold while the replica was cut off are offered again \
                     and sell twice: oversell {DURING}"
                ),
                observed,
                f.sold_during == DURING as usize
                    && f.offered_again == during
                    && f.oversell == during,
            ),
            true => Judgement::new(
                format!(
                    "reconcile lowers the promoted counter by the {DURING} lost decrements: \
                     exactly {} sold, no oversell",
                    f.stock
                ),
                observed,
                f.offered_again == during
                    && f.counter_after_reconcile == Some(f.counter_before_kill)
                    && f.oversell == 0
                    && f.units_sold == f.stock,
            ),
        }
    }

    fn why(_: &(), rows: &[(Mode, Figures)]) -> String {
        let mut text = String::from(
            "A cluster's master answers a decrement before its replica has it. The orders \
             placed on decrements the replica never received stay in the database; the \
             promoted replica's counter still holds their units, and its client, which follows \
             the slots to the new master, sells them again.",
        );
        for (mode, f) in rows {
            text.push_str(&format!(
                " {mode}: {} sold while the replica was cut off, the promoted counter offered \
                 {} of them again, the app reached it {} ms after the kill{}, and the sale \
                 ended with {} unit(s) in orders of {} (oversell {}).",
                f.sold_during,
                f.offered_again,
                f.unavailable_ms,
                f.counter_after_reconcile
                    .map(|c| format!(", reconcile set the counter to {c}"))
                    .unwrap_or_default(),
                f.units_sold,
                f.stock,
                f.oversell
            ));
        }
        text.push_str(
            " The database is the record: `reconcile` after a failover makes the lost \
             decrements again from the orders. Until it runs the units are on sale twice. On a \
             lone primary, `--redis-wait-replicas` refuses instead the purchases no replica \
             acknowledged (scenario `redis-failover-stock`).",
        );
        text
    }
}

/// The first product from `from` whose counter, under the key prefix `prefix`, lives on the
/// cluster's `shard`-th shard, and that shard.
pub(super) async fn product_on(
    cluster: &Arc<RedisCluster>,
    prefix: &str,
    shard: usize,
    from: u64,
) -> Result<(u64, Arc<RedisShard>)> {
    let keys = Keys::in_lanes(prefix, CLUSTER_LANES);
    let c = Arc::clone(cluster);
    control(move || {
        // The last shard is never killed or cut off: ask one of its members.
        let asked = c.shards()[sandbox::SHARDS - 1].member(0);
        let target = Arc::clone(&c.shards()[shard]);
        for product in from..from + CLUSTER_LANES {
            let slot: u16 = asked
                .command(&["CLUSTER", "KEYSLOT", &keys.stock(product)])?
                .parse()
                .unwrap_or(u16::MAX);
            if c.shard_of_slot(slot).slots() == target.slots() {
                return Ok((product, target));
            }
        }
        Err(sandbox::Error::Control {
            server: "redis-cluster".into(),
            action: "find a product on a shard",
            reason: format!("no lane of {CLUSTER_LANES} lives on shard {shard}"),
        })
    })
    .await
}

async fn one(
    stage: &Stage,
    mode: Mode,
    fleet: &Fleet,
    product: u64,
    shard: Arc<RedisShard>,
) -> Result<Figures> {
    let tl = stage.round(mode.to_string());
    fleet.reset_in(product, STOCK, Home::Redis).await?;
    let sold_before = fleet
        .one_buyer(Strategy::RedisLua, product, "before", Clicks::Total(BEFORE))
        .await
        .created();
    let s = Arc::clone(&shard);
    control(move || s.await_replica_caught_up(PATIENCE)).await?;
    tl.log(
        "app",
        format!("{sold_before} unit(s) sold of product {product}; the replica has them"),
    );
    let s = Arc::clone(&shard);
    let master = control(move || s.cut_replication()).await?;
    tl.log(
        "replica",
        "cut off from its master: it receives nothing more",
    );
    let during = fleet
        .one_buyer(Strategy::RedisLua, product, "during", Clicks::Total(DURING))
        .await;
    let counter_before_kill = fleet.product(product).await?.stock;
    tl.log(
        "app",
        format!(
            "{} sold while the replica was cut off; the counter reads {counter_before_kill}",
            during.created()
        ),
    );

    let s = Arc::clone(&shard);
    control(move || s.process(master).kill()).await?;
    let killed = Instant::now();
    tl.log("master", "killed (SIGKILL)");
    let s = Arc::clone(&shard);
    // The dead master answers nothing, so the member named next is the promoted replica.
    control(move || {
        let promoted = s.await_leader(PATIENCE);
        s.heal_replication();
        promoted
    })
    .await?;
    tl.log("replica", "promoted by the cluster's vote");
    let counter_after_failover = fleet.await_product(product, |_| true).await?.stock;
    let unavailable_ms = u64::try_from(killed.elapsed().as_millis()).unwrap_or(u64::MAX);
    tl.log(
        "app",
        format!("reads the promoted replica's counter: {counter_after_failover}"),
    );
    let s = Arc::clone(&shard);
    control(move || s.rejoin(master, PATIENCE)).await?;
    tl.log("old master", "restarted: a replica of the promoted one");

    let counter_after_reconcile = match mode.reconcile {
        false => None,
        true => {
            let found = fleet.api.reconcile(product).await?;
            tl.log(
                "reconcile",
                format!(
                    "{} unit(s) in orders: the counter {} → {}",
                    found.ordered,
                    found.counter_found.unwrap_or_default(),
                    found.counter_after
                ),
            );
            Some(found.counter_after)
        }
    };

    let until = Clicks::UntilSoldOut {
        pause: Duration::from_millis(50),
        patience: PATIENCE,
    };
    let after = fleet
        .one_buyer(Strategy::RedisLua, product, "after", until)
        .await;
    ensure!(
        after.refused(ErrorCode::SoldOut) > 0,
        "the sale did not end within {PATIENCE:?} of the failover: {}",
        after.outcomes()
    );
    let end = fleet.product(product).await?;
    let acc = accounting(&end);
    tl.log(
        "db",
        format!(
            "{} more sold; {} unit(s) in {} order(s) of {STOCK}: oversell {}",
            after.created(),
            end.sold,
            end.orders,
            acc.oversell
        ),
    );
    Ok(Figures {
        stock: STOCK,
        sold_before,
        sold_during: during.created(),
        counter_before_kill,
        counter_after_failover,
        offered_again: counter_after_failover - counter_before_kill,
        counter_after_reconcile,
        unavailable_ms,
        sold_after: after.created(),
        units_sold: end.sold,
        orders: end.orders,
        oversell: acc.oversell,
    })
}
