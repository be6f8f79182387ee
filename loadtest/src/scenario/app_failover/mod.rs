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
//!   the new primary has no such order, and the purchase is made there, once;
//! * **semi-synchronous, fallen back**: both replicas cut off and a 300 ms timeout: the first
//!   commit after the cut waits it out and the primary answers it, then replicates
//!   asynchronously and says so only in `Rpl_semi_sync_master_status`. The buyers who click
//!   next are answered `201` at once, and a failover loses every one of them, as
//!   asynchronously;
//! * **the same, with `--require-semi-sync`**: each instance reads that status and, once it
//!   reads `OFF`, refuses purchases `503` instead. Only the commit that waited out the timeout
//!   is lost — the primary answered it before anyone could know. The promoted replica waits
//!   for the replica left, the refused buyers click again and are placed there, once.

mod clicks;
mod cut;
mod fallback;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use sandbox::{Relay, ReplicatedMariaDb, Replication, WaitPoint};
use serde::{Deserialize, Serialize};

use super::{Judgement, Scenario, Stage};
use crate::rig::control;
use crate::rig::fleet::{Fleet, Rows};

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
    /// Semi-synchronous, fallen back to asynchronous after its timeout.
    FellBack,
    /// [`Subject::FellBack`], the instances with `--require-semi-sync`.
    FellBackRefused,
}

impl Subject {
    const ALL: [Subject; 4] = [
        Subject::Async,
        Subject::SemiSyncAfterSync,
        Subject::FellBack,
        Subject::FellBackRefused,
    ];

    fn replication(self) -> Replication {
        match self {
            Subject::Async => Replication::Async,
            // Longer than any scenario: the commit waits until the primary dies.
            Subject::SemiSyncAfterSync => Replication::SemiSync {
                wait_point: WaitPoint::AfterSync,
                timeout: Duration::from_secs(600),
            },
            Subject::FellBack | Subject::FellBackRefused => Replication::SemiSync {
                wait_point: WaitPoint::AfterSync,
                timeout: Duration::from_millis(300),
            },
        }
    }

    /// Replicas of the primary: a second one for the promoted replica to wait for, where
    /// the instances refuse purchases while no replica acknowledges.
    fn replicas(self) -> usize {
        match self {
            Subject::Async | Subject::SemiSyncAfterSync => 1,
            Subject::FellBack | Subject::FellBackRefused => 2,
        }
    }

    /// The instances' flags.
    fn flags(self) -> Vec<String> {
        let refusing = self == Subject::FellBackRefused;
        vec![format!("--require-semi-sync={refusing}")]
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Subject::Async => "conditional, asynchronous replica",
            Subject::SemiSyncAfterSync => "conditional, semi-synchronous replica (AFTER_SYNC)",
            Subject::FellBack => "conditional, semi-synchronous replicas fallen back (300 ms)",
            Subject::FellBackRefused => {
                "conditional, fallen back, instances with --require-semi-sync"
            }
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
    /// Clicks after a fallback to asynchronous replication not answered `201` (refused by
    /// instances that require semi-synchronous replication).
    #[serde(default)]
    pub refused_while_async: usize,
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
             sold out. With two semi-synchronous replicas (300 ms timeout) both are cut off: \
             one buyer clicks, waits out the timeout, and the other {} click once the primary \
             fell back — the instances trusting it, or refusing with --require-semi-sync",
            s.stock,
            s.before_cut,
            s.after_cut,
            s.after_cut - 1
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Subject, Figures)>> {
        let mut rows = Vec::new();
        for subject in Subject::ALL {
            let tl = stage.round(subject.to_string());
            let replication = subject.replication();
            let replicas = subject.replicas();
            let set =
                Arc::new(control(move || ReplicatedMariaDb::start(replicas, replication)).await?);
            let address = |i: usize| SocketAddr::from(([127, 0, 0, 1], set.member(i).port()));
            let primary = address(0);
            let relay = Arc::new(control(move || Relay::start(primary)).await?);
            let rows_at = Rows::At {
                url: format!("mysql://root@{}", relay.addr()),
                servers: Arc::new((Arc::clone(&set), Arc::clone(&relay))),
            };
            let fleet =
                Fleet::start_with_rows(stage.app_binary()?, 2, &subject.flags(), rows_at).await?;
            let figures = match subject {
                Subject::Async | Subject::SemiSyncAfterSync => {
                    cut::round(&s, &fleet, &set, &relay, address(1), &tl).await?
                }
                Subject::FellBack | Subject::FellBackRefused => {
                    let refusing = subject == Subject::FellBackRefused;
                    fallback::round(&s, &fleet, &set, &relay, address(1), refusing, &tl).await?
                }
            };
            rows.push((subject, figures));
        }
        Ok(rows)
    }

    fn judge(s: &Sizes, subject: &Subject, f: &Figures) -> Judgement {
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
            Subject::FellBack => (
                "every click after the cut is answered `201` — the first after the timeout, \
                 the rest at once — and every one of those orders is lost by the failover, as \
                 with asynchronous replication; the new primary's accounting balances",
                f.answered_after_cut == s.after_cut
                    && f.lost_orders == s.after_cut
                    && f.oversold == f.lost_orders as i64
                    && f.oversell_in_database == 0,
            ),
            Subject::FellBackRefused => (
                "only the commit that waited out the timeout is answered `201` and lost; the \
                 clicks after the instances read the fallback are refused, and clicked again \
                 after the failover each is placed once",
                f.answered_after_cut == 1
                    && f.lost_orders == 1
                    && f.refused_while_async == s.after_cut - 1
                    && f.placed_on_retry == f.refused_while_async
                    && f.oversold == 1
                    && f.oversell_in_database == 0,
            ),
        };
        let observed = format!(
            "{} answered `201` before the kill ({} after the cut, {} refused), {} commit(s) \
             waiting; {} clicked again, {} placed then; {} sold after the failover; {} \
             answered order(s) lost; {} oversold by the answers, {} by the database's \
             accounting",
            f.answered_before_kill,
            f.answered_after_cut,
            f.refused_while_async,
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
                Subject::FellBack => format!(
                    " Semi-synchronous with a 300 ms timeout and both replicas cut off: the \
                     first commit waited out the timeout and the primary answered it, then \
                     fell back to asynchronous replication, saying so only in \
                     `Rpl_semi_sync_master_status`. {} buyer(s) after the cut were answered \
                     `201`, {} of those orders were gone after the failover and {} unit(s) \
                     sold twice: the promise semi-synchronous replication made lasts only as \
                     long as its timeout.",
                    f.answered_after_cut, f.lost_orders, f.oversold
                ),
                Subject::FellBackRefused => format!(
                    " With `--require-semi-sync` each instance reads that status every 100 ms \
                     and, reading `OFF`, refused {} buyer(s) `503` rather than promise orders \
                     a failover could take back; clicked again once the promoted replica \
                     waited for the replica left, {} were placed, once each. What no reading \
                     can refuse is the commit that waited out the timeout: the primary \
                     answered it before the status changed — {} order(s) lost, {} oversold. \
                     Only a timeout longer than any outage (the AFTER_SYNC row: purchases \
                     wait instead) loses none.",
                    f.refused_while_async, f.placed_on_retry, f.lost_orders, f.oversold
                ),
            });
        }
        text
    }
}
