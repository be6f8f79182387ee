//! `stream-consumer-crash`: an instance is SIGKILLed while its stream consumer holds a batch of
//! `redis-lua-stream` orders read and not acknowledged.
//!
//! To hold the consumers between their read and their acknowledgement, MariaDB is frozen
//! (SIGSTOP) while buyers are answered `202` — the accept path needs Redis only — so each
//! consumer reads a batch and waits in its insert. Once instance 1's consumer holds entries,
//! the instance is killed and MariaDB thawed. The live consumer places its own batch and the
//! entries nobody read; the dead one's batch stays pending in the group, owned by a consumer
//! that will never acknowledge it: those accepted orders are missing from the database. Once
//! they have been idle for the claim time, the live consumer claims them (`XAUTOCLAIM`) and
//! places them; the insert ignores request ids already present, so an order the dead consumer
//! had committed would not be doubled. Every accepted order ends in the database exactly once.

use std::fmt;
use std::time::Instant;

use anyhow::{Context, Result};
use app::api::{Home, Strategy};
use app::redis_stock::{GROUP, Keys, RedisStock};
use deadpool_redis::redis;
use serde::{Deserialize, Serialize};
use testkit::{Clicks, Crowd};

use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::{Fleet, accounting, poll};

pub struct StreamConsumerCrash;

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    claim_idle_ms: u64,
}

/// Before and after the claim: one row each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    BeforeTheClaim,
    AfterTheClaim,
}

impl fmt::Display for Moment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Moment::BeforeTheClaim => "redis-lua-stream, before the claim time",
            Moment::AfterTheClaim => "redis-lua-stream, after the claim",
        })
    }
}

/// An instance dies with its consumer's batch read and not acknowledged; a live consumer
/// claims it after the claim time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Buyers answered `202`.
    pub accepted: i64,
    /// Entries the dead consumer had read and not acknowledged when it died.
    pub held_by_dead_consumer: i64,
    /// Orders in the database once the live consumer had placed all it could, before the
    /// claim time had passed.
    pub orders_before_claim: i64,
    /// Entries the dead consumer still owned just after that reading (fewer than it held:
    /// the claim came first, and the reading shows nothing).
    pub owned_after_reading: i64,
    pub orders: i64,
    /// Units still waiting in the stream at the end.
    pub still_pending: i64,
    pub oversell: i64,
}

const PRODUCT: u64 = 950;
const STOCK: i64 = 100;
const BUYERS: u64 = 40;

impl Scenario for StreamConsumerCrash {
    type Sizes = Sizes;
    // The claim time runs from the entries' delivery, before the thaw, so it must leave a
    // loaded machine time to place the live consumer's orders after it.
    const QUICK: Sizes = Sizes {
        claim_idle_ms: 8000,
    };
    const FULL: Sizes = Sizes {
        claim_idle_ms: 8000,
    };
    type Subject = Moment;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        format!(
            "MariaDB frozen while {BUYERS} `redis-lua-stream` buyers are accepted; instance 1 is \
             SIGKILLed with its consumer's batch read and not acknowledged; claim time {} ms",
            s.claim_idle_ms
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Moment, Figures)>> {
        let flags = [format!("--stream-claim-idle-ms={}", s.claim_idle_ms)];
        let mut fleet = Fleet::start(stage.app_binary()?, 2, &flags).await?;
        fleet.reset_in(PRODUCT, STOCK, Home::Redis).await?;
        let redis = RedisStock::open(&fleet.redis_url(), "", 2).map_err(anyhow::Error::msg)?;
        let tl = stage.round(Strategy::RedisLuaStream.name());

        fleet.mariadb().server().pause()?;
        tl.log(
            "mariadb",
            "frozen (SIGSTOP): consumers wait in their inserts",
        );
        let buyers = Crowd::new(1, Clicks::Total(BUYERS), Strategy::RedisLuaStream, "b")
            .run(&fleet.api, PRODUCT)
            .await;
        let accepted = buyers.created() as i64;
        tl.log("buyers", format!("{accepted} of {BUYERS} answered 202"));

        let dead = fleet.apps.instances[0]
            .base
            .trim_start_matches("http://")
            .to_string();
        // Instance 1's consumer has read a batch it cannot place.
        let (stock, consumer) = (&redis, dead.as_str());
        let held = poll(move || async move {
            Ok(Some(pending_of(stock, consumer).await?).filter(|&n| n > 0))
        })
        .await
        .context("instance 1's consumer never read an entry")?;
        fleet.apps.instances[0].kill()?;
        let held_by_dead = pending_of(&redis, &dead).await?.max(held);
        tl.log(
            "instance 1",
            format!("killed (SIGKILL) holding {held_by_dead} entries read and not acknowledged"),
        );
        fleet.mariadb().server().resume()?;
        let thawed = Instant::now();
        tl.log("mariadb", "thawed");

        // The live consumer places everything but the dead one's batch.
        let placed = accepted - held_by_dead;
        let before_claim = fleet.await_product(PRODUCT, |p| p.orders >= placed).await?;
        let owned_after_reading = pending_of(&redis, &dead).await?;
        tl.log(
            "db",
            format!(
                "{} order(s) {} ms after the thaw (claim time {} ms), {owned_after_reading} \
                 entries still owned by the dead consumer",
                before_claim.orders,
                thawed.elapsed().as_millis(),
                s.claim_idle_ms
            ),
        );

        let end = fleet.await_product(PRODUCT, |p| p.pending == 0).await?;
        let left_pending = pending_of(&redis, &dead).await?;
        tl.log(
            "db",
            format!(
                "{} order(s), {} unit(s) still waiting, {left_pending} entries still owned by \
                 the dead consumer",
                end.orders, end.pending
            ),
        );
        let figures = Figures {
            accepted,
            held_by_dead_consumer: held_by_dead,
            orders_before_claim: before_claim.orders,
            owned_after_reading,
            orders: end.orders,
            still_pending: end.pending,
            oversell: accounting(&end).oversell,
        };
        Ok(vec![
            (Moment::BeforeTheClaim, figures),
            (Moment::AfterTheClaim, figures),
        ])
    }

    fn judge(_: &Sizes, moment: &Moment, f: &Figures) -> Judgement {
        match moment {
            Moment::BeforeTheClaim => {
                let missing = f.accepted - f.orders_before_claim;
                Judgement::new(
                    "the dead consumer's batch is missing from the database",
                    format!(
                        "{} entries held by the dead consumer ({} still after the reading); \
                         {missing} accepted order(s) missing",
                        f.held_by_dead_consumer, f.owned_after_reading
                    ),
                    f.held_by_dead_consumer > 0
                        && f.owned_after_reading == f.held_by_dead_consumer
                        && missing == f.held_by_dead_consumer,
                )
            }
            Moment::AfterTheClaim => Judgement::new(
                "a live consumer claims the batch; every accepted order in the database exactly \
                 once",
                format!(
                    "{} order(s) for {} accepted, {} unit(s) still waiting, oversell {}",
                    f.orders, f.accepted, f.still_pending, f.oversell
                ),
                f.orders == f.accepted && f.still_pending == 0 && f.oversell == 0,
            ),
        }
    }

    fn why(s: &Sizes, rows: &[(Moment, Figures)]) -> String {
        let Some((_, f)) = rows.first() else {
            return String::new();
        };
        format!(
            "A consumer acknowledges an entry only after its order is committed, so a consumer \
             that dies in between leaves its batch pending, owned by nobody alive: {} accepted \
             order(s) were missing from the database while {} of {} were placed. After {} ms of \
             idleness the live consumer claimed them with XAUTOCLAIM and placed them; the insert \
             ignores request ids already present, so a batch the dead consumer had committed \
             would not have been doubled. In the end {} order(s) for {} accepted.",
            f.held_by_dead_consumer,
            f.orders_before_claim,
            f.accepted,
            s.claim_idle_ms,
            f.orders,
            f.accepted
        )
    }
}

/// The summary form of `XPENDING`: count, lowest and highest id, and entries per consumer.
type PendingSummary = (
    i64,
    Option<String>,
    Option<String>,
    Option<Vec<(String, String)>>,
);

/// Entries of the group read by the consumer of instance `instance` (`host:port`) and not
/// acknowledged.
async fn pending_of(stock: &RedisStock, instance: &str) -> Result<i64> {
    let keys = Keys::new("");
    let (_, _, _, consumers): PendingSummary = stock
        .query(redis::cmd("XPENDING").arg(keys.stream(0)).arg(GROUP))
        .await
        .context("XPENDING")?;
    Ok(consumers
        .unwrap_or_default()
        .iter()
        .filter(|(name, _)| name.starts_with(&format!("{instance}/")))
        .filter_map(|(_, count)| count.parse::<i64>().ok())
        .sum())
}
