//! The round-trip phase: what one purchase costs in round trips to each server, counted.
//!
//! On loopback a round trip costs tens of microseconds, so a strategy's rate says little of
//! what it will do with its servers half a millisecond away. What carries over is the count:
//! a purchase that waits for k round trips takes k × RTT longer at a distance, and a lock held
//! across some of them caps one product's rate. With the servers behind relays (`--rtt`,
//! `--rtt 0` for the count alone), each relay counts the exchanges it carries — a request
//! after its answer ([`sandbox::Relay::exchanges`]).
//!
//! The count is made one purchase at a time, each by a buyer of its own on a product of its
//! own with a unit for each: requests from concurrent purchases sharing a connection (a
//! multiplexed Redis connection) would count as one exchange, which one purchase at a time
//! cannot. Each purchase is counted on its own, from its request to its answer; what the
//! servers are asked while nobody buys — the stream consumers' blocking reads, the expiry
//! sweeps, the lock services' heartbeats, a pool opening a connection — lands in some
//! purchases, and the mean leaves out those that counted the most: a tenth, or as many as the
//! quiet second before the purchases (`idle_per_second`) says met some of it, whichever is
//! more. On a busy machine a purchase takes longer and meets more of it: with nobody buying
//! the instances ask Redis about 150 times a second (the stream consumers' reads among them),
//! once in a purchase of 7 ms. The asynchronous work of a purchase (a stream consumer placing
//! an order) falls in the purchases it overlaps, one each on average: round trips the service
//! spends for it, if not ones its buyer waits for.
//!
//! Its figures and shape are in [`schema`].

pub mod schema;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use app::api::{Strategy, StrategyInfo};
use testkit::metrics::series_values;
use testkit::{Api, order_request};

use super::{About, Allotment, Measured, Measuring, Needs, Phase, Recorded, Run, Turn};
use crate::report::section::Section;
use crate::report::table::Table;
use crate::rig::distance::{self, Relays};
use crate::schema::{Findings, RunReport, Settings};

pub use schema::{RoundTripShape, RoundTrips};

/// Its name: in the report, the settings and the errors.
pub const NAME: &str = "round-trips";

/// The shape the run asked of it; `None`: not asked.
pub fn shape(settings: &Settings) -> Option<RoundTripShape> {
    settings.phases.get(NAME).copied()
}

/// How long the servers are watched with nobody buying, before the purchases.
const QUIET: Duration = Duration::from_secs(1);

/// The least share of purchases, those that counted the most, left out of each server's mean.
const TRIMMED: f64 = 0.1;

/// The most: at least a sixth of the purchases (ten of sixty) stays in the mean.
const MOST_TRIMMED: f64 = 5.0 / 6.0;

/// A kind of server asked less than this per purchase was not asked for the purchases.
const NOISE: f64 = 0.05;

pub struct RoundTripCount;

impl Phase for RoundTripCount {
    fn about(&self) -> About {
        About {
            name: NAME,
            label: "round trips",
            needs: Needs {
                before_sale: false,
                deployable: false,
                products: 1,
                refusal_ceiling: false,
            },
        }
    }

    fn asked(&self, settings: &Settings) -> bool {
        shape(settings).is_some()
    }

    fn doing(&self, settings: &Settings, _: &Measuring<'_>) -> String {
        let purchases = shape(settings).map_or(0, |s| s.purchases);
        format!("round trips of {purchases} purchases, one at a time")
    }

    fn measure<'a>(&'a self, run: &'a Run<'a>, turn: Turn<'a>) -> Measured<'a> {
        Box::pin(measure_one(run, turn.strategy, turn.allotment))
    }

    fn judge(&self, _: &RunReport, _: &mut Findings) {}

    fn section(&self, r: &RunReport) -> Section {
        section(r)
    }

    fn went_wrong(&self, _: &RunReport) -> Option<String> {
        None
    }
}

/// The phase on one strategy: its purchases one at a time on the allotment's product.
async fn measure_one(
    run: &Run<'_>,
    strategy: &Measuring<'_>,
    allotment: &Allotment,
) -> Result<Recorded> {
    let shape = shape(run.settings).context("the run has no round-trip shape")?;
    let relays = (run.relays).context("the servers stand behind no relay to count round trips")?;
    let warm_up = u64::from(run.app.db_pool_size) * run.api.bases.len() as u64;
    let counted = count(
        run.api,
        relays,
        strategy.info,
        allotment,
        shape.purchases,
        warm_up,
    )
    .await?;
    Ok(Recorded::new(counted))
}

/// Counts `purchases` purchases of `info`'s strategy, one at a time, on `allotment`'s
/// product, through instances whose servers stand behind `relays`, after `warm_up` purchases
/// not counted; leaves the product with no stock and no orders.
///
/// The warm-up is what makes the count a steady state's: a pool's connection prepares a
/// statement the first time it runs it (one round trip more, once per connection), and a pool
/// that loops before grew — another strategy's buyers waiting on a row lock open every
/// connection it may hold — has connections this strategy never ran on. Its purchases one at
/// a time take the idle connections in turn, so as many as the instances' pools hold take each
/// once.
pub async fn count(
    api: &Api,
    relays: &Relays,
    info: &StrategyInfo,
    allotment: &Allotment,
    purchases: u64,
    warm_up: u64,
) -> Result<RoundTrips> {
    let (product, home) = (allotment.product(), info.name.home());
    api.reset_product(product, (purchases + warm_up) as i64, home)
        .await?;
    for i in 0..warm_up {
        let body = order_request(
            format!("rt-warm-{i}"),
            info.name,
            format!("{}-warm-{i}", allotment.prefix),
            1,
        );
        api.order(i as usize, product, &body).await;
    }
    // The warm-up's orders placed, so that their placing lands in no purchase counted.
    if warm_up > 0 && home.in_redis() {
        crate::measure::sale::drain(api, product).await?;
    }

    let quiet_from = relays.exchanges();
    tokio::time::sleep(QUIET).await;
    let idle_per_second = rates(&quiet_from, &relays.exchanges(), QUIET);

    let held_from = LockHolds::of(&api.metrics().await, info.name);
    let mut deltas: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    let mut times = Vec::with_capacity(purchases as usize);
    let mut placed = 0;
    for i in 0..purchases {
        let body = order_request(
            format!("rt-{i}"),
            info.name,
            format!("{}-{i}", allotment.prefix),
            1,
        );
        let before = relays.exchanges();
        let sent = Instant::now();
        let answer = api.order(i as usize, product, &body).await;
        times.push(sent.elapsed());
        placed += u64::from(answer.created());
        for (kind, n) in relays.exchanges() {
            let was = before.get(kind).copied().unwrap_or(0);
            deltas.entry(kind).or_default().push(n.saturating_sub(was));
        }
    }
    let held = LockHolds::of(&api.metrics().await, info.name).since(held_from);
    if home.in_redis() {
        crate::measure::sale::drain(api, product).await?;
    }
    api.reset_product(product, 0, home).await?;
    times.sort();
    Ok(RoundTrips {
        purchases,
        placed,
        per_purchase: per_purchase(relays, deltas, &idle_per_second, &times),
        idle_per_second,
        median_ms: times
            .get(times.len() / 2)
            .map_or(0.0, |t| t.as_secs_f64() * 1e3),
        under_lock: held.per_hold(),
    })
}

/// What the service counted of one strategy's purchases that held a lock, over every
/// instance: `seckill_lock_holds_total` and `seckill_calls_under_lock_total`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct LockHolds {
    holds: f64,
    calls: f64,
}

impl LockHolds {
    fn of(text: &str, strategy: Strategy) -> LockHolds {
        let series = |name: &str| format!("{name}{{strategy=\"{strategy}\"}}");
        LockHolds {
            holds: series_values(text, &series("seckill_lock_holds_total")).sum(),
            calls: series_values(text, &series("seckill_calls_under_lock_total")).sum(),
        }
    }

    /// What was counted after `before`.
    fn since(self, before: LockHolds) -> LockHolds {
        LockHolds {
            holds: self.holds - before.holds,
            calls: self.calls - before.calls,
        }
    }

    /// Calls under the lock per purchase that held one; `None` when none held one.
    fn per_hold(self) -> Option<f64> {
        (self.holds >= 1.0).then(|| self.calls / self.holds)
    }
}

/// Exchanges per second of each kind of server between the counts `from` and `to`.
fn rates(
    from: &BTreeMap<&'static str, u64>,
    to: &BTreeMap<&'static str, u64>,
    over: Duration,
) -> BTreeMap<String, f64> {
    (to.iter())
        .map(|(kind, n)| {
            let before = from.get(kind).copied().unwrap_or(0);
            (
                kind.to_string(),
                n.saturating_sub(before) as f64 / over.as_secs_f64(),
            )
        })
        .collect()
}

/// Exchanges per purchase with one server of each kind, from each purchase's own count (its
/// time in `times`): the mean of all but those that counted the most, as many as the kind's
/// rate while nobody bought (`idle`) says met some of it ([`left_out`]). What the servers are
/// asked by nobody buying (a consumer's read, a sweep, a heartbeat, a pool opening a
/// connection) is left out with them; a purchase's own work, asynchronous work included, is in
/// every one.
fn per_purchase(
    relays: &Relays,
    deltas: BTreeMap<&'static str, Vec<u64>>,
    idle: &BTreeMap<String, f64>,
    times: &[Duration],
) -> BTreeMap<String, f64> {
    (deltas.into_iter())
        .filter_map(|(kind, counts)| {
            let idle = idle.get(kind).copied().unwrap_or(0.0);
            let servers = relays.servers(kind).max(1) as f64;
            let n = kept_mean(counts, left_out(idle, times)) / servers;
            (n >= NOISE).then_some((kind.to_string(), n))
        })
        .collect()
}

/// The share of purchases taking `times` that meet at least one exchange of a background
/// asking `per_second` (as arrivals at random: one minus the chance of none), within
/// [`TRIMMED`] and [`MOST_TRIMMED`].
fn left_out(per_second: f64, times: &[Duration]) -> f64 {
    let none = |t: &Duration| (-per_second * t.as_secs_f64()).exp();
    let met = 1.0 - times.iter().map(none).sum::<f64>() / times.len().max(1) as f64;
    met.clamp(TRIMMED, MOST_TRIMMED)
}

/// The mean of `counts` without the `share` of them that are largest (at least one kept).
fn kept_mean(mut counts: Vec<u64>, share: f64) -> f64 {
    counts.sort_unstable();
    let kept = counts.len() - (counts.len() as f64 * share).ceil() as usize;
    let kept = &counts[..kept.max(1).min(counts.len())];
    kept.iter().sum::<u64>() as f64 / kept.len().max(1) as f64
}

/// The kinds of server in the order the tables show them.
pub const KINDS: [&str; 6] = [
    distance::MARIADB,
    distance::REDIS,
    distance::REDLOCK,
    distance::ZOOKEEPER,
    distance::ETCD,
    distance::MEMCACHED,
];

/// The phase's section: each strategy's round trips per purchase, by server.
fn section(r: &RunReport) -> Section {
    let counted = r.each::<RoundTrips>(NAME);
    let (Some(shape), false) = (shape(&r.settings), counted.is_empty()) else {
        return Section::default();
    };
    let mut s = Section::titled("Round trips per purchase");
    s.prose(format!(
        "Counted by the relays in front of the servers: an exchange is a request sent after \
         its server's answer, one round trip waited for. {} purchases of each strategy, one \
         at a time, each by a buyer of its own, each counted on its own; the mean leaves out the \
         purchases that counted the most (a consumer's read, a sweep, a heartbeat, a new \
         connection landing in them): a tenth, or as many as the rate while nobody bought says \
         met some of it. The Redlock \
         column is one of its five servers, asked at once. A purchase waits for about \
         *total* × RTT more at a distance, if its round trips are one after another; \
         asynchronous work (a stream consumer placing the order) counts, though its buyer \
         does not wait for it. *Under the lock* is the service's own count of the calls a \
         purchase sent while it held the product's row lock or a distributed lock, after the \
         call that took it through the one that released it: round trips every other buyer \
         of the product waits for (– where the strategy holds no lock across a call).",
        shape.purchases
    ));
    let used: Vec<&str> = (KINDS.iter().copied())
        .filter(|k| (counted.iter()).any(|c| c.per_purchase.contains_key(*k)))
        .collect();
    let mut table = Table::left(["strategy"])
        .and_right(used.iter().copied())
        .and_right(["total", "under the lock", "placed", "median ms"]);
    for c in &counted {
        let per = |k: &str| {
            c.per_purchase
                .get(k)
                .map_or("–".into(), |n| format!("{n:.1}"))
        };
        table.row(
            [c.strategy.name.to_string()]
                .into_iter()
                .chain(used.iter().map(|k| per(k)))
                .chain([
                    format!("{:.1}", c.total()),
                    c.under_lock.map_or("–".into(), |k| format!("{k:.1}")),
                    format!("{}/{}", c.placed, c.purchases),
                    format!("{:.2}", c.median_ms),
                ]),
        );
    }
    s.table(table);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sixty purchases of `own` exchanges each, those in `met` of them with `extra` more.
    fn counts(own: u64, met: usize, extra: u64) -> Vec<u64> {
        (0..60).map(|i| own + u64::from(i < met) * extra).collect()
    }

    #[test]
    fn a_background_few_purchases_meet_is_left_out_with_the_tenth_that_counted_most() {
        let quick = vec![Duration::from_millis(1); 60];
        let share = left_out(20.0, &quick);
        assert_eq!(share, TRIMMED, "2 % meet a background of 20/s: the tenth");
        assert_eq!(kept_mean(counts(6, 5, 1), share), 6.0);
    }

    #[test]
    fn a_background_most_purchases_meet_on_a_busy_machine_is_left_out_with_them() {
        // 150 exchanges a second while nobody buys; purchases of 14 ms meet two on average,
        // and 86 % of them at least one: a tenth left out would count the background as the
        // purchase's own.
        let slow = vec![Duration::from_millis(14); 60];
        let share = left_out(150.0, &slow);
        assert!(share > 0.8, "{share}");
        let busy = counts(0, 50, 2);
        assert!(kept_mean(busy.clone(), TRIMMED) > 1.5, "a tenth left out");
        assert_eq!(kept_mean(busy, share), 0.0, "none of the purchase's own");
        assert_eq!(kept_mean(counts(2, 50, 2), share), 2.0);
    }

    #[test]
    fn at_least_a_sixth_of_the_purchases_stays_in_the_mean() {
        let endless = vec![Duration::from_secs(10); 60];
        assert_eq!(left_out(150.0, &endless), MOST_TRIMMED);
        assert_eq!(kept_mean(counts(3, 59, 1), MOST_TRIMMED), 3.9);
        assert_eq!(
            kept_mean(vec![4], MOST_TRIMMED),
            4.0,
            "one purchase is kept"
        );
    }
}
