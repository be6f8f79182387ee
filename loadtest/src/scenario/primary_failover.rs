//! `primary-failover`: the database's primary dies mid-sale and its replica is promoted.
//!
//! Buyers buy through the conditional update on a MariaDB primary with one replica. The
//! replica is cut off from the primary (its I/O thread stopped, as a network fault between
//! them would), a few more purchases are made, the primary is SIGKILLed and the replica
//! promoted; the sale goes on on the new primary until sold out. Judged against what the
//! buyers were told:
//!
//! * **asynchronous replication**: the purchases made after the cut were committed and
//!   answered, and never sent: the promoted replica has no such orders, and their units are on
//!   sale again — sold twice (oversell), the first buyers' orders gone;
//! * **semi-synchronous, `AFTER_SYNC`**: each commit waits for the replica's acknowledgement,
//!   which cannot come, so no purchase after the cut is answered: the buyers get an error when
//!   the primary dies, nothing they were told is lost, nothing sells twice;
//! * **semi-synchronous, `AFTER_COMMIT`** (MariaDB's default wait point): the buyers are not
//!   answered either, but the waiting commit is already visible — another client reads the
//!   order and the stock it took — and the failover then loses what it read;
//! * **semi-synchronous with a short timeout**: the first commit after the cut waits out
//!   `rpl_semi_sync_master_timeout`, then the primary falls back to asynchronous replication,
//!   saying so only in a status variable — and loses what the asynchronous primary loses.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use sandbox::{ReplicatedMariaDb, Replication, WaitPoint};
use serde::{Deserialize, Serialize};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{Acquire, Connection as _, MySql, MySqlConnection, MySqlPool};

use super::{Judgement, Scenario, Stage, Timeline};
use crate::rig::control;

pub struct PrimaryFailover;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    stock: i64,
    /// Units sold, and applied on the replica, before it is cut off.
    before_cut: i64,
    /// Purchases attempted after the cut, before the primary dies.
    after_cut: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Async,
    SemiSyncAfterSync,
    SemiSyncAfterCommit,
    SemiSyncFallback,
}

impl Subject {
    const ALL: [Subject; 4] = [
        Subject::Async,
        Subject::SemiSyncAfterSync,
        Subject::SemiSyncAfterCommit,
        Subject::SemiSyncFallback,
    ];

    /// Whether its commits wait for the replica for as long as the scenario lasts.
    fn waits(self) -> bool {
        matches!(
            self,
            Subject::SemiSyncAfterSync | Subject::SemiSyncAfterCommit
        )
    }

    fn replication(self) -> Replication {
        match self {
            Subject::Async => Replication::Async,
            // Longer than any scenario: the commits wait until the primary dies.
            Subject::SemiSyncAfterSync => Replication::SemiSync {
                wait_point: WaitPoint::AfterSync,
                timeout: Duration::from_secs(600),
            },
            Subject::SemiSyncAfterCommit => Replication::SemiSync {
                wait_point: WaitPoint::AfterCommit,
                timeout: Duration::from_secs(600),
            },
            Subject::SemiSyncFallback => Replication::SemiSync {
                wait_point: WaitPoint::AfterSync,
                timeout: Duration::from_millis(200),
            },
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Subject::Async => "asynchronous",
            Subject::SemiSyncAfterSync => "semi-synchronous, AFTER_SYNC",
            Subject::SemiSyncAfterCommit => "semi-synchronous, AFTER_COMMIT",
            Subject::SemiSyncFallback => "semi-synchronous, 200 ms timeout",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Purchases answered "bought" by the primary before it died.
    pub answered_before_failover: i64,
    /// Purchases after the cut that were still waiting for their commit when it died.
    pub waiting_at_kill: u64,
    /// Whether the primary's commits still waited for a replica when it died.
    pub semi_sync_on_at_kill: bool,
    /// Orders another client read on the primary before it died whose buyers had not been
    /// answered (their commits waiting for the replica).
    pub seen_unanswered: i64,
    /// Orders another client read on the primary that the promoted replica does not have, past
    /// the answered ones lost.
    pub seen_then_lost: i64,
    /// Orders the promoted replica holds of those answered.
    pub orders_on_promoted: i64,
    /// Answered purchases whose orders are gone.
    pub lost_orders: i64,
    /// Units sold on the promoted replica until sold out.
    pub sold_after_failover: i64,
    /// Units answered "bought" past the stock, over the whole sale.
    pub oversold: i64,
}

impl Scenario for PrimaryFailover {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        stock: 40,
        before_cut: 10,
        after_cut: 6,
    };
    const FULL: Sizes = Sizes {
        stock: 200,
        before_cut: 50,
        after_cut: 20,
    };
    type Subject = Subject;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "a sale of {} units on a MariaDB primary with one replica: after {} units the \
             replica is cut off, {} more purchases are made, the primary is SIGKILLed and the \
             replica promoted",
            s.stock, s.before_cut, s.after_cut
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Subject, Figures)>> {
        let mut rows = Vec::new();
        for subject in Subject::ALL {
            let tl = stage.round(subject.to_string());
            let replication = subject.replication();
            let set = Arc::new(
                tokio::task::spawn_blocking(move || ReplicatedMariaDb::start(1, replication))
                    .await??,
            );
            let figures = round(&s, subject, &set, &tl).await?;
            rows.push((subject, figures));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, subject: &Subject, f: &Figures) -> Judgement {
        let (expected, holds) = match subject {
            Subject::SemiSyncAfterSync => (
                "the purchases after the cut wait for the replica, unanswered and unseen; \
                 nothing lost, no oversell",
                f.waiting_at_kill > 0
                    && f.lost_orders == 0
                    && f.oversold == 0
                    && f.seen_unanswered == 0,
            ),
            Subject::SemiSyncAfterCommit => (
                "the purchases after the cut wait unanswered, but another client reads them; \
                 the failover loses what it read",
                f.waiting_at_kill > 0
                    && f.lost_orders == 0
                    && f.oversold == 0
                    && f.seen_then_lost > 0,
            ),
            Subject::Async => (
                "the purchases after the cut are answered and lost with the primary; their \
                 units sell again (oversell)",
                f.lost_orders > 0 && f.oversold == f.lost_orders,
            ),
            Subject::SemiSyncFallback => (
                "the primary falls back to asynchronous after its timeout, silently: answered \
                 orders lost, their units sold again",
                !f.semi_sync_on_at_kill && f.lost_orders > 0 && f.oversold == f.lost_orders,
            ),
        };
        let observed = format!(
            "{} answered before the kill ({} waiting, semi-synchronous {}, {} read unanswered); \
             {} orders on the promoted replica: {} answered lost, {} read and lost; {} oversold",
            f.answered_before_failover,
            f.waiting_at_kill,
            if f.semi_sync_on_at_kill { "on" } else { "off" },
            f.seen_unanswered,
            f.orders_on_promoted,
            f.lost_orders,
            f.seen_then_lost,
            f.oversold
        );
        Judgement::new(expected, observed, holds)
    }

    fn why(s: &Sizes, rows: &[(Subject, Figures)]) -> String {
        let mut text = format!(
            "A replica has what the primary sent it. After the cut the primary went on \
             committing {} purchases while the replica received nothing.",
            s.after_cut
        );
        for (subject, f) in rows {
            text.push_str(&match subject {
                Subject::Async => format!(
                    " Asynchronous: each was answered at its commit; the promoted replica never \
                     had them, so {} answered orders vanished and their units were sold again \
                     ({} oversold).",
                    f.lost_orders, f.oversold
                ),
                Subject::SemiSyncAfterSync => format!(
                    " Semi-synchronous with AFTER_SYNC: each commit waited for an \
                     acknowledgement that could not come ({} waiting when the primary died), so \
                     no buyer was told yes for an order the replica lacked: {} lost, {} \
                     oversold. The price is the wait: without a replica the sale stops.",
                    f.waiting_at_kill, f.lost_orders, f.oversold
                ),
                Subject::SemiSyncAfterCommit => format!(
                    " Semi-synchronous with AFTER_COMMIT, MariaDB's default: no buyer was \
                     answered either ({} waiting), but each commit waited *after* the storage \
                     engine had committed, so another client read {} order(s) — and the stock \
                     they took — that the promoted replica then did not have ({} read and lost).",
                    f.waiting_at_kill, f.seen_unanswered, f.seen_then_lost
                ),
                Subject::SemiSyncFallback => format!(
                    " Semi-synchronous with a 200 ms timeout: the first commit waited it out and \
                     the primary fell back to asynchronous replication (status {} when it \
                     died), answering the rest at once — {} answered orders lost, {} oversold, \
                     as if it had never been semi-synchronous. MariaDB's default timeout is \
                     10 s.",
                    if f.semi_sync_on_at_kill { "on" } else { "off" },
                    f.lost_orders,
                    f.oversold
                ),
            });
        }
        text
    }
}

/// One sale through the failover, on `set`.
async fn round(
    s: &Sizes,
    subject: Subject,
    set: &Arc<ReplicatedMariaDb>,
    tl: &Timeline,
) -> Result<Figures> {
    let primary = shop(&set.member(0).url()).await?;
    sqlx::raw_sql(
        "CREATE TABLE stock (id INT PRIMARY KEY, units INT NOT NULL); \
         CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, buyer BIGINT NOT NULL)",
    )
    .execute(&primary)
    .await?;
    sqlx::query("INSERT INTO stock VALUES (1, ?)")
        .bind(s.stock)
        .execute(&primary)
        .await?;
    let mut answered = 0;
    for buyer in 0..s.before_cut {
        answered += i64::from(buy(&primary, buyer).await?);
    }
    let answered_at_cut = answered;
    let blocking = Arc::clone(set);
    control(move || blocking.wait_caught_up(1, 0, Duration::from_secs(60))).await?;
    let blocking = Arc::clone(set);
    control(move || blocking.disconnect(1)).await?;
    tl.log(
        "replica",
        format!("cut off from the primary after {answered} units"),
    );
    // Each on a connection of its own, which dies with the primary (a pooled one would be
    // tested, and complained about, on its way back to the pool).
    let shop_url = format!("{}/shop", set.member(0).url());
    let buyers: Vec<_> = (0..s.after_cut)
        .map(|k| {
            let (url, buyer) = (shop_url.clone(), s.before_cut + k as i64);
            tokio::spawn(async move {
                let mut conn = MySqlConnection::connect(&url).await?;
                buy(&mut conn, buyer).await
            })
        })
        .collect();
    // Until every purchase is answered — or, where commits wait for the replica for as long
    // as it takes, until the primary holds one waiting.
    let waits = subject.waits();
    let waiting = loop {
        let blocking = Arc::clone(set);
        let waiting = tokio::task::spawn_blocking(move || blocking.waiting_commits(0)).await??;
        if buyers.iter().all(|b| b.is_finished()) || (waits && waiting > 0) {
            break waiting;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let blocking = Arc::clone(set);
    let (semi_sync_on, _) =
        tokio::task::spawn_blocking(move || blocking.semi_sync_status(0)).await??;
    // Another client — a product page, an order list — reads the primary now.
    let reader = shop_as_is(&set.member(0).url()).await?;
    let seen: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(&reader)
        .await?;
    reader.close().await;
    tl.log("reader", format!("reads {seen} orders on the primary"));
    let blocking = Arc::clone(set);
    control(move || blocking.member(0).server().kill()).await?;
    tl.log(
        "primary",
        format!("SIGKILLed with {waiting} commit(s) waiting for the replica"),
    );
    for b in buyers {
        // A purchase the dead primary never answered is an error the buyer saw.
        answered += i64::from(b.await?.unwrap_or(false));
    }
    // The waiting commits answered none (every purchase read above was answered, where the
    // commits do not wait).
    let seen_unanswered = if waits { seen - answered_at_cut } else { 0 };
    primary.close().await;
    tl.log(
        "buyers",
        format!("{answered} purchases answered \"bought\""),
    );
    let blocking = Arc::clone(set);
    control(move || blocking.promote(1)).await?;
    let promoted = shop(&set.member(1).url()).await?;
    let on_promoted: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(&promoted)
        .await?;
    tl.log("replica", format!("promoted, holding {on_promoted} orders"));
    let mut sold_after = 0;
    let mut buyer = 1_000_000;
    while buy(&promoted, buyer).await? {
        sold_after += 1;
        buyer += 1;
    }
    tl.log(
        "buyers",
        format!("{sold_after} more units sold on the promoted replica until sold out"),
    );
    promoted.close().await;
    Ok(Figures {
        answered_before_failover: answered,
        waiting_at_kill: waiting,
        semi_sync_on_at_kill: semi_sync_on,
        seen_unanswered,
        seen_then_lost: (seen - on_promoted - (answered - on_promoted).max(0)).max(0),
        orders_on_promoted: on_promoted,
        lost_orders: answered - on_promoted,
        sold_after_failover: sold_after,
        oversold: (answered + sold_after - s.stock).max(0),
    })
}

/// A connection's pool on the `shop` database of the server at `url`, created if missing.
pub(super) async fn shop(url: &str) -> Result<MySqlPool> {
    let admin = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await?;
    sqlx::raw_sql("CREATE DATABASE IF NOT EXISTS shop")
        .execute(&admin)
        .await?;
    admin.close().await;
    shop_as_is(url).await
}

/// A connection's pool on the `shop` database of the server at `url`, creating nothing: for a
/// reader of a replica (a statement that wrote would give it a transaction of its own) or of a
/// primary whose writes wait for a replica.
pub(super) async fn shop_as_is(url: &str) -> Result<MySqlPool> {
    MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&format!("{url}/shop"))
        .await
        .with_context(|| format!("connecting to {url}/shop"))
}

/// One purchase of one unit: the conditional update and the order in one transaction; `true`
/// once committed, `false` when sold out.
async fn buy<'c>(on: impl Acquire<'c, Database = MySql>, buyer: i64) -> Result<bool, sqlx::Error> {
    let mut tx = on.begin().await?;
    let taken = sqlx::query("UPDATE stock SET units = units - 1 WHERE id = 1 AND units >= 1")
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if taken == 0 {
        tx.rollback().await?;
        return Ok(false);
    }
    sqlx::query("INSERT INTO orders (buyer) VALUES (?)")
        .bind(buyer)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}
