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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use app::accounting::{Accounting, Ledger};
use app::api::{ErrorCode, Home, Safety, Service, Strategy};
use sandbox::Cluster;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::figures::ClusterSale;
use super::{Row, Scenario, ScenarioOptions, ScenarioReport, Timeline, start};
use crate::rig::fleet::{Fleet, lock_flags, order};
use testkit::{Answer, Api};

/// One sale: a strategy and, for stock held in Redis, the replicas each deduction waits for.
#[derive(Debug, Clone, Copy)]
struct Sale {
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
        self.strategy.home() == Home::Redis
    }

    /// The lock's token fences the stock write.
    fn fenced(self) -> bool {
        !self.redis_stock() && matches!(self.strategy.safety(), Safety::Safe)
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
/// every deduction waiting for both replicas. (Not in the quick form: each is one more Redis
/// failover, and the quick form's 30 units sell out within a few dozen milliseconds of the
/// kill.)
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
/// The instances' lock lease and wait budget (the app's defaults, named here because the
/// report reads the Redis rows against the lease).
const LOCK_LEASE_MS: u64 = 5000;
const LOCK_WAIT_MS: u64 = 3000;
/// A bound on a sale, a leader election, a restart.
const PATIENCE: Duration = Duration::from_secs(60);

/// The three clusters.
#[derive(Clone)]
struct Clusters {
    zookeeper: Arc<sandbox::ZooKeeperEnsemble>,
    etcd: Arc<sandbox::EtcdCluster>,
    redis: Arc<sandbox::RedisSentinelCluster>,
}

impl Clusters {
    async fn start() -> Result<Clusters> {
        let (zookeeper, etcd, redis) = tokio::try_join!(
            start(sandbox::ZooKeeperEnsemble::start),
            start(sandbox::EtcdCluster::start),
            start(sandbox::RedisSentinelCluster::start),
        )?;
        Ok(Clusters {
            zookeeper: Arc::new(zookeeper),
            etcd: Arc::new(etcd),
            redis: Arc::new(redis),
        })
    }

    /// The instances' flags: the three clusters, the lock lease and wait.
    fn app_flags(&self) -> Vec<String> {
        let mut flags = lock_flags(LOCK_LEASE_MS, LOCK_WAIT_MS);
        flags.extend([
            format!("--zookeeper={}", self.zookeeper.connect_string()),
            format!("--etcd={}", self.etcd.endpoints().join(",")),
            format!(
                "--redis-sentinels={}",
                self.redis.sentinel_addrs().join(",")
            ),
            format!("--redis-master-name={}", self.redis.master_name()),
        ]);
        flags
    }

    /// The cluster `strategy`'s lock (or, for `redis-lua`, its stock) lives on.
    fn of(&self, strategy: Strategy) -> Arc<dyn Cluster> {
        match strategy.service() {
            Service::Zookeeper => self.zookeeper.clone(),
            Service::Etcd => self.etcd.clone(),
            _ => self.redis.clone(),
        }
    }
}

/// Waits for `cluster`'s leader and returns its member index.
async fn leader(cluster: &Arc<dyn Cluster>) -> Result<usize> {
    let c = cluster.clone();
    Ok(tokio::task::spawn_blocking(move || c.await_leader(PATIENCE)).await??)
}

/// SIGKILLs member `i` of `cluster`.
async fn kill(cluster: &Arc<dyn Cluster>, i: usize) -> Result<()> {
    let c = cluster.clone();
    Ok(tokio::task::spawn_blocking(move || c.process(i).kill()).await??)
}

/// Starts member `i` of `cluster` again, in the background, and waits until it is back in
/// the cluster.
fn restart(cluster: &Arc<dyn Cluster>, i: usize) -> JoinHandle<Result<()>> {
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || Ok(c.rejoin(i, PATIENCE)?))
}

/// [`restart`] of member `i`, once another member leads: a Redis started before the
/// Sentinels promoted a replica would come back as an empty primary that they still name.
/// Returns when the member was back.
fn restart_after_failover(cluster: &Arc<dyn Cluster>, i: usize) -> JoinHandle<Result<Instant>> {
    let c = cluster.clone();
    tokio::spawn(async move {
        let r = c.clone();
        tokio::task::spawn_blocking(move || {
            sandbox::wait_for(PATIENCE, || r.leader().filter(|&l| l != i))
        })
        .await?
        .context("no other member took the lead")?;
        restart(&c, i).await??;
        Ok(Instant::now())
    })
}

/// How big a sale.
#[derive(Debug, Clone, Copy)]
struct Plan {
    stock: i64,
    buyers: usize,
}

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts.app_binary(Scenario::ClusterSale)?;
    let plan = match opts.quick {
        true => Plan {
            stock: 30,
            buyers: 6,
        },
        false => Plan {
            stock: 300,
            buyers: 32,
        },
    };
    let clusters = Clusters::start().await?;
    let fleet = Fleet::start_on_clusters(binary, INSTANCES, &clusters.app_flags()).await?;
    let mut sales = SALES.to_vec();
    if !opts.quick {
        sales.extend(FULL_ONLY);
    }
    let tl = Timeline::new();
    let mut restarts: Vec<(&'static str, JoinHandle<Result<()>>)> = Vec::new();
    let mut rows = Vec::new();
    let mut measured = Vec::new();
    for (n, s) in sales.into_iter().enumerate() {
        let cluster = clusters.of(s.strategy);
        let which = cluster.kind();
        // The member this cluster lost in its last sale must be back first.
        if let Some(at) = restarts.iter().position(|(w, _)| *w == which) {
            restarts.remove(at).1.await??;
        }
        let product = PRODUCT + n as u64;
        // A sale waiting for replicas goes through instances of its own, on the same servers.
        let waiting = match s.wait_replicas {
            0 => None,
            replicas => {
                let flags = [format!("--redis-wait-replicas={replicas}")];
                let apps = fleet
                    .apps
                    .start_variant("app-wait", &flags, INSTANCES)
                    .await?;
                let api = Api::new(apps.bases(), None)?;
                Some((apps, api))
            }
        };
        let api = waiting.as_ref().map_or(&fleet.api, |(_, api)| api);
        let (f, killed) = sale(api, &cluster, s, product, plan, &tl)
            .await
            .with_context(|| format!("the {} sale", s.name()))?;
        if let Some((apps, _)) = waiting {
            apps.shutdown().await;
        }
        if s.wait_replicas == 0 {
            tl.log(s.name(), format!("member {} restarting", killed + 1));
            restarts.push((which, restart(&cluster, killed)));
        }
        rows.push(row(s, &f));
        measured.push((s, f));
    }
    for (_, restart) in restarts {
        restart.await??;
    }
    Ok(ScenarioReport {
        scenario: Scenario::ClusterSale,
        fault: format!(
            "{} buyers, one unit per click, for {} units, through {INSTANCES} app instances \
             configured with a 3-member ZooKeeper ensemble, a 3-member etcd cluster and Redis \
             (primary + 2 replicas) behind 3 Sentinels (the Redis locks' server and, for \
             `redis-lua`, the stock's); when a third is sold, the strategy's cluster leader is \
             SIGKILLed; the sale goes on until sold out; the member is restarted afterwards \
             (with `WAIT 2`, as soon as a replica is promoted)",
            plan.buyers, plan.stock
        ),
        rows,
        timeline: tl.events(None),
        why: why(&measured),
    })
}

/// One answer, with when its request was sent and when it came back (since the sale began).
struct Click {
    sent: Duration,
    answered: Duration,
    answer: Answer,
}

/// Resets `product`, runs the buyers through `api`, kills the cluster's leader when a third is
/// sold, and reads the ledger after the sale. Returns the figures and the member killed (which
/// is back already when the sale waited for replicas: it could not finish without it).
async fn sale(
    api: &Api,
    cluster: &Arc<dyn Cluster>,
    s: Sale,
    product: u64,
    plan: Plan,
    tl: &Timeline,
) -> Result<(ClusterSale, usize)> {
    let (strategy, name) = (s.strategy, s.name());
    api.reset_product(product, plan.stock, strategy.home())
        .await?;
    let leader = leader(cluster).await?;
    let created = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (began, began_ms) = (Instant::now(), tl.now_ms());
    tl.log(&name, "sale starts");
    let buyers: Vec<JoinHandle<Vec<Click>>> = (0..plan.buyers)
        .map(|n| {
            let buyer = Buyer {
                api: api.clone(),
                n,
                product,
                strategy,
                created: created.clone(),
                done: done.clone(),
                began,
            };
            tokio::spawn(buyer.run())
        })
        .collect();

    let third = usize::try_from(plan.stock / 3).unwrap_or(1);
    while created.load(Ordering::Relaxed) < third && !done.load(Ordering::Relaxed) {
        if began.elapsed() > PATIENCE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    kill(cluster, leader).await?;
    let killed = began.elapsed();
    tl.log(
        &name,
        format!(
            "the {}'s {} (member {}) SIGKILLed, {} unit(s) sold",
            cluster.kind(),
            cluster.leader_title(),
            leader + 1,
            created.load(Ordering::Relaxed)
        ),
    );
    // With every replica's acknowledgement required, nothing sells until the killed member
    // is back as a replica.
    let restart = (s.wait_replicas > 0).then(|| restart_after_failover(cluster, leader));
    let mut clicks = Vec::new();
    for buyer in buyers {
        clicks.extend(buyer.await?);
    }
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
    let acc = Accounting::of(Ledger::of(end), clicks.len() as i64);
    let count = |f: fn(&Answer) -> bool| clicks.iter().filter(|c| f(&c.answer)).count();
    let first_after = clicks
        .iter()
        .filter(|c| c.answer.created() && c.sent >= killed)
        .map(|c| c.answered)
        .min();
    let f = ClusterSale {
        fenced: s.fenced(),
        wait_replicas: s.wait_replicas,
        stock: plan.stock,
        buyers: plan.buyers,
        requests: clicks.len(),
        created: count(|a| a.created()),
        answered_503: count(|a| {
            a.refused_with(ErrorCode::BackendUnavailable) || a.refused_with(ErrorCode::Busy)
        }),
        lock_lost: count(|a| a.refused_with(ErrorCode::LockLost)),
        other: count(|a| {
            !a.created()
                && ![
                    ErrorCode::BackendUnavailable,
                    ErrorCode::Busy,
                    ErrorCode::LockLost,
                    ErrorCode::SoldOut,
                ]
                .iter()
                .any(|&code| a.refused_with(code))
        }),
        sold_before_kill: clicks
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
        let at = began_ms + t.as_secs_f64() * 1000.0;
        tl.log_at(at, &name, "first sale after the kill");
    }
    tl.log(
        &name,
        format!(
            "sale over after {:.1} s: {} unit(s) in orders of {}, {} answer(s) 503",
            began.elapsed().as_secs_f64(),
            acc.units_sold,
            plan.stock,
            f.answered_503
        ),
    );
    Ok((f, leader))
}

/// One buyer: clicks until the product is sold out or the sale's patience runs out.
struct Buyer {
    api: Api,
    n: usize,
    product: u64,
    strategy: Strategy,
    created: Arc<AtomicUsize>,
    done: Arc<AtomicBool>,
    began: Instant,
}

impl Buyer {
    async fn run(self) -> Vec<Click> {
        let user = format!("buyer-{}", self.n);
        let mut clicks = Vec::new();
        while !self.done.load(Ordering::Relaxed) && self.began.elapsed() < PATIENCE {
            let sent = self.began.elapsed();
            let answer = order(
                &self.api,
                self.n % INSTANCES,
                self.product,
                self.strategy,
                &user,
                0,
            )
            .await;
            clicks.push(Click {
                sent,
                answered: self.began.elapsed(),
                answer,
            });
            if answer.created() {
                self.created.fetch_add(1, Ordering::Relaxed);
            } else if answer.refused_with(ErrorCode::SoldOut) {
                self.done.store(true, Ordering::Relaxed);
            } else {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
        clicks
    }
}

fn row(s: Sale, f: &ClusterSale) -> Row {
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
    Row::new(
        format!("{}, leader killed", s.name()),
        expected,
        observed,
        ok,
        *f,
    )
}

fn why(measured: &[(Sale, ClusterSale)]) -> String {
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
