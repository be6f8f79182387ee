//! One cell: a failure's clicks on one engine at one level, from many connections at once,
//! judged from the database once every click is answered.

use std::time::Instant;

use anyhow::{Context, Result};
use futures::future::{join_all, try_join_all};

use super::engine::{Level, Server, Session, Stmt};
use super::failure::{Answer, Click, Clicks, Failure, click};
use super::schema::{IsolationSettings, Round};

/// The phantom inventory's sale: 4 units, orders of 3 and of 2 at the same moment.
pub const PHANTOM_UNITS: i64 = 4;
const PHANTOM_ORDERS: [i64; 2] = [3, 2];

/// Runs `failure` on `server` at `level` once, on products numbered from `first_product`
/// (the count it takes is [`products`]).
pub async fn run(
    server: &Server,
    failure: Failure,
    level: Level,
    s: &IsolationSettings,
    first_product: i64,
) -> Result<Round> {
    let mut judge = Session::open(server, Level::ReadCommitted).await?;
    let count = products(failure, s);
    let stock = match failure {
        Failure::PhantomInventory => PHANTOM_UNITS,
        Failure::WriteSkew => 0,
        _ => s.stock,
    };
    for id in first_product..first_product + count {
        judge.execute(Stmt::InsertProduct, &[id, stock]).await?;
    }
    let mut sessions = try_join_all((0..s.sessions).map(|_| Session::open(server, level)))
        .await
        .with_context(|| format!("opening {} sessions at {level}", s.sessions))?;
    let started = Instant::now();
    let tallies = match failure {
        Failure::WriteSkew => write_skew(&mut sessions, first_product, s).await?,
        Failure::PhantomInventory => phantom(&mut sessions, first_product, s).await?,
        _ => sell_out(&mut sessions, failure, first_product).await?,
    };
    let seconds = started.elapsed().as_secs_f64();
    for session in sessions {
        session.close().await;
    }
    let mut clicks = Clicks::default();
    tallies.iter().for_each(|t| clicks.add(t));
    let mut round = Round {
        clicks,
        seconds,
        units: stock * count,
        ..Round::default()
    };
    for id in first_product..first_product + count {
        let sold = judge.number(Stmt::UnitsSold, &[id]).await?;
        let left = judge.number(Stmt::ReadStock, &[id]).await?;
        round.sold += sold;
        round.left += left;
        round.failures += match failure {
            Failure::LostUpdate => (sold - (stock - left)).max(0),
            Failure::NegativeStock | Failure::Conditional => (sold - stock).max(0),
            Failure::WriteSkew => judge.number(Stmt::ExtraOrders, &[id]).await?,
            Failure::PhantomInventory => i64::from(sold > stock),
        };
    }
    judge.close().await;
    Ok(round)
}

/// The products a run of `failure` sells.
pub fn products(failure: Failure, s: &IsolationSettings) -> i64 {
    match failure {
        Failure::PhantomInventory => s.sales as i64,
        _ => 1,
    }
}

/// Every session clicks for one unit until told the product is sold out.
async fn sell_out(sessions: &mut [Session], failure: Failure, product: i64) -> Result<Vec<Clicks>> {
    let workers = sessions
        .iter_mut()
        .enumerate()
        .map(|(buyer, session)| async move {
            let mut tally = Clicks::default();
            loop {
                let c = Click {
                    failure,
                    product,
                    buyer: buyer as i64,
                    quantity: 1,
                };
                match click(session, c, &mut tally).await? {
                    Answer::Bought => continue,
                    Answer::Refused | Answer::GaveUp => return Ok::<_, sqlx::Error>(tally),
                }
            }
        });
    Ok(try_join_all(workers).await?)
}

/// Groups of `clicks_per_buyer` sessions (the sessions left over idle): each group's sessions
/// click at once for one buyer, then for the group's next buyer.
async fn write_skew(
    sessions: &mut [Session],
    product: i64,
    s: &IsolationSettings,
) -> Result<Vec<Clicks>> {
    let size = s.clicks_per_buyer.max(1);
    let groups = (sessions.len() / size).max(1) as u64;
    let workers = sessions
        .chunks_exact_mut(size)
        .enumerate()
        .map(|(g, group)| async move {
            let mut tallies = vec![Clicks::default(); group.len()];
            for buyer in (g as u64..s.buyers).step_by(groups as usize) {
                let clicks = group
                    .iter_mut()
                    .zip(tallies.iter_mut())
                    .map(|(session, tally)| {
                        let c = Click {
                            failure: Failure::WriteSkew,
                            product,
                            buyer: buyer as i64,
                            quantity: 1,
                        };
                        click(session, c, tally)
                    });
                for answer in join_all(clicks).await {
                    answer?;
                }
            }
            Ok::<_, sqlx::Error>(tallies)
        });
    Ok(try_join_all(workers).await?.into_iter().flatten().collect())
}

/// Pairs of sessions (an odd one idle): each pair's two buyers order 3 and 2 of a sale's 4
/// units at once, then the pair's next sale.
async fn phantom(
    sessions: &mut [Session],
    first_product: i64,
    s: &IsolationSettings,
) -> Result<Vec<Clicks>> {
    let pairs = (sessions.len() / 2).max(1);
    let workers = sessions
        .chunks_exact_mut(2)
        .enumerate()
        .map(|(p, pair)| async move {
            let mut tallies = vec![Clicks::default(); pair.len()];
            for sale in (p as u64..s.sales).step_by(pairs) {
                let product = first_product + sale as i64;
                let orders = pair.iter_mut().zip(tallies.iter_mut()).enumerate().map(
                    |(i, (session, tally))| {
                        let c = Click {
                            failure: Failure::PhantomInventory,
                            product,
                            buyer: 2 * sale as i64 + i as i64,
                            quantity: PHANTOM_ORDERS[i % 2],
                        };
                        click(session, c, tally)
                    },
                );
                for answer in join_all(orders).await {
                    answer?;
                }
            }
            Ok::<_, sqlx::Error>(tallies)
        });
    Ok(try_join_all(workers).await?.into_iter().flatten().collect())
}
