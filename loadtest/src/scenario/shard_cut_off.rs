//! `shard-cut-off`: on a Redis Cluster, the network between the app and one shard breaks
//! mid-sale — its master and its replica unreachable from the instances, while the cluster's
//! own bus still sees both alive, so nothing is failed over.
//!
//! The counter of a product on that shard cannot be reached: a `redis-lua` purchase finds no
//! connection, cannot settle whether its script ran (the settling script cannot reach the shard
//! either), and is answered `503 backend_unavailable` — after the service's Redis timeout, for
//! the script and again for the settling, never a guess and never a sale the counter did not
//! make. A product on another shard
//! sells on: the cluster client routes each key to its own shard, so one shard's partition is
//! that shard's products' outage, not the sale's. Once the network is back, the client
//! reconnects and the cut-off product sells its remaining units; the accounting balances.
//!
//! The members announce relays as their addresses (`cluster-announce-port`); cutting a shard's
//! two relays is the partition, which leaves the members' direct bus connections alone.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use app::api::{ErrorCode, Home, Strategy};
use sandbox::RedisCluster;
use serde::{Deserialize, Serialize};
use testkit::Clicks;

use super::cluster_failover_stock::product_on;
use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::{AppBinary, Fleet, accounting};
use crate::rig::{control, start};

pub struct ShardCutOff;

/// The product on the shard cut off, and one on another shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Product {
    CutOff,
    OtherShard,
}

impl fmt::Display for Product {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Product::CutOff => "redis-lua, product on the shard cut off",
            Product::OtherShard => "redis-lua, product on another shard",
        })
    }
}

/// One product's sale across the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub stock: i64,
    pub sold_before: usize,
    /// Purchases tried while the shard was cut off.
    pub tried_during: usize,
    pub created_during: usize,
    /// Of those, answered `503 backend_unavailable`.
    pub unavailable_during: usize,
    /// The slowest answer while the shard was cut off, in ms.
    pub slowest_during_ms: u64,
    /// From the network's return to this product's first sale, in ms.
    pub first_sale_after_ms: u64,
    pub units_sold: i64,
    pub orders: i64,
    pub oversell: i64,
    /// Units taken from the counter with no order at the end.
    pub stranded: i64,
}

/// The instances' key prefix, so the scenario can find the counters' shards.
const PREFIX: &str = "sco:";
const PRODUCTS: u64 = 980;
const STOCK: i64 = 20;
/// Units sold before the partition, and purchases tried during it.
const BEFORE: u64 = 5;
const DURING: u64 = 5;
/// How long the app may take to sell again once the network is back.
const PATIENCE: Duration = Duration::from_secs(60);

impl Scenario for ShardCutOff {
    type Sizes = ();
    const QUICK: () = ();
    const FULL: () = ();
    type Subject = Product;
    type Figures = Figures;

    fn fault(_: &()) -> String {
        format!(
            "{STOCK} units in a `redis-lua` counter on each of two shards of a Redis Cluster; \
             {BEFORE} sell of each, then the network between the app and the first shard (its \
             master and replica) is cut while the cluster's bus is not; {DURING} purchases of \
             each; the network comes back and buyers take what is left"
        )
    }

    async fn play(_: (), stage: &Stage) -> Result<Vec<(Product, Figures)>> {
        let cluster = Arc::new(start(RedisCluster::start_behind_relays).await?);
        let flags = vec![format!("--lock-prefix={PREFIX}")];
        // The instances reach the members through the relays the members announce; a
        // distance (`--rtt`) would need relays of its own in front of those.
        let app = AppBinary::local(stage.app_path()?);
        let fleet = Fleet::start_with_redis(app, 1, &flags, cluster.url()).await?;
        let (cut, shard) = product_on(&cluster, PREFIX, 0, PRODUCTS).await?;
        let (other, _) = product_on(&cluster, PREFIX, 1, PRODUCTS).await?;
        let tl = stage.round("partition");
        for product in [cut, other] {
            fleet.reset_in(product, STOCK, Home::Redis).await?;
        }
        let mut before = Vec::new();
        for (product, who) in [(cut, "before-cut"), (other, "before-other")] {
            let sold = (fleet.one_buyer(Strategy::RedisLua, product, who, Clicks::Total(BEFORE)))
                .await
                .created();
            before.push(sold);
        }
        tl.log(
            "app",
            format!(
                "{} and {} sold of products {cut} and {other}",
                before[0], before[1]
            ),
        );

        let s = Arc::clone(&shard);
        control(move || {
            s.cut_off();
            Ok(())
        })
        .await?;
        tl.log(
            "network",
            format!("cut between the app and the shard of product {cut}"),
        );
        // Both products' buyers at once: the other shard's sell while the cut one's wait.
        let (on_cut, on_other) = tokio::join!(
            fleet.one_buyer(Strategy::RedisLua, cut, "during-cut", Clicks::Total(DURING)),
            fleet.one_buyer(
                Strategy::RedisLua,
                other,
                "during-other",
                Clicks::Total(DURING)
            ),
        );
        let mut during = Vec::new();
        for (product, answers) in [(cut, on_cut), (other, on_other)] {
            let slowest = answers.latencies().max().unwrap_or_default();
            tl.log(
                format!("buyer of {product}"),
                format!(
                    "{}: slowest answer {} ms",
                    answers.outcomes(),
                    slowest.as_millis()
                ),
            );
            during.push((answers, slowest));
        }

        let s = Arc::clone(&shard);
        control(move || {
            s.reconnect();
            Ok(())
        })
        .await?;
        let back = Instant::now();
        tl.log("network", "back");
        let until = Clicks::UntilSoldOut {
            pause: Duration::from_millis(20),
            patience: PATIENCE,
        };
        let mut rows = Vec::new();
        for (n, (subject, product)) in [(Product::CutOff, cut), (Product::OtherShard, other)]
            .into_iter()
            .enumerate()
        {
            let started = Instant::now();
            let after = fleet
                .one_buyer(Strategy::RedisLua, product, &format!("after-{n}"), until)
                .await;
            ensure!(
                after.refused(ErrorCode::SoldOut) > 0,
                "product {product} did not sell out within {PATIENCE:?} of the network's \
                 return: {}",
                after.outcomes()
            );
            let first_sale_after_ms = after
                .clicks
                .iter()
                .filter(|c| c.answer.created())
                .map(|c| c.answered)
                .min()
                .map_or(0, |at| {
                    let since_back = (started + at).saturating_duration_since(back);
                    u64::try_from(since_back.as_millis()).unwrap_or(u64::MAX)
                });
            let end = fleet.product(product).await?;
            let acc = accounting(&end);
            tl.log(
                "db",
                format!(
                    "product {product}: {} unit(s) in {} order(s) of {STOCK}, first sale {} ms \
                     after the network came back: oversell {}, stranded {}",
                    end.sold, end.orders, first_sale_after_ms, acc.oversell, acc.stranded
                ),
            );
            let (answers, slowest) = &during[n];
            rows.push((
                subject,
                Figures {
                    stock: STOCK,
                    sold_before: before[n],
                    tried_during: answers.clicks.len(),
                    created_during: answers.created(),
                    unavailable_during: answers.refused(ErrorCode::BackendUnavailable),
                    slowest_during_ms: u64::try_from(slowest.as_millis()).unwrap_or(u64::MAX),
                    first_sale_after_ms,
                    units_sold: end.sold,
                    orders: end.orders,
                    oversell: acc.oversell,
                    stranded: acc.stranded,
                },
            ));
        }
        Ok(rows)
    }

    fn judge(_: &(), product: &Product, f: &Figures) -> Judgement {
        let observed = format!(
            "during the cut {} of {} purchase(s) sold, {} answered `503 backend_unavailable` \
             (slowest {} ms); afterwards {} unit(s) in {} order(s) of {}: oversell {}, \
             stranded {}",
            f.created_during,
            f.tried_during,
            f.unavailable_during,
            f.slowest_during_ms,
            f.units_sold,
            f.orders,
            f.stock,
            f.oversell,
            f.stranded
        );
        let balanced = f.units_sold == f.stock && f.oversell == 0 && f.stranded == 0;
        match product {
            Product::CutOff => Judgement::new(
                format!(
                    "every purchase during the cut answered `503 backend_unavailable`, none \
                     sold; once the network is back all {} units sell, none twice",
                    f.stock
                ),
                observed,
                f.created_during == 0 && f.unavailable_during == f.tried_during && balanced,
            ),
            Product::OtherShard => Judgement::new(
                format!(
                    "sells through the cut as before: all {DURING} purchases during it sold, \
                     and all {} units in the end",
                    f.stock
                ),
                observed,
                f.created_during == DURING as usize && balanced,
            ),
        }
    }

    fn why(_: &(), rows: &[(Product, Figures)]) -> String {
        let find = |p| rows.iter().find(|(q, _)| *q == p).map(|(_, f)| *f);
        let (Some(cut), Some(other)) = (find(Product::CutOff), find(Product::OtherShard)) else {
            return String::new();
        };
        format!(
            "With the shard out of reach, a purchase of its product could neither run its \
             script nor find out whether it had run: {} of {} were answered `503 \
             backend_unavailable` (the slowest after {} ms: the service's Redis timeout, once \
             for the script and once for the settling that follows a lost answer) and none \
             sold, so nothing was sold that the counter did not take. The \
             cluster's bus, still connected, saw the shard alive and failed nothing over. The \
             product on another shard sold {} of {} meanwhile: one shard's partition is its \
             own products' outage. Once the network was back the client reconnected, the \
             first sale came {} ms later, and both products sold exactly their {} units \
             (oversell {} and {}, stranded {} and {}).",
            cut.unavailable_during,
            cut.tried_during,
            cut.slowest_during_ms,
            other.created_during,
            other.tried_during,
            cut.first_sale_after_ms,
            cut.stock,
            cut.oversell,
            other.oversell,
            cut.stranded,
            other.stranded
        )
    }
}
