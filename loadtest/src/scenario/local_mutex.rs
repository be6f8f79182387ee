//! `local-mutex`: an in-process mutex behind one instance, then behind three.
//!
//! `local-mutex` serialises the read-modify-write of a product with a mutex in the app's
//! memory. Behind one instance every buyer goes through that one mutex: no lost update, no
//! oversell. Behind three instances each has its own mutex, three buyers run the critical
//! section at once, read the same stock, and write back the same decrement: the count of
//! units sold exceeds the stock. The same buyers, the same stock, only the deployment changes.

use anyhow::{Context, Result};
use futures::future::join_all;

use super::app::{Fleet, oversell};
use super::{Row, ScenarioOptions, ScenarioReport};
use crate::wire::ProductView;

const STRATEGY: &str = "local-mutex";
/// Each buyer pauses this long inside the critical section, to widen the window.
const HOLD_MS: u64 = 20;
/// Rounds of the 3-instance sale run until one oversells (timing on a busy machine).
const MAX_ROUNDS: u64 = 3;

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts
        .app_binary
        .as_deref()
        .context("local-mutex runs seckill-app: its binary is needed")?;
    let (stock, buyers) = if opts.quick { (10, 30) } else { (100, 300) };
    let fleet = Fleet::start(binary, 3, &[]).await?;

    let one = sale(&fleet, 300, 1, stock, buyers).await?;
    let mut three = sale(&fleet, 301, 3, stock, buyers).await?;
    let mut rounds = 1;
    while oversell(&three.0) == 0 && rounds < MAX_ROUNDS {
        three = sale(&fleet, 301 + rounds, 3, stock, buyers).await?;
        rounds += 1;
    }

    let mut rows = Vec::new();
    for (instances, (p, created)) in [(1, one), (3, three)] {
        let (expected, ok) = if instances == 1 {
            ("one mutex for every buyer: no oversell", oversell(&p) == 0)
        } else {
            (
                "three mutexes, concurrent critical sections: oversell",
                oversell(&p) > 0,
            )
        };
        let observed = format!(
            "{created} orders accepted for {} units; stock left {}",
            p.initial_stock, p.stock
        );
        let mut row = Row::new(format!("local-mutex × {instances}"), expected, observed, ok)
            .figure("instances", instances as f64)
            .figure("oversell", oversell(&p) as f64)
            .figure("orders", p.orders as f64);
        if instances == 3 {
            row = row.figure("rounds", rounds as f64);
        }
        rows.push(row);
    }
    let oversell3 = rows[1].get("oversell").unwrap_or(f64::NAN);
    let why = format!(
        "A mutex protects what shares its memory. With one instance, all {buyers} buyers queued \
         on one mutex and exactly {stock} units were sold. With three, each instance's mutex \
         admitted one buyer at a time — three at once in total — and their read-modify-writes \
         of the same row overwrote each other: {oversell3:.0} unit(s) sold beyond the stock. \
         Exclusion across processes needs a lock outside them (the database row, or a \
         distributed lock)."
    );
    Ok(ScenarioReport {
        scenario: "local-mutex".into(),
        fault: format!(
            "{buyers} buyers for {stock} units, {HOLD_MS} ms inside the critical section, spread \
             over 1 instance, then over 3"
        ),
        rows,
        timeline: Vec::new(),
        why,
    })
}

/// All buyers at once, round-robin over the first `instances` instances.
async fn sale(
    fleet: &Fleet,
    product: u64,
    instances: usize,
    stock: i64,
    buyers: usize,
) -> Result<(ProductView, usize)> {
    fleet.reset(product, stock).await?;
    let answers = join_all((0..buyers).map(|n| {
        let user = format!("buyer-{n}");
        async move {
            fleet
                .order(n % instances, product, STRATEGY, &user, HOLD_MS)
                .await
        }
    }))
    .await;
    let created = answers.iter().filter(|a| a.created()).count();
    Ok((fleet.product(product).await?, created))
}
