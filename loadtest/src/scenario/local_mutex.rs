//! `local-mutex`: an in-process mutex behind one instance, then behind three.
//!
//! `local-mutex` serialises the read-modify-write of a product with a mutex in the app's
//! memory. Behind one instance every buyer goes through that one mutex: no lost update, no
//! oversell. Behind three instances each has its own mutex, three buyers run the critical
//! section at once, read the same stock, and write back the same decrement: the count of
//! units sold exceeds the stock. The same buyers, the same stock, only the deployment changes.

use std::fmt;
use std::time::Duration;

use anyhow::Result;
use app::api::Strategy;
use serde::{Deserialize, Serialize};
use testkit::{Clicks, Crowd, Spread};

use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::{Fleet, accounting};

pub struct LocalMutex;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    stock: i64,
    buyers: usize,
}

/// The same sale behind one instance, then behind three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub instances: usize,
    pub stock: i64,
    pub stock_left: i64,
    pub oversell: i64,
    pub orders: i64,
    /// Orders the buyers were told of.
    pub created: usize,
    /// Sales run until one oversold (three instances only).
    pub rounds: Option<u64>,
}

/// The deployment a row is about: the strategy behind this many instances.
#[derive(Debug, Clone, Copy)]
pub struct Behind(usize);

impl fmt::Display for Behind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{STRATEGY} × {}", self.0)
    }
}

const STRATEGY: Strategy = Strategy::LocalMutex;
/// Each buyer pauses this long inside the critical section, to widen the window.
const HOLD: Duration = Duration::from_millis(20);
/// Rounds of the 3-instance sale run until one oversells (timing on a busy machine).
const MAX_ROUNDS: u64 = 3;

impl Scenario for LocalMutex {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        stock: 10,
        buyers: 30,
    };
    const FULL: Sizes = Sizes {
        stock: 100,
        buyers: 300,
    };
    type Subject = Behind;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "{} buyers for {} units, {} ms inside the critical section, spread over 1 instance, \
             then over 3",
            s.buyers,
            s.stock,
            HOLD.as_millis()
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Behind, Figures)>> {
        let fleet = Fleet::start(stage.app_binary()?, 3, &[]).await?;
        let one = sale(&fleet, 300, 1, s).await?;
        let mut three = sale(&fleet, 301, 3, s).await?;
        let mut rounds = 1;
        while three.oversell == 0 && rounds < MAX_ROUNDS {
            three = sale(&fleet, 301 + rounds, 3, s).await?;
            rounds += 1;
        }
        three.rounds = Some(rounds);
        Ok(vec![(Behind(1), one), (Behind(3), three)])
    }

    fn judge(_: &Sizes, behind: &Behind, f: &Figures) -> Judgement {
        let (expected, holds) = if behind.0 == 1 {
            ("one mutex for every buyer: no oversell", f.oversell == 0)
        } else {
            (
                "three mutexes, concurrent critical sections: oversell",
                f.oversell > 0,
            )
        };
        let observed = format!(
            "{} orders accepted for {} units; stock left {}",
            f.created, f.stock, f.stock_left
        );
        Judgement::new(expected, observed, holds)
    }

    fn why(s: &Sizes, rows: &[(Behind, Figures)]) -> String {
        let mut text = String::from("A mutex protects what shares its memory.");
        for (_, f) in rows {
            let what = if f.oversell > 0 {
                format!(
                    "the critical sections of different instances ran at once, their \
                     read-modify-writes of the same row overwrote each other, and {} order(s) \
                     were accepted for {} units ({} beyond the stock)",
                    f.orders, s.stock, f.oversell
                )
            } else if f.instances == 1 {
                format!(
                    "all {} buyers queued on one mutex and {} order(s) were accepted for {} \
                     units",
                    s.buyers, f.orders, s.stock
                )
            } else {
                format!(
                    "each instance's mutex admitted one buyer at a time, yet no two \
                     read-modify-writes happened to overlap in {} round(s): {} order(s) for {} \
                     units",
                    f.rounds.unwrap_or(1),
                    f.orders,
                    s.stock
                )
            };
            text.push_str(&format!(" Behind {} instance(s), {what}.", f.instances));
        }
        text.push_str(
            " Exclusion across processes needs a lock outside them (the database row, or a \
             distributed lock).",
        );
        text
    }
}

/// Every buyer clicks once, all at once, spread by buyer over the first `instances` instances.
async fn sale(fleet: &Fleet, product: u64, instances: usize, s: Sizes) -> Result<Figures> {
    fleet.reset(product, s.stock).await?;
    let through: Vec<usize> = (0..instances).collect();
    let answers = Crowd::new(s.buyers, Clicks::Each(1), STRATEGY, &format!("p{product}"))
        .holding(HOLD)
        .through(&through, Spread::ByBuyer)
        .run(&fleet.api, product)
        .await;
    let p = fleet.product(product).await?;
    Ok(Figures {
        instances,
        stock: p.initial_stock,
        stock_left: p.stock,
        oversell: accounting(&p).oversell,
        orders: p.orders,
        created: answers.created(),
        rounds: None,
    })
}
