//! `stream-consumer-crash`: an instance is SIGKILLed while its stream consumer holds a batch of
//! `redis-lua-stream` orders read and not acknowledged.
//!
//! To hold the consumers between their read and their acknowledgement, MariaDB is frozen
//! (SIGSTOP) while buyers are answered `202` — the accept path needs Redis only — so each
//! consumer reads a batch and waits in its insert. Instance 1 is then killed and MariaDB
//! thawed. The live consumer places its own batch and the entries nobody read; the dead one's
//! batch stays pending in the group, owned by a consumer that will never acknowledge it: those
//! accepted orders are missing from the database. Once they have been idle for the claim time,
//! the live consumer claims them (`XAUTOCLAIM`) and places them; the insert ignores request ids
//! already present, so an order the dead consumer had committed would not be doubled. Every
//! accepted order ends in the database exactly once.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use app::api::{Home, Strategy};
use app::redis_stock::{GROUP, Keys, RedisStock};
use deadpool_redis::redis;

use super::figures::StreamConsumerCrash;
use super::{Row, Scenario, ScenarioOptions, ScenarioReport, Timeline};
use crate::rig::fleet::{Fleet, accounting, order};

const PRODUCT: u64 = 950;
const STOCK: i64 = 100;
const BUYERS: usize = 40;

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts.app_binary(Scenario::StreamConsumerCrash)?;
    let claim_idle_ms: u64 = if opts.quick { 3000 } else { 8000 };
    let flags = [format!("--stream-claim-idle-ms={claim_idle_ms}")];
    let mut fleet = Fleet::start(binary, 2, &flags).await?;
    fleet.reset_in(PRODUCT, STOCK, Home::Redis).await?;
    let redis = RedisStock::open(&fleet.redis_url(), "", 2).map_err(anyhow::Error::msg)?;
    let tl = Timeline::new();

    fleet.mariadb().server().pause()?;
    tl.log(
        "mariadb",
        "frozen (SIGSTOP): consumers wait in their inserts",
    );
    let mut accepted = 0;
    for n in 0..BUYERS {
        let answer = order(
            &fleet.api,
            n,
            PRODUCT,
            Strategy::RedisLuaStream,
            &format!("b-{n}"),
            0,
        )
        .await;
        if answer.created() {
            accepted += 1;
        }
    }
    tl.log("buyers", format!("{accepted} of {BUYERS} answered 202"));
    tokio::time::sleep(Duration::from_millis(500)).await;

    let dead = fleet.apps.instances[0]
        .base
        .trim_start_matches("http://")
        .to_string();
    fleet.apps.instances[0].kill()?;
    let held_by_dead = pending_of(&redis, &dead).await?;
    tl.log(
        "instance 1",
        format!("killed (SIGKILL) holding {held_by_dead} entries read and not acknowledged"),
    );
    fleet.mariadb().server().resume()?;
    tl.log("mariadb", "thawed");

    // Before the claim time: the live consumer placed everything but the dead one's batch.
    tokio::time::sleep(Duration::from_millis(claim_idle_ms / 3)).await;
    let before_claim = fleet.product(PRODUCT).await?;
    tl.log(
        "db",
        format!("{} order(s) before the claim time", before_claim.orders),
    );

    let bound = Duration::from_millis(claim_idle_ms * 4);
    let started = Instant::now();
    let end = loop {
        let p = fleet.product(PRODUCT).await?;
        if p.pending == 0 || started.elapsed() > bound {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let left_pending = pending_of(&redis, &dead).await?;
    tl.log(
        "db",
        format!(
            "{} order(s), {} unit(s) still waiting, {left_pending} entries still owned by the dead consumer",
            end.orders, end.pending
        ),
    );
    let f = StreamConsumerCrash {
        accepted,
        held_by_dead_consumer: held_by_dead,
        orders_before_claim: before_claim.orders,
        orders: end.orders,
        still_pending: end.pending,
        oversell: accounting(&end).oversell,
    };
    Ok(ScenarioReport {
        scenario: Scenario::StreamConsumerCrash,
        fault: format!(
            "MariaDB frozen while {BUYERS} `redis-lua-stream` buyers are accepted; instance 1 is \
             SIGKILLed with its consumer's batch read and not acknowledged; claim time \
             {claim_idle_ms} ms"
        ),
        rows: rows(f),
        timeline: tl.events(Some(Strategy::RedisLuaStream.name())),
        why: why(f, claim_idle_ms),
    })
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
        .query(redis::cmd("XPENDING").arg(keys.stream()).arg(GROUP))
        .await
        .context("XPENDING")?;
    Ok(consumers
        .unwrap_or_default()
        .iter()
        .filter(|(name, _)| name.starts_with(&format!("{instance}/")))
        .filter_map(|(_, count)| count.parse::<i64>().ok())
        .sum())
}

/// The failure and the fix, one row each.
fn rows(f: StreamConsumerCrash) -> Vec<Row> {
    let missing = f.accepted - f.orders_before_claim;
    let stuck = Row::new(
        "redis-lua-stream, before the claim time",
        "the dead consumer's batch is missing from the database",
        format!(
            "{} entries held by the dead consumer; {missing} accepted order(s) missing",
            f.held_by_dead_consumer
        ),
        f.held_by_dead_consumer > 0 && missing == f.held_by_dead_consumer,
        f,
    );
    let claimed = Row::new(
        "redis-lua-stream, after the claim",
        "a live consumer claims the batch; every accepted order in the database exactly once",
        format!(
            "{} order(s) for {} accepted, {} unit(s) still waiting, oversell {}",
            f.orders, f.accepted, f.still_pending, f.oversell
        ),
        f.orders == f.accepted && f.still_pending == 0 && f.oversell == 0,
        f,
    );
    vec![stuck, claimed]
}

fn why(f: StreamConsumerCrash, claim_idle_ms: u64) -> String {
    format!(
        "A consumer acknowledges an entry only after its order is committed, so a consumer \
         that dies in between leaves its batch pending, owned by nobody alive: {} accepted \
         order(s) were missing from the database while {} of {} were placed. After {claim_idle_ms} \
         ms of idleness the live consumer claimed them with XAUTOCLAIM and placed them; the \
         insert ignores request ids already present, so a batch the dead consumer had committed \
         would not have been doubled. In the end {} order(s) for {} accepted.",
        f.held_by_dead_consumer, f.orders_before_claim, f.accepted, f.orders, f.accepted
    )
}
