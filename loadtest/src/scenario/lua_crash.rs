//! `lua-crash-before-order`: the instance running a `redis-lua` purchase is SIGKILLed after the
//! Lua script took the unit from the Redis counter and before the order was inserted.
//!
//! The deduction and the order are two writes in two systems; a process that dies between them
//! leaves a unit sold to nobody. Nothing oversells — the counter only went down — but the unit
//! is off sale: the counter says 9, the database holds no order for the tenth. That is
//! undersell ("less-sell"), and the crashed click cannot simply be retried either: its request
//! id is recorded as charged, so the retry waits for an order that will never come and is told
//! `busy`. `POST /api/products/{id}/reconcile` compares the counter with the orders (and the
//! stream), puts the lost unit back and forgets the charged request id; afterwards the retry
//! buys, every unit sells, and none is sold twice.

use std::time::Duration;

use anyhow::Result;
use app::api::{ErrorCode, Home, Strategy};

use super::figures::LuaCrashBeforeOrder;
use super::{Row, Scenario, ScenarioOptions, ScenarioReport, Timeline};
use crate::rig::fleet::{Fleet, accounting, order};
use testkit::order_request;

const PRODUCT: u64 = 900;
const STOCK: i64 = 10;
/// How long a replayed click waits for its original order before answering `busy`.
const REPLAY_WAIT_MS: u64 = 300;

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts.app_binary(Scenario::LuaCrashBeforeOrder)?;
    let flags = [format!("--lock-wait-ms={REPLAY_WAIT_MS}")];
    let mut fleet = Fleet::start(binary, 2, &flags).await?;
    fleet.reset_in(PRODUCT, STOCK, Home::Redis).await?;
    let tl = Timeline::new();

    // A's purchase takes its unit in Redis, then pauses before the insert; its instance dies.
    let click = order_request("buyer-a".into(), Strategy::RedisLua, "click-a".into(), 1);
    let api = fleet.api.clone();
    let hold = Duration::from_secs(60);
    let a = tokio::spawn({
        let click = click.clone();
        async move { api.order_holding(0, PRODUCT, &click, hold).await }
    });
    tl.log(
        "A@1",
        "redis-lua: the script took 1 unit; paused before the order insert",
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
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

    // Everyone else buys what is left, through the living instance.
    let mut probes_created = 0;
    for n in 0..(STOCK as usize + 5) {
        let answer = order(
            &fleet.api,
            1,
            PRODUCT,
            Strategy::RedisLua,
            &format!("b-{n}"),
            0,
        )
        .await;
        if answer.created() {
            probes_created += 1;
        }
    }
    let end = fleet.product(PRODUCT).await?;
    let accounting_end = accounting(&end);
    tl.log(
        "db+redis",
        format!(
            "counter {} of {}, {} order(s) after {probes_created} more sale(s)",
            end.stock, end.initial_stock, end.orders
        ),
    );
    let f = LuaCrashBeforeOrder {
        undersell_after_crash,
        retry_before_reconcile_busy: retry_before.refused_with(ErrorCode::Busy),
        counter_found: reconciled.counter_found.unwrap_or(-1),
        counter_after: reconciled.counter_after,
        released_requests: reconciled.released_requests,
        retry_after_reconcile_created: retry_after.created(),
        units_sold: end.sold,
        orders: end.orders,
        oversell: accounting_end.oversell,
        undersell_at_end: accounting_end.undersell + end.stock,
    };
    Ok(ScenarioReport {
        scenario: Scenario::LuaCrashBeforeOrder,
        fault: format!(
            "{STOCK} units in Redis; the instance running buyer A's `redis-lua` purchase is \
             SIGKILLed after the Lua deduction and before the order insert; then `reconcile`, \
             and buyers on the other instance buy what is left"
        ),
        rows: rows(f),
        timeline: tl.events(Some(Strategy::RedisLua.name())),
        why: why(f),
    })
}

/// The failure and the fix, one row each.
fn rows(f: LuaCrashBeforeOrder) -> Vec<Row> {
    let crash_ok = f.undersell_after_crash == 1 && f.retry_before_reconcile_busy;
    let crash = Row::new(
        "redis-lua, after the crash",
        "1 unit taken from the counter with no order (undersell 1); the click's retry is `busy`",
        format!(
            "undersell {}; retry {}",
            f.undersell_after_crash,
            if f.retry_before_reconcile_busy {
                "busy"
            } else {
                "not busy"
            }
        ),
        crash_ok,
        f,
    );
    let fixed_ok = f.counter_after == STOCK
        && f.retry_after_reconcile_created
        && f.units_sold == STOCK
        && f.orders == STOCK
        && f.oversell == 0
        && f.undersell_at_end == 0;
    let fixed = Row::new(
        "redis-lua, after reconcile",
        format!(
            "counter back to {STOCK} − 0 ordered; the retry buys; all {STOCK} units sell, none twice"
        ),
        format!(
            "counter {} → {}; retry {}; {} unit(s) sold in {} order(s), oversell {}, undersell {}",
            f.counter_found,
            f.counter_after,
            if f.retry_after_reconcile_created {
                "bought"
            } else {
                "refused"
            },
            f.units_sold,
            f.orders,
            f.oversell,
            f.undersell_at_end
        ),
        fixed_ok,
        f,
    );
    vec![crash, fixed]
}

fn why(f: LuaCrashBeforeOrder) -> String {
    format!(
        "The Lua script and the order insert are two writes in two systems. The crash between \
         them left {} unit(s) off sale with no order (undersell), and the click's retry found \
         its request id charged and waited for an order that never came. Reconciling counted \
         the orders and the stream, set the counter from {} to {} and released {} request \
         id(s); then the retry bought and {} of {STOCK} units sold in {} orders (oversell {}).",
        f.undersell_after_crash,
        f.counter_found,
        f.counter_after,
        f.released_requests,
        f.units_sold,
        f.orders,
        f.oversell
    )
}
