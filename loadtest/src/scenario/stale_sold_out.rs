//! `stale-sold-out`: units come back after a sell-out while the instances remember the product
//! as sold out.
//!
//! An instance that saw a product sell out refuses further clicks from memory, at the cost of
//! a no-op (see the app's `product_memory`). That memory is a cache of "no stock left", and a cache
//! goes stale: when an order is cancelled (or expires) its unit goes back on the shelf, and an
//! instance that is not told keeps refusing buyers while the unit waits — undersell, until the
//! memory's lifetime ends (an hour here). With invalidation, the instance that took the unit
//! back forgets at once and announces it on a Redis channel every instance listens to; the
//! next click on any instance sells the unit.
//!
//! The first fleet runs with the fault switch `--keep-sold-out-on-return` (returns make no
//! instance forget, and none listens for the announcements), the second without it.

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::Result;
use app::api::{ErrorCode, Home, Strategy};
use serde::{Deserialize, Serialize};
use testkit::Fault;

use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::{Fleet, poll};
use crate::rig::order_life::{buy, metric, sell};

pub struct StaleSoldOut;

/// Whether returned units make the instances forget the sell-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Nothing tells them: only the memory's lifetime ends it.
    NoInvalidation,
    /// The returning instance forgets and announces it to the others.
    Invalidation,
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Memory::NoInvalidation => "sold-out memory, no invalidation",
            Memory::Invalidation => "sold-out memory, invalidated on return",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub stock: i64,
    /// Units back on the shelf after the cancellations.
    pub returned: i64,
    /// Clicks after the return refused `sold_out` while units were on the shelf.
    pub refused_with_stock_left: u64,
    /// Units sold after the return.
    pub sold_after_return: i64,
    /// Units still on the shelf at the end.
    pub left_at_end: i64,
    /// From the cancellation to the first sale of a returned unit (none: not sold).
    pub first_sale_ms: Option<u64>,
}

const PRODUCT: u64 = 940;
/// Clicks sent after the return, alternating between the instances.
const CLICKS: u64 = 20;

impl Scenario for StaleSoldOut {
    type Sizes = i64;
    const QUICK: i64 = 3;
    const FULL: i64 = 10;
    type Subject = Memory;
    type Figures = Figures;

    fn fault(stock: &i64) -> String {
        format!(
            "{stock} units sell out through 2 instances, which then refuse from memory; one \
             buyer cancels, and {CLICKS} more clicks arrive on both instances"
        )
    }

    async fn play(stock: i64, stage: &Stage) -> Result<Vec<(Memory, Figures)>> {
        let mut rows = Vec::new();
        for memory in [Memory::NoInvalidation, Memory::Invalidation] {
            let mut flags = vec![
                "--expiry-interval-ms=0".to_string(),
                "--product-memory-ms=3600000".to_string(),
            ];
            if memory == Memory::NoInvalidation {
                flags.push("--keep-sold-out-on-return".to_string());
            }
            let fleet = Fleet::start(stage.app_binary()?, 2, &flags).await?;
            let tl = stage.round(memory.to_string());
            sell(&fleet, PRODUCT, stock, Home::Row, Duration::from_secs(600)).await?;
            for n in 0..stock {
                let user = format!("buyer-{n}");
                buy(
                    &fleet,
                    n as usize,
                    PRODUCT,
                    Strategy::Conditional,
                    &user,
                    "r",
                )
                .await;
            }
            // Each instance learns the sell-out: a refused click stops reaching its strategy.
            for n in 0..2 {
                poll(|| async {
                    let name = "seckill_purchases_started_total";
                    let mark = metric(&fleet, n, name).await?;
                    let probe = buy(&fleet, n, PRODUCT, Strategy::Conditional, "probe", "p").await;
                    let refused = probe.refused_with(ErrorCode::SoldOut);
                    Ok((refused && metric(&fleet, n, name).await? == mark).then_some(()))
                })
                .await?;
            }
            tl.log(
                "instances 1, 2",
                format!("sold out ({stock} units); refusing from memory"),
            );
            let cancelled = fleet
                .api
                .transition(0, PRODUCT, "buyer-0", "r", "cancel", Fault::default())
                .await?;
            let since = Instant::now();
            anyhow::ensure!(
                cancelled.is_ok(),
                "the cancellation was refused: {cancelled:?}"
            );
            let returned = fleet.product(PRODUCT).await?.stock;
            tl.log(
                "buyer-0@1",
                format!("cancels: {returned} unit(s) back on the shelf"),
            );

            let (mut refused_with_stock_left, mut first_sale_ms) = (0, None);
            for click in 0..CLICKS {
                let user = format!("late-{click}");
                let n = click as usize;
                let answer = buy(&fleet, n, PRODUCT, Strategy::Conditional, &user, "r").await;
                if answer.created() {
                    first_sale_ms.get_or_insert(since.elapsed().as_millis() as u64);
                } else if answer.refused_with(ErrorCode::SoldOut)
                    && fleet.product(PRODUCT).await?.stock > 0
                {
                    refused_with_stock_left += 1;
                }
            }
            let end = fleet.product(PRODUCT).await?;
            let sold_after_return = end.sold - (stock - returned);
            tl.log(
                "buyers@1,2",
                format!(
                    "{CLICKS} clicks: {sold_after_return} bought, {refused_with_stock_left} \
                     refused sold_out with units on the shelf; {} left",
                    end.stock
                ),
            );
            rows.push((
                memory,
                Figures {
                    stock,
                    returned,
                    refused_with_stock_left,
                    sold_after_return,
                    left_at_end: end.stock,
                    first_sale_ms,
                },
            ));
        }
        Ok(rows)
    }

    fn judge(_: &i64, memory: &Memory, f: &Figures) -> Judgement {
        let observed = format!(
            "{} unit(s) back; {} click(s) refused with units on the shelf; {} sold after the \
             return; {} left",
            f.returned, f.refused_with_stock_left, f.sold_after_return, f.left_at_end
        );
        match memory {
            Memory::NoInvalidation => Judgement::new(
                "buyers refused `sold_out` while the returned unit is on the shelf; it stays \
                 unsold",
                observed,
                f.returned > 0
                    && f.refused_with_stock_left > 0
                    && f.sold_after_return == 0
                    && f.left_at_end == f.returned,
            ),
            Memory::Invalidation => Judgement::new(
                "the returned unit sells; nothing left on the shelf",
                observed,
                f.returned > 0 && f.sold_after_return == f.returned && f.left_at_end == 0,
            ),
        }
    }

    fn why(_: &i64, rows: &[(Memory, Figures)]) -> String {
        let find = |m: Memory| rows.iter().find(|(s, _)| *s == m).map(|(_, f)| *f);
        let (Some(stale), Some(fresh)) = (find(Memory::NoInvalidation), find(Memory::Invalidation))
        else {
            return String::new();
        };
        format!(
            "Both instances remembered the sell-out, to refuse at the cost of a no-op. A \
             cancellation put {} unit(s) back. Without invalidation, nothing told them: {} \
             click(s) were refused `sold_out` while the unit was on the shelf, and it stayed \
             unsold ({} left) — undersell for as long as the memory lives. With invalidation, \
             the instance that took the unit back forgot at once and announced it; the next \
             clicks bought {} unit(s){}, {} left.",
            stale.returned,
            stale.refused_with_stock_left,
            stale.left_at_end,
            fresh.sold_after_return,
            fresh.first_sale_ms.map_or_else(String::new, |ms| format!(
                " ({ms} ms after the cancellation)"
            )),
            fresh.left_at_end
        )
    }
}
