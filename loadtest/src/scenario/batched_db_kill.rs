//! `batched-db-kill`: MariaDB is killed (SIGKILL) while a `batched` transaction is about to
//! commit.
//!
//! A batch of purchases is collected on instance 1 and written — the stock decrement and the
//! orders — then pauses before its `COMMIT` (the hold header); the scenario sees the orders
//! with a dirty read and kills the database. The `COMMIT` goes nowhere, so the strategy cannot
//! know whether it happened: every purchase of the batch must be answered `503` (none may be
//! told "bought", none "sold out"), and InnoDB's crash recovery must roll the whole batch back
//! — no stock taken without its orders, no order without its stock. After the restart the
//! batch's buyers retry with the same request ids, a crowd larger than the stock joins them
//! over both instances, and the sale must end with exactly the stock sold.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use app::api::{ErrorCode, ProductView, Strategy};
use sqlx::{Connection, MySqlConnection};

use super::figures::BatchedDbKill;
use super::{Row, Scenario, ScenarioOptions, ScenarioReport, Timeline, control};
use crate::rig::fleet::{Fleet, accounting};
use testkit::{Answer, Api, order_request};

const PRODUCT: u64 = 300;
const KILLED: &str = "batched: the killed batch";
const AFTER: &str = "batched: the sale after the restart";

/// The sizes of one run.
struct Plan {
    stock: i64,
    batch: usize,
    window_ms: u64,
    hold_ms: u64,
}

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts.app_binary(Scenario::BatchedDbKill)?;
    let plan = match opts.quick {
        true => Plan {
            stock: 20,
            batch: 5,
            window_ms: 150,
            hold_ms: 1_500,
        },
        false => Plan {
            stock: 200,
            batch: 32,
            window_ms: 500,
            hold_ms: 4_000,
        },
    };
    let flags = [
        format!("--batch-window-ms={}", plan.window_ms),
        format!("--batch-max={}", plan.batch),
        "--db-acquire-timeout-ms=500".to_string(),
    ];
    let fleet = Fleet::start(binary, 2, &flags).await?;
    fleet.reset(PRODUCT, plan.stock).await?;
    let tl = Timeline::new();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let request_id = |buyer: usize| format!("{run}-{buyer}");

    tl.log(
        "batch@1",
        format!(
            "{} purchases within the {} ms window, holding {} ms before the COMMIT",
            plan.batch, plan.window_ms, plan.hold_ms
        ),
    );
    let mut batch = Vec::new();
    for buyer in 0..plan.batch {
        let (api, body) = (
            fleet.api.clone(),
            order_request(
                format!("u-{buyer}"),
                Strategy::Batched,
                request_id(buyer),
                1,
            ),
        );
        let hold = Duration::from_millis(plan.hold_ms);
        batch.push(tokio::spawn(async move {
            api.order_holding(0, PRODUCT, &body, hold).await
        }));
        tokio::time::sleep(Duration::from_millis(
            plan.window_ms / (plan.batch as u64 * 2),
        ))
        .await;
    }
    let bound = Duration::from_millis(plan.window_ms + plan.hold_ms);
    let written_before_kill = uncommitted_orders(&fleet.database_url, plan.batch, bound).await?;
    tl.log(
        "db",
        match written_before_kill {
            true => "the batch's orders are written, not committed (dirty read)",
            false => "the batch's orders never showed up uncommitted",
        },
    );
    let db = fleet.mariadb();
    control(move || db.server().kill()).await?;
    tl.log("db", "MariaDB killed (SIGKILL)");
    let mut answers = Vec::new();
    for buyer in batch {
        answers.push(buyer.await?);
    }
    let batch_503 = answers
        .iter()
        .filter(|a| matches!(a, Answer::Refused { status: 503, .. }))
        .count();
    tl.log(
        "batch@1",
        format!("{batch_503} of {} answered 503", plan.batch),
    );

    let db = fleet.mariadb();
    control(move || db.server().start_again()).await?;
    let restarted = Instant::now();
    tl.log("db", "MariaDB started again (crash recovery)");
    let after_kill = product(&fleet.api).await?;
    tl.log(
        "db",
        format!(
            "stock {} of {}, {} order(s)",
            after_kill.stock, after_kill.initial_stock, after_kill.orders
        ),
    );

    // The batch's buyers retry their clicks; a crowd twice the stock joins them.
    let buyers = plan.batch.max(plan.stock as usize * 2);
    let mut crowd = Vec::new();
    for buyer in 0..buyers {
        let (api, body) = (
            fleet.api.clone(),
            order_request(
                format!("u-{buyer}"),
                Strategy::Batched,
                request_id(buyer),
                1,
            ),
        );
        crowd.push(tokio::spawn(async move {
            for _ in 0..200 {
                let answer = api.order(buyer, PRODUCT, &body).await;
                let retry = matches!(answer, Answer::Transport)
                    || answer.refused_with(ErrorCode::Busy)
                    || answer.refused_with(ErrorCode::BackendUnavailable);
                if !retry {
                    return (answer, Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (Answer::Transport, Instant::now())
        }));
    }
    let mut created_after_restart = 0;
    let mut first_sale: Option<Instant> = None;
    for buyer in crowd {
        let (answer, at) = buyer.await?;
        if answer.created() {
            created_after_restart += 1;
            first_sale = Some(first_sale.map_or(at, |t| t.min(at)));
        }
    }
    let end = product(&fleet.api).await?;
    tl.log(
        "crowd",
        format!(
            "{buyers} buyers over both instances: {created_after_restart} bought; stock {} of {}",
            end.stock, end.initial_stock
        ),
    );
    let accounted = accounting(&end);
    let f = BatchedDbKill {
        batch: plan.batch,
        written_before_kill,
        batch_503,
        batch_orders: after_kill.orders,
        batch_units_taken: after_kill.initial_stock - after_kill.stock,
        created_after_restart,
        first_sale_after_restart_ms: first_sale
            .map(|t| t.duration_since(restarted).as_secs_f64() * 1000.0),
        sold: end.sold,
        oversell: accounted.oversell,
        lost_updates: accounted.lost_updates,
        undersell: end.stock.max(0),
    };
    let killed_ok = f.written_before_kill
        && f.batch_503 == f.batch
        && f.batch_orders == 0
        && f.batch_units_taken == 0;
    let after_ok = f.sold == plan.stock
        && end.orders == plan.stock
        && f.oversell == 0
        && f.lost_updates == 0
        && f.undersell == 0;
    let rows = vec![
        Row::new(
            KILLED,
            "every purchase of the batch answers 503; after the restart none of it is recorded",
            format!(
                "{batch_503} of {} answered 503; {} order(s) and {} unit(s) taken after the restart",
                f.batch, f.batch_orders, f.batch_units_taken
            ),
            killed_ok,
            f,
        ),
        Row::new(
            AFTER,
            "the sale completes: exactly the stock sold, no oversell, no undersell",
            format!(
                "{} of {} sold in {} orders; oversell {}, undersell {}",
                end.sold, end.initial_stock, end.orders, f.oversell, f.undersell
            ),
            after_ok,
            f,
        ),
    ];
    Ok(ScenarioReport {
        scenario: Scenario::BatchedDbKill,
        fault: format!(
            "two instances; MariaDB is SIGKILLed while a batch of {} purchases is written and \
             waits {} ms before its COMMIT, then started again",
            plan.batch, plan.hold_ms
        ),
        rows,
        timeline: tl.events(None),
        why: why(&f),
    })
}

/// Waits (at most `bound`) until `count` orders are written, committed or not: a dirty read
/// sees the batch's rows before its `COMMIT`.
async fn uncommitted_orders(database_url: &str, count: usize, bound: Duration) -> Result<bool> {
    let mut conn = MySqlConnection::connect(database_url)
        .await
        .context("connecting to watch the batch")?;
    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
        .execute(&mut conn)
        .await?;
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        let written: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE product_id = ?")
            .bind(PRODUCT)
            .fetch_one(&mut conn)
            .await?;
        if written >= count as i64 {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(false)
}

/// The product, asked until the instances' database connections work again (bounded).
async fn product(api: &Api) -> Result<ProductView> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match api.product(PRODUCT).await {
            Ok(p) => return Ok(p),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn why(f: &BatchedDbKill) -> String {
    let killed = if f.batch_503 == f.batch && f.batch_orders == 0 && f.batch_units_taken == 0 {
        format!(
            "The batch's {} purchases were one transaction: its COMMIT never reached the \
             server, so the strategy could not know the outcome and answered every one 503, and \
             crash recovery rolled the whole transaction back — the stock decrement and the \
             orders together.",
            f.batch
        )
    } else {
        format!(
            "Of the batch's {} purchases {} were answered 503, and after the restart {} order(s) \
             and {} unit(s) of it were in the database: the batch was not all-or-nothing.",
            f.batch, f.batch_503, f.batch_orders, f.batch_units_taken
        )
    };
    let after = match f.first_sale_after_restart_ms {
        Some(ms) => format!(
            " After the restart the first purchase succeeded {ms:.0} ms later (the instances \
             drop their broken connections as they meet them), and the retried clicks and the \
             crowd bought {} units: oversell {}, undersell {}.",
            f.sold, f.oversell, f.undersell
        ),
        None => " After the restart no purchase succeeded.".to_string(),
    };
    killed + &after
}
