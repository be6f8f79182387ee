//! A run with baselines measures each of them and relates the strategy to them.

mod common;

use app::api::Strategy;
use loadtest::baselines::BaselineName;
use loadtest::report::explain;
use loadtest::run::run_in;

#[tokio::test(flavor = "multi_thread")]
async fn every_baseline_is_measured_and_the_strategy_is_compared_with_its_own() {
    let mut settings = common::quick(Strategy::Conditional);
    settings.baselines = true;
    settings.seconds = 0.5;
    settings.warmup = 0.2;
    let target = common::target();
    let out = tempfile::tempdir().unwrap();
    let output = run_in(&settings, &target, out.path()).await.unwrap();
    let report = &output.report;
    let measured: Vec<BaselineName> = report.baselines.iter().map(|b| b.name).collect();
    assert_eq!(measured, BaselineName::ALL);
    for b in &report.baselines {
        assert!(
            b.result.attempts_per_sec > 0.0,
            "{}: {:?}",
            b.name,
            b.result
        );
    }
    let strategy = &report.strategies[0];
    assert_eq!(strategy.baseline, BaselineName::SqlConditional);
    assert!(strategy.percent_of_backend_baseline.is_some());
    assert!(strategy.percent_of_http_noop.is_some());
    let check = explain::client_check(report).expect("both no-op baselines");
    assert!(check.contains("goose"), "{check}");
    common::drop_database(&target).await;
}
