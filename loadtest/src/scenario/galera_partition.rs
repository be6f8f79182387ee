//! `galera-partition`: a node of a Galera cluster cut off from the other two in the middle of a
//! sale, each of the app's three instances writing to a node of its own.
//!
//! A Galera node that loses the others counts itself out of the *primary component* — the
//! majority that may go on — and from then on refuses every statement (`1047 WSREP has not yet
//! prepared node for application use`): the cut-off side cannot sell a unit the majority sells
//! too, so there is no split brain to oversell. The two nodes left are a majority and go on,
//! once they have decided the third is gone; until then a commit waits for it. Nothing a buyer
//! was told was bought is lost: a write set is certified by every node of the primary component
//! before `COMMIT` answers, so the cut-off node has all of them and receives the rest when it
//! comes back — unlike an asynchronous replica promoted after its primary died
//! (`primary-failover`).
//!
//! What the service must do is answer the cut-off node's buyers as it answers them when the
//! database is down — `503 backend_unavailable`, to retry or to be sent to another instance —
//! and not as a bug (`500 internal`); and its health check must say the same to a balancer.
//! The same sale runs again with node 2 SIGKILLed instead: its instance loses its connections,
//! the majority goes on, and the node started again rejoins by a transfer of what it missed.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use app::api::{ErrorCode, Home, Strategy};
use sandbox::{Cluster, GaleraCluster};
use serde::{Deserialize, Serialize};
use testkit::{Clicks, Crowd, Retry};

use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::{Fleet, PATIENCE, Rows, accounting};
use crate::rig::{control, start};

pub struct GaleraPartition;

/// What happens to node 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Cut off from the other two (`gmcast.isolate`), running on; let back after the sale.
    CutOff,
    /// SIGKILLed; started again after the sale, rejoining by a transfer of what it missed.
    Killed,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loss::CutOff => write!(f, "conditional, node {} cut off", CUT + 1),
            Loss::Killed => write!(f, "conditional, node {} killed", CUT + 1),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Units on sale.
    stock: i64,
    /// Buyers clicking at once, spread over the three instances.
    buyers: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub stock: i64,
    /// Units sold when node 2 was cut off or killed.
    pub sold_at_cut: i64,
    /// From the cut to node 2 refusing statements, or from the kill to node 1 counting two
    /// nodes, in ms.
    pub noticed_ms: u64,
    pub clicks: usize,
    pub created: usize,
    /// Clicks answered `backend_unavailable` (node 2's buyers while it was cut off).
    pub unavailable: usize,
    /// Clicks answered `busy`: a commit that waited too long while the majority decided.
    pub busy: usize,
    /// Clicks answered `500 internal` or outside the contract.
    pub broken: usize,
    /// The slowest answer of the sale, in ms: how long a commit waited for the cluster to
    /// decide node 2 was gone.
    pub slowest_ms: u64,
    /// Node 2's instance's health check once the node is out: its status and code.
    pub health_while_cut: String,
    pub units_sold: i64,
    pub orders: i64,
    pub oversell: i64,
    /// Orders answered `201` minus orders in the database: above 0, an answered order lost;
    /// below 0, orders whose buyers were told `503` because the answer to their `COMMIT` was
    /// lost with the node (an outcome unknown: the same request id again finds the order).
    pub acknowledged_minus_orders: i64,
    /// The orders node 2 holds once it is back, against node 1's.
    pub orders_on_node_2_after: i64,
}

/// The crowd's product in the first mode; the next mode's is the next id.
const PRODUCT: u64 = 990;
/// The node cut off, and its instance: not the last instance, which takes the fleet's own
/// admin calls.
const CUT: usize = 1;
/// What the cut-off instance's health check is to say.
const UNHEALTHY: &str = "503 backend_unavailable";
/// A buyer refused by the cut-off node clicks again after this pause.
const PAUSE: Duration = Duration::from_millis(20);

impl Scenario for GaleraPartition {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        stock: 60,
        buyers: 9,
    };
    const FULL: Sizes = Sizes {
        stock: 300,
        buyers: 18,
    };
    type Subject = Loss;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "a Galera cluster of 3 nodes, 3 app instances each writing to a node of its own; \
             {} buyers clicking until {} units are sold; once a third is sold, node {} is cut \
             off from the other two (`gmcast.isolate`) until the sale ends, then let back; \
             again with the node SIGKILLed, then started again",
            s.buyers,
            s.stock,
            CUT + 1
        )
    }

    async fn play(sizes: Sizes, stage: &Stage) -> Result<Vec<(Loss, Figures)>> {
        let cluster = Arc::new(start(GaleraCluster::start).await?);
        let rows = Rows::Galera {
            cluster: Arc::clone(&cluster),
            nodes: vec![0, 1, 2],
        };
        let fleet = Fleet::start_with_rows(stage.app_binary()?, 3, &[], rows).await?;
        let mut rows = Vec::new();
        for (n, loss) in [Loss::CutOff, Loss::Killed].into_iter().enumerate() {
            let product = PRODUCT + n as u64;
            rows.push((
                loss,
                one(stage, sizes, loss, &fleet, &cluster, product).await?,
            ));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, loss: &Loss, f: &Figures) -> Judgement {
        let observed = format!(
            "node {} {} after {} of {} unit(s) sold, noticed {} ms later; {} \
             of {} click(s) placed, {} unavailable, {} busy, {} broken; its health check {}; \
             slowest answer {} ms; {} unit(s) in {} order(s): oversell {}, answered orders \
             minus orders {}; node {} holds {} order(s) once back",
            CUT + 1,
            match loss {
                Loss::CutOff => "cut off",
                Loss::Killed => "killed",
            },
            f.sold_at_cut,
            f.stock,
            f.noticed_ms,
            f.created,
            f.clicks,
            f.unavailable,
            f.busy,
            f.broken,
            f.health_while_cut,
            f.slowest_ms,
            f.units_sold,
            f.orders,
            f.oversell,
            f.acknowledged_minus_orders,
            CUT + 1,
            f.orders_on_node_2_after
        );
        Judgement::new(
            "the lost node's buyers are told `503 backend_unavailable` and its instance's \
             health check says 503; no answer is a `500`; the majority sells every unit once; \
             every answered order is in the database (an order beyond them only where a buyer \
             was told `503`: a commit whose answer was lost with the node), and on the node \
             once it is back",
            observed,
            f.unavailable > 0
                && f.broken == 0
                && f.health_while_cut == UNHEALTHY
                && f.oversell == 0
                && f.units_sold == f.stock
                && f.acknowledged_minus_orders <= 0
                && -f.acknowledged_minus_orders <= f.unavailable as i64
                && f.orders_on_node_2_after == f.orders,
        )
    }

    fn why(_: &Sizes, rows: &[(Loss, Figures)]) -> String {
        let mut text = String::from(
            "A Galera node that loses the others stops serving: only a majority, the primary \
             component, may go on, so the two sides of a partition never both sell the last \
             unit. The node refuses every statement (`1047`), which the service answers as a \
             database that is down — `503 backend_unavailable` — and its health check fails, \
             so a balancer sends the buyers to an instance on the majority's side.",
        );
        for (loss, f) in rows {
            text.push_str(&format!(
                " {loss}: {} of {} clicks placed, {} told `unavailable` by the lost node's \
                 instance, {} broken; until the cluster decided node {} was gone ({} ms) \
                 commits waited, and {} buyers were told `busy`; the slowest answer took {} \
                 ms; oversell {}; every answered order kept ({} answered minus stored), and \
                 node {} back with all {} orders.",
                f.created,
                f.clicks,
                f.unavailable,
                f.broken,
                CUT + 1,
                f.noticed_ms,
                f.busy,
                f.slowest_ms,
                f.oversell,
                f.acknowledged_minus_orders,
                CUT + 1,
                f.orders_on_node_2_after
            ));
            if f.acknowledged_minus_orders < 0 {
                text.push_str(&format!(
                    " {} order(s) more than were answered `201`: a commit sent on node {} as it \
                     was cut off reached the majority, and its answer was lost with the node — \
                     an outcome the service cannot know, so its buyer was told `503`, and the \
                     same request id sent again is answered with the order.",
                    -f.acknowledged_minus_orders,
                    CUT + 1
                ));
            }
        }
        text.push_str(
            " Synchronous replication is what keeps the answered orders: each was certified by \
             every node of the primary component before its buyer heard of it, where an \
             asynchronous replica promoted after a crash has lost what it was never sent.",
        );
        text
    }
}

async fn one(
    stage: &Stage,
    sizes: Sizes,
    loss: Loss,
    fleet: &Fleet,
    cluster: &Arc<GaleraCluster>,
    product: u64,
) -> Result<Figures> {
    let tl = stage.round(format!("{loss} mid-sale"));
    let strategy = Strategy::Conditional;
    fleet.reset_in(product, sizes.stock, Home::Row).await?;
    let until = Clicks::UntilSoldOut {
        pause: PAUSE,
        patience: PATIENCE,
    };
    let crowd = Crowd::new(sizes.buyers, until, strategy, "partition")
        .retrying(Retry::NEVER)
        .run(&fleet.api, product);
    let cut = async {
        let sold_at_cut = crate::rig::fleet::poll(|| async {
            let sold = fleet.product(product).await?.sold;
            Ok((sold * 3 >= sizes.stock).then_some(sold))
        })
        .await?;
        let started = Instant::now();
        let c = Arc::clone(cluster);
        match loss {
            Loss::CutOff => control(move || c.isolate(CUT, PATIENCE)).await?,
            Loss::Killed => control(move || two_left(&c)).await?,
        }
        let noticed = started.elapsed();
        tl.log(
            format!("node {}", CUT + 1),
            match loss {
                Loss::CutOff => format!(
                    "cut off after {sold_at_cut} unit(s) sold; out of the primary component {} \
                     ms later",
                    noticed.as_millis()
                ),
                Loss::Killed => format!(
                    "killed after {sold_at_cut} unit(s) sold; node 1 counted two nodes {} ms \
                     later",
                    noticed.as_millis()
                ),
            },
        );
        let health = health(fleet).await;
        tl.log(
            format!("instance {}", CUT + 1),
            format!("health check: {health}"),
        );
        anyhow::Ok((sold_at_cut, noticed, health))
    };
    let (answers, cut) = tokio::join!(crowd, cut);
    let (sold_at_cut, noticed, health_while_cut) = cut?;
    let c = Arc::clone(cluster);
    match loss {
        Loss::CutOff => control(move || c.heal(CUT, PATIENCE)).await?,
        Loss::Killed => control(move || c.rejoin(CUT, PATIENCE)).await?,
    }
    tl.log(
        format!("node {}", CUT + 1),
        "back, synced with the other two",
    );
    let end = fleet.product(product).await?;
    let acc = accounting(&end);
    let c = Arc::clone(cluster);
    let count = format!(
        "SELECT COUNT(*) FROM scenario.orders WHERE product_id = {product} \
         AND state IN ('reserved', 'paid')"
    );
    let on_node_2 = control(move || c.sql(CUT, &count)).await?;
    let broken = answers.clicks.len()
        - answers.created()
        - ErrorCode::ALL
            .iter()
            .filter(|c| **c != ErrorCode::Internal)
            .map(|c| answers.refused(*c))
            .sum::<usize>();
    let figures = Figures {
        stock: sizes.stock,
        sold_at_cut,
        noticed_ms: noticed.as_millis() as u64,
        clicks: answers.clicks.len(),
        created: answers.created(),
        unavailable: answers.refused(ErrorCode::BackendUnavailable),
        busy: answers.refused(ErrorCode::Busy),
        broken,
        slowest_ms: answers.latencies().max().unwrap_or_default().as_millis() as u64,
        health_while_cut,
        units_sold: end.sold,
        orders: end.orders,
        oversell: acc.oversell,
        acknowledged_minus_orders: answers.created() as i64 - end.orders,
        orders_on_node_2_after: on_node_2.trim().parse()?,
    };
    tl.log(
        "crowd",
        format!(
            "{} of {} click(s) placed, {} unavailable, {} busy, {} broken; oversell {}",
            figures.created,
            figures.clicks,
            figures.unavailable,
            figures.busy,
            figures.broken,
            figures.oversell
        ),
    );
    Ok(figures)
}

/// The cut-off instance's health check, once it says [`UNHEALTHY`] (the instance asks its node
/// a few times a second), or what it said last when it never did within [`PATIENCE`].
async fn health(fleet: &Fleet) -> String {
    let url = format!("{}/healthz", fleet.apps.bases()[CUT]);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let said = match reqwest::get(&url).await {
            Ok(answer) => {
                let status = answer.status().as_u16();
                let body: serde_json::Value = answer.json().await.unwrap_or_default();
                format!("{status} {}", body["error"].as_str().unwrap_or("ok"))
            }
            Err(e) => format!("no answer ({e})"),
        };
        if said == UNHEALTHY || Instant::now() > deadline {
            return said;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills node 2, and waits until node 1 counts the two nodes left as its primary component.
fn two_left(cluster: &GaleraCluster) -> sandbox::Result<()> {
    cluster.process(CUT).kill()?;
    let size = || cluster.status(0, "wsrep_cluster_size");
    match sandbox::wait_for(PATIENCE, || (size().as_deref() == Some("2")).then_some(())) {
        Some(()) => Ok(()),
        None => Err(sandbox::Error::Control {
            server: "galera".into(),
            action: "lose a node",
            reason: format!("node 1 still counts {:?} nodes", size()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(acknowledged_minus_orders: i64, unavailable: usize) -> Figures {
        Figures {
            stock: 300,
            sold_at_cut: 100,
            noticed_ms: 6_000,
            clicks: 700,
            created: 300,
            unavailable,
            busy: 300,
            broken: 0,
            slowest_ms: 6_000,
            health_while_cut: UNHEALTHY.to_owned(),
            units_sold: 300,
            orders: 300,
            oversell: 0,
            acknowledged_minus_orders,
            orders_on_node_2_after: 300,
        }
    }

    #[test]
    fn an_order_beyond_the_answered_ones_holds_only_where_a_buyer_was_told_503() {
        let sizes = GaleraPartition::QUICK;
        let judged = |f: &Figures| GaleraPartition::judge(&sizes, &Loss::CutOff, f).holds;
        assert!(judged(&figures(0, 100)));
        assert!(
            judged(&figures(-1, 100)),
            "a commit's answer lost with the node"
        );
        assert!(!judged(&figures(1, 100)), "an answered order lost");
        assert!(!judged(&figures(-3, 2)), "more unanswered orders than 503s");
    }
}
