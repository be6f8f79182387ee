//! `app-failover`: the database's primary dies under the service mid-sale, and the address the
//! instances reach it at moves to the promoted replica.
//!
//! `primary-failover` shows at the database what a failover loses; this is the same failure
//! as the buyers meet it. Two app instances reach the primary through one address — a relay,
//! standing for the virtual IP or the proxy in front of a primary. The replica is cut off
//! from the primary, more buyers click, the primary is SIGKILLed, the replica promoted and
//! the address moved to it; the instances reconnect and sell on until sold out. A buyer who
//! was not answered clicks again with the same request id, as the API asks. Judged against
//! what each buyer was told:
//!
//! * **asynchronous**: the purchases after the cut were answered `201` and are not on the new
//!   primary: their units are sold again. The new primary's own accounting balances (stock
//!   plus units in orders is the initial stock) — only the buyers' answers show the loss;
//! * **semi-synchronous, `AFTER_SYNC`**: the first purchase after the cut waits for the
//!   replica's acknowledgement, holding the row, and the others wait for the row; none is
//!   answered `201`. When the primary dies the service answers them `503` — a commit whose
//!   outcome it cannot know — or `busy`; each buyer clicks again with the same request id,
//!   the new primary has no such order, and the purchase is made there, once.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use app::api::Strategy;
use sandbox::{Relay, ReplicatedMariaDb, Replication, WaitPoint};
use serde::{Deserialize, Serialize};
use testkit::{Answer, Api, order_request};

use super::{Judgement, Scenario, Stage, Timeline};
use crate::rig::control;
use crate::rig::fleet::{Fleet, Rows, accounting, poll};

pub struct AppFailover;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    stock: i64,
    /// Units sold, and applied on the replica, before it is cut off.
    before_cut: usize,
    /// Buyers clicking at once after the cut, before the primary dies.
    after_cut: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Async,
    SemiSyncAfterSync,
}

impl Subject {
    const ALL: [Subject; 2] = [Subject::Async, Subject::SemiSyncAfterSync];

    fn replication(self) -> Replication {
        match self {
            Subject::Async => Replication::Async,
            // Longer than any scenario: the commit waits until the primary dies.
            Subject::SemiSyncAfterSync => Replication::SemiSync {
                wait_point: WaitPoint::AfterSync,
                timeout: Duration::from_secs(600),
            },
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Subject::Async => "conditional, asynchronous replica",
            Subject::SemiSyncAfterSync => "conditional, semi-synchronous replica (AFTER_SYNC)",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub stock: i64,
    /// Purchases answered `201` before the primary died (before the cut and after it).
    pub answered_before_kill: usize,
    /// Of those, answered after the replica was cut off.
    pub answered_after_cut: usize,
    /// Commits waiting for the replica's acknowledgement when the primary died.
    pub waiting_at_kill: u64,
    /// Clicks after the cut the service answered `503` or `busy` (or not at all) when the
    /// primary died, clicked again with the same request id.
    pub clicked_again: usize,
    /// Of those, placed on the new primary.
    pub placed_on_retry: usize,
    /// Units sold to new buyers on the new primary until sold out.
    pub sold_after_failover: usize,
    /// Purchases answered `201` whose order the new primary does not have.
    pub lost_orders: usize,
    /// Units answered `201`, over the whole sale, past the stock.
    pub oversold: i64,
    /// Oversell by the new primary's own accounting (its stock and its orders).
    pub oversell_in_database: i64,
}

/// The product on sale.
const PRODUCT: u64 = 996;

impl Scenario for AppFailover {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        stock: 30,
        before_cut: 10,
        after_cut: 5,
    };
    const FULL: Sizes = Sizes {
        stock: 120,
        before_cut: 40,
        after_cut: 12,
    };
    type Subject = Subject;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "2 app instances reach a MariaDB primary through one address (a relay); a sale of \
             {} units with `conditional`: after {} the replica is cut off, {} buyers click at \
             once, the primary is SIGKILLed, the replica promoted and the address moved to \
             it; the unanswered click again with the same request id, new buyers buy until \
             sold out",
            s.stock, s.before_cut, s.after_cut
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Subject, Figures)>> {
        let mut rows = Vec::new();
        for subject in Subject::ALL {
            let tl = stage.round(subject.to_string());
            let replication = subject.replication();
            let set = Arc::new(control(move || ReplicatedMariaDb::start(1, replication)).await?);
            let address = |i: usize| SocketAddr::from(([127, 0, 0, 1], set.member(i).port()));
            let primary = address(0);
            let relay = Arc::new(control(move || Relay::start(primary)).await?);
            let rows_at = Rows::At {
                url: format!("mysql://root@{}", relay.addr()),
                servers: Arc::new((Arc::clone(&set), Arc::clone(&relay))),
            };
            let fleet = Fleet::start_with_rows(stage.app_binary()?, 2, &[], rows_at).await?;
            let figures = round(&s, &fleet, &set, &relay, address(1), &tl).await?;
            rows.push((subject, figures));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, subject: &Subject, f: &Figures) -> Judgement {
        let (expected, holds) = match subject {
            Subject::Async => (
                "buyers answered `201` after the cut have no order on the new primary and their \
                 units sell again, while the new primary's own accounting balances",
                f.lost_orders > 0
                    && f.oversold == f.lost_orders as i64
                    && f.oversell_in_database == 0,
            ),
            Subject::SemiSyncAfterSync => (
                "no purchase after the cut is answered `201` before the primary dies; clicked \
                 again with the same request id, each is made once on the new primary: nothing \
                 lost, nothing sold twice",
                f.waiting_at_kill > 0
                    && f.answered_after_cut == 0
                    && f.placed_on_retry > 0
                    && f.lost_orders == 0
                    && f.oversold == 0
                    && f.oversell_in_database == 0,
            ),
        };
        let observed = format!(
            "{} answered `201` before the kill ({} after the cut), {} commit(s) waiting; {} \
             clicked again, {} placed then; {} sold after the failover; {} answered order(s) \
             lost; {} oversold by the answers, {} by the database's accounting",
            f.answered_before_kill,
            f.answered_after_cut,
            f.waiting_at_kill,
            f.clicked_again,
            f.placed_on_retry,
            f.sold_after_failover,
            f.lost_orders,
            f.oversold,
            f.oversell_in_database
        );
        Judgement::new(expected, observed, holds)
    }

    fn why(s: &Sizes, rows: &[(Subject, Figures)]) -> String {
        let mut text = format!(
            "The service keeps no copy of an order: what the database it reaches has is all \
             there is. After the cut {} buyers clicked while the replica received nothing.",
            s.after_cut
        );
        for (subject, f) in rows {
            text.push_str(&match subject {
                Subject::Async => format!(
                    " Asynchronous: {} were answered `201` at their commit; when the address \
                     moved to the promoted replica those orders were not there, and their \
                     units were sold to others — {} answered order(s) lost, {} unit(s) \
                     oversold. The new primary's accounting balances ({} oversold by its own \
                     rows): only the answers the buyers hold show it. Nothing the service can \
                     do afterwards finds them; a failover must not promote a replica that \
                     lacks acknowledged commits.",
                    f.answered_after_cut, f.lost_orders, f.oversold, f.oversell_in_database
                ),
                Subject::SemiSyncAfterSync => format!(
                    " Semi-synchronous with AFTER_SYNC: the first commit after the cut waited \
                     for an acknowledgement that could not come ({} waiting when the primary \
                     died) and the rest waited for its row, so no buyer was told `201` for an \
                     order the replica lacked. The service answered them `503` or `busy`; {} \
                     clicked again with the same request id and {} were placed on the new \
                     primary — once each, because the order is looked up by that id first: {} \
                     lost, {} oversold.",
                    f.waiting_at_kill,
                    f.clicked_again,
                    f.placed_on_retry,
                    f.lost_orders,
                    f.oversold
                ),
            });
        }
        text
    }
}

/// One click: instance `n`, buyer `user`, request id `request`.
async fn click(api: &Api, n: usize, user: &str, request: &str) -> Answer {
    let body = order_request(user.into(), Strategy::Conditional, request.into(), 1);
    api.order(n, PRODUCT, &body).await
}

/// [`click`] again with the same request id until the buyer is told bought or sold out (a
/// `503` or `busy` while the instances find the new primary is clicked again).
async fn click_until_answered(api: &Api, n: usize, user: &str, request: &str) -> Result<Answer> {
    poll(|| async {
        let answer = click(api, n, user, request).await;
        Ok((created(&answer) || answer == Answer::SOLD_OUT).then_some(answer))
    })
    .await
}

fn created(answer: &Answer) -> bool {
    matches!(answer, Answer::Created { .. } | Answer::Replayed { .. })
}

/// Files `request` under the answered, or the ones to click again.
fn settle(
    request: String,
    answer: &Answer,
    answered: &mut HashSet<String>,
    unanswered: &mut Vec<String>,
) {
    if created(answer) {
        answered.insert(request);
    } else {
        unanswered.push(request);
    }
}

/// One sale through the failover on `set`, the instances reaching its primary through `relay`.
async fn round(
    s: &Sizes,
    fleet: &Fleet,
    set: &Arc<ReplicatedMariaDb>,
    relay: &Arc<Relay>,
    replica: SocketAddr,
    tl: &Timeline,
) -> Result<Figures> {
    fleet.reset(PRODUCT, s.stock).await?;
    let api = &fleet.api;
    // Request ids answered `201`, over the whole sale.
    let mut answered: HashSet<String> = HashSet::new();
    for k in 0..s.before_cut {
        let request = format!("before-{k}");
        if created(&click(api, k % 2, &format!("b{k}"), &request).await) {
            answered.insert(request);
        }
    }
    let blocking = Arc::clone(set);
    control(move || blocking.wait_caught_up(1, 0, Duration::from_secs(60))).await?;
    let blocking = Arc::clone(set);
    control(move || blocking.disconnect(1)).await?;
    tl.log(
        "replica",
        format!("cut off from the primary after {} units", answered.len()),
    );
    let clicks: Vec<_> = (0..s.after_cut)
        .map(|k| {
            let api = api.clone();
            tokio::spawn(async move {
                let request = format!("after-{k}");
                let answer = click(&api, k % 2, &format!("a{k}"), &request).await;
                (request, answer)
            })
        })
        .collect();
    // Until every click is answered, or is a commit waiting for the replica, or waits for
    // the row such a commit holds (answered `busy` when its lock wait runs out).
    let waiting = poll(|| async {
        let blocking = Arc::clone(set);
        let waiting = control(move || blocking.waiting_commits(0)).await?;
        let done = clicks.iter().filter(|c| c.is_finished()).count();
        Ok((done + usize::try_from(waiting)? >= s.after_cut).then_some(waiting))
    })
    .await
    .context("the clicks after the cut were neither answered nor waiting")?;
    let answered_before_cut = answered.len();
    let mut unanswered = Vec::new();
    let finished: Vec<_> = clicks.iter().map(|c| c.is_finished()).collect();
    let mut pending = Vec::new();
    for (click, done) in clicks.into_iter().zip(finished) {
        match done {
            true => {
                let (request, answer) = click.await?;
                settle(request, &answer, &mut answered, &mut unanswered);
            }
            false => pending.push(click),
        }
    }
    let answered_after_cut = answered.len() - answered_before_cut;
    let answered_before_kill = answered.len();
    let blocking = Arc::clone(set);
    control(move || {
        blocking.member(0).server().kill()?;
        blocking.promote(1)
    })
    .await?;
    relay.move_to(replica);
    tl.log(
        "primary",
        format!(
            "SIGKILLed with {waiting} commit(s) waiting for the replica; the replica promoted \
             and the address moved to it"
        ),
    );
    for click in pending {
        let (request, answer) = click.await?;
        settle(request, &answer, &mut answered, &mut unanswered);
    }
    tl.log(
        "buyers",
        format!(
            "{answered_before_kill} answered `201` before the kill, {} not",
            unanswered.len()
        ),
    );
    let mut placed_on_retry = 0;
    for request in &unanswered {
        let k: usize = request.trim_start_matches("after-").parse()?;
        let user = format!("a{k}");
        let answer = click_until_answered(api, k % 2, &user, request)
            .await
            .with_context(|| {
                format!("{request} was never answered once the replica was promoted")
            })?;
        if created(&answer) {
            placed_on_retry += 1;
            answered.insert(request.clone());
        }
    }
    tl.log(
        "buyers",
        format!("{placed_on_retry} of the unanswered placed when clicked again"),
    );
    let mut sold_after = 0;
    for k in 0.. {
        let request = format!("new-{k}");
        let answer = click_until_answered(api, k % 2, &format!("n{k}"), &request).await?;
        if !created(&answer) {
            break;
        }
        sold_after += 1;
        answered.insert(request);
    }
    tl.log(
        "buyers",
        format!("{sold_after} more units sold on the promoted replica until sold out"),
    );
    let kept = kept_orders(set).await?;
    let product = fleet.product(PRODUCT).await?;
    Ok(Figures {
        stock: s.stock,
        answered_before_kill,
        answered_after_cut,
        waiting_at_kill: waiting,
        clicked_again: unanswered.len(),
        placed_on_retry,
        sold_after_failover: sold_after,
        lost_orders: answered.iter().filter(|r| !kept.contains(*r)).count(),
        oversold: (answered.len() as i64 - s.stock).max(0),
        oversell_in_database: accounting(&product).oversell,
    })
}

/// The request ids of the product's orders on the promoted replica.
async fn kept_orders(set: &ReplicatedMariaDb) -> Result<HashSet<String>> {
    let url = format!("{}/scenario", set.member(1).url());
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let ids: Vec<String> = sqlx::query_scalar("SELECT request_id FROM orders WHERE product_id = ?")
        .bind(PRODUCT)
        .fetch_all(&pool)
        .await?;
    pool.close().await;
    Ok(ids.into_iter().collect())
}
