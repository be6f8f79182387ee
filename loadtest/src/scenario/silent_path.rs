//! `silent-path`: the network between one app instance and Redis goes silent while that
//! instance holds a lock.
//!
//! Two instances, each reaching Redis through a relay of its own (the database is reached
//! directly by both). Buyer A, on instance A, takes the `redis-watchdog` lock of the last unit
//! and works inside (the injected `X-Seckill-Hold-Ms`, three leases long). While A is inside,
//! the path from instance A to Redis goes silent — packets dropped, no error, as a partition
//! does it. A's process runs on, but its watchdog's renewals reach nobody; the lease runs out
//! in Redis; buyer B, on instance B, is granted the lock, reads the same last unit and sells
//! it; A, still inside, sells it again — **oversell**, from the lock whose renewals were meant
//! to keep a slow holder safe. The watchdog tells A's guard the lock is lost (`lost()`), but the
//! unfenced strategy does not look before its write, and no check before a write closes the
//! race anyway. `redis-watchdog-fenced`: B's grant raised the product's fence, A's late write
//! carries the older token and the database refuses it (`409 lock_lost`).

use anyhow::{Context, Result};
use app::api::{Home, Strategy};
use sandbox::Relay;
use testkit::Api;

pub use super::lease_expiry::{Figures, Sizes};

use super::lease_expiry::last_unit_race;
use super::{Judgement, Scenario, Stage, Timeline};
use crate::rig::fleet::{Fleet, lock_flags};

pub struct SilentPath;

const STRATEGIES: [Strategy; 2] = [Strategy::RedisWatchdog, Strategy::RedisWatchdogFenced];

impl Scenario for SilentPath {
    type Subject = Strategy;
    type Figures = Figures;
    type Sizes = Sizes;
    const QUICK: Sizes = Sizes { lease_ms: 300 };
    const FULL: Sizes = Sizes { lease_ms: 2000 };

    fn fault(s: &Sizes) -> String {
        format!(
            "lease {} ms; buyer A, on instance A, works {} ms inside the last unit's lock; \
             meanwhile the path from instance A to Redis goes silent, and buyer B asks on \
             instance B",
            s.lease_ms,
            s.hold_ms()
        )
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(Strategy, Figures)>> {
        let redis = crate::rig::start(sandbox::Redis::start).await?;
        let server = format!("127.0.0.1:{}", redis.port()).parse()?;
        let (path_a, path_b) = (Relay::start(server)?, Relay::start(server)?);
        let flags = lock_flags(s.lease_ms, s.hold_ms() * 4);
        // The first instance has no Redis: it serves the scenario's own calls.
        let fleet = Fleet::start_on_clusters(stage.app_path()?, 1, &flags).await?;
        let through = |relay: &Relay| vec![format!("--redis-url=redis://{}", relay.addr())];
        let a = (fleet.apps)
            .start_variant("app-a", &through(&path_a), 1)
            .await?;
        let b = (fleet.apps)
            .start_variant("app-b", &through(&path_b), 1)
            .await?;
        let (api_a, api_b) = (fleet.api_for(&a)?, fleet.api_for(&b)?);
        let mut rows = Vec::new();
        for (n, strategy) in STRATEGIES.into_iter().enumerate() {
            let product = 720 + n as u64;
            let figures = one(
                s,
                stage,
                &fleet,
                (&api_a, &api_b),
                &path_a,
                strategy,
                product,
            )
            .await
            .with_context(|| format!("`{strategy}`"))?;
            rows.push((strategy, figures));
        }
        Ok(rows)
    }

    fn judge(_: &Sizes, strategy: &Strategy, f: &Figures) -> Judgement {
        let (a, b) = (f.a.created(), f.b.created());
        let (expected, holds) = match strategy {
            Strategy::RedisWatchdogFenced => (
                "B is granted the lapsed lock, A's stale write is refused (lock_lost); no \
                 oversell",
                f.oversell == 0 && f.stale_write_rejected && b,
            ),
            _ => (
                "the renewals cannot reach Redis, the lease runs out, B is granted the lock \
                 while A works: two orders for one unit (oversell)",
                f.oversell > 0 && a && b,
            ),
        };
        Judgement::new(expected, f.observed(), holds)
    }

    fn why(s: &Sizes, rows: &[(Strategy, Figures)]) -> String {
        let mut text = format!(
            "A watchdog renews a lease only as far as its messages reach. The path from A's \
             instance to Redis went silent while A worked {} ms inside a {} ms lease.",
            s.hold_ms(),
            s.lease_ms
        );
        for (strategy, f) in rows {
            text.push_str(&format!(
                " `{strategy}`: A {}, B {}, {} order(s) for the one unit (oversell {}).",
                f.a.describe(),
                f.b.describe(),
                f.orders,
                f.oversell
            ));
        }
        text.push_str(
            " Nothing was paused and no clock was wrong: A's process ran on, its renewals \
             went out and were lost. Only the fence, checked where the write lands, tells a \
             holder whose lease lapsed from the one that holds it now.",
        );
        text
    }
}

/// One row: A inside the lock, its path silenced, B asking on the other instance; the path
/// healed once B has its answer.
async fn one(
    s: Sizes,
    stage: &Stage,
    fleet: &Fleet,
    buyers: (&Api, &Api),
    path_a: &Relay,
    strategy: Strategy,
    product: u64,
) -> Result<Figures> {
    fleet.reset_in(product, 1, Home::Row).await?;
    let tl = stage.round(strategy.name());
    let silence = |tl: &Timeline| {
        path_a.silence();
        tl.log("network", "the path from A's instance to Redis goes silent");
    };
    let heal = |tl: &Timeline| {
        path_a.heal();
        tl.log("network", "the path from A's instance to Redis heals");
    };
    let figures = last_unit_race(s, fleet, &tl, buyers, strategy, product, silence, heal).await;
    path_a.heal();
    figures
}
