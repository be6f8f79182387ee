//! `split-undersell`: a product's stock split over Redis counters (`redis-split`), as many
//! buyers as units, each wanting one: without the fallback, buyers whose home part ran dry are
//! told "sold out" while other parts still hold units; with it, every unit sells.
//!
//! Splitting a hot item's stock over counters in different slots is how one product is spread
//! over a Redis Cluster's shards, and the failure the split brings is undersell, not oversell:
//! buyers do not hash evenly over the parts, so some parts run out while others keep units no
//! buyer of theirs comes for. A store that answers "sold out" at the first empty part turns
//! buyers away from units it has. `redis-split` moves units home from the other parts before
//! it says so, and says it only when every part is empty. Each part's counter is the one
//! atomic script of `redis-lua`, so neither form oversells; what differs is the units left
//! unsold at the end although every buyer wanted one.
//!
//! The buyers are `u-0 … u-n`, the same in both rows, so both meet the same uneven spread.

use std::fmt;
use std::time::Duration;

use anyhow::Result;
use app::api::{ErrorCode, Home, Strategy};
use serde::{Deserialize, Serialize};
use testkit::{Clicks, Crowd, Retry, Spread};

use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::Fleet;

pub struct SplitUndersell;

/// The split as sold: with its fallback or without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    WithoutFallback,
    WithFallback,
}

impl Form {
    fn flag(self) -> String {
        let on = self == Form::WithFallback;
        format!("--split-fallback={on}")
    }
}

impl fmt::Display for Form {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Form::WithoutFallback => "redis-split, sold out at the buyer's empty part",
            Form::WithFallback => "redis-split, units moved home from the other parts",
        })
    }
}

/// How big: units and parts, and as many buyers as units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub stock: i64,
    pub parts: u32,
}

/// One sale to as many buyers as units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub stock: i64,
    pub parts: u32,
    pub buyers: u64,
    pub sold: i64,
    pub orders: i64,
    /// Buyers told `sold_out`.
    pub refused_sold_out: u64,
    /// Units on sale in the parts at the end.
    pub left: i64,
    pub oversell: i64,
    /// Units left unsold that buyers told `sold_out` wanted: the lesser of the two.
    pub undersell: i64,
}

const PRODUCT: u64 = 910;

impl Scenario for SplitUndersell {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        stock: 40,
        parts: 8,
    };
    const FULL: Sizes = Sizes {
        stock: 1000,
        parts: 8,
    };
    type Subject = Form;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "{} units split over {} Redis counters; {} buyers, one unit each, spread over two \
             instances: sold out at the buyer's empty part, then with units moved home",
            s.stock,
            s.parts,
            buyers(s)
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Form, Figures)>> {
        let mut rows = Vec::new();
        for form in [Form::WithoutFallback, Form::WithFallback] {
            rows.push((form, sell(s, stage, form).await?));
        }
        Ok(rows)
    }

    fn judge(s: &Sizes, form: &Form, f: &Figures) -> Judgement {
        match form {
            Form::WithoutFallback => Judgement::new(
                "buyers told `sold_out` while other parts hold units: undersell > 0; no oversell",
                format!(
                    "{} of {} sold, {} buyer(s) refused with {} unit(s) left: undersell {}, \
                     oversell {}",
                    f.sold, f.stock, f.refused_sold_out, f.left, f.undersell, f.oversell
                ),
                f.undersell > 0 && f.left == f.undersell && f.oversell == 0,
            ),
            Form::WithFallback => Judgement::new(
                format!(
                    "all {} units sell, none twice: undersell 0, oversell 0",
                    s.stock
                ),
                format!(
                    "{} of {} sold in {} orders, {} left: undersell {}, oversell {}",
                    f.sold, f.stock, f.orders, f.left, f.undersell, f.oversell
                ),
                f.sold == f.stock
                    && f.orders == f.stock
                    && f.left == 0
                    && f.undersell == 0
                    && f.oversell == 0,
            ),
        }
    }

    fn why(_: &Sizes, rows: &[(Form, Figures)]) -> String {
        let find = |form| rows.iter().find(|(f, _)| *f == form).map(|(_, f)| *f);
        let (Some(without), Some(with)) = (find(Form::WithoutFallback), find(Form::WithFallback))
        else {
            return String::new();
        };
        format!(
            "The {} buyers hash unevenly over the {} parts: some parts had more buyers than \
             units, others fewer. Answering \"sold out\" at the buyer's own part refused {} \
             buyer(s) while {} unit(s) sat in parts none of their buyers came for: undersell \
             {}, and no oversell, since each part is one atomic counter. Moving units home from \
             the other parts before saying so sold {} of {} to the same buyers (undersell {}, \
             oversell {}).",
            without.buyers,
            without.parts,
            without.refused_sold_out,
            without.left,
            without.undersell,
            with.sold,
            with.stock,
            with.undersell,
            with.oversell
        )
    }
}

/// As many buyers as units: every unit is wanted by exactly one buyer, so each buyer refused
/// while units are left was refused a unit that was there for her.
fn buyers(s: &Sizes) -> u64 {
    s.stock as u64
}

/// One sale of `s.stock` units split over `s.parts` parts to [`buyers`], by instances started
/// with the fallback as `form` says.
async fn sell(s: Sizes, stage: &Stage, form: Form) -> Result<Figures> {
    let fleet = Fleet::start(stage.app_binary()?, 2, &[form.flag()]).await?;
    let api = &fleet.api;
    let product = app::api::ResetProduct {
        buckets: Some(i64::from(s.parts)),
        ..app::api::ResetProduct::new(s.stock, Home::RedisSplit)
    };
    api.put_product(PRODUCT, &product).await?;
    let tl = stage.round(form.to_string());
    let buyers = buyers(&s);
    let answers = Crowd::new(
        buyers as usize,
        Clicks::Each(1),
        Strategy::RedisSplit,
        "split",
    )
    .through(&[0, 1], Spread::ByBuyer)
    // Every buyer is answered about the stock: a click refused at the door (`overloaded`, the
    // crowd arriving at once) tries again a moment later, as a buyer would.
    .retrying(Retry {
        when: Retry::transient,
        times: 200,
        pause: Duration::from_millis(10),
        jitter: Duration::from_millis(40),
    })
    .run(api, PRODUCT)
    .await;
    let end = fleet.product(PRODUCT).await?;
    let accounted = app::accounting::Accounting::of(app::accounting::Ledger::of(end), 0);
    let refused_sold_out = answers.refused(ErrorCode::SoldOut) as u64;
    tl.log(
        "crowd",
        format!(
            "{} bought, {refused_sold_out} told sold_out; {} unit(s) left in the parts",
            answers.created(),
            end.stock
        ),
    );
    Ok(Figures {
        stock: s.stock,
        parts: s.parts,
        buyers,
        sold: end.sold,
        orders: end.orders,
        refused_sold_out,
        left: end.stock,
        oversell: accounted.oversell,
        undersell: end.stock.min(refused_sold_out as i64),
    })
}
