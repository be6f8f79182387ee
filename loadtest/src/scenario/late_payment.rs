//! `late-payment`: a buyer pays an order after its payment deadline, once the expiry has given
//! its unit back and the unit was sold again.
//!
//! A reservation is a promise for a while: once the deadline passes, the order expires and its
//! unit goes back on sale. A payment that only looks the order up and marks it paid — without
//! checking, in the same statement, that it is still reserved and within its deadline — turns
//! the expired order back into a sale after its unit went to someone else: two buyers hold one
//! unit (oversell). The conditional transition (`UPDATE … WHERE state = 'reserved' AND pay_by >
//! NOW(6)`) finds nothing to change and answers `order_expired`.
//!
//! The unchecked payment is the service's fault-injection variant (`X-Seckill-Unchecked-
//! Transition`, honoured only with `--allow-fault-injection`). The expiry is one round of the
//! sweep on the product (`POST /api/products/{id}/expire`), asked until it expired the order;
//! the instances' own sweeps are off, so the timeline is the scenario's.

use std::fmt;
use std::time::Duration;

use anyhow::Result;
use app::api::{ErrorCode, Home, OrderStage, Strategy};
use serde::{Deserialize, Serialize};
use testkit::Fault;

use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::{Fleet, accounting, poll};
use crate::rig::order_life::{await_all_due, buy, sell};

pub struct LatePayment;

/// How the late payment is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payment {
    /// Marks the order paid whatever its state.
    Unchecked,
    /// One conditional state change.
    Conditional,
}

impl fmt::Display for Payment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Payment::Unchecked => "unchecked payment",
            Payment::Conditional => "conditional payment",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub stock: i64,
    pub window_ms: u64,
    /// The late payment was accepted (the order is `paid`).
    pub late_payment_accepted: bool,
    /// The code it was refused with, if refused.
    pub refused_with: Option<ErrorCode>,
    /// The unit sold again after the expiry.
    pub resold: bool,
    /// Units held by paid and reserved orders at the end.
    pub units_held: i64,
    pub oversell: i64,
}

const PRODUCT: u64 = 910;

impl Scenario for LatePayment {
    /// The payment window, in milliseconds.
    type Sizes = u64;
    const QUICK: u64 = 200;
    const FULL: u64 = 2_000;
    type Subject = Payment;
    type Figures = Figures;

    fn fault(window_ms: &u64) -> String {
        format!(
            "1 unit with a {window_ms} ms payment window; A buys it and does not pay in time; \
             the order expires and B buys the unit; then A pays"
        )
    }

    async fn play(window_ms: u64, stage: &Stage) -> Result<Vec<(Payment, Figures)>> {
        let flags = ["--expiry-interval-ms=0".to_string()];
        let fleet = Fleet::start(stage.app_binary()?, 2, &flags).await?;
        let mut rows = Vec::new();
        for (product, payment) in (PRODUCT..).zip([Payment::Unchecked, Payment::Conditional]) {
            let tl = stage.round(payment.to_string());
            sell(
                &fleet,
                product,
                1,
                Home::Row,
                Duration::from_millis(window_ms),
            )
            .await?;
            let a = buy(&fleet, 0, product, Strategy::Conditional, "buyer-a", "a").await;
            tl.log("A@1", format!("buys: {}", a.describe()));
            await_all_due(&fleet).await?;
            tl.log("db", "A's deadline passed; A has not paid");
            poll(|| async {
                let round = fleet.api.expire(1, product, Fault::default()).await?;
                Ok((round.expired == 1).then_some(()))
            })
            .await?;
            tl.log("sweep@2", "expired A's order; its unit is back on sale");
            let b = buy(&fleet, 1, product, Strategy::Conditional, "buyer-b", "b").await;
            tl.log("B@2", format!("buys the unit: {}", b.describe()));
            let fault = Fault {
                unchecked: payment == Payment::Unchecked,
                hold: Duration::ZERO,
            };
            let paid = fleet
                .api
                .transition(0, product, "buyer-a", "a", "pay", fault)
                .await?;
            let (accepted, refused_with) = match &paid {
                Ok(order) => (order.stage == OrderStage::Paid, None),
                Err(code) => (false, Some(*code)),
            };
            tl.log(
                "A@1",
                match refused_with {
                    None => "pays late: accepted, the order is paid".to_string(),
                    Some(code) => format!("pays late: refused, {code}"),
                },
            );
            let end = fleet.product(product).await?;
            let judged = accounting(&end);
            tl.log(
                "db",
                format!(
                    "{} unit(s) held by orders ({} paid, {} reserved) of {}: oversell {}",
                    end.sold, end.paid, end.reserved, end.initial_stock, judged.oversell
                ),
            );
            rows.push((
                payment,
                Figures {
                    stock: end.initial_stock,
                    window_ms,
                    late_payment_accepted: accepted,
                    refused_with,
                    resold: b.created(),
                    units_held: end.sold,
                    oversell: judged.oversell,
                },
            ));
        }
        Ok(rows)
    }

    fn judge(_: &u64, payment: &Payment, f: &Figures) -> Judgement {
        let observed = format!(
            "late payment {}; unit resold: {}; {} unit(s) held of {}, oversell {}",
            match f.refused_with {
                None if f.late_payment_accepted => "accepted".to_string(),
                None => "answered without paying".to_string(),
                Some(code) => format!("refused ({code})"),
            },
            if f.resold { "yes" } else { "no" },
            f.units_held,
            f.stock,
            f.oversell
        );
        match payment {
            Payment::Unchecked => Judgement::new(
                "the late payment is accepted after the unit was resold: oversell",
                observed,
                f.resold && f.late_payment_accepted && f.oversell > 0,
            ),
            Payment::Conditional => Judgement::new(
                "the late payment is refused with `order_expired`; oversell 0",
                observed,
                f.resold
                    && f.refused_with == Some(ErrorCode::OrderExpired)
                    && f.oversell == 0
                    && f.units_held == f.stock,
            ),
        }
    }

    fn why(_: &u64, rows: &[(Payment, Figures)]) -> String {
        let find = |p: Payment| rows.iter().find(|(s, _)| *s == p).map(|(_, f)| *f);
        let (Some(unchecked), Some(conditional)) =
            (find(Payment::Unchecked), find(Payment::Conditional))
        else {
            return String::new();
        };
        format!(
            "A's order expired after its {} ms window and its unit sold again to B. The \
             unchecked payment looked the order up and marked it paid without asking whether it \
             was still reserved and within its deadline: {} unit(s) ended held by orders for {} \
             in stock (oversell {}), A's paid order and B's order on one unit. The conditional \
             payment puts the state and the deadline in the `UPDATE`'s own `WHERE`: it changed \
             nothing and answered {}, and {} unit(s) are held for {} (oversell {}).",
            unchecked.window_ms,
            unchecked.units_held,
            unchecked.stock,
            unchecked.oversell,
            conditional
                .refused_with
                .map_or_else(|| "without refusing".to_string(), |c| format!("`{c}`")),
            conditional.units_held,
            conditional.stock,
            conditional.oversell
        )
    }
}
