//! `local-mutex`: an in-process mutex behind one instance, then behind three.
//!
//! `local-mutex` serialises the read-modify-write of a product with a mutex in the app's
//! memory. Behind one instance every buyer goes through that one mutex: no lost update, no
//! oversell. Behind three instances each has its own mutex, three buyers run the critical
//! section at once, read the same stock, and write back the same decrement: the count of
//! units sold exceeds the stock. The same buyers, the same stock, only the deployment changes.

use anyhow::Result;
use app::api::{ProductView, Strategy};
use futures::future::join_all;

use super::figures::LocalMutex;
use super::{Row, Scenario, ScenarioOptions, ScenarioReport};
use crate::rig::fleet::{Fleet, accounting, order};

const STRATEGY: Strategy = Strategy::LocalMutex;
/// Each buyer pauses this long inside the critical section, to widen the window.
const HOLD_MS: u64 = 20;
/// Rounds of the 3-instance sale run until one oversells (timing on a busy machine).
const MAX_ROUNDS: u64 = 3;

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts.app_binary(Scenario::LocalMutex)?;
    let (stock, buyers) = if opts.quick { (10, 30) } else { (100, 300) };
    let fleet = Fleet::start(binary, 3, &[]).await?;

    let one = sale(&fleet, 300, 1, stock, buyers).await?;
    let mut three = sale(&fleet, 301, 3, stock, buyers).await?;
    let mut rounds = 1;
    while accounting(&three.0).oversell == 0 && rounds < MAX_ROUNDS {
        three = sale(&fleet, 301 + rounds, 3, stock, buyers).await?;
        rounds += 1;
    }

    let mut measured = Vec::new();
    let mut rows = Vec::new();
    for (instances, (p, created)) in [(1, one), (3, three)] {
        let f = LocalMutex {
            instances,
            oversell: accounting(&p).oversell,
            orders: p.orders,
            created,
            rounds: (instances == 3).then_some(rounds),
        };
        let (expected, ok) = if instances == 1 {
            ("one mutex for every buyer: no oversell", f.oversell == 0)
        } else {
            (
                "three mutexes, concurrent critical sections: oversell",
                f.oversell > 0,
            )
        };
        let observed = format!(
            "{created} orders accepted for {} units; stock left {}",
            p.initial_stock, p.stock
        );
        rows.push(Row::new(
            format!("{STRATEGY} × {instances}"),
            expected,
            observed,
            ok,
            f,
        ));
        measured.push(f);
    }
    Ok(ScenarioReport {
        scenario: Scenario::LocalMutex,
        fault: format!(
            "{buyers} buyers for {stock} units, {HOLD_MS} ms inside the critical section, spread \
             over 1 instance, then over 3"
        ),
        rows,
        timeline: Vec::new(),
        why: why(&measured, stock, buyers),
    })
}

/// What each deployment did, in words chosen by the figures.
fn why(measured: &[LocalMutex], stock: i64, buyers: usize) -> String {
    let mut text = String::from("A mutex protects what shares its memory.");
    for f in measured {
        let what = if f.oversell > 0 {
            format!(
                "the critical sections of different instances ran at once, their \
                 read-modify-writes of the same row overwrote each other, and {} order(s) were \
                 accepted for {stock} units ({} beyond the stock)",
                f.orders, f.oversell
            )
        } else if f.instances == 1 {
            format!(
                "all {buyers} buyers queued on one mutex and {} order(s) were accepted for \
                 {stock} units",
                f.orders
            )
        } else {
            format!(
                "each instance's mutex admitted one buyer at a time, yet no two \
                 read-modify-writes happened to overlap in {} round(s): {} order(s) for {stock} \
                 units",
                f.rounds.unwrap_or(1),
                f.orders
            )
        };
        text.push_str(&format!(" Behind {} instance(s), {what}.", f.instances));
    }
    text.push_str(
        " Exclusion across processes needs a lock outside them (the database row, or a \
         distributed lock).",
    );
    text
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
        async move { order(&fleet.api, n % instances, product, STRATEGY, &user, HOLD_MS).await }
    }))
    .await;
    let created = answers.iter().filter(|a| a.created()).count();
    Ok((fleet.product(product).await?, created))
}
