//! `cancel-expiry-race`: the buyer cancels an order at the instant the sweep expires it, many
//! times over.
//!
//! Both transitions give the order's unit back. Written as "read the order; if it is reserved,
//! mark it ended and put its unit back", each reads `reserved` before either writes, and both
//! put the unit back: the shelf holds more units than the product ever had (phantom units,
//! counted by the accounting as units the stock holds that no order took out), and they sell —
//! oversell by the next buyers. As one conditional `UPDATE … WHERE state = 'reserved'`, the
//! second to arrive finds nothing to change, and its transaction gives nothing back.
//!
//! Each round sells one unit whose order is past its deadline, then sends the cancellation to
//! one instance and one round of the sweep on the product to the other, at once, each pausing
//! inside its transition (the injected pause), so both are inside before either writes.

use std::fmt;
use std::time::Duration;

use anyhow::Result;
use app::api::{Home, Strategy};
use serde::{Deserialize, Serialize};
use testkit::Fault;

use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::{Fleet, accounting};
use crate::rig::order_life::{await_all_due, buy, sell};

pub struct CancelExpiryRace;

/// How the two transitions check the order's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transitions {
    /// Read the state, pause, write it.
    Unchecked,
    /// One conditional state change each.
    Conditional,
}

impl fmt::Display for Transitions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transitions::Unchecked => "unchecked return",
            Transitions::Conditional => "conditional return",
        })
    }
}

/// How big the race is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub rounds: u32,
    /// The pause inside each transition.
    pub hold_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub rounds: u32,
    /// Rounds in which the unit came back twice.
    pub returned_twice: u32,
    /// Units on the shelf beyond the stock, summed over the rounds.
    pub phantom_units: i64,
    /// Rounds in which both transitions said they ended the order.
    pub both_succeeded: u32,
    /// Units sold beyond the stock when buyers bought everything on the shelf after each
    /// round, summed over the rounds.
    pub oversell_after_resale: i64,
}

const PRODUCT: u64 = 920;
const STOCK: i64 = 1;

impl Scenario for CancelExpiryRace {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        rounds: 5,
        hold_ms: 100,
    };
    const FULL: Sizes = Sizes {
        rounds: 25,
        hold_ms: 100,
    };
    type Subject = Transitions;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "{} rounds: 1 unit, its order past its deadline; its buyer cancels on one instance \
             while the sweep expires it on the other, each pausing {} ms inside",
            s.rounds, s.hold_ms
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Transitions, Figures)>> {
        let flags = ["--expiry-interval-ms=0".to_string()];
        let fleet = Fleet::start(stage.app_binary()?, 2, &flags).await?;
        let mut rows = Vec::new();
        for (product, mode) in (PRODUCT..).zip([Transitions::Unchecked, Transitions::Conditional]) {
            let tl = stage.round(mode.to_string());
            let fault = Fault {
                unchecked: mode == Transitions::Unchecked,
                hold: Duration::from_millis(s.hold_ms),
            };
            let mut f = Figures {
                rounds: s.rounds,
                returned_twice: 0,
                phantom_units: 0,
                both_succeeded: 0,
                oversell_after_resale: 0,
            };
            for round in 0..s.rounds {
                sell(&fleet, product, STOCK, Home::Row, Duration::from_millis(1)).await?;
                let request = format!("r{round}");
                // Through the instance the reset went through (the fleet's last), which forgot
                // at once that the last round sold the unit out; the other forgets when the
                // reset's announcement reaches it, a moment later.
                let a = buy(&fleet, 1, product, Strategy::Conditional, "buyer", &request).await;
                anyhow::ensure!(a.created(), "the round's purchase failed: {}", a.describe());
                await_all_due(&fleet).await?;
                let (cancelled, swept) = tokio::join!(
                    fleet
                        .api
                        .transition(0, product, "buyer", &request, "cancel", fault),
                    fleet.api.expire(1, product, fault)
                );
                let cancelled = cancelled?.is_ok();
                let expired = swept?.expired > 0;
                let view = fleet.product(product).await?;
                let phantom = (view.stock + view.sold - view.initial_stock).max(0);
                f.phantom_units += phantom;
                f.returned_twice += u32::from(phantom > 0);
                f.both_succeeded += u32::from(cancelled && expired);
                // What is on the shelf sells, to buyers who each want one.
                for n in 0..view.stock.max(0) + 1 {
                    let user = format!("late-{round}-{n}");
                    buy(
                        &fleet,
                        n as usize,
                        product,
                        Strategy::Conditional,
                        &user,
                        "late",
                    )
                    .await;
                }
                let end = fleet.product(product).await?;
                let oversell = accounting(&end).oversell;
                f.oversell_after_resale += oversell;
                if round == 0 || phantom > 0 {
                    tl.log(
                        format!("round {}", round + 1),
                        format!(
                            "cancel {}, expiry {}: {} unit(s) on the shelf of {}; resold: {} \
                             unit(s) held, oversell {oversell}",
                            if cancelled { "ended it" } else { "refused" },
                            if expired { "ended it" } else { "found nothing" },
                            view.stock,
                            view.initial_stock,
                            end.sold
                        ),
                    );
                }
            }
            rows.push((mode, f));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, mode: &Transitions, f: &Figures) -> Judgement {
        let observed = format!(
            "{} of {} round(s) returned the unit twice ({} phantom unit(s)); both transitions \
             ended the order in {}; resold to oversell {}",
            f.returned_twice, f.rounds, f.phantom_units, f.both_succeeded, f.oversell_after_resale
        );
        match mode {
            Transitions::Unchecked => Judgement::new(
                "the unit comes back twice (phantom units), and they sell: oversell",
                observed,
                f.phantom_units > 0 && f.oversell_after_resale > 0,
            ),
            Transitions::Conditional => Judgement::new(
                "one of the two ends the order, the unit comes back once; oversell 0",
                observed,
                f.phantom_units == 0 && f.both_succeeded == 0 && f.oversell_after_resale == 0,
            ),
        }
    }

    fn why(s: &Sizes, rows: &[(Transitions, Figures)]) -> String {
        let find = |m: Transitions| rows.iter().find(|(t, _)| *t == m).map(|(_, f)| *f);
        let (Some(unchecked), Some(conditional)) =
            (find(Transitions::Unchecked), find(Transitions::Conditional))
        else {
            return String::new();
        };
        format!(
            "A cancellation and an expiry of the same order, each pausing {} ms between \
             reading the order and writing it. Read-then-write, both read `reserved` and both \
             gave the unit back in {} of {} rounds: {} phantom unit(s) on the shelf, which \
             buyers then bought (oversell {}). As one conditional `UPDATE … WHERE state = \
             'reserved'` each, the second found 0 rows to change in every round ({} of {} \
             returned twice, oversell {}): the row lock orders them, the condition decides.",
            s.hold_ms,
            unchecked.returned_twice,
            unchecked.rounds,
            unchecked.phantom_units,
            unchecked.oversell_after_resale,
            conditional.returned_twice,
            conditional.rounds,
            conditional.oversell_after_resale
        )
    }
}
