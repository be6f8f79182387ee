//! `holder-crash`: the app instance inside the critical section is SIGKILLed.
//!
//! A lock held by a dead process must come back by itself, or every later buyer waits for an
//! operator. How soon it comes back is each lock's answer to "how do you know the holder is
//! dead?": a Redis key's TTL or a lock row's expiry (one lease), ZooKeeper's session timeout
//! (the server stops hearing the session's pings), and for `pessimistic` no time at all — the
//! row lock belongs to a database transaction, and the database rolls back the transaction of
//! a connection that closed, which the kernel does the moment the process dies. A lock with no
//! expiry (`redis-setnx-no-ttl`, whose holder died between `SETNX` and `EXPIRE` — simulated,
//! since no signal can be timed into that window) never comes back. Whatever the lock, the
//! dead buyer's uncommitted order must vanish and no other order may be lost or doubled.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use locks::redis::SetnxNoTtlLock;
use locks::{AcquireOptions, DistributedLock};

use super::app::{Fleet, order};
use super::{Row, ScenarioOptions, ScenarioReport, Timeline};

const STRATEGIES: [&str; 5] = [
    "redis-setnx-no-ttl",
    "redis-lock",
    "zookeeper",
    "db-lock",
    "pessimistic",
];
/// How long each probe buyer waits for the lock before answering `busy`.
const PROBE_WAIT_MS: u64 = 150;
const STOCK: i64 = 10;

struct Settings {
    lease_ms: u64,
    session_ms: u64,
    bound: Duration,
}

pub async fn run(opts: &ScenarioOptions) -> Result<ScenarioReport> {
    let binary = opts
        .app_binary
        .as_deref()
        .context("holder-crash runs seckill-app: its binary is needed")?;
    let (lease_ms, session_ms) = if opts.quick {
        (1500, 1500)
    } else {
        (5000, 4000)
    };
    let settings = Settings {
        lease_ms,
        session_ms,
        bound: Duration::from_millis(lease_ms.max(session_ms) * 4),
    };
    let flags = [
        format!("--lock-lease-ms={lease_ms}"),
        format!("--lock-wait-ms={PROBE_WAIT_MS}"),
        format!("--zookeeper-session-timeout-ms={session_ms}"),
    ];
    let mut fleet = Fleet::start_with(binary, 2, &flags, true).await?;
    let mut rows = Vec::new();
    let mut timeline = Vec::new();
    for (n, strategy) in STRATEGIES.iter().enumerate() {
        let product = 400 + n as u64;
        fleet.reset(product, STOCK).await?;
        let tl = Timeline::new();
        if *strategy == "redis-setnx-no-ttl" {
            crash_between_setnx_and_expire(&fleet, product, &settings).await?;
            tl.log(
                "A",
                "SETNX granted, then died before EXPIRE (simulated crash)",
            );
        } else {
            kill_inside(&mut fleet, product, strategy, &settings, &tl).await?;
        }
        let back = probe(&fleet, product, strategy, settings.bound, &tl).await?;
        let p = fleet.product(product).await?;
        let created = i64::from(back.is_some());
        let damage = (p.orders - created).abs() + (p.initial_stock - p.stock - p.sold).abs();
        tl.log(
            "db",
            format!(
                "{} order(s), stock {} of {}",
                p.orders, p.stock, p.initial_stock
            ),
        );
        if *strategy != "redis-setnx-no-ttl" {
            fleet.restart(0).await?;
        }
        rows.push(row(strategy, back, damage, &settings));
        timeline.extend(tl.events(Some(strategy)));
    }
    let why = why(&rows, &settings);
    Ok(ScenarioReport {
        scenario: "holder-crash".into(),
        fault: format!(
            "the instance holding the lock is SIGKILLed inside the critical section (lease {} \
             ms, ZooKeeper session {} ms); buyers on the other instance probe until one buys, \
             for at most {:?}",
            settings.lease_ms, settings.session_ms, settings.bound
        ),
        rows,
        timeline,
        why,
    })
}

/// The dead holder of `redis-setnx-no-ttl`: a client of the same Redis takes the app's lock
/// key with `SETNX` and "dies" before `EXPIRE`.
async fn crash_between_setnx_and_expire(
    fleet: &Fleet,
    product: u64,
    settings: &Settings,
) -> Result<()> {
    let lock = SetnxNoTtlLock::connect(&fleet.redis_url())?.crash_between_setnx_and_expire();
    let key = format!("product:{product}");
    let lease = Duration::from_millis(settings.lease_ms);
    match lock.acquire(&key, AcquireOptions::new(lease)).await {
        Err(locks::LockError::Unavailable(_)) => Ok(()),
        other => anyhow::bail!("expected the simulated crash, got {other:?}"),
    }
}

/// Buyer A enters the critical section on instance 1 (pausing there), which is then killed.
async fn kill_inside(
    fleet: &mut Fleet,
    product: u64,
    strategy: &str,
    settings: &Settings,
    tl: &Timeline,
) -> Result<()> {
    let hold_ms = settings.bound.as_millis() as u64 * 2;
    let api = fleet.api.clone();
    let strategy_name = strategy.to_owned();
    tl.log(
        "A@1",
        format!("orders, pauses {hold_ms} ms inside the critical section"),
    );
    // Its answer never comes: the connection dies with the instance.
    let a =
        tokio::spawn(
            async move { order(&api, 0, product, &strategy_name, "buyer-a", hold_ms).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;
    fleet.apps.instances[0].kill()?;
    tl.log(
        "instance 1",
        "killed (SIGKILL) with A inside the critical section",
    );
    a.abort();
    Ok(())
}

/// Probe buyers through instance 2 until one buys: how long after the crash, if within `bound`.
async fn probe(
    fleet: &Fleet,
    product: u64,
    strategy: &str,
    bound: Duration,
    tl: &Timeline,
) -> Result<Option<Duration>> {
    let start = Instant::now();
    let mut refused = 0;
    for n in 0.. {
        let answer = fleet
            .order(1, product, strategy, &format!("probe-{n}"), 0)
            .await;
        if answer.created() {
            let back = start.elapsed();
            tl.log(
                "probe@2",
                format!(
                    "{} after {refused} refusals: lock back after {} ms",
                    answer.describe(),
                    back.as_millis()
                ),
            );
            return Ok(Some(back));
        }
        refused += 1;
        if start.elapsed() > bound {
            tl.log(
                "probe@2",
                format!(
                    "still refused ({}) after {refused} probes over {bound:?}",
                    answer.describe()
                ),
            );
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unreachable!("the loop returns")
}

fn row(strategy: &str, back: Option<Duration>, damage: i64, s: &Settings) -> Row {
    let back_ms = back.map(|d| d.as_secs_f64() * 1000.0);
    // Came back, no sooner than half of `expected` after the crash (the dead holder took the
    // lock about 300 ms before), and within the bound.
    let about = |expected: u64| back_ms.is_some_and(|b| b >= expected as f64 / 2.0);
    let (expected, ok) = match strategy {
        "redis-setnx-no-ttl" => (
            format!(
                "never: the key has no expiry (still held after {:?})",
                s.bound
            ),
            back.is_none(),
        ),
        "redis-lock" => (
            format!("≈ lease ({} ms): the key's TTL runs out", s.lease_ms),
            about(s.lease_ms),
        ),
        "db-lock" => (
            format!(
                "≈ lease ({} ms): a waiter reaps the expired lock row",
                s.lease_ms
            ),
            about(s.lease_ms),
        ),
        "zookeeper" => (
            format!(
                "≈ session timeout ({} ms): the server expires the dead session and its node",
                s.session_ms
            ),
            about(s.session_ms),
        ),
        _ => (
            "≈ immediately: the database rolls back the dead connection's transaction".into(),
            back_ms.is_some_and(|b| b < s.lease_ms as f64 / 2.0),
        ),
    };
    let observed = match back_ms {
        Some(b) => format!("buyable again after {b:.0} ms"),
        None => format!("not buyable within {:?}", s.bound),
    };
    let observed = match damage {
        0 => format!("{observed}; no order lost or duplicated"),
        d => format!("{observed}; {d} order(s) lost or duplicated"),
    };
    let mut row = Row::new(
        strategy,
        format!("{expected}; no order lost or duplicated"),
        observed,
        ok && damage == 0,
    )
    .figure("orders_lost_or_duplicated", damage as f64)
    .figure("recovered", f64::from(u8::from(back.is_some())));
    if let Some(b) = back_ms {
        row = row.figure("lock_back_ms", b);
    }
    row
}

fn why(rows: &[Row], s: &Settings) -> String {
    let back = |subject: &str| {
        rows.iter()
            .find(|r| r.subject == subject)
            .and_then(|r| r.get("lock_back_ms"))
            .map_or_else(|| "never".to_string(), |b| format!("{b:.0} ms"))
    };
    format!(
        "A dead holder cannot release; the lock comes back only through what the backend uses \
         to detect death. The Redis key's TTL gave it back after {} (lease {} ms), the expired \
         lock row after {}, ZooKeeper's session expiry after {} (timeout {} ms), and the row \
         lock of `pessimistic` after {}: a transaction dies with its connection. The lock taken \
         by `SETNX` without an expiry: {} — every buyer after the crash was told `busy`. The \
         dead buyer's order was never committed, so nothing was lost or sold twice.",
        back("redis-lock"),
        s.lease_ms,
        back("db-lock"),
        back("zookeeper"),
        s.session_ms,
        back("pessimistic"),
        back("redis-setnx-no-ttl"),
    )
}
