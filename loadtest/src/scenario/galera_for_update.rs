//! `galera-for-update`: `SELECT … FOR UPDATE` on a multi-primary Galera cluster, with the app's
//! instances writing to one node, then each to a node of its own.
//!
//! On one node a row lock is a queue: the second buyer's locking read waits until the first
//! commits, then reads what is left. On Galera a lock exists only on the node that took it.
//! Nothing crosses the cluster until `COMMIT`, when a transaction's write set is *certified*
//! against the ones committed meanwhile: two buyers on two nodes both read the last unit "under
//! lock", the first to commit wins, and the other is aborted — at its commit (a certification
//! failure), or before, when the winner's write set reaches its node and the node throws its
//! transaction out (a brute-force abort): `1213`, which the app answers `busy`. Certification
//! keeps the stock: nothing oversells. What the lock no longer gives is order: a buyer who
//! held the lock first can lose to one who came later on another node, and every lost race is
//! an abort the buyer pays in a retry. Percona's advice for a hot row — send its writes to one
//! node — is the other mode, measured beside it.
//!
//! A commit certification refuses is a `1213` the server *answered*: the transaction is rolled
//! back, as certain as a refusal. A service that took every failed `COMMIT` for a lost answer
//! would tell the buyer "outcome unknown" (and a lock strategy would keep its lock a lease
//! long) for a purchase known not to have happened.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use app::api::{ErrorCode, Home, Strategy};
use sandbox::GaleraCluster;
use serde::{Deserialize, Serialize};
use testkit::{Clicks, Crowd, Retry};

use super::{Judgement, Scenario, Stage};
use crate::rig::aborts_of;
use crate::rig::fleet::{Fleet, PATIENCE, Rows, accounting, order};
use crate::rig::start;

pub struct GaleraForUpdate;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Units of the crowd's product.
    stock: i64,
    /// Buyers clicking at once, spread over the instances.
    buyers: usize,
}

/// Where the instances write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writers {
    /// Every instance to node 1: the cluster's other nodes only follow.
    OneNode,
    /// Instance `n` to node `n + 1`: three primaries.
    EachItsOwn,
}

/// A strategy with its instances' writers.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    strategy: Strategy,
    writers: Writers,
    /// The instances' `--rollback-retries`: a purchase the database rolled back is run again.
    retries: u32,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let writers = match self.writers {
            Writers::OneNode => "every instance writing to node 1",
            Writers::EachItsOwn => "each instance writing to a node of its own",
        };
        write!(f, "{}, {writers}", self.strategy.name())?;
        match self.retries {
            0 => Ok(()),
            n => write!(f, ", a rolled-back purchase run again (up to {n} times)"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// The answer to the buyer who took the last unit's row lock first (instance 1, holding
    /// it), and to the one who came while it was held (instance 2).
    pub first_holder: String,
    pub second_buyer: String,
    /// Whether the second buyer was answered while the first still held its lock.
    pub second_answered_first: bool,
    pub stock: i64,
    pub clicks: usize,
    pub created: usize,
    /// Clicks answered `busy`: a lock wait that ran out, or an abort (`1213`).
    pub busy: usize,
    /// Clicks answered `backend_unavailable`: the outcome of a commit taken as unknown.
    pub unavailable: usize,
    /// The cluster's own counts over the probe and the crowd, all nodes: write sets refused at
    /// commit (`wsrep_local_cert_failures`) and transactions thrown out by a write set that
    /// arrived (`wsrep_local_bf_aborts`).
    pub cert_failures: u64,
    pub bf_aborts: u64,
    pub units_sold: i64,
    pub orders: i64,
    pub oversell: i64,
}

impl Figures {
    fn aborts(&self) -> u64 {
        self.cert_failures + self.bf_aborts
    }
}

/// The first buyer's pause inside its critical section, row lock held: long enough for the
/// second buyer's whole purchase on another node.
const HOLD_MS: u64 = 3_000;
/// Where the modes' product ids start: the probe's product, then the crowd's.
const PRODUCTS: u64 = 970;
const MODES: [Mode; 4] = [
    Mode {
        strategy: Strategy::Pessimistic,
        writers: Writers::OneNode,
        retries: 0,
    },
    Mode {
        strategy: Strategy::Pessimistic,
        writers: Writers::EachItsOwn,
        retries: 0,
    },
    Mode {
        strategy: Strategy::Conditional,
        writers: Writers::EachItsOwn,
        retries: 0,
    },
    Mode {
        strategy: Strategy::Pessimistic,
        writers: Writers::EachItsOwn,
        retries: RETRIES,
    },
];
/// The retrying mode's `--rollback-retries`.
const RETRIES: u32 = 5;

impl Scenario for GaleraForUpdate {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        stock: 30,
        buyers: 6,
    };
    const FULL: Sizes = Sizes {
        stock: 200,
        buyers: 12,
    };
    type Subject = Mode;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "a Galera cluster of 3 nodes, 3 app instances; one unit: a buyer takes its row lock \
             on instance 1 and holds it, a second buyer comes on instance 2; then {} buyers \
             clicking at once until {} units are sold; the instances writing to one node, then \
             each to its own",
            s.buyers, s.stock
        )
    }

    async fn play(sizes: Sizes, stage: &Stage) -> Result<Vec<(Mode, Figures)>> {
        let cluster = Arc::new(start(GaleraCluster::start).await?);
        let mut rows = Vec::new();
        for (n, mode) in MODES.into_iter().enumerate() {
            let nodes = match mode.writers {
                Writers::OneNode => vec![0],
                Writers::EachItsOwn => vec![0, 1, 2],
            };
            let rows_on = Rows::Galera {
                cluster: Arc::clone(&cluster),
                nodes,
            };
            let flags = [format!("--rollback-retries={}", mode.retries)];
            let fleet = Fleet::start_with_rows(stage.app_binary()?, 3, &flags, rows_on).await?;
            let product = PRODUCTS + 2 * n as u64;
            rows.push((
                mode,
                one(stage, sizes, mode, &fleet, &cluster, product).await?,
            ));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, mode: &Mode, f: &Figures) -> Judgement {
        let observed = format!(
            "first holder {}, second buyer {}; crowd: {} of {} click(s) placed, {} busy, {} \
             unavailable; {} certification failure(s), {} brute-force abort(s); {} unit(s) in \
             {} order(s) of {}: oversell {}",
            f.first_holder,
            f.second_buyer,
            f.created,
            f.clicks,
            f.busy,
            f.unavailable,
            f.cert_failures,
            f.bf_aborts,
            f.units_sold,
            f.orders,
            f.stock,
            f.oversell
        );
        let kept = f.oversell == 0 && f.units_sold == f.stock && f.unavailable == 0;
        let busy = ErrorCode::Busy.to_string();
        let sold_out = ErrorCode::SoldOut.to_string();
        let placed = |answer: &str| answer.starts_with("201");
        let refused = |answer: &str, code: &str| answer.ends_with(code);
        match mode.writers {
            Writers::OneNode => Judgement::new(
                "the second buyer waits for the first's lock and finds the unit gone; no \
                 transaction aborted; every unit sold once, no buyer told `unavailable`",
                observed,
                placed(&f.first_holder)
                    && refused(&f.second_buyer, &sold_out)
                    && f.aborts() == 0
                    && kept,
            ),
            Writers::EachItsOwn if mode.retries > 0 => Judgement::new(
                "both buyers read the unit under lock at once; the one aborted is run again \
                 and finds it gone (`sold_out`); every unit sold once, no buyer told \
                 `unavailable`",
                observed,
                ((placed(&f.first_holder) && refused(&f.second_buyer, &sold_out))
                    || (placed(&f.second_buyer) && refused(&f.first_holder, &sold_out)))
                    && f.aborts() >= 1
                    && kept,
            ),
            Writers::EachItsOwn => Judgement::new(
                "both buyers read the unit under lock at once; one is sold it, the other \
                 aborted (`busy`); every unit sold once, no buyer told `unavailable`",
                observed,
                ((placed(&f.first_holder) && refused(&f.second_buyer, &busy))
                    || (placed(&f.second_buyer) && refused(&f.first_holder, &busy)))
                    && f.aborts() >= 1
                    && kept,
            ),
        }
    }

    fn why(_: &Sizes, rows: &[(Mode, Figures)]) -> String {
        let mut text = String::from(
            "A row lock on Galera is a lock on one node. Nothing crosses the cluster before \
             `COMMIT`, when the write set is certified against the ones committed meanwhile: \
             the first to commit wins and the other is aborted, at its commit or, when the \
             winner's write set reaches its node first, thrown out in the middle (`1213`). The \
             stock is kept — certification never lets two writes of one row both commit — but \
             the lock no longer orders the buyers, and each lost race is a retry.",
        );
        for (mode, f) in rows {
            let per_sale = match f.created {
                0 => 0.0,
                n => f.aborts() as f64 / n as f64,
            };
            text.push_str(&format!(
                " {mode}: the lock holder {}, the buyer who came second {}{}; the crowd placed \
                 {} of {} clicks with {} busy and {} unavailable answers, {} abort(s) in the \
                 cluster ({per_sale:.2} per sale), oversell {}.",
                f.first_holder,
                f.second_buyer,
                match f.second_answered_first {
                    true => " — answered while the first still held its lock",
                    false => "",
                },
                f.created,
                f.clicks,
                f.busy,
                f.unavailable,
                f.aborts(),
                f.oversell
            ));
        }
        text.push_str(
            " Sending a hot row's writes to one node gives the lock back its queue and costs \
             no aborts. Spread over all nodes, a buyer aborted by certification is told `busy` \
             — the server answered the rollback, so the outcome is known — or, with \
             `--rollback-retries`, the service runs the purchase again itself: nothing of it \
             happened, so the retry buys at most once, and the buyer hears `busy` only when \
             every attempt lost.",
        );
        text
    }
}

async fn one(
    stage: &Stage,
    sizes: Sizes,
    mode: Mode,
    fleet: &Fleet,
    cluster: &Arc<GaleraCluster>,
    product: u64,
) -> Result<Figures> {
    let tl = stage.round(mode.to_string());
    let before = aborts_of(cluster).await?;

    // The probe: one unit, a buyer inside its critical section on instance 1, another on 2.
    fleet.reset_in(product, 1, Home::Row).await?;
    let mut watch = fleet.watch_transactions().await?;
    let strategy = mode.strategy;
    // The first holder pauses HOLD_MS inside its section, which it enters after its request
    // is sent: until then it holds its lock whatever else happens. An answer to the second
    // buyer before that moment came while the lock was held; after it, the two answers race
    // (the first's commit frees the row and the second is answered at once).
    let held_until = Instant::now() + Duration::from_millis(HOLD_MS);
    let first = async { order(&fleet.api, 0, product, strategy, "holder", HOLD_MS).await };
    let second = async {
        watch.inside().await?;
        tl.log(
            "instance 1",
            "inside: the last unit read under its row lock, held",
        );
        let answer = order(&fleet.api, 1, product, strategy, "second", 0).await;
        tl.log("instance 2", format!("answered {}", answer.describe()));
        anyhow::Ok((answer, Instant::now()))
    };
    let (first, second) = tokio::join!(first, second);
    let (second, second_at) = second?;
    tl.log("instance 1", format!("answered {}", first.describe()));
    let second_answered_first = second_at < held_until;

    // The crowd.
    let crowd_product = product + 1;
    fleet
        .reset_in(crowd_product, sizes.stock, Home::Row)
        .await?;
    let until = Clicks::UntilSoldOut {
        pause: Duration::ZERO,
        patience: PATIENCE,
    };
    let answers = Crowd::new(sizes.buyers, until, strategy, "crowd")
        .retrying(Retry::NEVER)
        .run(&fleet.api, crowd_product)
        .await;
    let after = aborts_of(cluster).await?;
    let end = fleet.product(crowd_product).await?;
    let acc = accounting(&end);
    let figures = Figures {
        first_holder: first.describe(),
        second_buyer: second.describe(),
        second_answered_first,
        stock: sizes.stock,
        clicks: answers.clicks.len(),
        created: answers.created(),
        busy: answers.refused(ErrorCode::Busy),
        unavailable: answers.refused(ErrorCode::BackendUnavailable),
        cert_failures: after.since(before).cert_failures,
        bf_aborts: after.since(before).bf_aborts,
        units_sold: end.sold,
        orders: end.orders,
        oversell: acc.oversell,
    };
    tl.log(
        "crowd",
        format!(
            "{} of {} click(s) placed, {} busy, {} unavailable; the cluster counted {} \
             certification failure(s) and {} brute-force abort(s); oversell {}",
            figures.created,
            figures.clicks,
            figures.busy,
            figures.unavailable,
            figures.cert_failures,
            figures.bf_aborts,
            figures.oversell
        ),
    );
    Ok(figures)
}
