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

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use app::api::{ErrorCode, Home, Strategy};
use sandbox::Relay;
use serde::{Deserialize, Serialize};
use testkit::Clicks;

use super::{Judgement, Scenario, Stage};
use crate::rig::fleet::{Fleet, accounting};
use crate::rig::replication::{connection, replicas_with_everything, replicate_through};
use crate::rig::{control, start};

pub struct RedisFailoverStock;

/// The stock counter's primary dies after its replica missed the last deductions; one row
/// per mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Replicas each deduction waited for (`--redis-wait-replicas`).
    pub wait_replicas: u32,
    pub stock: i64,
    pub sold_before: usize,
    /// Purchases made while the replica was cut off.
    pub during: usize,
    /// Of those, placed.
    pub sold_during: usize,
    /// Of those, refused `503`.
    pub refused_during: usize,
    /// The promoted replica's counter, as the app read it after the failover.
    pub counter_after_failover: i64,
    pub sold_after: usize,
    pub units_sold: i64,
    pub orders: i64,
    pub oversell: i64,
}

/// Whether every deduction waits for a replica.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    wait: bool,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.wait {
            false => "redis-lua, no WAIT",
            true => "redis-lua + WAIT 1",
        })
    }
}

const PRODUCT: u64 = 950;
const STOCK: i64 = 20;
/// Units sold while the replica keeps up.
const BEFORE: u64 = 5;
/// Purchases made while the replica is cut off.
const DURING: u64 = 5;
/// How long the app may take to find the new primary, and a replica to acknowledge.
const PATIENCE: Duration = Duration::from_secs(30);

impl Scenario for RedisFailoverStock {
    type Sizes = ();
    const QUICK: () = ();
    const FULL: () = ();
    type Subject = Mode;
    type Figures = Figures;

    fn fault(_: &()) -> String {
        format!(
            "{STOCK} units in a Redis counter (primary + async replica); {BEFORE} sell, the \
             replication link is cut, {DURING} more purchases, the primary is SIGKILLed, the \
             replica is promoted and the app's Redis address moves to it; buyers take what is \
             left"
        )
    }

    async fn play(_: (), stage: &Stage) -> Result<Vec<(Mode, Figures)>> {
        let modes = [Mode { wait: false }, Mode { wait: true }];
        // One pair per mode, started together: a replica's first sync takes seconds.
        let pairs =
            futures::future::try_join_all(modes.iter().map(|_| start(sandbox::RedisPair::start)))
                .await?;
        let mut rows = Vec::new();
        for (mode, pair) in modes.into_iter().zip(pairs) {
            rows.push((mode, one(stage, mode, Arc::new(pair)).await?));
        }
        Ok(rows)
    }

    fn judge(_: &(), mode: &Mode, f: &Figures) -> Judgement {
        let observed = format!(
            "{} placed and {} refused while the replica lagged; the new primary's counter {}; \
             {} unit(s) in {} order(s): oversell {}",
            f.sold_during,
            f.refused_during,
            f.counter_after_failover,
            f.units_sold,
            f.orders,
            f.oversell
        );
        let during = f.during as i64;
        match mode.wait {
            false => Judgement::new(
                format!(
                    "oversell {during}: the {during} units sold while the replica lagged sell \
                     again"
                ),
                observed,
                f.oversell == during && f.sold_during == f.during,
            ),
            true => Judgement::new(
                format!(
                    "no oversell: the {during} unreplicated purchases are refused 503; exactly \
                     {} sold",
                    f.stock
                ),
                observed,
                f.oversell == 0 && f.refused_during == f.during && f.units_sold == f.stock,
            ),
        }
    }

    fn why(_: &(), rows: &[(Mode, Figures)]) -> String {
        let mut text = String::from(
            "The counter's decrements reach the replica after the buyer is answered. Orders \
             placed on decrements the replica never received stay in the database, and the \
             promoted replica sells their units again.",
        );
        for (mode, f) in rows {
            text.push_str(&format!(
                " {mode}: {} purchase(s) placed and {} refused while the replica lagged, the \
                 promoted counter read {}, and the sale ended with {} unit(s) in orders of {} \
                 (oversell {}).",
                f.sold_during,
                f.refused_during,
                f.counter_after_failover,
                f.units_sold,
                f.stock,
                f.oversell
            ));
        }
        text.push_str(
            " `WAIT 1` turns the lost decrements into refusals: no order rests on a write only \
             the dead primary had. It costs a replica round trip per purchase and stops the \
             sale while no replica listens. It narrows the window; it is not consensus.",
        );
        text
    }
}

async fn one(stage: &Stage, mode: Mode, pair: Arc<sandbox::RedisPair>) -> Result<Figures> {
    let tl = stage.round(mode.to_string());
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
    let redis_url = format!("redis://{}", service.addr());
    let fleet = Fleet::start_with_redis(stage.app_binary()?, 1, &flags, redis_url).await?;
    fleet.reset_in(PRODUCT, STOCK, Home::Redis).await?;

    let sold_before = fleet
        .one_buyer(Strategy::RedisLua, PRODUCT, "before", Clicks::Total(BEFORE))
        .await
        .created();
    // The replica has every sale so far: the lag is exactly what follows the cut.
    let mut primary = connection(&pair.primary.url(), PATIENCE).await?;
    let acked = replicas_with_everything(&mut primary, 1, PATIENCE).await?;
    tl.log(
        "app",
        format!("{sold_before} unit(s) sold; {acked} replica(s) have them"),
    );

    link.cut();
    tl.log(
        "network",
        "replication link cut: the replica stops receiving",
    );
    let during = fleet
        .one_buyer(Strategy::RedisLua, PRODUCT, "during", Clicks::Total(DURING))
        .await;
    let refused_during = during.refused(ErrorCode::BackendUnavailable);
    tl.log(
        "app",
        format!(
            "{DURING} purchase(s) while the replica lags: {} placed, {refused_during} refused 503",
            during.created()
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
    let counter_after_failover = fleet.await_product(PRODUCT, |_| true).await?.stock;
    tl.log(
        "redis",
        format!("the promoted replica's counter: {counter_after_failover}"),
    );

    // Buyers take what is left, one after the other, retrying while the app reconnects.
    let until = Clicks::UntilSoldOut {
        pause: Duration::from_millis(50),
        patience: PATIENCE,
    };
    let after = fleet
        .one_buyer(Strategy::RedisLua, PRODUCT, "after", until)
        .await;
    ensure!(
        after.refused(ErrorCode::SoldOut) > 0,
        "the sale did not resume within {PATIENCE:?} of the failover: {}",
        after.outcomes()
    );
    let end = fleet.product(PRODUCT).await?;
    let acc = accounting(&end);
    tl.log(
        "db",
        format!(
            "{} more sold after the failover; {} unit(s) in {} order(s) of {STOCK}: oversell {}",
            after.created(),
            end.sold,
            end.orders,
            acc.oversell
        ),
    );
    Ok(Figures {
        wait_replicas: u32::from(mode.wait),
        stock: STOCK,
        sold_before,
        during: DURING as usize,
        sold_during: during.created(),
        refused_during,
        counter_after_failover,
        sold_after: after.created(),
        units_sold: end.sold,
        orders: end.orders,
        oversell: acc.oversell,
    })
}
