//! The flash-sale accounting reports what the database holds, for an unsafe and a safe
//! strategy, through the whole `run` (app processes, HTTP, report).

use crate::common::{self, run_and_read};

use app::api::Strategy;

/// Rounds an unsafe run may take before its race shows.
const MAX_ROUNDS: usize = 3;

#[tokio::test(flavor = "multi_thread")]
async fn an_unsafe_strategy_run_reports_the_oversell_the_database_shows() {
    // `naive` writes back an absolute stock computed from a stale read: with 30 concurrent
    // buyers and demand 4× stock, its lost updates oversell.
    for round in 1..=MAX_ROUNDS {
        let (output, truth, _out) = run_and_read(Strategy::Naive, &common::target()).await;
        let reported = &output.report.strategies[0]
            .sale
            .as_ref()
            .unwrap()
            .accounting;
        assert_eq!(reported, &truth, "round {round}");
        if truth.oversell == 0 {
            eprintln!("round {round}: no oversell this time ({truth:?})");
            continue;
        }
        assert_eq!(truth.oversell, truth.units_sold - truth.initial_stock);
        let md = std::fs::read_to_string(output.dir.join("report.md")).unwrap();
        assert!(
            md.contains(&format!("oversold by {} unit", truth.oversell)),
            "the report's explanation does not quote the measured oversell:\n{md}"
        );
        return;
    }
    panic!("`naive` did not oversell in {MAX_ROUNDS} rounds");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_safe_strategy_run_reports_zero_oversell_and_sells_out_exactly() {
    let (output, truth, _out) = run_and_read(Strategy::Conditional, &common::target()).await;
    let reported = &output.report.strategies[0]
        .sale
        .as_ref()
        .unwrap()
        .accounting;
    assert_eq!(reported, &truth);
    assert_eq!(truth.oversell, 0);
    assert_eq!(truth.lost_updates, 0);
    assert_eq!(truth.units_sold, truth.initial_stock, "{truth:?}");
    assert_eq!(truth.final_stock, 0);
    assert_eq!(
        output.report.strategies[0]
            .sale
            .as_ref()
            .unwrap()
            .outcomes
            .created as i64,
        truth.orders
    );
    for file in [
        "report.md",
        "report.json",
        "throughput.svg",
        "latency.svg",
        "oversell.svg",
    ] {
        assert!(output.dir.join(file).is_file(), "{file} missing");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_runs_on_the_same_servers_place_each_others_stream_orders_nowhere() {
    // Two runs of `redis-lua-stream` at once on one Redis and one MariaDB, each in a database
    // of its own (as the tests run, and as two users' benchmarks may): every order a run's
    // buyers were promised is placed in that run's database, none by the other run's consumers.
    let settings = common::quick(Strategy::RedisLuaStream);
    let (a, b) = (common::target(), common::target());
    let (out_a, out_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (ran_a, ran_b) = tokio::join!(
        loadtest::run::run_in(&settings, &a, out_a.path()),
        loadtest::run::run_in(&settings, &b, out_b.path()),
    );
    for (target, ran) in [(&a, ran_a), (&b, ran_b)] {
        let output = ran.unwrap();
        let sale = &output.report.strategies[0].sale;
        let truth = &sale.as_ref().unwrap().accounting;
        assert_eq!(
            (truth.oversell, truth.stranded, truth.units_sold),
            (0, 0, truth.initial_stock),
            "{truth:?}"
        );
        assert_eq!(
            sale.as_ref().unwrap().outcomes.created,
            truth.orders as u64,
            "{:?}",
            sale.as_ref().unwrap().outcomes
        );
        common::drop_database(target).await;
    }
}
