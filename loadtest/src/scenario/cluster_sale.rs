//! `cluster-sale`: the flash sale against the three clusters, with the cluster's leader killed
//! mid-sale.
//!
//! Two app instances are configured with the ZooKeeper ensemble's connect string, the etcd
//! cluster's endpoints and the Redis Sentinels. For each ZooKeeper, etcd and Redis lock
//! strategy, plain and fenced, and (full form) for `redis-lua`, the stock itself held in Redis
//! on the primary the Sentinels name, buyers buy one unit at a time until the product is sold out;
//! when a third of the stock is sold, the leader of the strategy's cluster is SIGKILLed (the
//! ZooKeeper leader, the etcd leader, the Redis primary), and it is restarted after the sale.
//! The database then tells what happened ([`app::accounting`]), next to what the buyers were
//! told: `503`s and the time from the kill to the first sale after it.
//!
//! What to expect. ZooKeeper and etcd commit every grant on a majority before answering, so a
//! new leader knows every lock; the sessions and leases outlive a short election. The leader's
//! death costs availability, not exclusion. Redis through Sentinel is different: the promoted
//! replica may lack the last grants (replication is asynchronous) and its fencing counter may
//! lag, so an unfenced holder may share its critical section with a new one — whether that
//! happens in a given run depends on timing, so the unfenced rows report the outcome as it was.
//! The fenced rows must never oversell: the product's fence refuses a token not above the last
//! one written (a lagging counter costs `lock_lost` refusals, not units).
//!
//! In the full form, `redis-lua` keeps the counter itself on the primary: the instances answer
//! `503` from the kill until the Sentinels name the promoted replica, then sell from it.
//! Whatever deductions the replica had not received are gone, so their units sell again
//! (oversell) — or not, by timing; the row reports it as it was. Then `redis-lua + WAIT 2`,
//! through two more instances whose every deduction waits for both replicas
//! (`--redis-wait-replicas 2`): whichever replica is promoted holds every deduction an order
//! rests on, so it must not oversell. (`WAIT 1` would not do: Sentinel promotes the replica that
//! last *reported* the larger replication offset, not necessarily the one that acknowledged.)
//! The price shows: with one replica left after the failover nothing sells until the killed
//! member is back as a replica, which this row restarts as soon as the Sentinels have promoted
//! another.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use app::accounting::{Accounting, Ledger};
use app::api::{ErrorCode, Safety, Service, Strategy};
use sandbox::Cluster;
use serde::{Deserialize, Serialize};
use testkit::{Answer, Api, Clicks, Crowd};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{Judgement, Scenario, Stage, Timeline};
use crate::rig::clusters::{self, Clusters, kill, rejoin, rejoin_after_failover};
use crate::rig::fleet::{Fleet, lock_flags};

pub struct ClusterSale;

/// How big a sale.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    stock: i64,
    buyers: usize,
    /// The full form's sales of stock held in Redis run too.
    redis_stock: bool,
}

/// A sale through a cluster whose leader was killed mid-sale, one row per strategy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
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

/// One sale: a strategy and, for stock held in Redis, the replicas each deduction waits for.
#[derive(Debug, Clone, Copy)]
pub struct Sale {
    strategy: Strategy,
    /// `--redis-wait-replicas` of the instances the sale goes through (0: the fleet's own).
    wait_replicas: u32,
}

impl Sale {
    const fn of(strategy: Strategy) -> Sale {
        Sale {
            strategy,
            wait_replicas: 0,
        }
    }

    fn name(self) -> String {
        match self.wait_replicas {
            0 => self.strategy.to_string(),
            n => format!("{} + WAIT {n}", self.strategy),
        }
    }

    /// The stock is a Redis counter, not a database row under a lock.
    fn redis_stock(self) -> bool {
        self.strategy.home().in_redis()
    }

    /// The lock's token fences the stock write.
    fn fenced(self) -> bool {
        !self.redis_stock() && matches!(self.strategy.safety(), Safety::Safe)
    }
}

impl fmt::Display for Sale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, leader killed", self.name())
    }
}

/// In the order they run: the clusters take turns, so a member restarts while the others sell.
const SALES: [Sale; 6] = [
    Sale::of(Strategy::Zookeeper),
    Sale::of(Strategy::Etcd),
    Sale::of(Strategy::RedisWatchdog),
    Sale::of(Strategy::ZookeeperFenced),
    Sale::of(Strategy::EtcdFenced),
    Sale::of(Strategy::RedisWatchdogFenced),
];
/// The full form's last sales, the stock itself in Redis: as the fleet sells it, then with
/// every deduction waiting for both replicas.
const FULL_ONLY: [Sale; 2] = [
    Sale::of(Strategy::RedisLua),
    Sale {
        strategy: Strategy::RedisLua,
        wait_replicas: 2,
    },
];
const INSTANCES: usize = 2;
/// The first product; each strategy sells its own.
const PRODUCT: u64 = 970;
/// A buyer refused (503, `busy`, `lock_lost`) waits this long before clicking again.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
/// The instances' lock lease and wait budget (the app's defaults; `why` reads the Redis rows
/// against the lease).
const LOCK_LEASE_MS: u64 = 5000;
const LOCK_WAIT_MS: u64 = 3000;
/// A bound on a sale, a leader election, a restart.
const PATIENCE: Duration = Duration::from_secs(60);

impl Scenario for ClusterSale {
    type Sizes = Sizes;
    // Not in the quick form: the sales of stock held in Redis, each one more Redis failover
    // (and the quick form's 30 units sell out within a few dozen milliseconds of the kill).
    const QUICK: Sizes = Sizes {
        stock: 30,
        buyers: 6,
        redis_stock: false,
    };
    const FULL: Sizes = Sizes {
        stock: 300,
        buyers: 32,
        redis_stock: true,
    };
    type Subject = Sale;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "{} buyers, one unit per click, for {} units, through {INSTANCES} app instances \
             configured with a 3-member ZooKeeper ensemble, a 3-member etcd cluster and Redis \
             (primary + 2 replicas) behind 3 Sentinels (the Redis locks' server and, for \
             `redis-lua`, the stock's); when a third is sold, the strategy's cluster leader is \
             SIGKILLed; the sale goes on until sold out; the member is restarted afterwards \
             (with `WAIT 2`, as soon as a replica is promoted)",
            s.buyers, s.stock
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Sale, Figures)>> {
        let clusters = Clusters::start().await?;
        // The instances' flags: the three clusters, the lock lease and wait.
        let flags = [
            lock_flags(LOCK_LEASE_MS, LOCK_WAIT_MS),
            clusters.app_flags(),
        ]
        .concat();
        let fleet = Fleet::start_on_clusters(stage.app_path()?, INSTANCES, &flags).await?;
        let mut sales = SALES.to_vec();
        if s.redis_stock {
            sales.extend(FULL_ONLY);
        }
        let tl = stage.timeline();
        let mut restarts: Vec<(&'static str, JoinHandle<Result<()>>)> = Vec::new();
        let mut rows = Vec::new();
        for (n, sale) in sales.into_iter().enumerate() {
            let cluster = clusters.of(sale.strategy);
            let which = cluster.kind();
            // The member this cluster lost in its last sale must be back first.
            if let Some(at) = restarts.iter().position(|(w, _)| *w == which) {
                restarts.remove(at).1.await??;
            }
            let product = PRODUCT + n as u64;
            // A sale waiting for replicas goes through instances of its own, on the same
            // servers.
            let waiting = match sale.wait_replicas {
                0 => None,
                replicas => {
                    let flags = [format!("--redis-wait-replicas={replicas}")];
                    let apps = fleet
                        .apps
                        .start_variant("app-wait", &flags, INSTANCES)
                        .await?;
                    let api = fleet.api_for(&apps)?;
                    Some((apps, api))
                }
            };
            let api = waiting.as_ref().map_or(&fleet.api, |(_, api)| api);
            let (figures, killed) = one(api, &cluster, sale, product, s, &tl)
                .await
                .with_context(|| format!("the {} sale", sale.name()))?;
            if let Some((apps, _)) = waiting {
                apps.shutdown().await;
            }
            if sale.wait_replicas == 0 {
                tl.log(sale.name(), format!("member {} restarting", killed + 1));
                restarts.push((which, rejoin(&cluster, killed, PATIENCE)));
            }
            rows.push((sale, figures));
        }
        for (_, restart) in restarts {
            restart.await??;
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, s: &Sale, f: &Figures) -> Judgement {
        let carried_out = f.sold_before_kill > 0 && f.sold_before_kill < f.stock as usize;
        let finished = f.undersell == 0;
        // Stock held in Redis finishes when its counter is empty: a deduction whose answer died
        // with the primary leaves a unit without an order (undersell, reported), not a stuck sale.
        let sold_out = f.final_stock == 0;
        let (expected, ok) = match (s.redis_stock(), s.wait_replicas, f.fenced) {
            (false, _, true) => (
                "no oversell: the fence refuses a holder the failover left behind; the sale \
                 finishes after the election",
                carried_out && finished && f.oversell == 0,
            ),
            (false, _, false) => (
                "reported as it was (not asserted); the sale finishes after the election",
                carried_out && finished,
            ),
            (true, 0, _) => (
                "503 until the Sentinels name the promoted replica, then sold out from it; \
                 deductions it never received sell again (reported as it was, not asserted)",
                carried_out && sold_out,
            ),
            (true, _, _) => (
                "no oversell: every order rests on a deduction both replicas acknowledged; \
                 nothing sells until the killed member is back as a replica",
                carried_out && sold_out && f.oversell == 0,
            ),
        };
        let observed = format!(
            "{} unit(s) in orders of {} (oversell {}, lost updates {}, undersell {}); {} of {} \
             click(s) answered 503, {} lock_lost; {} sold before the kill; first sale {} after it",
            f.units_sold,
            f.stock,
            f.oversell,
            f.lost_updates,
            f.undersell,
            f.answered_503,
            f.requests,
            f.lock_lost,
            f.sold_before_kill,
            f.unavailable_ms
                .map_or_else(|| "never".to_string(), |ms| format!("{ms:.0} ms"))
        );
        Judgement::new(expected, observed, ok)
    }

    fn why(_: &Sizes, measured: &[(Sale, Figures)]) -> String {
        let mut text = String::from(
            "ZooKeeper and etcd commit a grant on a majority before answering, so the leader's \
             death costs time, not exclusion; Redis through Sentinel promotes an asynchronous \
             replica, which may lack the newest grants and fencing increments.",
        );
        for (s, f) in measured {
            text.push_str(&format!(
                " {}: {} unit(s) sold of {} (oversell {}), {} answer(s) 503, {} lock_lost, \
                 first sale {} after the kill.",
                s.name(),
                f.units_sold,
                f.stock,
                f.oversell,
                f.answered_503,
                f.lock_lost,
                f.unavailable_ms
                    .map_or_else(|| "never".to_string(), |ms| format!("{ms:.0} ms"))
            ));
        }
        let lease_ms = LOCK_LEASE_MS as f64;
        let redis_after_a_lease = measured.iter().any(|(s, f)| {
            s.strategy.service() == Service::Redis
                && !s.redis_stock()
                && f.unavailable_ms
                    .is_some_and(|ms| (0.9 * lease_ms..1.3 * lease_ms).contains(&ms))
        });
        if redis_after_a_lease {
            text.push_str(&format!(
                " The Redis lock sales resumed about one lock lease ({:.0} s) after the kill, which is \
                 what a lock held at the kill leaves behind when its grant had reached the \
                 replicas and its release went to the dead primary: the promoted primary keeps it \
                 until the lease runs out.",
                lease_ms / 1000.0
            ));
        }
        let unfenced_oversold: Vec<String> = measured
            .iter()
            .filter(|(s, f)| !s.redis_stock() && !f.fenced && f.oversell > 0)
            .map(|(s, _)| s.name())
            .collect();
        text.push_str(&match unfenced_oversold.as_slice() {
            [] => " No unfenced strategy oversold in this run. For ZooKeeper and etcd that is what \
                   a majority-committed grant promises while sessions outlive the election; for \
                   Redis it is timing: a double grant needs the kill to fall between a grant and its \
                   replication, which this run did not produce (scenario `sentinel-failover` makes \
                   it certain)."
                .to_string(),
            names => format!(
                " {} oversold: a holder and its successor shared the critical section across the \
                 leader's death.",
                names.join(", ")
            ),
        });
        text.push_str(
            " The fenced strategies cannot oversell whatever the timing: the product's fence \
             refuses a token not above the last one written.",
        );
        for (s, f) in measured.iter().filter(|(s, _)| s.redis_stock()) {
            text.push_str(&match (s.wait_replicas, f.oversell) {
                (0, 0) => format!(
                    " {}: the counter moved with the primary, and this run lost no deduction in \
                     the failover (the promoted replica had every one an order rests on: timing, \
                     not a guarantee; scenario `redis-failover-stock` makes the loss certain).",
                    s.name()
                ),
                (0, n) => format!(
                    " {}: the promoted replica had not received {n} deduction(s) that orders rest \
                     on, and sold those units again.",
                    s.name()
                ),
                (_, _) => format!(
                    " {}: every order waited for both replicas' acknowledgement, so the promoted \
                     one had them all (oversell {}); the price is no sale from the failover until \
                     the killed member was back as a replica.",
                    s.name(),
                    f.oversell
                ),
            });
            if f.undersell > 0 {
                text.push_str(&format!(
                    " Its undersell of {} is deductions in flight at the kill: replicated, their \
                     answer (or their `WAIT`'s) died with the primary, so no order was placed, and \
                     giving the units back failed while no primary answered; `reconcile` puts \
                     them back on sale.",
                    f.undersell
                ));
            }
        }
        text
    }
}

/// Resets `product`, runs the buyers through `api`, kills the cluster's leader when a third is
/// sold, and reads the ledger after the sale. Returns the figures and the member killed (which
/// is back already when the sale waited for replicas: it could not finish without it).
async fn one(
    api: &Api,
    cluster: &Arc<dyn Cluster>,
    s: Sale,
    product: u64,
    sizes: Sizes,
    tl: &Timeline,
) -> Result<(Figures, usize)> {
    let name = s.name();
    api.reset_product(product, sizes.stock, s.strategy.home())
        .await?;
    let leader = clusters::leader(cluster, PATIENCE).await?;
    let began_ms = tl.now_ms();
    tl.log(&name, "sale starts");
    let until = Clicks::UntilSoldOut {
        pause: RETRY_PAUSE,
        patience: PATIENCE,
    };
    let id_prefix = format!("{product}-{}", uuid::Uuid::new_v4().simple());
    let sale = Crowd::new(sizes.buyers, until, s.strategy, &id_prefix)
        .by_buyer()
        .start(api, product);

    // The kill waits for the state it needs: a third of the stock sold.
    let third = usize::try_from(sizes.stock / 3).unwrap_or(1);
    while sale.placed() < third && !sale.sold_out() && sale.elapsed() < PATIENCE {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    kill(cluster, leader).await?;
    let killed = sale.elapsed();
    tl.log(
        &name,
        format!(
            "the {}'s {} (member {}) SIGKILLed, {} unit(s) sold",
            cluster.kind(),
            cluster.leader_title(),
            leader + 1,
            sale.placed()
        ),
    );
    // With every replica's acknowledgement required, nothing sells until the killed member
    // is back as a replica.
    let began = Instant::now() - sale.elapsed();
    let restart = (s.wait_replicas > 0).then(|| rejoin_after_failover(cluster, leader, PATIENCE));
    let answers = sale.finish().await;
    if let Some(restart) = restart {
        let back = restart.await??;
        let at = began_ms + (back - began).as_secs_f64() * 1000.0;
        tl.log_at(
            at,
            &name,
            format!("member {} seen back as a replica", leader + 1),
        );
    }
    let end = api.product(product).await?;
    let acc = Accounting::of(Ledger::of(end), answers.clicks.len() as i64);
    let first_after = answers.first_placed_sent_after(killed);
    let unavailable = |a: &Answer| {
        a.refused_with(ErrorCode::BackendUnavailable) || a.refused_with(ErrorCode::Busy)
    };
    let figures = Figures {
        fenced: s.fenced(),
        wait_replicas: s.wait_replicas,
        stock: sizes.stock,
        buyers: sizes.buyers,
        requests: answers.clicks.len(),
        created: answers.created(),
        answered_503: answers.count(unavailable),
        lock_lost: answers.refused(ErrorCode::LockLost),
        other: answers.count(|a| {
            !a.created()
                && !unavailable(a)
                && !a.refused_with(ErrorCode::LockLost)
                && !a.refused_with(ErrorCode::SoldOut)
        }),
        sold_before_kill: answers
            .clicks
            .iter()
            .filter(|c| c.answer.created() && c.answered < killed)
            .count(),
        unavailable_ms: first_after.map(|t| (t - killed).as_secs_f64() * 1000.0),
        units_sold: acc.units_sold,
        final_stock: acc.final_stock,
        oversell: acc.oversell,
        lost_updates: acc.lost_updates,
        undersell: acc.undersell,
    };
    if let Some(t) = first_after {
        tl.log_at(
            began_ms + t.as_secs_f64() * 1000.0,
            &name,
            "first sale after the kill",
        );
    }
    tl.log(
        &name,
        format!(
            "sale over after {:.1} s: {} unit(s) in orders of {}, {} answer(s) 503",
            answers.elapsed.as_secs_f64(),
            acc.units_sold,
            sizes.stock,
            figures.answered_503
        ),
    );
    Ok((figures, leader))
}
