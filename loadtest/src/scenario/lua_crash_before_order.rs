//! `lua-crash-before-order`: the instance running a `redis-lua` purchase is SIGKILLed after the
//! Lua script took the unit from the Redis counter and before the order was inserted.
//!
//! The deduction and the order are two writes in two systems; a process that dies between them
//! leaves a unit sold to nobody. Nothing oversells — the counter only went down — but the unit
//! is off sale: the counter says 9, the database holds no order for the tenth. That is
//! undersell ("less-sell"), and the crashed click cannot simply be retried either: its request
//! id is recorded as charged, so the retry waits for an order that will never come and is told
//! `busy`. `POST /api/products/{id}/reconcile` compares the counter with the orders (and the
//! stream). A charge older than the reconcile grace is presumed lost: reconcile first writes
//! the purchase as a *voided* order — so a purchase that was only slow can never place its
//! order afterwards and sell the unit twice — and only then puts the unit back. The crashed
//! click's retry is told `purchase_voided`; the buyer clicks again (a new request id) and buys,
//! every unit sells, and none is sold twice.
//!
//! The fleet runs with a grace of 1 ms so that reconcile presumes the charge lost at once; the
//! default grace (10 s) leaves every younger charge alone as in flight. The instance is killed
//! once the counter shows the unit taken (A is then paused between the two writes), not after
//! a guessed delay.

use std::time::Duration;

use anyhow::Result;
use app::api::{ErrorCode, Home, Strategy};
use serde::{Deserialize, Serialize};
use testkit::{Clicks, Crowd, Spread, order_request};

use super::{Judgement, Moment, Scenario, Stage};
use crate::rig::fleet::{Fleet, accounting};

pub struct LuaCrashBeforeOrder;

/// The instance running a `redis-lua` purchase dies between the Lua deduction and the order
/// insert; then the product is reconciled and sold out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub stock: i64,
    /// Units taken from the counter without an order, right after the crash.
    pub undersell_after_crash: i64,
    /// The crashed click's retry was told `busy` before the reconciliation.
    pub retry_before_reconcile_busy: bool,
    /// The counter as the reconciliation found it (−1: none).
    pub counter_found: i64,
    pub counter_after: i64,
    pub released_requests: u64,
    /// The crashed click's retry was told `purchase_voided` after the reconciliation.
    pub retry_after_reconcile_voided: bool,
    /// A's new click (a new request id) bought after the reconciliation.
    pub new_click_created: bool,
    pub units_sold: i64,
    pub orders: i64,
    pub oversell: i64,
    /// Units left unsold or taken without an order at the end, although buyers wanted more.
    pub undersell_at_end: i64,
}

const PRODUCT: u64 = 900;
/// How long a replayed click waits for its original order before answering `busy`.
const REPLAY_WAIT_MS: u64 = 300;

impl Scenario for LuaCrashBeforeOrder {
    type Sizes = i64;
    const QUICK: i64 = 10;
    const FULL: i64 = 10;
    type Subject = Moment;
    type Figures = Figures;

    fn fault(stock: &i64) -> String {
        format!(
            "{stock} units in Redis; the instance running buyer A's `redis-lua` purchase is \
             SIGKILLed after the Lua deduction and before the order insert; then `reconcile`, \
             and buyers on the other instance buy what is left"
        )
    }

    async fn play(stock: i64, stage: &Stage) -> Result<Vec<(Moment, Figures)>> {
        let flags = [
            format!("--lock-wait-ms={REPLAY_WAIT_MS}"),
            "--reconcile-grace-ms=1".to_string(),
        ];
        let mut fleet = Fleet::start(stage.app_binary()?, 2, &flags).await?;
        fleet.reset_in(PRODUCT, stock, Home::Redis).await?;
        let tl = stage.round(Strategy::RedisLua.name());

        // A's purchase takes its unit in Redis, then pauses before the insert; its instance
        // dies once the counter shows the unit gone.
        let click = order_request("buyer-a".into(), Strategy::RedisLua, "click-a".into(), 1);
        let api = fleet.api.clone();
        let hold = Duration::from_secs(60);
        let a = tokio::spawn({
            let click = click.clone();
            async move { api.order_holding(0, PRODUCT, &click, hold).await }
        });
        fleet
            .await_product(PRODUCT, |p| p.stock == stock - 1 && p.orders == 0)
            .await?;
        tl.log(
            "A@1",
            "redis-lua: the script took 1 unit; paused before the order insert",
        );
        fleet.apps.instances[0].kill()?;
        a.abort();
        tl.log(
            "instance 1",
            "killed (SIGKILL) between the deduction and the insert",
        );

        let after_crash = fleet.product(PRODUCT).await?;
        let undersell_after_crash = accounting(&after_crash).undersell;
        tl.log(
            "db+redis",
            format!(
                "counter {} of {}, {} order(s): {undersell_after_crash} unit(s) sold to nobody",
                after_crash.stock, after_crash.initial_stock, after_crash.orders
            ),
        );
        let retry_before = fleet.api.order(1, PRODUCT, &click).await;
        tl.log("A retries@2", retry_before.describe());

        let reconciled = fleet.api.reconcile(PRODUCT).await?;
        tl.log(
            "reconcile@2",
            format!(
                "counter {} → {}, {} request id(s) released",
                reconciled
                    .counter_found
                    .map_or_else(|| "absent".to_string(), |c| c.to_string()),
                reconciled.counter_after,
                reconciled.released_requests
            ),
        );
        let retry_after = fleet.api.order(1, PRODUCT, &click).await;
        tl.log("A retries@2", retry_after.describe());
        let again = order_request("buyer-a".into(), Strategy::RedisLua, "click-a2".into(), 1);
        let new_click = fleet.api.order(1, PRODUCT, &again).await;
        tl.log("A clicks again@2", new_click.describe());

        // Everyone else buys what is left, one after the other, through the living instance.
        let more = stock as u64 + 5;
        let others = Crowd::new(1, Clicks::Total(more), Strategy::RedisLua, "others")
            .through(&[1], Spread::ByClick)
            .run(&fleet.api, PRODUCT)
            .await;
        let end = fleet.product(PRODUCT).await?;
        let demand = 1 + more as i64;
        let accounted = app::accounting::Accounting::of(app::accounting::Ledger::of(end), demand);
        tl.log(
            "db+redis",
            format!(
                "counter {} of {}, {} order(s) after {} more sale(s)",
                end.stock,
                end.initial_stock,
                end.orders,
                others.created()
            ),
        );
        let figures = Figures {
            stock,
            undersell_after_crash,
            retry_before_reconcile_busy: retry_before.refused_with(ErrorCode::Busy),
            counter_found: reconciled.counter_found.unwrap_or(-1),
            counter_after: reconciled.counter_after,
            released_requests: reconciled.released_requests,
            retry_after_reconcile_voided: retry_after.refused_with(ErrorCode::PurchaseVoided),
            new_click_created: new_click.created(),
            units_sold: end.sold,
            orders: end.orders,
            oversell: accounted.oversell,
            undersell_at_end: accounted.undersell,
        };
        Ok(Moment::both(figures))
    }

    fn judge(_: &i64, moment: &Moment, f: &Figures) -> Judgement {
        match moment {
            Moment::AfterTheCrash => Judgement::new(
                "1 unit taken from the counter with no order (undersell 1); the click's retry \
                 is `busy`",
                format!(
                    "undersell {}; retry {}",
                    f.undersell_after_crash,
                    if f.retry_before_reconcile_busy {
                        "busy"
                    } else {
                        "not busy"
                    }
                ),
                f.undersell_after_crash == 1 && f.retry_before_reconcile_busy,
            ),
            Moment::AfterReconcile => Judgement::new(
                format!(
                    "counter back to {} − 0 ordered; the retry is `purchase_voided`, a new click \
                     buys; all {} units sell, none twice",
                    f.stock, f.stock
                ),
                format!(
                    "counter {} → {}; retry {}; new click {}; {} unit(s) sold in {} order(s), \
                     oversell {}, undersell {}",
                    f.counter_found,
                    f.counter_after,
                    if f.retry_after_reconcile_voided {
                        "purchase_voided"
                    } else {
                        "not voided"
                    },
                    if f.new_click_created {
                        "bought"
                    } else {
                        "refused"
                    },
                    f.units_sold,
                    f.orders,
                    f.oversell,
                    f.undersell_at_end
                ),
                f.counter_after == f.stock
                    && f.retry_after_reconcile_voided
                    && f.new_click_created
                    && f.units_sold == f.stock
                    && f.orders == f.stock
                    && f.oversell == 0
                    && f.undersell_at_end == 0,
            ),
        }
    }

    fn why(_: &i64, rows: &[(Moment, Figures)]) -> String {
        let Some((_, f)) = rows.first() else {
            return String::new();
        };
        format!(
            "The Lua script and the order insert are two writes in two systems. The crash \
             between them left {} unit(s) off sale with no order (undersell), and the click's \
             retry found its request id charged and waited for an order that never came. \
             Reconciling counted the orders and the stream, fenced the stalled purchase out (a \
             voided order under its request id, so it can never place its order late), set the \
             counter from {} to {} and released {} request id(s); the retry was told \
             `purchase_voided`, a new click bought, and {} of {} units sold in {} orders \
             (oversell {}).",
            f.undersell_after_crash,
            f.counter_found,
            f.counter_after,
            f.released_requests,
            f.units_sold,
            f.stock,
            f.orders,
            f.oversell
        )
    }
}
