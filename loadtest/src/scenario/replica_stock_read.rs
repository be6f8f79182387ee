//! `replica-stock-read`: the stock checked on a replica that lags, the deduction made on the
//! primary.
//!
//! Reads go to replicas so that the primary keeps its strength for writes — the product page,
//! and in some designs the stock check before a purchase. A replica applies the primary's
//! changes after it: here it is made to lag (its SQL thread stopped), so it shows the stock
//! as it was before the sale, and says "in stock" to every buyer. What the primary does with
//! the purchase decides the outcome:
//!
//! * **an unconditional deduction** (`unchecked`'s `stock = stock - 1`, trusting the check):
//!   every buyer is sold a unit, and the stock goes below zero — oversell;
//! * **a conditional one** (`conditional`'s `WHERE stock >= 1`): the primary refuses the buyers
//!   the replica let through once the stock is gone — safe, and the replica's answer was only
//!   a hint.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use sandbox::{ReplicatedMariaDb, Replication};
use serde::{Deserialize, Serialize};
use sqlx::MySqlPool;

use super::primary_failover::{shop, shop_as_is};
use super::{Judgement, Scenario, Stage};
use crate::rig::control;

pub struct ReplicaStockRead;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    stock: i64,
    buyers: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Unconditional,
    Conditional,
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Subject::Unconditional => "checked on the replica, deducted unconditionally",
            Subject::Conditional => "checked on the replica, deducted conditionally",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Buyers the replica told "in stock".
    pub passed_check: i64,
    /// Of those, buyers the primary sold a unit.
    pub bought: i64,
    /// Of those, buyers the primary refused (sold out).
    pub refused_by_primary: i64,
    /// The stock the replica showed at the end, and the primary's.
    pub replica_stock: i64,
    pub primary_stock: i64,
    /// Units sold past the stock.
    pub oversold: i64,
}

impl Scenario for ReplicaStockRead {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        stock: 10,
        buyers: 25,
    };
    const FULL: Sizes = Sizes {
        stock: 50,
        buyers: 120,
    };
    type Subject = Subject;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "{} buyers, one after another, for {} units: each checks the stock on a replica \
             whose SQL thread is stopped, then buys on the primary",
            s.buyers, s.stock
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Subject, Figures)>> {
        let set = Arc::new(
            tokio::task::spawn_blocking(|| ReplicatedMariaDb::start(1, Replication::Async))
                .await??,
        );
        let primary = shop(&set.member(0).url()).await?;
        sqlx::raw_sql("CREATE TABLE stock (id INT PRIMARY KEY, units INT NOT NULL)")
            .execute(&primary)
            .await?;
        let mut rows = Vec::new();
        for (id, subject) in [(1, Subject::Unconditional), (2, Subject::Conditional)] {
            let tl = stage.round(subject.to_string());
            sqlx::query("INSERT INTO stock VALUES (?, ?)")
                .bind(id)
                .bind(s.stock)
                .execute(&primary)
                .await?;
            let blocking = Arc::clone(&set);
            control(move || {
                blocking.catch_up(1)?;
                blocking.wait_caught_up(1, 0, Duration::from_secs(60))?;
                blocking.lag(1)
            })
            .await?;
            tl.log(
                "replica",
                format!("shows {} units, and lags from now on", s.stock),
            );
            let replica = shop_as_is(&set.member(1).url()).await?;
            let figures = sale(&s, subject, id, &primary, &replica).await?;
            tl.log(
                "buyers",
                format!(
                    "{} told \"in stock\" by the replica; {} sold a unit by the primary, {} \
                     refused",
                    figures.passed_check, figures.bought, figures.refused_by_primary
                ),
            );
            replica.close().await;
            rows.push((subject, figures));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, subject: &Subject, f: &Figures) -> Judgement {
        let (expected, holds) = match subject {
            Subject::Unconditional => (
                "every buyer the replica lets through is sold a unit: oversell",
                f.oversold > 0 && f.primary_stock < 0,
            ),
            Subject::Conditional => (
                "the primary refuses the buyers the replica let through once the stock is gone: \
                 no oversell",
                f.oversold == 0 && f.refused_by_primary > 0 && f.primary_stock == 0,
            ),
        };
        let observed = format!(
            "{} passed the replica's check ({} units shown); {} bought, {} refused by the \
             primary; primary stock {}; {} oversold",
            f.passed_check,
            f.replica_stock,
            f.bought,
            f.refused_by_primary,
            f.primary_stock,
            f.oversold
        );
        Judgement::new(expected, observed, holds)
    }

    fn why(_: &Sizes, rows: &[(Subject, Figures)]) -> String {
        let mut text = String::from(
            "A replica answers with what it has applied, which is the primary's past: the \
             lagging replica showed the stock before the sale to every buyer.",
        );
        for (subject, f) in rows {
            text.push_str(&match subject {
                Subject::Unconditional => format!(
                    " Trusting that check, the unconditional deduction sold {} units and took \
                     the stock to {} ({} oversold).",
                    f.bought, f.primary_stock, f.oversold
                ),
                Subject::Conditional => format!(
                    " The conditional deduction checked again where the stock is written: {} \
                     bought, {} refused by the primary although the replica said yes, {} \
                     oversold. A replica's stock is a hint for the page; the decision belongs \
                     to the write.",
                    f.bought, f.refused_by_primary, f.oversold
                ),
            });
        }
        text
    }
}

/// The buyers, one after another: the check on the replica, the purchase on the primary.
async fn sale(
    s: &Sizes,
    subject: Subject,
    id: i64,
    primary: &MySqlPool,
    replica: &MySqlPool,
) -> Result<Figures> {
    let read = |pool: &MySqlPool| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT CAST(units AS SIGNED) FROM stock WHERE id = ?")
                .bind(id)
                .fetch_one(&pool)
                .await
        }
    };
    let deduct = match subject {
        Subject::Unconditional => "UPDATE stock SET units = units - 1 WHERE id = ?",
        Subject::Conditional => "UPDATE stock SET units = units - 1 WHERE id = ? AND units >= 1",
    };
    let (mut passed, mut bought) = (0, 0);
    for _ in 0..s.buyers {
        if read(replica).await? < 1 {
            continue;
        }
        passed += 1;
        let changed = sqlx::query(deduct)
            .bind(id)
            .execute(primary)
            .await?
            .rows_affected();
        bought += i64::try_from(changed)?;
    }
    let primary_stock = read(primary).await?;
    Ok(Figures {
        passed_check: passed,
        bought,
        refused_by_primary: passed - bought,
        replica_stock: read(replica).await?,
        primary_stock,
        oversold: (bought - s.stock).max(0),
    })
}
