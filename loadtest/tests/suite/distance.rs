//! Servers at a distance: a run whose every server stands behind a relay adding a round trip
//! sells as safely as over loopback, judged from what the database holds, and its report says
//! at which round trip it was taken; so does a run whose buyers are far from the instances,
//! and a fault scenario whose instances stand a round trip from their servers.

use std::sync::Arc;
use std::time::Duration;

use app::api::Strategy;
use clap::Parser;
use loadtest::cli::{Cli, Command};
use loadtest::phase::round_trips::{self, RoundTripShape, RoundTrips};
use loadtest::rig::fleet::{AppBinary, Fleet};
use loadtest::rig::{Stand, distance};
use loadtest::scenario::{self, Name, Options, Selection};
use loadtest::schema::Settings;
use loadtest::schema::world::Distance;
use testkit::Clicks;

use crate::common;

#[tokio::test(flavor = "multi_thread")]
async fn a_safe_strategy_sells_out_without_oversell_with_its_servers_a_millisecond_away() {
    let rtt = Duration::from_millis(1);
    let mut target = common::target();
    let (relays, endpoints) = distance::apart(&target.endpoints, rtt).unwrap();
    target.endpoints = endpoints;
    target.distance = Distance::of(Some(rtt));
    target.relays = Some(Arc::new(relays));
    let (output, truth, _out) = common::run_and_read(Strategy::Conditional, &target).await;

    assert_eq!(truth.oversell, 0, "{truth:?}");
    assert_eq!(truth.lost_updates, 0, "{truth:?}");
    assert_eq!(truth.units_sold, truth.initial_stock, "{truth:?}");
    assert_eq!(
        &output.report.strategies[0]
            .sale
            .as_ref()
            .unwrap()
            .accounting,
        &truth
    );
    assert_eq!(
        output.report.world.map(|w| w.distance),
        Some(Distance::Relayed { rtt_us: 1_000 })
    );
    let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
    assert!(md.contains("| round trip added | 1 ms"), "{md}");
}

#[tokio::test(flavor = "multi_thread")]
async fn buyers_far_from_the_instances_buy_through_their_relays_and_the_report_says_how_far() {
    let rtt = Duration::from_millis(20);
    let mut target = common::target();
    target.buyers = Distance::of(Some(rtt));
    let (output, truth, _out) = common::run_and_read(Strategy::Conditional, &target).await;

    assert_eq!(truth.oversell, 0, "{truth:?}");
    assert_eq!(truth.units_sold, truth.initial_stock, "{truth:?}");
    let world = output
        .report
        .world
        .expect("a world other than the local one");
    assert_eq!(world.buyers, Distance::Relayed { rtt_us: 20_000 });
    assert_eq!(world.distance, Distance::Local);
    // Each answer crossed the relay both ways: no purchase was answered sooner than the
    // round trip it adds, however fast the machine.
    let closed = &output.report.strategies[0]
        .loops
        .as_ref()
        .unwrap()
        .throughput
        .closed;
    assert!(closed.latency.count > 0, "{closed:?}");
    assert!(
        closed.latency.p50_us >= 20_000,
        "answers came sooner than the buyers' round trip: {:?}",
        closed.latency
    );
    let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
    assert!(md.contains("| buyers' round trip added | 20 ms"), "{md}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_relays_count_a_purchase_s_round_trips_and_the_service_those_under_its_lock() {
    // Relays adding nothing: the count alone.
    let mut target = common::target();
    let (relays, endpoints) = distance::apart(&target.endpoints, Duration::ZERO).unwrap();
    target.endpoints = endpoints;
    target.distance = Distance::of(Some(Duration::ZERO));
    target.relays = Some(Arc::new(relays));
    let strategies = [
        Strategy::Conditional,
        Strategy::Pessimistic,
        Strategy::RedisLua,
    ];
    let mut settings = Settings {
        strategies: strategies.to_vec(),
        ..common::quick(Strategy::Conditional)
    };
    // Enough purchases that a sweep or a renewal landing in a few of them moves the means by
    // less than the half round trip told apart below: with 20, one purchase in three counting
    // one more (or one less) left `conditional` 5.9 against `pessimistic` 6.3.
    let shape = RoundTripShape { purchases: 60 };
    settings.phases.put(round_trips::NAME, shape);
    let out = tempfile::tempdir().unwrap();
    let output = loadtest::run::run_in(&settings, &target, out.path())
        .await
        .unwrap();
    common::drop_database(&target).await;
    let counted = |s: Strategy| {
        let c = (output
            .report
            .each::<RoundTrips>(round_trips::NAME)
            .into_iter())
        .find(|c| c.strategy.name == s)
        .unwrap_or_else(|| panic!("{s} counted"));
        assert_eq!(c.placed, c.purchases, "{s}: every purchase placed: {c:?}");
        c.result.clone()
    };
    let sql = |s: Strategy| {
        counted(s)
            .per_purchase
            .get("mariadb")
            .copied()
            .unwrap_or(0.0)
    };
    let (conditional, pessimistic) = (sql(Strategy::Conditional), sql(Strategy::Pessimistic));
    // The same transaction, with the row read under its lock before it is written.
    assert!(conditional >= 1.5, "conditional: {conditional}");
    assert!(
        pessimistic >= conditional + 0.5,
        "SELECT … FOR UPDATE is one round trip more: {pessimistic} against {conditional}\n\
         pessimistic: {:?}\nconditional: {:?}",
        counted(Strategy::Pessimistic),
        counted(Strategy::Conditional)
    );
    let lua = counted(Strategy::RedisLua);
    let redis = lua.per_purchase.get("redis").copied().unwrap_or(0.0);
    assert!(redis >= 0.5, "redis-lua asks Redis: {lua:?}");
    let conditional_redis = counted(Strategy::Conditional);
    assert!(
        conditional_redis
            .per_purchase
            .get("redis")
            .is_none_or(|n| *n < redis),
        "conditional asks Redis less than redis-lua\nconditional: {conditional_redis:?}\n\
         redis-lua: {lua:?}"
    );
    // Under the row lock: the order's INSERT and the COMMIT after conditional's UPDATE; the
    // stock's UPDATE before them after pessimistic's SELECT … FOR UPDATE. Redis's script
    // holds nothing across a call.
    let under = |s: Strategy| counted(s).under_lock;
    let near = |k: Option<f64>, want: f64| k.is_some_and(|k| (k - want).abs() < 0.01);
    assert!(
        near(under(Strategy::Conditional), 2.0),
        "{:?}",
        under(Strategy::Conditional)
    );
    assert!(
        near(under(Strategy::Pessimistic), 3.0),
        "{:?}",
        under(Strategy::Pessimistic)
    );
    assert_eq!(under(Strategy::RedisLua), None);
    let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
    assert!(md.contains("## Round trips per purchase"), "{md}");
    assert!(md.contains("| under the lock |"), "{md}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_network_sweep_keeps_the_stock_safe_at_every_distance_and_models_each_strategy() {
    let target = common::target();
    let direct = target.endpoints.clone();
    let (relays, endpoints) = distance::apart(&direct, Duration::ZERO).unwrap();
    let stand = Stand {
        endpoints,
        direct,
        distance: Distance::of(Some(Duration::ZERO)),
        relays: Some(Arc::new(relays)),
        servers: None,
        postgres: None,
    };
    let cli = Cli::try_parse_from([
        "seckill-bench",
        "network",
        "--quick",
        "--strategies",
        "conditional,redis-watchdog,naive",
        "--rtts",
        "1ms",
    ])
    .unwrap();
    let Command::Network(args) = cli.command else {
        unreachable!("parsed as `network`")
    };
    let out = tempfile::tempdir().unwrap();
    let swept = loadtest::network::sweep(&args.settings().unwrap(), &stand, &target, out.path())
        .await
        .unwrap();
    common::drop_database(&target).await;
    let r = &swept.report;
    assert_eq!(
        r.points,
        [
            Distance::Local,
            Distance::Relayed { rtt_us: 0 },
            Distance::Relayed { rtt_us: 1_000 }
        ]
    );
    for s in &r.strategies {
        assert_eq!(s.sales.len(), 3, "a sale at every distance");
        let oversold: i64 = s.sales.iter().map(|a| a.oversell).sum();
        match s.strategy.name {
            Strategy::Naive => assert!(oversold > 0, "naive's race shows: {:?}", s.sales),
            _ => assert_eq!(oversold, 0, "{}: {:?}", s.strategy.name, s.sales),
        }
        assert!(s.round_trips.total() >= 1.0, "{:?}", s.round_trips);
    }
    // What the relays' loop spent is measured beside every baseline through the relays.
    for b in &r.baselines {
        let relayed = &b.cpu[1];
        let relays = (relayed.processes.iter())
            .find(|p| p.process == loadtest::network::schema::RELAYS_LOOP)
            .unwrap_or_else(|| panic!("[{}] through the relays: {relayed:?}", b.name));
        assert!(relays.cpu_seconds > 0.0, "[{}]: {relays:?}", b.name);
    }
    // The model reads each strategy at the one distance past zero (no timing is judged here).
    let models = loadtest::network::model::models(r);
    assert_eq!(models.len(), 3);
    for m in &models {
        assert_eq!(m.readings.len(), 1, "{m:?}");
        assert!(m.under_lock().is_some(), "{m:?}");
        // Every one holds a lock across calls, so the service counted them and the model
        // predicts even the distance it is read at.
        assert!(m.lock_count.is_some(), "{m:?}");
        assert!(m.readings[0].predicted.is_some(), "{m:?}");
    }
    let watchdog = (models.iter()).find(|m| m.strategy == Strategy::RedisWatchdog);
    let k = watchdog.and_then(|m| m.under_lock()).unwrap_or(0.0);
    // BEGIN, the read, the write, the order, the COMMIT, and the release.
    assert!(k >= 6.0 - 0.01, "redis-watchdog under its lock: {k}");
    let md = std::fs::read_to_string(swept.dir.join("report.md")).unwrap();
    assert!(md.contains("## The model"), "{md}");
    for file in ["network.json", "report.md", "report.html", "rates.svg"] {
        assert!(swept.dir.join(file).is_file(), "{file}");
    }
}

/// The product the far fleet sells (its servers are its own).
const FAR_PRODUCT: u64 = 77;

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_a_round_trip_from_its_servers_pays_it_on_every_purchase() {
    sandbox::require_faults!();
    let rtt = Duration::from_millis(50);
    let binary = common::app_binary();
    let app = AppBinary {
        path: &binary,
        rtt: Some(rtt),
    };
    let fleet = Fleet::start(app, 1, &[]).await.unwrap();
    fleet.reset(FAR_PRODUCT, 3).await.unwrap();
    let answers =
        (fleet.one_buyer(Strategy::Conditional, FAR_PRODUCT, "far", Clicks::Total(1))).await;
    assert_eq!(answers.outcomes().created, 1, "{:?}", answers.outcomes());
    // The deduction, the order and the commit each cross the relay to MariaDB and back: no
    // purchase is answered sooner than two of its round trips, however fast the machine.
    assert!(
        answers.elapsed >= 2 * rtt,
        "a purchase answered in {:?}, sooner than two round trips of {rtt:?}",
        answers.elapsed
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scenario_played_a_round_trip_from_its_servers_still_judges_and_says_how_far() {
    sandbox::require_faults!();
    let opts = Options {
        quick: true,
        app_binary: Some(common::app_binary()),
        rtt: Some(Duration::from_millis(5)),
        ..Options::default()
    };
    let played = |name| {
        let opts = opts.clone();
        async move {
            let mut reports = (scenario::run(Selection::One(name), &opts).await)
                .unwrap_or_else(|e| panic!("scenario {name}: {e:#}"));
            let report = reports.pop().expect("one report");
            eprintln!("{}", loadtest::report::scenarios::markdown(&report));
            report
        }
    };
    let far = played(Name::LatePayment).await;
    assert!(far.passed(), "late-payment 5 ms from its servers");
    assert_eq!(far.servers, Distance::Relayed { rtt_us: 5_000 });
    // One whose lock clients reach their servers themselves plays over loopback, and says so.
    let near = played(Name::UnsafeRelease).await;
    assert!(near.passed(), "unsafe-release");
    assert_eq!(near.servers, Distance::Local);
}
