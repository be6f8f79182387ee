//! `redis-failover-stock`: the Redis primary holding a `redis-lua` stock counter dies, and the
//! replica promoted in its place missed the last deductions.
//!
//! Redis replicates asynchronously: a script's decrement is answered first and shipped to the
//! replica afterwards. Orders placed on decrements the replica never received survive in the
//! database, while the promoted replica's counter still has their units — it sells them
//! again: **oversell**, from a strategy that is safe on one server. The set-up is made certain
//! rather than lucky: the replica replicates through a relay that is cut before the last sales,
//! and the app reaches Redis through a second relay, its service address, which moves to the
//! promoted replica (as a virtual IP or a proxy would; Sentinel discovery is the other way).
//!
//! With `--redis-wait-replicas 1` every deduction is followed by `WAIT 1`: while the replica
//! is cut off, no replica acknowledges, so each purchase is given back and answered `503`, and
//! nothing the failover can lose becomes an order. The price shows too: while no replica
//! listens, nothing sells at all; after the failover the sale resumes only once the old
//! primary is back as a replica of the new one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use app::api::{ErrorCode, Home, Strategy};
use tokio::time::Instant;

use super::failover::{replicate_through, wait_for_replica};
use super::figures::RedisFailoverStock;
use super::{Row, Scenario, ScenarioOptions, ScenarioReport, Timeline, control, start};
use crate::rig::fleet::{Fleet, accounting, order};
use sandbox::Relay;
use testkit::Answer;

const PRODUCT: u64 = 950;
const STOCK: i64 = 20;
/// Units sold while the replica keeps up.
const BEFORE: usize = 5;
/// Purchases made while the replica is cut off.
const DURING: usize = 5;
/// How long buyers keep retrying `503`s while the app finds the new primary.
const RECOVERY: Duration = Duration::from_secs(30);

struct Mode {
    subject: &'static str,
    wait: bool,
}

const MODES: [Mode; 2] = [
    Mode {
        subject: "redis-lua, no WAIT",
        wait: false,
    },
    Mode {
        subject: "redis-lua + WAIT 1",
        wait: true,
    },
];

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts.app_binary(Scenario::RedisFailoverStock)?;
    // One pair per mode, started together: a replica's first sync takes seconds.
    let pairs =
        futures::future::try_join_all(MODES.iter().map(|_| start(sandbox::RedisPair::start)))
            .await?;
    let mut rows = Vec::new();
    let mut timeline = Vec::new();
    let mut measured = Vec::new();
    for (mode, pair) in MODES.iter().zip(pairs) {
        let (f, events) = one(binary, mode, Arc::new(pair)).await?;
        rows.push(row(mode, f));
        measured.push((mode, f));
        timeline.extend(events);
    }
    Ok(ScenarioReport {
        scenario: Scenario::RedisFailoverStock,
        fault: format!(
            "{STOCK} units in a Redis counter (primary + async replica); {BEFORE} sell, the \
             replication link is cut, {DURING} more purchases, the primary is SIGKILLed, the \
             replica is promoted and the app's Redis address moves to it; buyers take what is left"
        ),
        rows,
        timeline,
        why: why(&measured),
    })
}

async fn one(
    binary: &std::path::Path,
    mode: &Mode,
    pair: Arc<sandbox::RedisPair>,
) -> Result<(RedisFailoverStock, Vec<super::Event>)> {
    let tl = Timeline::new();
    let primary: SocketAddr = format!("127.0.0.1:{}", pair.primary.port()).parse()?;
    let replica: SocketAddr = format!("127.0.0.1:{}", pair.replica.port()).parse()?;
    let link = Relay::start(primary)?;
    let p = pair.clone();
    let link_port = link.addr().port();
    control(move || replicate_through(&p.replica, link_port)).await?;
    let service = Relay::start(primary)?;
    let flags: Vec<String> = match mode.wait {
        true => vec![
            "--redis-wait-replicas=1".into(),
            "--redis-wait-timeout-ms=100".into(),
        ],
        false => Vec::new(),
    };
    let fleet =
        Fleet::start_with_redis(binary, 1, &flags, format!("redis://{}", service.addr())).await?;
    fleet.reset_in(PRODUCT, STOCK, Home::Redis).await?;

    let sold_before = buy(&fleet, "before", BEFORE).await.created;
    // Make sure the replica has every sale so far: the lag is exactly what follows the cut.
    let acked = wait_for_replica(&pair.primary.url(), 2000).await?;
    tl.log(
        "app",
        format!("{sold_before} unit(s) sold; {acked} replica(s) have them"),
    );

    link.cut();
    tl.log(
        "network",
        "replication link cut: the replica stops receiving",
    );
    let during = buy(&fleet, "during", DURING).await;
    tl.log(
        "app",
        format!(
            "{} purchase(s) while the replica lags: {} placed, {} refused 503",
            DURING, during.created, during.unavailable
        ),
    );

    let p = pair.clone();
    control(move || p.primary.server().kill()).await?;
    tl.log("primary", "killed (SIGKILL)");
    let p = pair.clone();
    control(move || p.promote_replica()).await?;
    service.move_to(replica);
    tl.log(
        "replica",
        "promoted (REPLICAOF NO ONE); the app's Redis address now leads to it",
    );
    // The old primary comes back as a replica of the new one, as Sentinel would reconfigure
    // it: with `WAIT 1`, the sale needs a replica to go on.
    let p = pair.clone();
    let replica_port = pair.replica.port();
    control(move || {
        p.primary.server().start_again()?;
        replicate_through(&p.primary, replica_port)
    })
    .await?;
    tl.log("old primary", "restarted as a replica of the promoted one");
    let counter_after_failover = product_when_back(&fleet).await?.stock;
    tl.log(
        "redis",
        format!("the promoted replica's counter: {counter_after_failover}"),
    );

    let after = buy_until_sold_out(&fleet).await?;
    let end = fleet.product(PRODUCT).await?;
    let acc = accounting(&end);
    tl.log(
        "db",
        format!(
            "{} more sold after the failover; {} unit(s) in {} order(s) of {STOCK}: oversell {}",
            after, end.sold, end.orders, acc.oversell
        ),
    );
    let f = RedisFailoverStock {
        wait_replicas: u32::from(mode.wait),
        sold_before,
        sold_during: during.created,
        refused_during: during.unavailable,
        counter_after_failover,
        sold_after: after,
        units_sold: end.sold,
        orders: end.orders,
        oversell: acc.oversell,
    };
    Ok((f, tl.events(Some(mode.subject))))
}

/// What `n` purchases through the instance were answered.
#[derive(Debug, Default)]
struct Sales {
    created: usize,
    unavailable: usize,
}

/// One `redis-lua` purchase of one unit by `user`, through the instance.
async fn click(fleet: &Fleet, user: &str) -> Answer {
    order(&fleet.api, 0, PRODUCT, Strategy::RedisLua, user, 0).await
}

async fn buy(fleet: &Fleet, who: &str, n: usize) -> Sales {
    let mut sales = Sales::default();
    for i in 0..n {
        let answer = click(fleet, &format!("{who}-{i}")).await;
        if answer.created() {
            sales.created += 1;
        } else if answer.refused_with(ErrorCode::BackendUnavailable) {
            sales.unavailable += 1;
        }
    }
    sales
}

/// The product, retried while the app's Redis connections find the new primary.
async fn product_when_back(fleet: &Fleet) -> Result<app::api::ProductView> {
    let deadline = Instant::now() + RECOVERY;
    loop {
        match fleet.product(PRODUCT).await {
            Ok(p) => return Ok(p),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Buys one unit at a time until `sold_out`, retrying `503`s while the app reconnects.
async fn buy_until_sold_out(fleet: &Fleet) -> Result<usize> {
    let deadline = Instant::now() + RECOVERY;
    let mut created = 0;
    for i in 0.. {
        let answer = click(fleet, &format!("after-{i}")).await;
        if answer.created() {
            created += 1;
        } else if answer.refused_with(ErrorCode::SoldOut) {
            return Ok(created);
        } else if Instant::now() > deadline {
            bail!(
                "the sale did not resume within {RECOVERY:?} of the failover: {}",
                answer.describe()
            );
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    unreachable!("the loop returns")
}

fn row(mode: &Mode, f: RedisFailoverStock) -> Row {
    let observed = format!(
        "{} placed and {} refused while the replica lagged; the new primary's counter {}; {} \
         unit(s) in {} order(s): oversell {}",
        f.sold_during,
        f.refused_during,
        f.counter_after_failover,
        f.units_sold,
        f.orders,
        f.oversell
    );
    let (expected, ok) = match mode.wait {
        false => (
            format!(
                "oversell {DURING}: the {DURING} units sold while the replica lagged sell again"
            ),
            f.oversell == DURING as i64 && f.sold_during == DURING,
        ),
        true => (
            format!(
                "no oversell: the {DURING} unreplicated purchases are refused 503; exactly \
                 {STOCK} sold"
            ),
            f.oversell == 0 && f.refused_during == DURING && f.units_sold == STOCK,
        ),
    };
    Row::new(mode.subject, expected, observed, ok, f)
}

fn why(measured: &[(&Mode, RedisFailoverStock)]) -> String {
    let mut text = String::from(
        "The counter's decrements reach the replica after the buyer is answered. Orders placed \
         on decrements the replica never received stay in the database, and the promoted \
         replica sells their units again.",
    );
    for (mode, f) in measured {
        text.push_str(&format!(
            " {}: {} purchase(s) placed and {} refused while the replica lagged, the promoted \
             counter read {}, and the sale ended with {} unit(s) in orders of {STOCK} \
             (oversell {}).",
            mode.subject,
            f.sold_during,
            f.refused_during,
            f.counter_after_failover,
            f.units_sold,
            f.oversell
        ));
    }
    text.push_str(
        " `WAIT 1` turns the lost decrements into refusals: no order rests on a write only the \
         dead primary had. It costs a replica round trip per purchase and stops the sale while \
         no replica listens. It narrows the window; it is not consensus.",
    );
    text
}
