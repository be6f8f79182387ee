//! The failures the matrix runs, each as the transaction a buyer's click runs, and the client
//! that runs it as a correct client must: again, from the start, when the engine refuses it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::engine::{Session, Stmt, refusal};

/// How many times a correct client runs a refused transaction before giving up.
pub const MAX_ATTEMPTS: u32 = 100;

/// A failure of a flash sale that an isolation level might stop, named by the strategy that
/// shows it in the service (and one that shows none, to compare with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Failure {
    /// `naive`: read the stock, write back the absolute value computed from it. Two buyers who
    /// read the same value both write it less one: a unit sold, not counted (a lost update).
    LostUpdate,
    /// `unchecked`: read the stock to check it, then deduct relative to whatever the row holds.
    /// Every buyer who passed the check before the last unit went takes one: stock below zero.
    NegativeStock,
    /// `racy-limit`: one per customer, checked by counting the buyer's orders before inserting
    /// one. A buyer's simultaneous clicks each see no order and each insert their own row:
    /// write skew, which no row both transactions write can reveal.
    WriteSkew,
    /// The seed articles' phantom inventory: 4 units; one buyer orders 3, another 2, at the
    /// same moment, each through `naive`'s read-then-write. Both are told yes: 5 of 4 sold.
    PhantomInventory,
    /// `conditional`: one `UPDATE … WHERE stock >= q`, no read before it. The control row: it
    /// needs no isolation level to be safe, but some levels make it retry.
    Conditional,
}

impl Failure {
    pub const ALL: [Failure; 5] = [
        Failure::LostUpdate,
        Failure::NegativeStock,
        Failure::WriteSkew,
        Failure::PhantomInventory,
        Failure::Conditional,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Failure::LostUpdate => "lost update",
            Failure::NegativeStock => "negative stock",
            Failure::WriteSkew => "one-per-customer write skew",
            Failure::PhantomInventory => "phantom inventory",
            Failure::Conditional => "no failure: the conditional update",
        }
    }

    /// The service's strategy whose transaction this is.
    pub fn strategy(self) -> &'static str {
        match self {
            Failure::LostUpdate | Failure::PhantomInventory => "naive",
            Failure::NegativeStock => "unchecked",
            Failure::WriteSkew => "racy-limit",
            Failure::Conditional => "conditional",
        }
    }

    /// What is counted as the failure, in the report's words.
    pub fn counted(self) -> &'static str {
        match self {
            Failure::LostUpdate => "units sold and not deducted",
            Failure::NegativeStock => "units sold past zero",
            Failure::WriteSkew => "orders past one per customer",
            Failure::PhantomInventory => "sales of 4 units that sold 5",
            Failure::Conditional => "units sold past the stock",
        }
    }
}

/// What a click was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Bought,
    /// Not enough stock (or, for the write skew, the buyer has their one already).
    Refused,
    /// Refused by the engine [`MAX_ATTEMPTS`] times.
    GaveUp,
}

/// What the clicks of one cell cost and were answered, summed over its clicks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Clicks {
    pub clicks: u64,
    /// Transactions begun, refused ones included.
    pub attempts: u64,
    pub bought: u64,
    pub refused: u64,
    pub gave_up: u64,
    /// The engine's refusals, by their error.
    pub refusals: BTreeMap<String, u64>,
}

impl Clicks {
    pub fn add(&mut self, other: &Clicks) {
        self.clicks += other.clicks;
        self.attempts += other.attempts;
        self.bought += other.bought;
        self.refused += other.refused;
        self.gave_up += other.gave_up;
        for (why, n) in &other.refusals {
            *self.refusals.entry(why.clone()).or_default() += n;
        }
    }

    pub fn refusals_total(&self) -> u64 {
        self.refusals.values().sum()
    }
}

/// One buyer's order: `failure`'s transaction for `quantity` units of `product` by `buyer`.
#[derive(Debug, Clone, Copy)]
pub struct Click {
    pub failure: Failure,
    pub product: i64,
    pub buyer: i64,
    pub quantity: i64,
}

/// One click, run again while the engine refuses it — at once the first time, then after a
/// random pause that doubles in its bound ([`backoff`]), so that the transactions that collided
/// do not collide again in step. Any other error ends the cell.
pub async fn click(
    session: &mut Session,
    c: Click,
    tally: &mut Clicks,
) -> Result<Answer, sqlx::Error> {
    tally.clicks += 1;
    for refused in 0..MAX_ATTEMPTS {
        if refused > 0 {
            tokio::time::sleep(backoff(refused)).await;
        }
        tally.attempts += 1;
        match attempt(session, c).await {
            Ok(true) => {
                tally.bought += 1;
                return Ok(Answer::Bought);
            }
            Ok(false) => {
                tally.refused += 1;
                return Ok(Answer::Refused);
            }
            Err(e) => {
                let Some(why) = refusal(session.engine(), &e) else {
                    return Err(e);
                };
                *tally.refusals.entry(why.into()).or_default() += 1;
            }
        }
    }
    tally.gave_up += 1;
    Ok(Answer::GaveUp)
}

/// The pause before a click's next attempt after `refused` refusals: none after the first,
/// then uniform in `[0, 2^(refused − 2)]` ms, at most 32 ms ("full jitter").
pub fn backoff(refused: u32) -> Duration {
    if refused < 2 {
        return Duration::ZERO;
    }
    let bound_us = 1_000u64 << (refused - 2).min(5);
    Duration::from_micros(rand::random_range(0..=bound_us))
}

/// One transaction of the click; `Ok(false)` when it decided not to buy. Ended either way:
/// committed, or rolled back (a failed `COMMIT` has ended it already).
async fn attempt(s: &mut Session, c: Click) -> Result<bool, sqlx::Error> {
    s.begin().await?;
    match decide(s, c).await {
        Ok(true) => s.commit().await.map(|()| true),
        Ok(false) => {
            s.rollback().await;
            Ok(false)
        }
        Err(e) => {
            s.rollback().await;
            Err(e)
        }
    }
}

/// The click's reads and writes inside its transaction; `false` when it does not buy.
async fn decide(s: &mut Session, c: Click) -> Result<bool, sqlx::Error> {
    let Click {
        failure,
        product,
        buyer,
        quantity: q,
    } = c;
    let buy = match failure {
        Failure::LostUpdate | Failure::PhantomInventory => {
            let stock = s.number(Stmt::ReadStock, &[product]).await?;
            let buy = stock >= q;
            if buy {
                s.execute(Stmt::SetStock, &[stock - q, product]).await?;
            }
            buy
        }
        Failure::NegativeStock => {
            let buy = s.number(Stmt::ReadStock, &[product]).await? >= q;
            if buy {
                s.execute(Stmt::TakeStock, &[q, product]).await?;
            }
            buy
        }
        Failure::WriteSkew => s.number(Stmt::CountOrders, &[product, buyer]).await? == 0,
        Failure::Conditional => s.execute(Stmt::TakeIfLeft, &[q, product, q]).await? == 1,
    };
    if buy {
        s.execute(Stmt::InsertOrder, &[product, buyer, q]).await?;
    }
    Ok(buy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_retry_is_at_once_and_later_pauses_stay_within_a_doubling_bound() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::ZERO);
        for refused in 2..MAX_ATTEMPTS {
            let bound = Duration::from_millis(1 << (refused - 2).min(5));
            assert!(backoff(refused) <= bound, "{refused}");
        }
    }
}
