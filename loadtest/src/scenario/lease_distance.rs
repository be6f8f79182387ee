//! `lease-distance`: the round trip to the servers eats into a lock's lease.
//!
//! A lease is a guess at how long the critical section takes. The guess is made where it is
//! cheap to be right: on loopback a `redis-lock` purchase makes its few round trips under the
//! lock — the stock read, the update, the order, the commit — in a millisecond or two, a small
//! share of the lease. Put the database and Redis a round trip away and each of those round
//! trips costs that much more: the section grows with the distance, and nothing in the
//! deployment told the lease. Here a crowd buys through `redis-lock` with the servers reached
//! over loopback and then far away, the lease the same: far away, a holder is still inside when
//! its lease runs out, the next waiter is granted the lock, both read the same stock and both
//! sell it — **oversell**, with no process paused and no clock wrong, only distance.
//!
//! `redis-watchdog` renews the lease every third of it while its holder works, so a long
//! section keeps its lock (its renewals pay the round trip too, and arrive well inside the
//! lease). `redis-lock-fenced` lets the next holder in as `redis-lock` does, but the grant
//! raised the product's fence, so the first holder's late write carries an older token and the
//! database refuses it (`409 lock_lost`).

use std::fmt;
use std::time::Duration;

use anyhow::Result;
use app::api::{ErrorCode, Home, Strategy};
use serde::{Deserialize, Serialize};
use testkit::{Clicks, Crowd, Retry};

use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::{Fleet, accounting, lock_flags};

pub struct LeaseDistance;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    lease_ms: u64,
    /// The round trip the far rows add to every request to the database and to Redis.
    far_rtt_ms: u64,
    stock: i64,
    buyers: usize,
}

/// A strategy with its servers reached over loopback (`rtt_ms` 0) or far away.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    strategy: Strategy,
    rtt_ms: u64,
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, {} ms away", self.strategy, self.rtt_ms)
    }
}

/// A crowd's sale of the stock through one strategy at one distance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub rtt_ms: u64,
    pub lease_ms: u64,
    pub stock: i64,
    pub created: usize,
    /// Late writes the product's fence refused (`409 lock_lost`).
    pub lock_lost: usize,
    pub units_sold: i64,
    pub orders: i64,
    pub oversell: i64,
    /// The slowest purchase that bought, from its click to its answer, in ms: what the section
    /// and the lock's queue came to.
    pub slowest_ms: u64,
}

impl Scenario for LeaseDistance {
    type Sizes = Sizes;
    // Far away, a holder's read of the stock and its commit are three round trips apart
    // (the update, the order, the commit): the next holder, let in a lease (and a poll) after
    // the first was granted, reads before that commit only if three round trips outlast the
    // lease. The watchdog's renewal, sent a third of a lease after its grant arrived, reaches
    // Redis in time only if a round trip is shorter than two thirds of the lease. A round trip
    // of 0.45 leases leaves both a margin of about a fifth of the lease, whether or not the
    // instances' connections have their statements prepared yet. The quick sizes are longer,
    // for a test machine running many suites at once: the margins grow with the lease, and a
    // renewal or a poll made late by a busy processor must still fall inside them. At a
    // 600 ms lease (margins of 120–150 ms) a loaded test machine once saw a watchdog's
    // renewal arrive too late (one unit sold twice); at 900 ms and 0.42 of it the margins are
    // about 220 ms, and fewer units keep the far rows as short as they were. (Further away
    // still, 500 ms, the other budgets of a purchase — Redis's 2 s per command among them —
    // start to refuse buyers, which is not what this scenario shows.)
    const QUICK: Sizes = Sizes {
        lease_ms: 900,
        far_rtt_ms: 380,
        stock: 6,
        buyers: 12,
    };
    // Each far purchase holds the line for its round trips, about half a second: ten units
    // show every far row's failure or its guard as twenty did, in half the minute and a half.
    const FULL: Sizes = Sizes {
        lease_ms: 300,
        far_rtt_ms: 135,
        stock: 10,
        buyers: 30,
    };
    type Subject = Row;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "a {} ms lease; {} buyers for {} units, each purchase's lock held across its round \
             trips to MariaDB and Redis: over loopback, then with both {} ms (round trip) away",
            s.lease_ms, s.buyers, s.stock, s.far_rtt_ms
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Row, Figures)>> {
        // A far holder's section takes seconds to come round to the last buyers in the line:
        // each waits for the lock, and for its answer, as long as the lock lets it. Every buyer
        // is let in to wait for it: the admission door, which would refuse all but a few once
        // a purchase takes a second, is not what this scenario shows.
        let mut flags = lock_flags(s.lease_ms, 60_000);
        flags.extend(
            [
                "--request-timeout-ms=60000",
                "--latency-budget-ms=0",
                "--lag-target-ms=0",
            ]
            .map(String::from),
        );
        let fleet = Fleet::start_apart(stage.app_path()?, 2, &flags).await?;
        let far = s.far_rtt_ms;
        let rows = [
            (Strategy::RedisLock, 0),
            (Strategy::RedisLock, far),
            (Strategy::RedisWatchdog, far),
            (Strategy::RedisLockFenced, far),
        ];
        let mut figures = Vec::new();
        for (n, (strategy, rtt_ms)) in rows.into_iter().enumerate() {
            let row = Row { strategy, rtt_ms };
            figures.push((row, sale(s, stage, &fleet, row, 700 + n as u64).await?));
        }
        fleet.set_rtt(Duration::ZERO);
        Ok(figures)
    }

    fn judge(s: &Sizes, row: &Row, f: &Figures) -> Judgement {
        let observed = format!(
            "{} sold in {} order(s) of {} units (oversell {}), {} late write(s) refused; the \
             slowest purchase took {} ms",
            f.units_sold, f.orders, f.stock, f.oversell, f.lock_lost, f.slowest_ms
        );
        let all_sold = f.oversell == 0 && f.units_sold == f.stock;
        let (expected, holds) = match (row.strategy, row.rtt_ms) {
            (Strategy::RedisLock, 0) => (
                format!("the lease outlasts every section over loopback: no oversell, all {} units sold", s.stock),
                all_sold,
            ),
            (Strategy::RedisLock, _) => (
                "a holder still inside when its lease runs out: a second holder, oversell".to_string(),
                f.oversell > 0,
            ),
            (Strategy::RedisWatchdog, _) => (
                format!("the renewals keep each lease through its section: no oversell, all {} units sold", s.stock),
                all_sold,
            ),
            _ => (
                "the next holder is let in, the first holder's late write refused (lock_lost): no oversell".to_string(),
                f.oversell == 0 && f.lock_lost > 0,
            ),
        };
        Judgement::new(expected, observed, holds)
    }

    fn why(s: &Sizes, rows: &[(Row, Figures)]) -> String {
        let mut text = format!(
            "The lease was {} ms throughout; only the distance to the servers changed.",
            s.lease_ms
        );
        for (row, f) in rows {
            text.push_str(&format!(
                " {row}: oversell {}, {} late write(s) refused, the slowest purchase {} ms.",
                f.oversell, f.lock_lost, f.slowest_ms
            ));
        }
        text.push_str(
            " Every round trip made under the lock lengthens the section by the distance; a \
             lease sized on loopback runs out under a holder that is still working, and the \
             next one is let in. A lease must be sized for the section as deployed, or \
             renewed while the holder works (`redis-watchdog`), and a write the lock guards \
             must carry its fencing token so that the database refuses a holder whose lease \
             ran out (`redis-lock-fenced`).",
        );
        text
    }
}

/// The crowd buys `product`'s stock through the row's strategy at the row's distance.
async fn sale(s: Sizes, stage: &Stage, fleet: &Fleet, row: Row, product: u64) -> Result<Figures> {
    let tl = stage.round(row.to_string());
    fleet.set_rtt(Duration::from_millis(row.rtt_ms));
    fleet.reset_in(product, s.stock, Home::Row).await?;
    tl.log(
        "network",
        format!(
            "MariaDB and Redis {} ms (round trip) from the instances",
            row.rtt_ms
        ),
    );
    let answers = Crowd::new(s.buyers, Clicks::Each(1), row.strategy, "buyer")
        .retrying(Retry::NEVER)
        .run(&fleet.api, product)
        .await;
    let slowest_ms = (answers.clicks.iter())
        .filter(|c| c.answer.created())
        .map(|c| u64::try_from((c.answered - c.sent).as_millis()).unwrap_or(u64::MAX))
        .max()
        .unwrap_or(0);
    let p = fleet.product(product).await?;
    let figures = Figures {
        rtt_ms: row.rtt_ms,
        lease_ms: s.lease_ms,
        stock: s.stock,
        created: answers.created(),
        lock_lost: answers.refused(ErrorCode::LockLost),
        units_sold: p.sold,
        orders: p.orders,
        oversell: accounting(&p).oversell,
        slowest_ms,
    };
    tl.log(
        "db",
        format!(
            "{} unit(s) in {} order(s) of {}: oversell {}; {} late write(s) refused",
            figures.units_sold, figures.orders, s.stock, figures.oversell, figures.lock_lost
        ),
    );
    Ok(figures)
}
