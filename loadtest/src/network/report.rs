//! The network sweep's report: `report.json`, `report.md`, the same as `report.html`, and a
//! chart of each strategy's rate against the round trip (`rates.svg`).

use std::path::Path;

use anyhow::{Context, Result};
use app::api::Safety;
use app::catalogue::Kind;
use plotters::prelude::*;

use super::model::{self, MISS, StrategyModel};
use super::schema::{BaselineSweep, NetworkReport, RELAYS_LOOP};
use crate::report::charts::{Chart, draw_legend, err};
use crate::report::section::Section;
use crate::report::table::Table;
use crate::schema::history::RunKind;
use crate::schema::world::Distance;
use crate::schema::{BaselineName, CpuUse};

/// The sweep's figures, beside `report.md` (not `report.json`: the run's, another schema).
pub const JSON: &str = RunKind::Network.file();

/// The chart's file, beside `report.md`, and its words where it cannot be shown.
pub const CHART: &str = "rates.svg";
const CHART_ALT: &str = "purchases per second against the round trip added";

/// The most a relay adding nothing may take off the Redis baseline's rate.
pub const RELAY_COST_BAR: f64 = 0.10;

/// Writes the report's files into `dir`.
pub fn write_all(dir: &Path, r: &NetworkReport) -> Result<()> {
    crate::schema::json::write_as(&dir.join(JSON), r)?;
    std::fs::write(dir.join("report.md"), markdown(r))?;
    let mut svg = String::new();
    chart(&mut svg, r)?;
    // The page holds the chart itself, as the run's page does: it loads nothing.
    let drawn = Chart {
        file: CHART.into(),
        title: CHART_ALT.into(),
        svg,
    };
    let html =
        crate::report::html::page::with_charts(TITLE, &document(r), std::slice::from_ref(&drawn));
    std::fs::write(dir.join("report.html"), html)?;
    std::fs::write(dir.join(CHART), drawn.svg).with_context(|| format!("writing {CHART}"))?;
    Ok(())
}

/// The sweep written in `dir` ([`JSON`]), as [`write_all`] wrote it.
pub fn read(dir: &Path) -> Result<NetworkReport> {
    crate::schema::json::read_as(&dir.join(JSON))
}

/// A point's name in a table's header.
fn point_name(p: Distance) -> String {
    match p {
        Distance::Local => "direct".into(),
        Distance::Relayed { rtt_us } => format!("{} ms", rtt_us as f64 / 1e3),
    }
}

/// The report's title.
const TITLE: &str = "Network sweep: every strategy with its servers at a distance";

/// The whole report in Markdown.
pub fn markdown(r: &NetworkReport) -> String {
    format!("# {TITLE}\n\n{}", document(r).markdown())
}

/// The whole report, printed as Markdown and as HTML.
fn document(r: &NetworkReport) -> Section {
    let s = &r.settings;
    let mut doc = Section::default();
    let points: Vec<String> = r.points.iter().map(|p| point_name(*p)).collect();
    doc.prose(format!(
        "Started {}, {:.0} s. Every server (MariaDB, Redis, the Redlock set, ZooKeeper, etcd, \
         memcached) reached by {} app instance(s) directly, and by {} more through relays on \
         this machine that add a round trip to every request: {}. Each strategy's closed loop of \
         {} buyers ran {} time(s) at each distance ({} s after {} s of warm-up), the distances \
         in turn and their order rotated each round; the figures are the medians. At each \
         distance each strategy also sold {} units to {} clicks, judged from the database.",
        r.started_at,
        r.duration_seconds,
        s.instances,
        s.instances,
        points.join(", "),
        s.buyers,
        s.rounds,
        s.seconds,
        s.warmup,
        s.sale_stock,
        s.sale_clicks,
    ));
    relay_cost(r, &mut doc);
    rates(r, &mut doc);
    let models = model::models(r);
    model_section(r, &models, &mut doc);
    ranking(r, &mut doc);
    safety(r, &mut doc);
    went_wrong(r, &models, &mut doc);
    doc.chart(CHART, CHART_ALT);
    doc
}

/// The relays' own cost: each server baseline and strategy through relays adding nothing,
/// against the same reached directly.
fn relay_cost(r: &NetworkReport, doc: &mut Section) {
    let (Some(direct), Some(zero)) = (r.direct(), r.relayed_zero()) else {
        return;
    };
    doc.heading(2, "What the relays cost");
    doc.prose(format!(
        "The same work reached directly and through relays adding \
         nothing, in the same rounds. The bar: the Redis baseline keeps at least {:.0}% of its \
         rate.",
        (1.0 - RELAY_COST_BAR) * 100.0
    ));
    let mut table =
        Table::left(["work"]).and_right(["direct /s", "relayed /s", "relayed ÷ direct"]);
    let baselines = r.baselines.iter().map(|b| (format!("[{}]", b.name), &b.at));
    let strategies = (r.strategies.iter()).map(|s| (s.strategy.name.to_string(), &s.closed));
    for (name, at) in baselines.chain(strategies) {
        let (Some(d), Some(z)) = (at.get(direct), at.get(zero)) else {
            continue;
        };
        let (d, z) = (d.successes_per_sec, z.successes_per_sec);
        table.row([name, format!("{d:.0}"), format!("{z:.0}"), ratio(z, d)]);
    }
    doc.table(table);
}

/// Why the relays cost the Redis baseline what they did, from the CPU measured beside it:
/// what the relays' loop spent on each request it carried, beside what Redis spent answering
/// one, and how busy the machine was with the baseline reached directly and through them.
fn relays_cpu(redis: &BaselineSweep, direct: usize, zero: usize, cpus: usize) -> Option<String> {
    let (d, z) = (redis.cpu.get(direct)?, redis.cpu.get(zero)?);
    // CPU-seconds per 1,000 requests are ms per 1,000, µs per one.
    let per_request = |c: &CpuUse, name: &str| {
        let row = c.processes.iter().find(|p| p.process == name)?;
        row.per_1000_successes.map(|s| s * 1_000.0)
    };
    let relays = per_request(z, RELAYS_LOOP)?;
    let redis_us = per_request(d, "redis-server")?;
    let (busy_direct, busy_relayed) = (d.machine_busy_cores?, z.machine_busy_cores?);
    Some(format!(
        " The relays' loop spent {relays:.1} µs of CPU on each request it carried, where \
         redis-server spent {redis_us:.1} µs answering one; the machine's {cpus} cores were \
         {busy_direct:.2} busy with the baseline reached directly and {busy_relayed:.2} through \
         the relays, so the relays' time came out of the baseline's."
    ))
}

/// `a / b` as a percentage, or a dash.
fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.0}%", 100.0 * a / b)
    } else {
        "–".into()
    }
}

/// Each strategy's closed-loop rate at each distance, beside its round trips counted.
fn rates(r: &NetworkReport, doc: &mut Section) {
    doc.heading(2, "Purchases per second at each distance");
    doc.prose(
        "*round trips* are counted per purchase \
         by the relays, one purchase at a time (every server; the Redlock set as one of its \
         five).",
    );
    let mut table = Table::left(["strategy"])
        .and_right(["round trips"])
        .and_right(r.points.iter().map(|p| point_name(*p)));
    for s in &r.strategies {
        table.row(
            [
                s.strategy.name.to_string(),
                format!("{:.1}", s.round_trips.total()),
            ]
            .into_iter()
            .chain(
                s.closed
                    .iter()
                    .map(|c| format!("{:.0}", c.successes_per_sec)),
            ),
        );
    }
    doc.table(table);
}

/// The model against the measurements.
fn model_section(r: &NetworkReport, models: &[StrategyModel], doc: &mut Section) {
    let Some(calibration) = model::calibration(r) else {
        return;
    };
    doc.heading(2, "The model");
    doc.prose(format!(
        "With k round trips per purchase and X₀ purchases/s through relays \
         adding nothing, a round trip r gives 1/X = 1/X₀ + k_lock × r, where k_lock is the \
         round trips made under a lock all buyers of the product share: between k × r / B \
         (none shared, B buyers overlapping) and k × r (all of them shared). k_lock is the \
         service's own count of the calls a purchase sends under the lock (*under the lock*: \
         after the call that took the product's row lock or a distributed lock, through the \
         one that released it), so the model predicts every distance from what was measured \
         with the relays adding nothing. Where a strategy holds no lock across a call, k_lock is \
         read from the clock at {at} ((1/X − 1/X₀) / r) and predicts the other distances. *By \
         the clock* is that reading for every strategy: the product's time per purchase at {at}, \
         in round trips; where it exceeds the count, the rest passes outside a hold. Each cell \
         is *measured (model)* purchases/s, ⚠ where they differ by more than {:.0}%.",
        MISS * 100.0,
        at = point_name(r.points[calibration]),
    ));
    let distances: Vec<String> = (models.first().into_iter())
        .flat_map(|m| m.readings.iter().map(|x| point_name(r.points[x.point])))
        .collect();
    let mut table = Table::left(["strategy"])
        .and_right(["round trips", "under the lock", "by the clock"])
        .and_right(distances.iter());
    for m in models {
        let cells = m.readings.iter().map(|x| match x.predicted {
            Some(p) => format!(
                "{:.0} ({p:.0}){}",
                x.measured,
                if x.missed() { " ⚠" } else { "" }
            ),
            None => format!("{:.0} (calibration)", x.measured),
        });
        table.row(
            [
                m.strategy.to_string(),
                format!("{:.1}", m.counted),
                m.lock_count.map_or("–".into(), |k| format!("{k:.1}")),
                m.by_clock.map_or("–".into(), |k| format!("{k:.1}")),
            ]
            .into_iter()
            .chain(cells),
        );
    }
    doc.table(table);
}

/// The ranking at the servers reached directly against the ranking at the calibration point.
fn ranking(r: &NetworkReport, doc: &mut Section) {
    let (Some(direct), Some(far)) = (r.direct(), model::calibration(r)) else {
        return;
    };
    doc.heading(2, "The ranking");
    doc.prose(format!(
        "Spearman's correlation between the strategies' rates reached directly and at {}: {}.",
        point_name(r.points[far]),
        model::rank_correlation(r, direct, far).map_or("–".into(), |c| format!("{c:.2}"))
    ));
    let moved = model::movers(r, direct, far, 3);
    if moved.is_empty() {
        doc.prose("No strategy moved three places or more.");
    } else {
        let list: Vec<String> = (moved.iter())
            .map(|(s, a, b)| format!("`{s}` {a} → {b}"))
            .collect();
        doc.prose(format!(
            "Moved three places or more (place reached directly → at {}): {}.",
            point_name(r.points[far]),
            list.join(", ")
        ));
    }
}

/// Each strategy's flash sale at each distance: oversell, and lost updates.
fn safety(r: &NetworkReport, doc: &mut Section) {
    doc.heading(2, "Safety at each distance");
    doc.prose(
        "Each cell: units oversold / lost updates in the flash \
         sale at that distance, from the database.",
    );
    let mut table =
        Table::left(["strategy", "safety"]).and_right(r.points.iter().map(|p| point_name(*p)));
    for s in &r.strategies {
        table.row(
            [s.strategy.name.to_string(), s.strategy.safety.to_string()]
                .into_iter()
                .chain(
                    s.sales
                        .iter()
                        .map(|a| format!("{} / {}", a.oversell, a.lost_updates)),
                ),
        );
    }
    doc.table(table);
}

/// What went wrong, from the figures.
fn went_wrong(r: &NetworkReport, models: &[StrategyModel], doc: &mut Section) {
    let mut lines = Vec::new();
    for s in &r.strategies {
        let oversold: Vec<String> = (r.points.iter().zip(&s.sales))
            .filter(|(_, a)| a.oversell > 0 || a.lost_updates > 0)
            .map(|(p, a)| format!("{} at {}", a.oversell.max(a.lost_updates), point_name(*p)))
            .collect();
        match (s.strategy.safety, oversold.is_empty()) {
            (Safety::Safe, false) => lines.push(format!(
                "`{}`, a safe strategy, oversold or lost updates: {}.",
                s.strategy.name,
                oversold.join(", ")
            )),
            (Safety::Unsafe, true) => lines.push(format!(
                "`{}`, meant to be unsafe, kept the stock at every distance: its failure is not a \
                 race of a sale's stock ({}): the flood or its fault scenario shows it.",
                s.strategy.name, s.strategy.description
            )),
            _ => {}
        }
    }
    for m in models {
        let missed: Vec<String> = (m.readings.iter())
            .filter(|x| x.missed())
            .map(|x| {
                let at = (r.strategies.iter())
                    .find(|s| s.strategy.name == m.strategy)
                    .and_then(|s| s.closed.get(x.point));
                let refused = at.map_or(0.0, |l| {
                    let total = l.outcomes.total().max(1) as f64;
                    100.0 * (total - l.outcomes.created as f64) / total
                });
                let rounds = (at.and_then(|l| l.repetitions.as_ref()))
                    .map(|r| {
                        let s = &r.successes_per_sec;
                        format!(", its rounds {:.0}–{:.0}/s", s.min, s.max)
                    })
                    .unwrap_or_default();
                format!(
                    "{} measured {:.0}/s against {:.0}/s ({refused:.0}% of its attempts \
                     refused{rounds})",
                    point_name(r.points[x.point]),
                    x.measured,
                    x.predicted.unwrap_or(0.0)
                )
            })
            .collect();
        if !missed.is_empty() {
            lines.push(format!(
                "`{}` left the model by more than {:.0}%: {}.{}",
                m.strategy,
                MISS * 100.0,
                missed.join("; "),
                outside_the_hold(m)
            ));
        }
    }
    if let (Some(direct), Some(zero)) = (r.direct(), r.relayed_zero())
        && let Some(redis) = r
            .baselines
            .iter()
            .find(|b| b.name == BaselineName::RedisLua)
        && let (Some(d), Some(z)) = (redis.at.get(direct), redis.at.get(zero))
        && z.successes_per_sec < (1.0 - RELAY_COST_BAR) * d.successes_per_sec
    {
        lines.push(format!(
            "The relays cost the Redis baseline more than {:.0}%: {:.0}/s through them against \
             {:.0}/s directly.{}",
            RELAY_COST_BAR * 100.0,
            z.successes_per_sec,
            d.successes_per_sec,
            relays_cpu(redis, direct, zero, r.environment.cpus).unwrap_or_default()
        ));
    }
    doc.heading(2, "What went wrong and why");
    if lines.is_empty() {
        doc.prose(
            "Every safe strategy kept the stock at every distance, every unsafe one showed its \
             race, every rate was within the model, and the relays cost what the bar allows.",
        );
    } else {
        let list: Vec<String> = lines.iter().map(|line| format!("- {line}")).collect();
        doc.prose(list.join("\n"));
    }
}

/// For a model whose round trips under the lock were counted, what the clock read beside the
/// count: the product's time per purchase at the calibration point, and where the difference
/// goes for this kind of strategy.
fn outside_the_hold(m: &StrategyModel) -> String {
    let (Some(counted), Some(clock)) = (m.lock_count, m.by_clock) else {
        return String::new();
    };
    let read = format!(
        " The clock read {clock:.1} round trips of the product's time per purchase at the \
         calibration point, {counted:.1} counted under the lock"
    );
    if clock < counted {
        return match m.strategy.spec().safety {
            Safety::Unsafe => format!(
                "{read}: holds overlapped — its lock does not exclude, the failure it is meant to \
                 show (see its sales below)."
            ),
            _ => format!(
                "{read}: holds overlapped, which a lock every buyer of the product shares cannot \
                 do."
            ),
        };
    }
    let rest = match m.strategy.spec().kind {
        Kind::Locked { .. } => {
            "the hand-over: from one holder's release to the next waiter's grant, the waiters \
             learning that the lock is free by asking again"
        }
        Kind::Own { .. } => "attempts that took the row and were refused or tried again",
    };
    format!(
        "{read}; the other {:.1} pass outside a hold, in {rest}.",
        clock - counted
    )
}

/// Each strategy's rate against the round trip the relays added (log scale).
fn chart(out: &mut String, r: &NetworkReport) -> Result<()> {
    let relayed: Vec<(usize, f64)> = (r.points.iter().enumerate())
        .filter_map(|(i, p)| match p {
            Distance::Relayed { rtt_us } => Some((i, *rtt_us as f64 / 1e3)),
            Distance::Local => None,
        })
        .collect();
    let rates = (r.strategies.iter())
        .flat_map(|s| relayed.iter().filter_map(|(i, _)| s.closed.get(*i)))
        .map(|l| l.successes_per_sec)
        .filter(|x| *x > 0.0);
    let (low, high) = rates.fold((f64::MAX, 1.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let max_rtt = relayed.iter().map(|(_, ms)| *ms).fold(0.1, f64::max);
    let root = SVGBackend::with_string(out, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Purchases per second against the round trip added",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(
            0.0..max_rtt * 1.05,
            (low.min(high) * 0.8..high * 1.25).log_scale(),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("round trip added (ms)")
        .y_desc("purchases per second (log)")
        .draw()
        .map_err(err)?;
    for (n, s) in r.strategies.iter().enumerate() {
        let color = crate::report::charts::PALETTE[n % crate::report::charts::PALETTE.len()];
        let points = (relayed.iter())
            .filter_map(|(i, ms)| Some((*ms, s.closed.get(*i)?.successes_per_sec)))
            .filter(|(_, x)| *x > 0.0);
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(s.strategy.name.to_string())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
    }
    draw_legend(
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 10)),
    )?;
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::network::schema::{BaselineSweep, NetworkSettings, SCHEMA_VERSION, StrategySweep};
    use crate::phase::round_trips::RoundTrips;
    use crate::phase::round_trips::schema::sample::round_trips;
    use crate::sample;
    use crate::schema::Loop;
    use app::accounting::{Accounting, Ledger};
    use app::api::{Strategy, StrategyInfo};
    use std::collections::BTreeMap;

    /// A sweep over `points`: `pessimistic` at the shared bound of 5 round trips from
    /// 1,000/s, `conditional` flat at 4,000/s, the Redis baseline flat.
    pub(crate) fn report_at(points: &[Distance]) -> NetworkReport {
        let at = |f: &dyn Fn(f64) -> f64| {
            (points.iter())
                .map(|p| {
                    let rtt = match p {
                        Distance::Local => 0.0,
                        Distance::Relayed { rtt_us } => *rtt_us as f64 / 1e6,
                    };
                    let mut l = sample::load(Loop::Closed, 100);
                    l.successes_per_sec = f(rtt);
                    l
                })
                .collect::<Vec<_>>()
        };
        let sale = Accounting::of(
            Ledger {
                initial_stock: 10,
                final_stock: 0,
                units_in_orders: 10,
                orders: 10,
                pending: 0,
                reserved: 0,
                paid: 10,
                returned: 0,
                returning: 0,
            },
            20,
        );
        let strategy = |s: Strategy, k: f64, f: &dyn Fn(f64) -> f64| StrategySweep {
            strategy: StrategyInfo::of(s),
            round_trips: RoundTrips {
                per_purchase: BTreeMap::from([("mariadb".to_string(), k)]),
                ..round_trips(s, &[]).result
            },
            closed: at(f),
            sales: vec![sale; points.len()],
        };
        NetworkReport {
            schema_version: SCHEMA_VERSION,
            started_at: "2026-12-01T00:00:00Z".into(),
            finished_at: "2026-12-01T00:10:00Z".into(),
            duration_seconds: 600.0,
            settings: NetworkSettings {
                strategies: Vec::new(),
                instances: 2,
                buyers: 200,
                rtts_us: Vec::new(),
                warmup: 0.5,
                seconds: 2.0,
                rounds: 1,
                purchases_counted: 40,
                sale_stock: 10,
                sale_clicks: 20,
                quick: true,
                server_niceness: 10,
            },
            environment: sample::environment(),
            points: points.to_vec(),
            baselines: vec![BaselineSweep {
                name: BaselineName::RedisLua,
                at: at(&|_| 50_000.0),
                cpu: Vec::new(),
            }],
            strategies: vec![
                strategy(Strategy::Pessimistic, 5.0, &|rtt| 1.0 / (1e-3 + 5.0 * rtt)),
                strategy(Strategy::Conditional, 4.0, &|_| 4_000.0),
            ],
        }
    }

    const POINTS: [Distance; 4] = [
        Distance::Local,
        Distance::Relayed { rtt_us: 0 },
        Distance::Relayed { rtt_us: 1_000 },
        Distance::Relayed { rtt_us: 2_000 },
    ];

    #[test]
    fn a_strategy_at_the_shared_bound_is_predicted_and_reads_its_round_trips_back() {
        let report = report_at(&POINTS);
        let models = model::models(&report);
        let pessimistic = &models[0];
        let k = pessimistic.under_lock().unwrap();
        assert!((k - 5.0).abs() < 1e-6, "{k}");
        let at_2ms = &pessimistic.readings[1];
        assert!(!at_2ms.missed(), "{at_2ms:?}");
        assert!((at_2ms.measured - at_2ms.shared).abs() < 1e-6);
        let md = markdown(&report);
        assert!(md.contains("| pessimistic | 5.0 | – | 5.0 |"), "{md}");
        assert!(!md.contains("⚠ |"), "{md}");
    }

    #[test]
    fn a_counted_lock_predicts_every_distance_and_a_miss_names_the_hand_over() {
        let mut report = report_at(&POINTS);
        let lock = &mut report.strategies[0];
        lock.strategy = StrategyInfo::of(Strategy::RedisLock);
        // Three calls counted under the lock; the clock reads the five the curve has.
        lock.round_trips.under_lock = Some(3.0);
        let models = model::models(&report);
        let at_1ms = &models[0].readings[0];
        let predicted = at_1ms
            .predicted
            .expect("a counted model predicts its calibration point");
        assert!(
            (predicted - 1.0 / (1e-3 + 3e-3)).abs() < 1e-6,
            "{predicted}"
        );
        assert!(at_1ms.missed(), "{at_1ms:?}");
        let md = markdown(&report);
        assert!(md.contains("| redis-lock | 5.0 | 3.0 | 5.0 |"), "{md}");
        assert!(
            md.contains(
                "5.0 round trips of the product's time per purchase at the calibration point, \
                 3.0 counted under the lock; the other 2.0 pass outside a hold, in the hand-over"
            ),
            "{md}"
        );
    }

    #[test]
    fn an_unsafe_lock_whose_holds_overlap_is_named_for_the_failure_it_shows() {
        let mut report = report_at(&POINTS);
        let lock = &mut report.strategies[0];
        lock.strategy = StrategyInfo::of(Strategy::RedisGetThenSet);
        // Eight calls counted under a lock the clock says was held for five: holds overlapped.
        lock.round_trips.under_lock = Some(8.0);
        let md = markdown(&report);
        assert!(
            md.contains("8.0 counted under the lock: holds overlapped — its lock does not exclude"),
            "{md}"
        );
    }

    #[test]
    fn a_rate_that_leaves_the_model_is_named_with_its_distance() {
        let mut report = report_at(&POINTS);
        report.strategies[0].closed[3].successes_per_sec /= 2.0;
        let md = markdown(&report);
        assert!(md.contains("⚠ |"), "{md}");
        assert!(
            md.contains("`pessimistic` left the model by more than 25%: 2 ms"),
            "{md}"
        );
    }

    #[test]
    fn an_unsafe_strategy_that_kept_the_stock_is_named_with_the_failure_it_shows_instead() {
        let mut report = report_at(&POINTS);
        report.strategies[1].strategy = StrategyInfo::of(Strategy::RacyLimit);
        let md = markdown(&report);
        assert!(
            md.contains("`racy-limit`, meant to be unsafe, kept the stock at every distance"),
            "{md}"
        );
        assert!(
            md.contains("per-user limit checked by a plain read"),
            "{md}"
        );
    }

    #[test]
    fn the_relays_cost_is_judged_against_the_redis_baseline_reached_directly() {
        let mut report = report_at(&POINTS);
        report.baselines[0].at[1].successes_per_sec = 40_000.0;
        let md = markdown(&report);
        assert!(md.contains("| [redis-lua] | 50000 | 40000 | 80% |"), "{md}");
        assert!(
            md.contains("The relays cost the Redis baseline more than 10%"),
            "{md}"
        );
        assert!(!md.contains("relays' loop spent"), "no CPU measured: {md}");
    }

    /// The CPU of a baseline's processes, each `(name, CPU-seconds per 1,000 requests)`, over
    /// one second with the machine `busy` cores.
    fn cpu(rows: &[(&str, f64)], busy: f64) -> CpuUse {
        let processes = (rows.iter())
            .map(|(name, per_1000)| crate::schema::ProcessCpu {
                process: name.to_string(),
                group: name.to_string(),
                cpu_seconds: 0.0,
                busy_cores: 0.0,
                per_1000_successes: Some(*per_1000),
                waiting_cores: None,
            })
            .collect();
        CpuUse {
            wall_seconds: 1.0,
            successes: 1.0,
            processes,
            saturated: None,
            machine_busy_cores: Some(busy),
            rest_of_machine_cores: Some(0.0),
            unread: Vec::new(),
        }
    }

    #[test]
    fn the_relays_cost_says_what_their_loop_spent_per_request_beside_redis() {
        let mut report = report_at(&POINTS);
        report.baselines[0].at[1].successes_per_sec = 25_000.0;
        let direct = cpu(&[("redis-server", 0.0092)], 1.81);
        let relayed = cpu(&[("redis-server", 0.0091), (RELAYS_LOOP, 0.021)], 1.97);
        report.baselines[0].cpu = vec![direct, relayed.clone(), relayed.clone(), relayed];
        let md = markdown(&report);
        let cores = report.environment.cpus;
        assert!(
            md.contains(&format!(
                "The relays' loop spent 21.0 µs of CPU on each request it carried, where \
                 redis-server spent 9.2 µs answering one; the machine's {cores} cores were 1.81 \
                 busy with the baseline reached directly and 1.97 through the relays"
            )),
            "{md}"
        );
    }

    #[test]
    fn the_report_is_written_as_json_markdown_html_and_a_chart() {
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), &report_at(&POINTS)).unwrap();
        for file in [JSON, "report.md", "report.html", CHART] {
            assert!(dir.path().join(file).is_file(), "{file}");
        }
        let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
        assert!(
            html.contains("<svg") && !html.contains("<img"),
            "the chart is in the page"
        );
        assert_eq!(read(dir.path()).unwrap(), report_at(&POINTS));
    }
}
