//! The flood's crowd sent again, right after the flood, against the same strategy and
//! instances, the product sold first come, first served: each click given its place in one
//! queue as it comes, across every instance (`app::first_come`). The same arrivals, so the
//! first clicks' share and the rank correlation are read beside the random door's; no second
//! act and no kill, so what differs is the door alone.

use anyhow::{Context, Result};
use app::api::ResetProduct;
use app::db::Db;
use testkit::{Api, Crowd};

use super::arrivals::Plan;
use super::crowd::{self, FloodPlan, sell_after_early_clicks};
use super::schema::CrowdResult;
use crate::measure::sale::read_ledger;

/// The crowd `drawn` of `plan`'s flood, sent to `product`, sold first come.
pub async fn flood(
    api: &Api,
    db: &Db,
    plan: &FloodPlan<'_>,
    product: u64,
    drawn: &Plan,
) -> Result<CrowdResult> {
    let shape = plan.shape;
    let home = plan.strategy.name.home();
    let rules = ResetProduct {
        per_user_limit: Some(1),
        first_come: true,
        ..ResetProduct::new(shape.units, home)
    };
    let prefix = format!("{}-first-come", plan.id_prefix);
    let crowd = Crowd::arriving(drawn.arrivals.clone(), plan.strategy.name, &prefix);
    let (answers, _) = sell_after_early_clicks(api, product, &rules, crowd, drawn).await?;
    let opened = answers.opened.context("the first-come sale opened")?;
    let (ledger, _) = read_ledger(api, db, product, home).await?;
    crowd::result(db, product, shape.units, drawn, &answers, opened, ledger).await
}
