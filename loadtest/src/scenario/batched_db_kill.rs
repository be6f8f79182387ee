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

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use app::api::{ProductView, Strategy};
use serde::{Deserialize, Serialize};
use sqlx::{Connection, MySqlConnection};
use testkit::{Api, Clicks, Crowd, Retry, Spread};

use super::{Judgement, Scenario, Stage};
use crate::rig::control;
use crate::rig::fleet::{Fleet, accounting};

pub struct BatchedDbKill;

/// The sizes of one run.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    stock: i64,
    batch: usize,
    window_ms: u64,
    hold_ms: u64,
}

/// MariaDB is killed while a batch is written and not committed; after the restart the sale
/// goes on. Both rows carry the same figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Purchases in the killed batch.
    pub batch: usize,
    /// The batch's orders were seen written, uncommitted, before the kill.
    pub written_before_kill: bool,
    /// Purchases of the batch answered `503`.
    pub batch_503: usize,
    /// Orders in the database after the restart, before anyone bought again (must be 0).
    pub batch_orders: i64,
    /// Units gone from the stock after the restart, before anyone bought again (must be 0).
    pub batch_units_taken: i64,
    /// Purchases answered `201` after the restart.
    pub created_after_restart: usize,
    pub first_sale_after_restart_ms: Option<f64>,
    pub stock: i64,
    pub sold: i64,
    pub orders: i64,
    pub oversell: i64,
    pub lost_updates: i64,
    /// Units left although the crowd asked for twice the stock.
    pub undersell: i64,
}

/// The two halves of the run, one row each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    KilledBatch,
    SaleAfterRestart,
}

impl fmt::Display for Half {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Half::KilledBatch => "batched: the killed batch",
            Half::SaleAfterRestart => "batched: the sale after the restart",
        })
    }
}

const PRODUCT: u64 = 300;
/// The buyers' retries after the restart: the same request id, while the instances find the
/// database again.
const RETRY: Retry = Retry {
    when: Retry::transient,
    times: 200,
    pause: Duration::from_millis(50),
    jitter: Duration::ZERO,
};

impl Scenario for BatchedDbKill {
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes {
        stock: 20,
        batch: 5,
        window_ms: 150,
        hold_ms: 1_500,
    };
    const FULL: Sizes = Sizes {
        stock: 200,
        batch: 32,
        window_ms: 500,
        hold_ms: 4_000,
    };
    type Subject = Half;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "two instances; MariaDB is SIGKILLed while a batch of {} purchases is written and \
             waits {} ms before its COMMIT, then started again",
            s.batch, s.hold_ms
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Half, Figures)>> {
        let flags = [
            format!("--batch-window-ms={}", s.window_ms),
            format!("--batch-max={}", s.batch),
            "--db-acquire-timeout-ms=500".to_string(),
        ];
        let fleet = Fleet::start(stage.app_binary()?, 2, &flags).await?;
        fleet.reset(PRODUCT, s.stock).await?;
        let tl = stage.timeline();
        let run = uuid::Uuid::new_v4().simple().to_string();

        tl.log(
            "batch@1",
            format!(
                "{} purchases within the {} ms window, holding {} ms before the COMMIT",
                s.batch, s.window_ms, s.hold_ms
            ),
        );
        // The batch's buyers click one after the other within the window, all on instance 1.
        let batch = Crowd::new(s.batch, Clicks::Each(1), Strategy::Batched, &run)
            .holding(Duration::from_millis(s.hold_ms))
            .through(&[0], Spread::ByBuyer)
            .staggered(Duration::from_millis(s.window_ms / (s.batch as u64 * 2)))
            .start(&fleet.api, PRODUCT);
        let bound = Duration::from_millis(s.window_ms + s.hold_ms);
        let written_before_kill = uncommitted_orders(&fleet.database_url, s.batch, bound).await?;
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
        let batch = batch.finish().await;
        let batch_503 = batch.count(|a| matches!(a, testkit::Answer::Refused { status: 503, .. }));
        tl.log(
            "batch@1",
            format!("{batch_503} of {} answered 503", s.batch),
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

        // The batch's buyers retry their clicks (the same request ids); a crowd twice the
        // stock joins them, over both instances.
        let buyers = s.batch.max(s.stock as usize * 2);
        let crowd = Crowd::new(buyers, Clicks::Each(1), Strategy::Batched, &run)
            .by_buyer()
            .retrying(RETRY)
            .start(&fleet.api, PRODUCT);
        let since_restart = restarted.elapsed();
        let crowd = crowd.finish().await;
        let first_sale = crowd
            .clicks
            .iter()
            .filter(|c| c.answer.created())
            .map(|c| c.answered + since_restart)
            .min();
        let end = product(&fleet.api).await?;
        tl.log(
            "crowd",
            format!(
                "{buyers} buyers over both instances: {} bought; stock {} of {}",
                crowd.created(),
                end.stock,
                end.initial_stock
            ),
        );
        let accounted = accounting(&end);
        let figures = Figures {
            batch: s.batch,
            written_before_kill,
            batch_503,
            batch_orders: after_kill.orders,
            batch_units_taken: after_kill.initial_stock - after_kill.stock,
            created_after_restart: crowd.created(),
            first_sale_after_restart_ms: first_sale.map(|t| t.as_secs_f64() * 1000.0),
            stock: s.stock,
            sold: end.sold,
            orders: end.orders,
            oversell: accounted.oversell,
            lost_updates: accounted.lost_updates,
            undersell: end.stock.max(0),
        };
        Ok(vec![
            (Half::KilledBatch, figures),
            (Half::SaleAfterRestart, figures),
        ])
    }

    fn judge(_: &Sizes, half: &Half, f: &Figures) -> Judgement {
        match half {
            Half::KilledBatch => Judgement::new(
                "every purchase of the batch answers 503; after the restart none of it is \
                 recorded",
                format!(
                    "{} of {} answered 503; {} order(s) and {} unit(s) taken after the restart",
                    f.batch_503, f.batch, f.batch_orders, f.batch_units_taken
                ),
                f.written_before_kill
                    && f.batch_503 == f.batch
                    && f.batch_orders == 0
                    && f.batch_units_taken == 0,
            ),
            Half::SaleAfterRestart => Judgement::new(
                "the sale completes: exactly the stock sold, no oversell, no undersell",
                format!(
                    "{} of {} sold in {} orders; oversell {}, undersell {}",
                    f.sold, f.stock, f.orders, f.oversell, f.undersell
                ),
                f.sold == f.stock
                    && f.orders == f.stock
                    && f.oversell == 0
                    && f.lost_updates == 0
                    && f.undersell == 0,
            ),
        }
    }

    fn why(_: &Sizes, rows: &[(Half, Figures)]) -> String {
        let Some((_, f)) = rows.first() else {
            return String::new();
        };
        let killed = if f.batch_503 == f.batch && f.batch_orders == 0 && f.batch_units_taken == 0 {
            format!(
                "The batch's {} purchases were one transaction: its COMMIT never reached the \
                 server, so the strategy could not know the outcome and answered every one 503, \
                 and crash recovery rolled the whole transaction back — the stock decrement and \
                 the orders together.",
                f.batch
            )
        } else {
            format!(
                "Of the batch's {} purchases {} were answered 503, and after the restart {} \
                 order(s) and {} unit(s) of it were in the database: the batch was not \
                 all-or-nothing.",
                f.batch, f.batch_503, f.batch_orders, f.batch_units_taken
            )
        };
        let after = match f.first_sale_after_restart_ms {
            Some(ms) => format!(
                " After the restart the first purchase succeeded {ms:.0} ms later (the \
                 instances drop their broken connections as they meet them), and the retried \
                 clicks and the crowd bought {} units: oversell {}, undersell {}.",
                f.sold, f.oversell, f.undersell
            ),
            None => " After the restart no purchase succeeded.".to_string(),
        };
        killed + &after
    }
}

/// Waits (at most `bound`, the batch's hold) until `count` orders are written, committed or
/// not: a dirty read sees the batch's rows before its `COMMIT`.
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
